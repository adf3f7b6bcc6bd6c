//! One error shape for every HTTP failure: `{"error": {"code": …, "message": …}}`,
//! with fields beside `error` where a program needs more (an invalid task move's
//! `allowed` statuses).

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, Request};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;

use crate::agents::AgentError;
use crate::store::{DISK_FULL, StoreError};

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// More fields beside `error` for a program to read (e.g. `allowed`).
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            extra: serde_json::Map::new(),
        }
    }

    /// The same error with one more field beside `error`.
    pub fn with(mut self, key: &str, value: serde_json::Value) -> Self {
        self.extra.insert(key.to_string(), value);
        self
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// A request authenticated by the web page's cookie that would change
    /// something without the session's CSRF token.
    pub fn csrf() -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            "csrf",
            "a request authenticated by the session cookie that changes something must send \
             the session's CSRF token (from GET /api/session) in the X-CSRF-Token header",
        )
    }

    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "send 'Authorization: Bearer <token>' with a good token: CHORUS_API_TOKEN or the file \
             <data-dir>/api-token, or one an admin issued you (revoked ones are refused)",
        )
    }

    /// 507: nothing was written because the disk is full; the same request works
    /// once space is freed.
    fn disk_full(detail: impl std::fmt::Display) -> Self {
        Self::new(
            StatusCode::INSUFFICIENT_STORAGE,
            "disk_full",
            format!("{DISK_FULL} ({detail})"),
        )
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::error!(code = self.code, message = %self.message, "request failed");
        }
        let mut body = serde_json::Map::new();
        body.insert(
            "error".into(),
            serde_json::json!({ "code": self.code, "message": self.message }),
        );
        body.extend(self.extra);
        let body = serde_json::Value::Object(body);
        let mut response = (self.status, Json(body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
        }
        response
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Conflict(m) => Self::new(StatusCode::CONFLICT, "conflict", m),
            StoreError::NotFound(m) => Self::not_found(m),
            StoreError::DiskFull(detail) => Self::disk_full(detail),
            other => Self::internal(other.to_string()),
        }
    }
}

impl From<AgentError> for ApiError {
    fn from(e: AgentError) -> Self {
        match e {
            AgentError::InvalidName(e) => {
                Self::new(StatusCode::BAD_REQUEST, "invalid_name", e.to_string())
            }
            AgentError::InvalidInput(m) => Self::bad_request(m),
            AgentError::Conflict(m) => Self::new(StatusCode::CONFLICT, "conflict", m),
            AgentError::NotFound(m) => Self::not_found(m),
            AgentError::Forbidden(m) => Self::new(StatusCode::FORBIDDEN, "forbidden", m),
            AgentError::Files(e) if e.is_disk_full() => Self::disk_full(e),
            AgentError::Files(e) => Self::internal(e.to_string()),
            AgentError::Store(e) => e.into(),
            AgentError::Incomplete(m) => Self::internal(m),
        }
    }
}

/// `Json<T>` whose rejections (bad JSON, wrong content type, missing fields) come
/// back in the API's error shape instead of plain text.
pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(request, state).await {
            Ok(Json(value)) => Ok(ApiJson(value)),
            Err(rejection) => Err(json_rejection(rejection)),
        }
    }
}

fn json_rejection(rejection: JsonRejection) -> ApiError {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        return ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            "the request body is too large",
        );
    }
    let message = match &rejection {
        JsonRejection::MissingJsonContentType(_) => {
            "send the body as JSON with 'Content-Type: application/json'".to_string()
        }
        _ => format!("the request body is not valid: {}", rejection.body_text()),
    };
    ApiError::bad_request(message)
}
