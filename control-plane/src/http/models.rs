//! `/api/models`: what each provider offers, and re-checking them.

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::routing::{get, post};

use super::AppState;
use crate::providers::catalog::CatalogSnapshot;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/models", get(list))
        .route("/models/refresh", post(refresh))
}

async fn list(State(state): State<AppState>) -> Json<CatalogSnapshot> {
    Json(state.catalog.snapshot().await)
}

/// Validates every key and lists every provider's models again (also the
/// `/settings validate-keys` of the Discord frontend, later).
async fn refresh(State(state): State<AppState>) -> Json<CatalogSnapshot> {
    Json(state.catalog.refresh().await)
}
