//! The task board (SPEC H1–H7). A task's life:
//! 1. A person creates it (`planning`, history `created`); the engine runs the
//!    planner (`[tasks] planner`) in a thread of its own (`role = planner`).
//! 2. The planner asks questions (`awaiting_input`; a person's answers send it back to
//!    `planning`, into the same thread) or submits a plan naming an assignee (`planned`).
//! 3. A person starts it (`active`): the assignee works on it in a worker thread,
//!    may pause on a person, a delegate (a child task) or another agent (`waiting`),
//!    and ends with a completion report: `completed` (or `review`, for a person to
//!    accept or send back), `blocked` (a reason; a person resumes it) or `failed`.
//! 4. A finished task may be reopened (to its plan, or to the planner) or retried.
//!
//! What may move where is one table (`status`); every change goes through the
//! [`board::Board`] (store and live feed), which records it in the task's history
//! (`history`) with who made it. The engine (planning, start, the finishing contract,
//! delegation) drives the board; the HTTP API and the front ends read it and press
//! the person's buttons on it.

pub mod board;
pub mod brief;
pub mod claims;
pub mod contract;
pub mod engine;
pub mod history;
pub mod limits;
pub mod status;
pub mod view;
pub mod waiting;

pub use board::{Board, BoardError, CreateTask, check_attachment_name};
pub use history::{TaskEvent, TaskEventKind};
pub use status::{Button, TaskStatus};
pub use view::TaskView;
