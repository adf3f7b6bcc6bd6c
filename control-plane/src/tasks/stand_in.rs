//! TEMPORARY stand-ins for lane A's and lane B's types (replaced at merge).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ThreadRole {
    Planner,
    Worker,
    Answerer,
}
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    Planning,
    AwaitingInput,
    Planned,
    Active,
    Waiting,
    Blocked,
    Review,
    Completed,
    Failed,
}
