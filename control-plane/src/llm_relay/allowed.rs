//! Which requests the model relay forwards: per provider, an allow-list of
//! (method, path) pairs a worker needs to talk to a model, and nothing else.
//!
//! Pure: the caller hands in the request target exactly as it arrived (not decoded,
//! not normalised) and forwards, on success, to the allow-list's own path and query,
//! never to the ones the worker sent. So `..`, `%2e%2e`, `%2F`, doubled slashes and
//! any query string but an endpoint's own can only fail to match.
//!
//! The CLI backends' needs are here too, and no more: Claude Code (2.1.332) sends
//! `POST v1/messages?beta=true` and counts tokens at `POST v1/messages/count_tokens`
//! (with or without `?beta=true`); OpenCode uses the OpenAI format's streaming chat
//! completions, already allowed.

use crate::providers::ProviderKind;

/// One endpoint a worker may use, below the provider's relay base
/// (`ProviderEndpoint::relay_base`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelEndpoint {
    pub method: &'static str,
    pub path: &'static str,
    /// The one query string this endpoint is used with (exactly; none when `None`).
    pub query: Option<&'static str>,
}

impl ModelEndpoint {
    /// What to request below the provider's relay base: the path, with its query.
    pub fn target(&self) -> String {
        match self.query {
            Some(query) => format!("{}?{query}", self.path),
            None => self.path.to_string(),
        }
    }
}

const fn endpoint(method: &'static str, path: &'static str) -> ModelEndpoint {
    ModelEndpoint {
        method,
        path,
        query: None,
    }
}

/// Anthropic's beta surface, which Claude Code uses (`?beta=true`, the query only).
const fn beta(method: &'static str, path: &'static str) -> ModelEndpoint {
    ModelEndpoint {
        method,
        path,
        query: Some("beta=true"),
    }
}

/// OpenAI, OpenRouter, Ollama and LM Studio (the last two below their `/v1`).
const OPENAI_FORMAT: &[ModelEndpoint] = &[
    endpoint("POST", "chat/completions"),
    endpoint("GET", "models"),
    endpoint("POST", "embeddings"),
];

/// Anthropic, below the bare host. It has no embeddings endpoint.
const ANTHROPIC: &[ModelEndpoint] = &[
    endpoint("POST", "v1/messages"),
    beta("POST", "v1/messages"),
    endpoint("POST", "v1/messages/count_tokens"),
    beta("POST", "v1/messages/count_tokens"),
    endpoint("GET", "v1/models"),
];

/// The endpoints a worker may use at `kind`.
pub fn model_endpoints(kind: ProviderKind) -> &'static [ModelEndpoint] {
    match kind {
        ProviderKind::Anthropic => ANTHROPIC,
        ProviderKind::OpenAi
        | ProviderKind::OpenRouter
        | ProviderKind::Ollama
        | ProviderKind::LmStudio => OPENAI_FORMAT,
    }
}

/// Why a request is not forwarded; the text is for the worker (and the log).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the model relay serves /llm/<provider>/<model endpoint> only")]
    NotRelayPath,
    #[error("'{0}' is not a provider the model relay serves ({1})")]
    UnknownProvider(String, String),
    #[error(
        "the model relay does not forward query strings (but `beta=true` on Anthropic's messages endpoints)"
    )]
    Query,
    #[error(
        "the model relay forwards only model endpoints; {method} {path} is not one of {provider}'s ({allowed})"
    )]
    NotModelEndpoint {
        method: String,
        path: String,
        provider: &'static str,
        allowed: String,
    },
}

/// A request the relay forwards: to whom, and where below the provider's base.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allowed {
    pub provider: ProviderKind,
    pub endpoint: ModelEndpoint,
}

/// Checks a request by its method and its raw target: `raw_path` as sent (for
/// example `/llm/openai/chat/completions`), `query` whatever followed a `?`.
pub fn check(method: &str, raw_path: &str, query: Option<&str>) -> Result<Allowed, Refusal> {
    let (provider, rest) = raw_path
        .strip_prefix("/llm/")
        .and_then(|p| p.split_once('/'))
        .ok_or(Refusal::NotRelayPath)?;
    let kind = ProviderKind::parse(provider).ok_or_else(|| {
        let known: Vec<&str> = crate::providers::ALL_PROVIDERS
            .iter()
            .map(|k| k.name())
            .collect();
        Refusal::UnknownProvider(shown(provider), known.join(", "))
    })?;
    let endpoints = model_endpoints(kind);
    let same = |e: &&ModelEndpoint| e.method == method && e.path == rest;
    if let Some(&endpoint) = endpoints.iter().filter(same).find(|e| e.query == query) {
        return Ok(Allowed {
            provider: kind,
            endpoint,
        });
    }
    if query.is_some() {
        return Err(Refusal::Query);
    }
    Err(Refusal::NotModelEndpoint {
        method: shown(method),
        path: shown(rest),
        provider: kind.name(),
        allowed: endpoints
            .iter()
            .map(|e| format!("{} {}", e.method, e.target()))
            .collect::<Vec<_>>()
            .join(", "),
    })
}

/// What a refusal quotes of the worker's input: at most 200 characters.
fn shown(text: &str) -> String {
    const MAX: usize = 200;
    match text.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_endpoints_pass_and_point_at_the_allow_lists_own_path() {
        for (method, path, provider, forwarded) in [
            (
                "POST",
                "/llm/openai/chat/completions",
                ProviderKind::OpenAi,
                "chat/completions",
            ),
            ("GET", "/llm/openai/models", ProviderKind::OpenAi, "models"),
            (
                "POST",
                "/llm/openai/embeddings",
                ProviderKind::OpenAi,
                "embeddings",
            ),
            (
                "POST",
                "/llm/openrouter/chat/completions",
                ProviderKind::OpenRouter,
                "chat/completions",
            ),
            (
                "POST",
                "/llm/ollama/chat/completions",
                ProviderKind::Ollama,
                "chat/completions",
            ),
            (
                "GET",
                "/llm/lmstudio/models",
                ProviderKind::LmStudio,
                "models",
            ),
            (
                "POST",
                "/llm/anthropic/v1/messages",
                ProviderKind::Anthropic,
                "v1/messages",
            ),
            (
                "GET",
                "/llm/anthropic/v1/models",
                ProviderKind::Anthropic,
                "v1/models",
            ),
        ] {
            let allowed = check(method, path, None).unwrap_or_else(|e| panic!("{path}: {e}"));
            assert_eq!(allowed.provider, provider, "{path}");
            assert_eq!(allowed.endpoint.path, forwarded, "{path}");
        }
    }

    #[test]
    fn everything_else_is_refused_with_the_reason() {
        for (method, path) in [
            // Other endpoints of the same providers.
            ("DELETE", "/llm/openai/keys/x"),
            ("GET", "/llm/openai/organization/api_keys"),
            ("POST", "/llm/openai/files"),
            ("POST", "/llm/openai/fine_tuning/jobs"),
            ("GET", "/llm/openai/chat/completions/abc"),
            ("POST", "/llm/anthropic/v1/files"),
            ("POST", "/llm/anthropic/v1/messages/batches"),
            ("POST", "/llm/anthropic/embeddings"),
            ("POST", "/llm/anthropic/chat/completions"),
            ("POST", "/llm/openai/v1/messages"),
            // Right path, wrong method.
            ("GET", "/llm/openai/chat/completions"),
            ("DELETE", "/llm/openai/models"),
            ("PUT", "/llm/anthropic/v1/messages"),
            ("post", "/llm/openai/chat/completions"),
            // Tricks: traversal, encodings, doubled or trailing slashes, case.
            ("POST", "/llm/openai/../../x"),
            ("POST", "/llm/openai/chat/completions/../../keys"),
            ("POST", "/llm/openai/%2e%2e/%2e%2e/x"),
            ("POST", "/llm/openai/chat%2Fcompletions"),
            ("POST", "/llm/openai/chat/%63ompletions"),
            ("POST", "/llm/openai//chat/completions"),
            ("POST", "/llm/openai/chat/completions/"),
            ("POST", "/llm/openai/./chat/completions"),
            ("POST", "/llm/openai/Chat/Completions"),
            ("POST", "/llm/openai/"),
        ] {
            let refusal = check(method, path, None).expect_err(path);
            assert!(
                matches!(refusal, Refusal::NotModelEndpoint { .. }),
                "{path}: {refusal}"
            );
            let text = refusal.to_string();
            assert!(text.contains("only model endpoints"), "{text}");
            assert!(
                text.contains("POST chat/completions") || text.contains("POST v1/messages"),
                "{text}"
            );
        }
        for path in [
            "/llm/openai",
            "/llm",
            "/llm//chat/completions",
            "/api/agents",
        ] {
            assert!(check("POST", path, None).is_err(), "{path}");
        }
        assert!(matches!(
            check("POST", "/llm/%6fpenai/chat/completions", None),
            Err(Refusal::UnknownProvider(..))
        ));
        assert!(matches!(
            check("POST", "/llm/azure/chat/completions", None),
            Err(Refusal::UnknownProvider(..))
        ));
    }

    #[test]
    fn a_query_string_is_refused_even_on_a_model_endpoint() {
        for query in ["", "api-version=1", "x=../../keys"] {
            assert_eq!(
                check("POST", "/llm/openai/chat/completions", Some(query)),
                Err(Refusal::Query)
            );
        }
    }

    /// What the pinned CLIs send passes, to the allow-list's own target.
    #[test]
    fn the_clis_requests_pass_with_exactly_their_query() {
        for (path, query, target) in [
            (
                "/llm/anthropic/v1/messages",
                Some("beta=true"),
                "v1/messages?beta=true",
            ),
            (
                "/llm/anthropic/v1/messages/count_tokens",
                Some("beta=true"),
                "v1/messages/count_tokens?beta=true",
            ),
            (
                "/llm/anthropic/v1/messages/count_tokens",
                None,
                "v1/messages/count_tokens",
            ),
            ("/llm/anthropic/v1/messages", None, "v1/messages"),
        ] {
            let allowed = check("POST", path, query).unwrap_or_else(|e| panic!("{path}: {e}"));
            assert_eq!(allowed.provider, ProviderKind::Anthropic);
            assert_eq!(allowed.endpoint.target(), target);
        }
        // OpenCode's streaming chat completions: the OpenAI format, unchanged.
        assert_eq!(
            check("POST", "/llm/openai/chat/completions", None)
                .unwrap()
                .endpoint
                .target(),
            "chat/completions"
        );
    }

    /// Any other query, even on those endpoints, and `beta=true` anywhere else.
    #[test]
    fn any_other_query_is_still_refused() {
        for (method, path, query) in [
            ("POST", "/llm/anthropic/v1/messages", "beta=false"),
            ("POST", "/llm/anthropic/v1/messages", "beta=true&x=1"),
            ("POST", "/llm/anthropic/v1/messages", "x=1&beta=true"),
            ("POST", "/llm/anthropic/v1/messages", "beta=TRUE"),
            ("POST", "/llm/anthropic/v1/messages", "beta%3Dtrue"),
            ("POST", "/llm/anthropic/v1/messages", "beta=true/../../x"),
            ("POST", "/llm/anthropic/v1/messages", ""),
            ("POST", "/llm/anthropic/v1/messages/count_tokens", "beta=1"),
            ("GET", "/llm/anthropic/v1/models", "beta=true"),
            ("POST", "/llm/openai/chat/completions", "beta=true"),
            ("POST", "/llm/anthropic/v1/files", "beta=true"),
            ("GET", "/llm/anthropic/v1/messages", "beta=true"),
        ] {
            assert_eq!(
                check(method, path, Some(query)),
                Err(Refusal::Query),
                "{method} {path}?{query}"
            );
        }
        // Near misses of the new paths.
        for path in [
            "/llm/anthropic/v1/messages/count_tokens/",
            "/llm/anthropic/v1/messages/count-tokens",
            "/llm/anthropic/v1/messages/batches",
            "/llm/anthropic/v1/complete",
        ] {
            assert!(
                matches!(
                    check("POST", path, None),
                    Err(Refusal::NotModelEndpoint { .. })
                ),
                "{path}"
            );
        }
        assert!(matches!(
            check("GET", "/llm/anthropic/v1/messages/count_tokens", None),
            Err(Refusal::NotModelEndpoint { .. })
        ));
    }

    #[test]
    fn what_is_quoted_is_bounded() {
        let long = format!("/llm/openai/{}", "x".repeat(10_000));
        let text = check("GET", &long, None).unwrap_err().to_string();
        assert!(text.len() < 600, "{}", text.len());
    }
}
