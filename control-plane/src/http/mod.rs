//! The HTTP API. [`table`] is every `/api` route with what it is (an [`Act`] of the
//! one role policy, `gate::policy`), and the router is built from it and nothing
//! else: a route cannot exist without its act. Each request is authenticated
//! (`access::authenticate`: the token's user and role), then checked against its
//! route's act before the handler runs. Handlers live in one module per resource.
//! Only this module tree uses axum for the API (the model relay has its own router).
//!
//! Every `/api` route, unknown ones included, is behind a token: the API token (user
//! `api`) or an issued one (`user_tokens`). A refused request gets a 403 naming the role
//! needed and the caller's. Errors are `{"error":{code,message}}`. What can grow without
//! end is paged (`…/audit`, `…/threads/{id}`: at most 1000 items and about 8 MiB per list
//! a page, with a `next` cursor).

pub mod access;
mod agents;
mod context;
mod error;
mod events;
mod grants;
mod health;
mod heartbeat;
mod jobs;
mod memory;
mod models;
mod permissions;
mod schedules;
mod status;
mod tasks;
mod threads;
mod tools;
mod users;
mod worker_tokens;

use axum::Router;
use axum::extract::{Request, State};
use axum::handler::Handler;
use axum::http::{Method, header};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{MethodFilter, MethodRouter, get};

use crate::gate::policy::Act;
pub use access::Caller;
pub use error::{ApiError, ApiJson};

/// The user the one API token (`CHORUS_API_TOKEN`, `<data-dir>/api-token`) acts as.
pub const API_USER: &str = "api";

/// One `/api` route: its method and path and what it is, which decides the least
/// role that may call it (`Act::needs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub method: Method,
    pub path: &'static str,
    pub act: Act,
}

fn declare<H, T>(
    method: Method,
    path: &'static str,
    act: Act,
    handler: H,
) -> (Route, MethodRouter<AppState>)
where
    H: Handler<T, AppState>,
    T: 'static,
{
    let filter = MethodFilter::try_from(method.clone()).unwrap_or(MethodFilter::GET);
    let endpoint = axum::routing::on(filter, handler).route_layer(middleware::from_fn(
        move |request: Request, next: Next| access::authorize(act, request, next),
    ));
    (Route { method, path, act }, endpoint)
}

/// Every `/api` route, and what it is. Looking and talking are for every role;
/// changing agents, their threads and contexts, and answering approvals are for
/// operators and admins; tokens are for admins (`gate::policy` says who may do what).
fn table() -> Vec<(Route, MethodRouter<AppState>)> {
    use Act::*;
    const GET: Method = Method::GET;
    const POST: Method = Method::POST;
    const PATCH: Method = Method::PATCH;
    const DELETE: Method = Method::DELETE;
    vec![
        declare(GET, "/api/whoami", Look, users::whoami),
        declare(GET, "/api/session", Look, users::session),
        declare(GET, "/api/status", Look, status::status),
        declare(GET, "/api/tools", Look, tools::list),
        // Agents.
        declare(GET, "/api/agents", Look, agents::list),
        declare(POST, "/api/agents", CreateAgents, agents::create),
        declare(GET, "/api/agents/{name}", Look, agents::show),
        declare(
            PATCH,
            "/api/agents/{name}",
            ConfigureAgents,
            agents::configure,
        ),
        declare(DELETE, "/api/agents/{name}", DestroyAgents, agents::destroy),
        // Identity and memory files.
        declare(GET, "/api/agents/{name}/identity", Look, memory::identity),
        declare(
            Method::PUT,
            "/api/agents/{name}/identity/{file}",
            ConfigureAgents,
            memory::set_identity,
        ),
        declare(GET, "/api/agents/{name}/memory", Look, memory::list),
        // Before `{item}`: the router prefers the fixed segment (no memory file is
        // named `search`, they end in `.md`).
        declare(
            GET,
            "/api/agents/{name}/memory/search",
            Look,
            memory::search,
        ),
        declare(
            POST,
            "/api/agents/{name}/memory/reindex",
            ConfigureAgents,
            memory::reindex,
        ),
        // One parameter name for both (the router needs it): a file's name to
        // read, an entry's id to retract.
        declare(GET, "/api/agents/{name}/memory/{item}", Look, memory::file),
        declare(
            DELETE,
            "/api/agents/{name}/memory/{item}",
            ConfigureAgents,
            memory::forget,
        ),
        declare(GET, "/api/agents/{name}/jobs", Look, jobs::list_jobs),
        // The same list under the path (and key) it had before jobs had their name.
        declare(
            GET,
            "/api/agents/{name}/tasks",
            Look,
            jobs::list_jobs_as_tasks,
        ),
        declare(GET, "/api/agents/{name}/tools", Look, tools::of_agent),
        declare(GET, "/api/agents/{name}/audit", Look, permissions::audit),
        declare(GET, "/api/agents/{name}/grants", Look, grants::list),
        declare(
            POST,
            "/api/agents/{name}/grants",
            ConfigureAgents,
            grants::grant,
        ),
        declare(
            DELETE,
            "/api/agents/{name}/grants/{tool}",
            ConfigureAgents,
            grants::revoke,
        ),
        // Schedules: reading is looking; setting an agent to work on its own is
        // changing its course, like its settings.
        declare(GET, "/api/agents/{name}/schedules", Look, schedules::list),
        declare(
            POST,
            "/api/agents/{name}/schedules",
            ConfigureAgents,
            schedules::create,
        ),
        declare(
            GET,
            "/api/agents/{name}/schedules/{id}",
            Look,
            schedules::show,
        ),
        declare(
            PATCH,
            "/api/agents/{name}/schedules/{id}",
            ConfigureAgents,
            schedules::update,
        ),
        declare(
            DELETE,
            "/api/agents/{name}/schedules/{id}",
            ConfigureAgents,
            schedules::delete,
        ),
        declare(
            GET,
            "/api/agents/{name}/schedules/{id}/runs",
            Look,
            schedules::runs,
        ),
        declare(
            POST,
            "/api/agents/{name}/schedules/{id}/run",
            ConfigureAgents,
            schedules::run_now,
        ),
        // The heartbeat: reading is looking; running one now is like "run now".
        declare(GET, "/api/agents/{name}/heartbeat", Look, heartbeat::show),
        declare(
            POST,
            "/api/agents/{name}/heartbeat",
            ConfigureAgents,
            heartbeat::run_now,
        ),
        // Threads.
        declare(
            POST,
            "/api/agents/{name}/messages",
            Talk,
            threads::send_message,
        ),
        declare(
            GET,
            "/api/agents/{name}/threads",
            Look,
            threads::list_threads,
        ),
        declare(
            DELETE,
            "/api/agents/{name}/threads",
            StopThreads,
            threads::kill_all,
        ),
        declare(
            GET,
            "/api/agents/{name}/threads/{id}",
            Look,
            threads::show_thread,
        ),
        declare(
            DELETE,
            "/api/agents/{name}/threads/{id}",
            StopThreads,
            threads::kill_thread,
        ),
        declare(
            GET,
            "/api/agents/{name}/threads/{id}/events",
            Look,
            threads::thread_events,
        ),
        declare(GET, "/api/events", Look, events::events),
        // Contexts.
        declare(
            POST,
            "/api/agents/{name}/context/save",
            ManageContext,
            context::save,
        ),
        declare(
            POST,
            "/api/agents/{name}/context/clear",
            ManageContext,
            context::clear,
        ),
        declare(
            POST,
            "/api/agents/{name}/context/restore",
            ManageContext,
            context::restore,
        ),
        declare(
            GET,
            "/api/agents/{name}/context/history",
            Look,
            context::history,
        ),
        // Approvals and permissions.
        declare(GET, "/api/approvals", Look, permissions::list_approvals),
        declare(GET, "/api/approvals/{id}", Look, permissions::show_approval),
        declare(
            POST,
            "/api/approvals/{id}",
            AnswerApprovals,
            permissions::answer_approval,
        ),
        declare(POST, "/api/permissions/explain", Look, permissions::explain),
        // Models.
        declare(GET, "/api/models", Look, models::list),
        declare(POST, "/api/models/refresh", RefreshModels, models::refresh),
        // Who may use the API.
        declare(GET, "/api/tokens", ManageTokens, users::list_tokens),
        declare(
            GET,
            "/api/users/{user}/tokens",
            ManageTokens,
            users::list_user_tokens,
        ),
        declare(
            POST,
            "/api/users/{user}/tokens",
            ManageTokens,
            users::create_token,
        ),
        declare(
            DELETE,
            "/api/users/{user}/tokens/{id}",
            ManageTokens,
            users::revoke_token,
        ),
        // Who may serve agents.
        declare(
            GET,
            "/api/workers/tokens",
            ManageWorkers,
            worker_tokens::list,
        ),
        declare(
            POST,
            "/api/workers/tokens",
            ManageWorkers,
            worker_tokens::create,
        ),
        declare(
            DELETE,
            "/api/workers/tokens/{name}",
            ManageWorkers,
            worker_tokens::revoke,
        ),
        // Tasks.
        declare(POST, "/api/tasks", ManageTasks, tasks::create),
        declare(GET, "/api/tasks", Look, tasks::list),
        declare(GET, "/api/tasks/{id}", Look, tasks::show),
        declare(PATCH, "/api/tasks/{id}", ManageTasks, tasks::update),
        declare(DELETE, "/api/tasks/{id}", ManageTasks, tasks::delete),
        declare(GET, "/api/tasks/{id}/history", Look, tasks::history),
        declare(POST, "/api/tasks/{id}/pause", ManageTasks, tasks::pause),
        declare(POST, "/api/tasks/{id}/resume", ManageTasks, tasks::resume),
        declare(
            POST,
            "/api/tasks/{id}/complete",
            ManageTasks,
            tasks::complete,
        ),
        declare(POST, "/api/tasks/{id}/fail", ManageTasks, tasks::fail),
        declare(POST, "/api/tasks/{id}/reopen", ManageTasks, tasks::reopen),
        declare(POST, "/api/tasks/{id}/accept", ManageTasks, tasks::accept),
        declare(POST, "/api/tasks/{id}/start", ManageTasks, tasks::start),
        declare(POST, "/api/tasks/{id}/retry", ManageTasks, tasks::retry),
        declare(
            POST,
            "/api/tasks/{id}/send-back",
            ManageTasks,
            tasks::send_back,
        ),
        declare(POST, "/api/tasks/{id}/answers", ManageTasks, tasks::answers),
        declare(
            POST,
            "/api/tasks/{id}/messages",
            ManageTasks,
            tasks::message,
        ),
        {
            // The upload bounds its own body (`[tasks] attachment_max_bytes`).
            let (route, endpoint) = declare(
                POST,
                "/api/tasks/{id}/attachments",
                ManageTasks,
                tasks::upload,
            );
            (
                route,
                endpoint.layer(axum::extract::DefaultBodyLimit::disable()),
            )
        },
        declare(GET, "/api/tasks/{id}/attachments", Look, tasks::attachments),
    ]
}

/// The route table without its handlers: what each `/api` route is.
pub fn routes() -> Vec<Route> {
    table().into_iter().map(|(route, _)| route).collect()
}

/// The handlers' name for the services every front end shares.
pub use crate::services::Services as AppState;

/// The `/api` routes of [`table`], each behind its act's check (not yet behind
/// authentication). Two declarations of one method and path panic here.
fn api_routes() -> Router<AppState> {
    let mut api = Router::new();
    for (route, endpoint) in table() {
        let path = route.path.strip_prefix("/api").unwrap_or(route.path);
        api = api.route(path, endpoint);
    }
    api
}

pub fn router(state: AppState) -> Router {
    let api = api_routes()
        .fallback(|| async { ApiError::not_found("no such API endpoint") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                axum::http::StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "this endpoint does not take that method",
            )
        })
        .layer(middleware::from_fn_with_state(
            state.clone(),
            access::authenticate,
        ));
    // Any good token may read the metrics (they are what `Look` shows, counted).
    let metrics = Router::new().route("/metrics", get(metrics));
    let metrics = if state.metrics_open {
        metrics
    } else {
        metrics.layer(middleware::from_fn_with_state(
            state.clone(),
            access::authenticate,
        ))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_is_under_api_and_declared_once() {
        let routes = routes();
        let mut seen = std::collections::HashSet::new();
        for route in &routes {
            assert!(route.path.starts_with("/api/"), "{route:?}");
            assert!(
                seen.insert((route.method.clone(), route.path)),
                "declared twice: {route:?}"
            );
        }
        // Builds (a duplicate would panic) with what the table says.
        let _ = api_routes();
        // Who may use the API, and who may serve agents, are admins' alone.
        let tokens: Vec<_> = routes.iter().filter(|r| r.path.contains("token")).collect();
        assert!(
            tokens
                .iter()
                .all(|r| r.act.needs() == crate::permissions::grants::Role::Admin),
            "{tokens:?}"
        );
    }
}
