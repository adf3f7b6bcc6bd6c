mod api;
mod architecture;
mod lifecycle;
mod tool_loop;
mod workers;
