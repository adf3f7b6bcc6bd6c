//! Who is calling, and whether they may: [`authenticate`] turns the bearer token
//! into a [`Caller`] (the one API token is user `api`; an issued token is its
//! user), and [`authorize`], layered onto each route by the route table, checks
//! the caller's role against the route's [`Act`] before the handler runs, so a
//! refused request changes nothing.

use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;

use super::{API_USER, ApiError, AppState};
use crate::gate::policy::{Act, allowed, refusal};
use crate::permissions::grants::Role;
use crate::secrets::{bearer_token, constant_time_eq};

/// The authenticated user of a request and their role (`[roles]`, else the
/// default role).
#[derive(Debug, Clone)]
pub struct Caller {
    pub user: String,
    pub role: Role,
}

impl Caller {
    /// The caller as who acts: a person at the HTTP API.
    pub fn principal(&self) -> crate::principal::Principal {
        crate::principal::Principal::person(&self.user)
    }
}

/// 401 unless the request carries the API token or a good issued token; then the
/// request goes on with its [`Caller`].
pub async fn authenticate(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token);
    let Some(token) = presented else {
        return Err(ApiError::unauthorized());
    };
    let user = if constant_time_eq(token.as_bytes(), state.api_token.expose().as_bytes()) {
        API_USER.to_string()
    } else {
        match crate::user_tokens::verify(&state.store, token).await? {
            Some(user) => user,
            None => return Err(ApiError::unauthorized()),
        }
    };
    let role = state.gate.role_of(Some(&user));
    request.extensions_mut().insert(Caller { user, role });
    Ok(next.run(request).await)
}

/// 403 unless the caller's role may do `act`.
pub async fn authorize(act: Act, request: Request, next: Next) -> Result<Response, ApiError> {
    let Some(caller) = request.extensions().get::<Caller>() else {
        // The route table layers this inside `authenticate`; reaching here without
        // a caller is a wiring bug, and a bug refuses.
        return Err(ApiError::unauthorized());
    };
    if !allowed(caller.role, act) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            refusal(&caller.user, caller.role, act),
        ));
    }
    Ok(next.run(request).await)
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<Caller>()
            .cloned()
            .ok_or_else(ApiError::unauthorized)
    }
}
