mod api;
mod architecture;
mod lifecycle;
mod permissions;
mod providers;
mod tool_loop;
mod workers;
