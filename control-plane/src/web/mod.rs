//! The web page, served by `chorus serve` on the API's port: `/` (the shell, for a
//! logged-in person; else a 303 to `/login`), `/login` (a form that posts `token`),
//! `POST /logout`, and `/assets/…` (the page's CSS and JavaScript modules).
//!
//! The files live in `control-plane/web/` and are embedded in release builds; debug
//! builds read them from disk at each request, so a developer reloads without
//! recompiling. Each file has a strong ETag (its SHA-256), and `If-None-Match` gets
//! a 304. Text is compressed (gzip or brotli) when the browser asks for it, and a
//! compressed body's tag names its encoding ([`tag_encoding`]).
//!
//! Logging in checks the token with the API's own check (`http::access::verify_token`)
//! and opens a [`sessions::Session`]; the cookie holds only the random session id.
//! With the cookie, `/api/…` is authenticated as the session's user, and a
//! state-changing request must also carry the session's CSRF token as `X-CSRF-Token`
//! (`GET /api/session` gives it to the page). Every response of the server carries
//! [`security_headers`]: a CSP without `'unsafe-inline'`, so the page runs only its
//! own files and talks only to this origin.

pub mod sessions;

use std::net::SocketAddr;
use std::time::Instant;

use axum::Router;
use axum::extract::{ConnectInfo, Form, Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use rust_embed::RustEmbed;
use serde::Deserialize;

use crate::http::AppState;
pub use sessions::{COOKIE, CSRF_HEADER, Session, Sessions, Web, csrf_ok};

/// The page's files (`control-plane/web/`).
#[derive(RustEmbed)]
#[folder = "web/"]
struct Files;

/// The policy every response carries: only this origin's files and requests, no
/// inline script or style, no framing, forms post only here.
pub const CSP: &str = "default-src 'self'; base-uri 'none'; object-src 'none'; \
                       form-action 'self'; frame-ancestors 'none'";

/// A file's kind, by its name's ending: what the page is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Html,
    Css,
    JavaScript,
}

impl Kind {
    fn of(name: &str) -> Option<Kind> {
        match name.rsplit_once('.')?.1 {
            "html" => Some(Kind::Html),
            "css" => Some(Kind::Css),
            "js" => Some(Kind::JavaScript),
            _ => None,
        }
    }

    fn content_type(self) -> &'static str {
        match self {
            Kind::Html => "text/html; charset=utf-8",
            Kind::Css => "text/css; charset=utf-8",
            Kind::JavaScript => "text/javascript; charset=utf-8",
        }
    }
}

/// The API's router with the page beside it, and every response of both with
/// [`security_headers`]. (Here rather than in `http`, so that `http` needs only the
/// sessions, not the page.)
pub fn around(api: Router, state: AppState) -> Router {
    api.merge(routes().with_state(state))
        .layer(axum::middleware::from_fn(security_headers))
}

fn routes() -> Router<AppState> {
    use tower_http::compression::CompressionLayer;
    Router::new()
        .route("/", get(shell))
        .route("/login", get(login_page).post(login))
        .route("/logout", post(logout))
        .route("/assets/{file}", get(asset))
        .layer(CompressionLayer::new().gzip(true).br(true))
        .layer(axum::middleware::from_fn(tag_encoding))
}

/// The encodings the compression layer may answer with, as `Content-Encoding` names them.
const ENCODINGS: [&str; 2] = ["gzip", "br"];

/// A strong ETag names one representation (RFC 9110, 8.8.1), and a compressed body is
/// another one: it gets its encoding in its tag (`"<sha256>-br"`). `If-None-Match` is
/// compared by the content's tag, and a 304 answers with the tag the browser sent.
async fn tag_encoding(mut request: Request, next: Next) -> Response {
    let sent: Vec<String> = if_none_match(request.headers())
        .map(str::to_string)
        .collect();
    if !sent.is_empty() {
        let contents: Vec<String> = sent.iter().map(|t| content_tag(t)).collect();
        if let Ok(value) = HeaderValue::from_str(&contents.join(", ")) {
            request.headers_mut().insert(header::IF_NONE_MATCH, value);
        }
    }
    let mut response = next.run(request).await;
    let Some(tag) = response
        .headers()
        .get(header::ETAG)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
    else {
        return response;
    };
    let tagged = if response.status() == StatusCode::NOT_MODIFIED {
        sent.into_iter().find(|t| content_tag(t) == tag)
    } else {
        response
            .headers()
            .get(header::CONTENT_ENCODING)
            .and_then(|v| v.to_str().ok())
            .map(|encoding| encoded_tag(&tag, encoding))
    };
    if let Some(value) = tagged.and_then(|t| HeaderValue::from_str(&t).ok()) {
        response.headers_mut().insert(header::ETAG, value);
    }
    response
}

/// `"<hash>"` with `encoding` in it: `"<hash>-<encoding>"`.
fn encoded_tag(tag: &str, encoding: &str) -> String {
    match tag.strip_suffix('"') {
        Some(open) => format!("{open}-{encoding}\""),
        None => tag.to_string(),
    }
}

/// The content's tag of a representation's tag (`"<hash>-br"` → `"<hash>"`).
fn content_tag(tag: &str) -> String {
    ENCODINGS
        .iter()
        .find_map(|encoding| {
            tag.strip_suffix('"')
                .and_then(|t| t.strip_suffix(encoding))
                .and_then(|t| t.strip_suffix('-'))
        })
        .map_or_else(|| tag.to_string(), |open| format!("{open}\""))
}

/// Adds the page's security headers to every response.
pub async fn security_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    response
}

/// A file's strong ETag: its SHA-256, quoted.
fn etag(hash: &[u8; 32]) -> String {
    let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
    format!("\"{hex}\"")
}

/// The tags `If-None-Match` lists.
fn if_none_match(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|t| !t.is_empty())
}

/// Whether `If-None-Match` names `tag` (or is `*`).
fn matches(headers: &HeaderMap, tag: &str) -> bool {
    if_none_match(headers).any(|t| t == tag || t == "*")
}

/// A file of the page with its ETag, or 304 when the browser has it.
fn file(name: &str, request_headers: &HeaderMap) -> Response {
    let (Some(kind), Some(found)) = (Kind::of(name), Files::get(name)) else {
        return (StatusCode::NOT_FOUND, "no such file").into_response();
    };
    let tag = etag(&found.metadata.sha256_hash());
    // `no-cache`: the browser keeps it but asks each time (a 304 is cheap), so a
    // new binary's files are used at once.
    let common = [
        (header::ETAG, tag.clone()),
        (header::CACHE_CONTROL, "no-cache".to_string()),
    ];
    if matches(request_headers, &tag) {
        return (StatusCode::NOT_MODIFIED, common).into_response();
    }
    (
        common,
        [(header::CONTENT_TYPE, kind.content_type())],
        found.data.into_owned(),
    )
        .into_response()
}

async fn asset(Path(name): Path<String>, headers: HeaderMap) -> Response {
    // Only the page's scripts and styles: the HTML pages have their own routes.
    if Kind::of(&name) == Some(Kind::Html) {
        return (StatusCode::NOT_FOUND, "no such file").into_response();
    }
    file(&name, &headers)
}

/// `GET /`: the shell for a logged-in person, else a 303 to `/login`.
async fn shell(State(state): State<AppState>, headers: HeaderMap) -> Response {
    match crate::http::access::web_session(&state, &headers).await {
        Ok(Some(_)) => file("index.html", &headers),
        Ok(None) => see_other("/login"),
        Err(e) => crate::http::ApiError::from(e).into_response(),
    }
}

fn see_other(to: &'static str) -> Response {
    (StatusCode::SEE_OTHER, [(header::LOCATION, to)]).into_response()
}

/// The login page, with a message when the last try was refused.
fn login_with(status: StatusCode, message: &str) -> Response {
    let Some(found) = Files::get("login.html") else {
        return (StatusCode::NOT_FOUND, "no login page").into_response();
    };
    let page = String::from_utf8_lossy(&found.data).replace(
        "<!--message-->",
        &format!(
            "<p class=\"error\" id=\"login-error\" role=\"alert\">{}</p>",
            escape(message)
        ),
    );
    (
        status,
        [
            (header::CONTENT_TYPE, Kind::Html.content_type()),
            (header::CACHE_CONTROL, "no-store"),
        ],
        page,
    )
        .into_response()
}

/// Text made safe inside HTML.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

async fn login_page(headers: HeaderMap) -> Response {
    file("login.html", &headers)
}

#[derive(Deserialize)]
struct LoginForm {
    token: String,
}

/// The message a refused token gets on the login page.
pub const WRONG_TOKEN: &str = "That token is not valid. Use the API token (CHORUS_API_TOKEN or \
                               <data-dir>/api-token) or a token an admin issued you; revoked \
                               tokens are refused.";
const TOO_MANY: &str =
    "Too many wrong tokens were tried just now. Wait a few seconds, then try again.";

/// `POST /login {token}`: a good token opens a session (303 to `/`, with the
/// cookie); a wrong one gets the login page again with [`WRONG_TOKEN`] (401).
async fn login(
    State(state): State<AppState>,
    client: Option<axum::Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    // A form of another site may not log a browser in (as someone else).
    if !same_origin(&headers) {
        return login_with(
            StatusCode::FORBIDDEN,
            "This form was sent from another site; open this server's own login page.",
        );
    }
    let now = Instant::now();
    let client = client.map(|axum::Extension(ConnectInfo(at))| at.ip());
    if state.web.login_limit.exhausted(client, now) {
        return login_with(StatusCode::TOO_MANY_REQUESTS, TOO_MANY);
    }
    let verified = match crate::http::access::verify_token(&state, form.token.trim()).await {
        Ok(v) => v,
        Err(e) => return e.into_response(),
    };
    let Some(verified) = verified else {
        state.web.login_limit.charge(client, now);
        return login_with(StatusCode::UNAUTHORIZED, WRONG_TOKEN);
    };
    let opened = match state
        .web
        .sessions
        .open(&verified.user, verified.token_hash, now)
    {
        Ok(o) => o,
        Err(e) => {
            return crate::http::ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                e.to_string(),
            )
            .into_response();
        }
    };
    tracing::info!(user = %verified.user, "logged in to the web page");
    // `Secure` always: browsers keep it over https, and over plain http only on
    // localhost (served elsewhere, put TLS in front: SECURITY.md).
    let cookie = format!(
        "{COOKIE}={}; Path=/; HttpOnly; Secure; SameSite=Strict; Max-Age={}",
        opened.id,
        sessions::LIFETIME.as_secs()
    );
    (
        StatusCode::SEE_OTHER,
        [
            (header::LOCATION, "/".to_string()),
            (header::SET_COOKIE, cookie),
        ],
    )
        .into_response()
}

/// Whether a form post came from this server's own page. The browser says so in
/// `Sec-Fetch-Site`; a browser without it is judged by `Origin` (our
/// `Referrer-Policy: no-referrer` makes a modern browser send `Origin: null`, so
/// that header alone cannot be trusted to name us). Neither: not a browser's
/// cross-site request (a script or `curl`, which could send the token anyway).
fn same_origin(headers: &HeaderMap) -> bool {
    let text = |name| {
        headers
            .get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
    };
    if let Some(site) = text(header::HeaderName::from_static("sec-fetch-site")) {
        return matches!(site, "same-origin" | "none");
    }
    let Some(origin) = text(header::ORIGIN) else {
        return true;
    };
    let origin_host = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"));
    matches!((origin_host, text(header::HOST)), (Some(o), Some(h)) if o == h)
}

/// `POST /logout`: ends the session (with its CSRF token) and clears the cookie.
async fn logout(State(state): State<AppState>, method: Method, headers: HeaderMap) -> Response {
    let (id, session) = match crate::http::access::web_session(&state, &headers).await {
        Ok(Some(found)) => found,
        Ok(None) => return crate::http::ApiError::unauthorized().into_response(),
        Err(e) => return crate::http::ApiError::from(e).into_response(),
    };
    if !csrf_ok(&method, &headers, &session) {
        return crate::http::ApiError::csrf().into_response();
    }
    state.web.sessions.end(&id);
    let clear = format!("{COOKIE}=; Path=/; HttpOnly; Secure; SameSite=Strict; Max-Age=0");
    (StatusCode::NO_CONTENT, [(header::SET_COOKIE, clear)]).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_of_the_page_has_a_kind_and_no_inline_code() {
        for name in Files::iter() {
            let kind = Kind::of(&name);
            assert!(kind.is_some(), "{name}: not html, css or js");
            if kind == Some(Kind::Html) {
                let text = String::from_utf8(Files::get(&name).unwrap().data.into_owned()).unwrap();
                // The CSP would block them: a script or style must be its own file.
                assert!(
                    !text.contains("<script>") && !text.contains("style="),
                    "{name}"
                );
                assert!(!text.contains("<style"), "{name}");
            }
        }
    }

    #[test]
    fn if_none_match_lists_are_read() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::IF_NONE_MATCH,
            HeaderValue::from_static("\"x\", \"y\""),
        );
        assert!(matches(&headers, "\"y\""));
        assert!(!matches(&headers, "\"z\""));
    }

    #[test]
    fn a_compressed_representation_has_its_own_tag_and_its_content_tag_back() {
        assert_eq!(encoded_tag("\"ab12\"", "br"), "\"ab12-br\"");
        assert_eq!(content_tag("\"ab12-br\""), "\"ab12\"");
        assert_eq!(content_tag("\"ab12-gzip\""), "\"ab12\"");
        for kept in ["\"ab12\"", "*", "\"ab12-zstd\"", "\"-br\"x"] {
            assert_eq!(content_tag(kept), kept);
        }
    }

    #[test]
    fn messages_are_escaped() {
        assert_eq!(escape("<a href='x'>&"), "&lt;a href=&#39;x&#39;&gt;&amp;");
    }
}
