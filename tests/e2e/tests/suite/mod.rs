mod api;
mod architecture;
mod lifecycle;
mod providers;
mod tool_loop;
mod workers;
