mod api;
mod architecture;
mod lifecycle;
mod permissions;
mod providers;
mod secrets;
mod tool_loop;
mod workers;
