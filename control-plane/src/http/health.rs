//! Probes for process supervisors (Kubernetes, compose, a load balancer). Served
//! without the API token, as probes carry none; they say nothing beyond
//! "alive" and "ready or why not".
//! - `GET /healthz`: the process serves HTTP (liveness).
//! - `GET /readyz`: 200 when the database answers and chorus is not shutting
//!   down; 503 otherwise, naming which (readiness).

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::{Value, json};

use super::AppState;

/// How long a readiness probe waits for the database.
const DATABASE_TIME: Duration = Duration::from_secs(2);

pub(super) async fn readyz(State(state): State<AppState>) -> (StatusCode, Json<Value>) {
    let database = match tokio::time::timeout(DATABASE_TIME, state.store.ping()).await {
        Ok(Ok(())) => Database::Answers,
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "readiness: the database does not answer");
            Database::Fails
        }
        Err(_) => Database::Slow,
    };
    let (status, body) = readiness(state.runs.draining(), database);
    (status, Json(body))
}

#[derive(Debug, Clone, Copy)]
enum Database {
    Answers,
    Fails,
    Slow,
}

/// The probe's answer. The database's own error goes to the log, not to an
/// unauthenticated caller.
fn readiness(draining: bool, database: Database) -> (StatusCode, Value) {
    let mut problems = Vec::new();
    if draining {
        problems.push("shutting down: finishing what is going, starting nothing new");
    }
    match database {
        Database::Answers => {}
        Database::Fails => problems.push("the database does not answer (see chorus's log)"),
        Database::Slow => problems.push("the database did not answer within 2 s"),
    }
    if problems.is_empty() {
        (StatusCode::OK, json!({"ready": true}))
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"ready": false, "problems": problems}),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_only_when_serving_and_the_database_answers() {
        assert_eq!(readiness(false, Database::Answers).0, StatusCode::OK);
        let (status, body) = readiness(true, Database::Answers);
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            body["problems"][0]
                .as_str()
                .unwrap()
                .contains("shutting down")
        );
        let (status, body) = readiness(false, Database::Slow);
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body["ready"], false);
        let (_, body) = readiness(true, Database::Fails);
        assert_eq!(body["problems"].as_array().unwrap().len(), 2);
    }
}
