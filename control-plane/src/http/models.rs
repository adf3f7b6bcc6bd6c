//! `/api/models`: what each provider offers, and re-checking them.

use axum::Json;
use axum::extract::State;

use super::AppState;
use crate::providers::catalog::CatalogSnapshot;

pub(super) async fn list(State(state): State<AppState>) -> Json<CatalogSnapshot> {
    Json(state.catalog.snapshot().await)
}

/// Validates every key and lists every provider's models again (also the
/// `/settings validate-keys` of the Discord frontend, later).
pub(super) async fn refresh(State(state): State<AppState>) -> Json<CatalogSnapshot> {
    Json(state.catalog.refresh().await)
}
