//! The HTTP API. Each resource module exposes `routes() -> Router<AppState>`; this
//! module merges them behind the token check. Only this module tree uses axum for
//! the API (the model relay has its own router).

mod agents;
mod context;
mod error;
mod events;
mod health;
mod models;
mod permissions;
mod tasks;
mod threads;
mod worker_tokens;

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::get;

use crate::agents::AgentService;
use crate::config::Secret;
use crate::gate::ToolGate;
use crate::providers::catalog::Catalog;
use crate::runs::Runs;
use crate::secrets::{bearer_token, constant_time_eq};
use crate::sessions::Sessions;
use crate::store::Store;
use crate::workers::WorkerManager;
pub use error::{ApiError, ApiJson};

/// Who the audit log names for actions taken through the API.
pub const API_USER: &str = "api";

#[derive(Clone)]
pub struct AppState {
    pub store: Store,
    pub agents: Arc<AgentService>,
    pub runs: Arc<Runs>,
    pub workers: Arc<WorkerManager>,
    pub catalog: Arc<Catalog>,
    pub gate: Arc<ToolGate>,
    pub sessions: Arc<Sessions>,
    pub api_token: Secret,
    /// How tool processes are confined on this host (`sandbox_probe`).
    pub sandbox: String,
    /// How long ended threads stay in the thread list.
    pub thread_retention: std::time::Duration,
    /// `GET /metrics` is served without the token.
    pub metrics_open: bool,
    /// Dial-in workers' join credentials (`/api/workers/tokens`).
    pub worker_credentials: Arc<crate::workers::credentials::JoinCredentials>,
}

pub fn router(state: AppState) -> Router {
    let api = Router::new()
        .merge(agents::routes())
        .merge(context::routes())
        .merge(events::routes())
        .merge(models::routes())
        .merge(permissions::routes())
        .merge(threads::routes())
        .merge(tasks::routes())
        .merge(worker_tokens::routes())
        .fallback(|| async { ApiError::not_found("no such API endpoint") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                axum::http::StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "this endpoint does not take that method",
            )
        })
        .layer(middleware::from_fn_with_state(state.clone(), require_token));
    let metrics = Router::new().route("/metrics", get(metrics));
    let metrics = if state.metrics_open {
        metrics
    } else {
        metrics.layer(middleware::from_fn_with_state(state.clone(), require_token))
    };
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(health::readyz))
        .merge(metrics)
        .nest("/api", api)
        .with_state(state)
}

/// `GET /metrics`: counters, histograms and gauges in the Prometheus text format.
async fn metrics(State(state): State<AppState>) -> Result<Response, ApiError> {
    use axum::response::IntoResponse;
    let gauges = crate::metrics::Gauges {
        pending_approvals: state.store.pending_approvals(None).await?.len() as u64,
        workers: state.workers.counts(),
        feed_subscribers: state.runs.feed().subscribers() as u64,
        agents: state.store.active_agents().await?.len() as u64,
        idle_dial_in: state.workers.idle_dial_in() as u64,
    };
    Ok((
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        crate::metrics::render(&gauges),
    )
        .into_response())
}

async fn require_token(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token);
    match presented {
        Some(token) if constant_time_eq(token.as_bytes(), state.api_token.expose().as_bytes()) => {
            Ok(next.run(request).await)
        }
        _ => Err(ApiError::unauthorized()),
    }
}
