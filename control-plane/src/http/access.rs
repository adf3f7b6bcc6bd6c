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

/// A token that passed [`verify_token`]: its user, and for an issued token its
/// hash (a web session opened with it ends when it is revoked).
pub struct Verified {
    pub user: String,
    pub token_hash: Option<String>,
}

/// The one check of a presented token: the API token (user `api`) or a live
/// issued one. The bearer header and the web page's login both use it.
pub async fn verify_token(state: &AppState, token: &str) -> Result<Option<Verified>, ApiError> {
    if constant_time_eq(token.as_bytes(), state.api_token.expose().as_bytes()) {
        return Ok(Some(Verified {
            user: API_USER.to_string(),
            token_hash: None,
        }));
    }
    Ok(crate::user_tokens::verify(&state.store, token)
        .await?
        .map(|user| Verified {
            user,
            token_hash: Some(crate::secrets::token_hash(token)),
        }))
}

/// The CSRF token of the web session a request was authenticated by (none for a
/// bearer token): what `GET /api/session` gives the page.
#[derive(Debug, Clone)]
pub struct CsrfToken(pub String);

/// 401 unless the request carries the API token or a good issued token as a bearer,
/// or else the cookie of a live web session (then, to change anything, also the
/// session's `X-CSRF-Token`: 403 without); then the request goes on with its [`Caller`].
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
    let user = if let Some(token) = presented {
        match verify_token(&state, token).await? {
            Some(verified) => verified.user,
            None => return Err(ApiError::unauthorized()),
        }
    } else {
        let Some((_, session)) = web_session(&state, request.headers()).await? else {
            return Err(ApiError::unauthorized());
        };
        if !crate::web::sessions::csrf_ok(request.method(), request.headers(), &session) {
            return Err(ApiError::csrf());
        }
        request
            .extensions_mut()
            .insert(CsrfToken(session.csrf.clone()));
        session.user
    };
    let role = state.gate.role_of(Some(&user));
    request.extensions_mut().insert(Caller { user, role });
    Ok(next.run(request).await)
}

/// The live session of a request's cookie: it has not expired, and the issued
/// token it was opened with is not revoked (checked each time, as a bearer is).
pub async fn web_session(
    state: &AppState,
    headers: &axum::http::HeaderMap,
) -> Result<Option<(String, crate::web::sessions::Session)>, crate::store::StoreError> {
    let Some(id) = crate::web::sessions::session_cookie(headers) else {
        return Ok(None);
    };
    let Some(session) = state.web.sessions.get(id, std::time::Instant::now()) else {
        return Ok(None);
    };
    if let Some(hash) = &session.token_hash
        && state.store.live_user_token(hash).await?.is_none()
    {
        state.web.sessions.end(id);
        return Ok(None);
    }
    Ok(Some((id.to_string(), session)))
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
