//! `/api/tasks`: the task board over HTTP (the board is `tasks::board`). Create
//! (201, `planning`; the engine is told through `Board::created`), list with filters
//! (`?status=&agent=&q=`), show, edit (`PATCH`: the plan only before Start), delete
//! (its going threads stopped first), its history, the person's buttons (pause,
//! resume, complete, fail, reopen, accept; start, retry, send-back, answers and
//! messages, which the engine carries to the task's threads), and its
//! attachments (multipart field `file`, at most `[tasks] attachment_max_bytes`: 413
//! past it; names jailed: 400 saying why).

use axum::Json;
use axum::extract::multipart::MultipartRejection;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Multipart, Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::{Deserialize, Deserializer};
use serde_json::{Value, json};

use super::{ApiError, ApiJson, AppState, Caller};
use crate::store::{PlanFields, TaskFilter};
use crate::tasks::engine::EngineError;
use crate::tasks::status::words;
use crate::tasks::{BoardError, Button, CreateTask, TaskStatus};

impl From<BoardError> for ApiError {
    fn from(e: BoardError) -> Self {
        match e {
            BoardError::NotFound(m) => ApiError::not_found(m),
            BoardError::Invalid(m) => ApiError::bad_request(m),
            BoardError::Conflict { message, allowed } => {
                let error = ApiError::new(StatusCode::CONFLICT, "conflict", message);
                if allowed.is_empty() {
                    error
                } else {
                    error.with("allowed", json!(allowed))
                }
            }
            BoardError::Store(e) => e.into(),
            BoardError::Files(m) => ApiError::internal(m),
        }
    }
}

fn task_id(raw: &str) -> Result<u64, ApiError> {
    raw.parse().map_err(|_| {
        ApiError::bad_request(format!(
            "'{raw}' is not a task id (a number); GET /api/tasks lists them"
        ))
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CreateBody {
    title: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    review: bool,
}

pub(super) async fn create(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<CreateBody>,
) -> Result<impl IntoResponse, ApiError> {
    let task = state
        .tasks
        .create(
            CreateTask {
                title: body.title,
                description: body.description,
                review: body.review,
                ..CreateTask::default()
            },
            &caller.principal(),
        )
        .await?;
    state.tasks.created(task.id);
    // The engine's view: what GET answers, with what the task waits on.
    Ok((StatusCode::CREATED, Json(state.engine.view(task.id).await?)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ListQuery {
    status: Option<String>,
    agent: Option<String>,
    q: Option<String>,
}

pub(super) async fn list(
    State(state): State<AppState>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(query) = query.map_err(|e| {
        ApiError::bad_request(format!(
            "{}; this endpoint takes ?status=, ?agent= and ?q=",
            e.body_text()
        ))
    })?;
    let status = match query.status.as_deref().filter(|s| !s.is_empty()) {
        Some(word) => Some(TaskStatus::parse(word).ok_or_else(|| {
            ApiError::bad_request(format!(
                "'{word}' is not a task status; the statuses are: {}",
                words(&TaskStatus::ALL)
            ))
        })?),
        None => None,
    };
    let filter = TaskFilter {
        status,
        agent: query.agent.filter(|a| !a.is_empty()),
        text: query.q.filter(|q| !q.trim().is_empty()),
    };
    Ok(Json(json!({ "tasks": state.engine.list(&filter).await? })))
}

pub(super) async fn show(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(state.engine.view(task_id(&id)?).await?))
}

/// A present key, `null` included (`Some(None)` clears), apart from an absent one.
fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PatchBody {
    title: Option<String>,
    description: Option<String>,
    review: Option<bool>,
    #[serde(default, deserialize_with = "present")]
    summary: Option<Option<String>>,
    requirements: Option<Vec<String>>,
    acceptance_criteria: Option<Vec<String>>,
    steps: Option<Vec<String>>,
    #[serde(default, deserialize_with = "present")]
    assignee: Option<Option<String>>,
}

pub(super) async fn update(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<PatchBody>,
) -> Result<impl IntoResponse, ApiError> {
    let fields = PlanFields {
        title: body.title,
        description: body.description,
        review: body.review,
        summary: body.summary,
        requirements: body.requirements,
        acceptance_criteria: body.acceptance_criteria,
        steps: body.steps,
        assignee: body.assignee,
    };
    let id = task_id(&id)?;
    state.tasks.update(id, fields, &caller.principal()).await?;
    Ok(Json(state.engine.view(id).await?))
}

pub(super) async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    state
        .engine
        .delete(task_id(&id)?, &caller.principal())
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

pub(super) async fn history(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let events = state.tasks.history(task_id(&id)?).await?;
    Ok(Json(json!({ "events": events })))
}

async fn press(
    state: &AppState,
    caller: &Caller,
    id: &str,
    button: Button,
) -> Result<Json<crate::tasks::TaskView>, ApiError> {
    Ok(Json(
        state
            .engine
            .press(task_id(id)?, button, &caller.principal())
            .await?,
    ))
}

macro_rules! button_handler {
    ($($name:ident => $button:expr),* $(,)?) => {$(
        pub(super) async fn $name(
            State(state): State<AppState>,
            caller: Caller,
            Path(id): Path<String>,
        ) -> Result<Json<crate::tasks::TaskView>, ApiError> {
            press(&state, &caller, &id, $button).await
        }
    )*};
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::Board(e) => e.into(),
            EngineError::Invalid(m) => ApiError::bad_request(m),
            EngineError::Conflict { message, allowed } => {
                BoardError::Conflict { message, allowed }.into()
            }
            EngineError::Store(e) => e.into(),
        }
    }
}

/// Start: the assignee works the task (`planned` → `active`).
pub(super) async fn start(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<crate::tasks::TaskView>, ApiError> {
    Ok(Json(
        state
            .engine
            .start(task_id(&id)?, &caller.principal())
            .await?,
    ))
}

/// Retry: a failed or blocked task gets a new attempt.
pub(super) async fn retry(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<crate::tasks::TaskView>, ApiError> {
    Ok(Json(
        state
            .engine
            .retry(task_id(&id)?, &caller.principal())
            .await?,
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct MessageBody {
    message: String,
}

/// Send back: a report in review goes back to its thread with the person's message.
pub(super) async fn send_back(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<MessageBody>,
) -> Result<Json<crate::tasks::TaskView>, ApiError> {
    Ok(Json(
        state
            .engine
            .send_back(task_id(&id)?, &body.message, &caller.principal())
            .await?,
    ))
}

/// A person's message to the agent working on the task.
pub(super) async fn message(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<MessageBody>,
) -> Result<Json<crate::tasks::TaskView>, ApiError> {
    Ok(Json(
        state
            .engine
            .message(task_id(&id)?, &body.message, &caller.principal())
            .await?,
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AnswersBody {
    answers: std::collections::BTreeMap<String, String>,
}

/// Answers to the open questions, by id; they go to the thread that asked.
pub(super) async fn answers(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<AnswersBody>,
) -> Result<Json<crate::tasks::TaskView>, ApiError> {
    Ok(Json(
        state
            .engine
            .answer(task_id(&id)?, &body.answers, &caller.principal())
            .await?,
    ))
}

button_handler! {
    pause => Button::Pause,
    resume => Button::Resume,
    complete => Button::Complete,
    fail => Button::Fail,
    reopen => Button::Reopen,
    accept => Button::Accept,
}

/// Bytes read past the bound before answering 413, so a client still sending gets
/// the answer rather than a reset connection; beyond this the connection is dropped.
const DRAIN_BYTES: u64 = 8 << 20;

fn too_large(max: u64) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "too_large",
        format!(
            "the attachment is larger than {max} bytes ([tasks] attachment_max_bytes); \
             send a smaller file or raise the bound"
        ),
    )
}

pub(super) async fn upload(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    multipart: Result<Multipart, MultipartRejection>,
) -> Result<impl IntoResponse, ApiError> {
    let id = task_id(&id)?;
    let mut multipart = multipart.map_err(|e| {
        ApiError::bad_request(format!(
            "{}; send the file as multipart/form-data in the field 'file'",
            e.body_text()
        ))
    })?;
    // The task first: a 404 before reading a whole file for nothing.
    state.tasks.get(id).await?;
    let max = state.tasks.settings().attachment_max_bytes;
    let bad_body = |e: axum::extract::multipart::MultipartError| {
        ApiError::bad_request(format!(
            "the multipart body cannot be read: {}",
            e.body_text()
        ))
    };
    let mut stored = None;
    while let Some(mut field) = multipart.next_field().await.map_err(bad_body)? {
        if field.name() != Some("file") || stored.is_some() {
            return Err(ApiError::bad_request(format!(
                "unexpected multipart field {:?}: send one file, in the field 'file'",
                field.name().unwrap_or("")
            )));
        }
        let Some(name) = field.file_name().map(str::to_string) else {
            return Err(ApiError::bad_request(
                "the field 'file' has no file name (Content-Disposition: form-data; name=\"file\"; filename=\"…\")",
            ));
        };
        crate::tasks::check_attachment_name(&name).map_err(ApiError::bad_request)?;
        let mut bytes = Vec::new();
        let mut seen: u64 = 0;
        while let Some(chunk) = field.chunk().await.map_err(bad_body)? {
            seen += chunk.len() as u64;
            if seen > max {
                if seen > max + DRAIN_BYTES {
                    return Err(too_large(max));
                }
                continue;
            }
            bytes.extend_from_slice(&chunk);
        }
        if seen > max {
            return Err(too_large(max));
        }
        stored = Some((name, bytes));
    }
    let Some((name, bytes)) = stored else {
        return Err(ApiError::bad_request(
            "no file: send it as multipart/form-data in the field 'file'",
        ));
    };
    let attachment = state
        .tasks
        .add_attachment(id, &name, &bytes, &caller.principal())
        .await?;
    Ok((StatusCode::CREATED, Json(attachment)))
}

pub(super) async fn attachments(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let listed = state.tasks.attachments(task_id(&id)?).await?;
    Ok(Json(json!({ "attachments": listed })))
}
