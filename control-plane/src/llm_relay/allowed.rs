//! Which requests the model relay forwards: per provider, an allow-list of
//! (method, path) pairs a worker needs to talk to a model, and nothing else.
//!
//! Pure: the caller hands in the request target exactly as it arrived (not decoded,
//! not normalised) and forwards, on success, to the allow-list's own path, never to
//! the one the worker sent. So `..`, `%2e%2e`, `%2F`, doubled slashes and any query
//! string can only fail to match.

use crate::providers::ProviderKind;

/// One endpoint a worker may use, below the provider's relay base
/// (`ProviderEndpoint::relay_base`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelEndpoint {
    pub method: &'static str,
    pub path: &'static str,
}

const fn endpoint(method: &'static str, path: &'static str) -> ModelEndpoint {
    ModelEndpoint { method, path }
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
    #[error("the model relay does not forward query strings")]
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
    if query.is_some() {
        return Err(Refusal::Query);
    }
    let endpoints = model_endpoints(kind);
    endpoints
        .iter()
        .find(|e| e.method == method && e.path == rest)
        .map(|&endpoint| Allowed {
            provider: kind,
            endpoint,
        })
        .ok_or_else(|| Refusal::NotModelEndpoint {
            method: shown(method),
            path: shown(rest),
            provider: kind.name(),
            allowed: endpoints
                .iter()
                .map(|e| format!("{} {}", e.method, e.path))
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

    #[test]
    fn what_is_quoted_is_bounded() {
        let long = format!("/llm/openai/{}", "x".repeat(10_000));
        let text = check("GET", &long, None).unwrap_err().to_string();
        assert!(text.len() < 600, "{}", text.len());
    }
}
