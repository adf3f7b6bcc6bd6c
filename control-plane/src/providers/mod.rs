//! Model providers: which ones exist, how each is reached and authenticated, and the
//! catalogue of their models (discovery, cache, resolving a model name to a provider).

pub mod catalog;
pub mod embeddings;

use crate::secrets::Secret;

/// Every provider Chorus knows, in resolution order (first match wins). In JSON, its
/// [`name`](ProviderKind::name).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    Anthropic,
    OpenAi,
    OpenRouter,
    Ollama,
    LmStudio,
}

pub const ALL_PROVIDERS: [ProviderKind; 5] = [
    ProviderKind::Anthropic,
    ProviderKind::OpenAi,
    ProviderKind::OpenRouter,
    ProviderKind::Ollama,
    ProviderKind::LmStudio,
];

/// Wire formats (the worker picks a client by these).
pub const API_OPENAI_CHAT: &str = chorus_proto::domain::ModelRoute::OPENAI_CHAT;
pub const API_ANTHROPIC_MESSAGES: &str = chorus_proto::domain::ModelRoute::ANTHROPIC_MESSAGES;

impl ProviderKind {
    pub fn name(self) -> &'static str {
        match self {
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::OpenAi => "openai",
            ProviderKind::OpenRouter => "openrouter",
            ProviderKind::Ollama => "ollama",
            ProviderKind::LmStudio => "lmstudio",
        }
    }

    pub fn parse(name: &str) -> Option<ProviderKind> {
        ALL_PROVIDERS.into_iter().find(|k| k.name() == name)
    }

    pub fn api(self) -> &'static str {
        match self {
            ProviderKind::Anthropic => API_ANTHROPIC_MESSAGES,
            _ => API_OPENAI_CHAT,
        }
    }

    /// Whether the provider's API has an embeddings endpoint (Anthropic's has none).
    pub fn offers_embeddings(self) -> bool {
        self != ProviderKind::Anthropic
    }

    /// Local servers need no key and may simply not be running.
    pub fn is_local(self) -> bool {
        matches!(self, ProviderKind::Ollama | ProviderKind::LmStudio)
    }

    pub fn key_env(self) -> Option<&'static str> {
        match self {
            ProviderKind::Anthropic => Some("ANTHROPIC_API_KEY"),
            ProviderKind::OpenAi => Some("OPENAI_API_KEY"),
            ProviderKind::OpenRouter => Some("OPENROUTER_API_KEY"),
            ProviderKind::Ollama | ProviderKind::LmStudio => None,
        }
    }

    pub fn base_env(self) -> &'static str {
        match self {
            ProviderKind::Anthropic => "ANTHROPIC_BASE_URL",
            ProviderKind::OpenAi => "OPENAI_BASE_URL",
            ProviderKind::OpenRouter => "OPENROUTER_BASE_URL",
            ProviderKind::Ollama => "OLLAMA_BASE_URL",
            ProviderKind::LmStudio => "LMSTUDIO_BASE_URL",
        }
    }

    pub fn default_base(self) -> &'static str {
        match self {
            ProviderKind::Anthropic => "https://api.anthropic.com",
            ProviderKind::OpenAi => "https://api.openai.com/v1",
            ProviderKind::OpenRouter => "https://openrouter.ai/api/v1",
            ProviderKind::Ollama => "http://127.0.0.1:11434",
            ProviderKind::LmStudio => "http://127.0.0.1:1234",
        }
    }

    /// What to set to use this provider, for messages.
    pub fn setting_hint(self) -> &'static str {
        self.key_env().unwrap_or_else(|| self.base_env())
    }
}

/// A configured provider: where it is and the key for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderEndpoint {
    pub kind: ProviderKind,
    /// As configured, without a trailing slash.
    pub base_url: String,
    pub api_key: Option<Secret>,
    /// Someone asked for it (a key, a base URL, `enabled = true`); false: a local
    /// server probed at its default address, whose absence is no news.
    pub configured: bool,
    /// The model memory search embeds with (`[providers.<name>] embedding_model`);
    /// `None`: search is lexical for the agents of this provider.
    pub embedding_model: Option<String>,
}

impl ProviderEndpoint {
    /// The URL the relay forwards `/llm/<provider>/<path>` to: `<this>/<path>`. Workers
    /// use OpenAI-style paths (`chat/completions`) below a `/v1` base, and Anthropic
    /// paths (`v1/messages`) below the bare host.
    pub fn relay_base(&self) -> String {
        match self.kind {
            ProviderKind::Ollama | ProviderKind::LmStudio => format!("{}/v1", self.base_url),
            _ => self.base_url.clone(),
        }
    }

    /// Headers that authenticate (and, for OpenRouter, attribute) a request.
    pub fn auth_headers(&self) -> Vec<(&'static str, String)> {
        let mut headers = Vec::new();
        match (self.kind, &self.api_key) {
            (ProviderKind::Anthropic, Some(key)) => {
                headers.push(("x-api-key", key.expose().to_string()))
            }
            (_, Some(key)) => headers.push(("authorization", format!("Bearer {}", key.expose()))),
            (_, None) => {}
        }
        if self.kind == ProviderKind::Anthropic {
            headers.push(("anthropic-version", "2023-06-01".to_string()));
        }
        if self.kind == ProviderKind::OpenRouter {
            // OpenRouter's attribution header: which app is calling.
            headers.push(("x-title", "Chorus".to_string()));
        }
        headers
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_local_servers_need_no_key() {
        for kind in ALL_PROVIDERS {
            assert_eq!(ProviderKind::parse(kind.name()), Some(kind));
            assert_eq!(serde_json::json!(kind), kind.name());
        }
        assert!(ProviderKind::Ollama.is_local() && ProviderKind::Ollama.key_env().is_none());
        assert_eq!(ProviderKind::Anthropic.api(), API_ANTHROPIC_MESSAGES);
        assert_eq!(ProviderKind::OpenRouter.api(), API_OPENAI_CHAT);
    }

    #[test]
    fn auth_follows_each_providers_convention() {
        let endpoint = |kind, key: Option<&str>| ProviderEndpoint {
            kind,
            base_url: kind.default_base().into(),
            api_key: key.map(Secret::new),
            configured: true,
            embedding_model: None,
        };
        let anthropic = endpoint(ProviderKind::Anthropic, Some("sk-ant"));
        assert!(
            anthropic
                .auth_headers()
                .contains(&("x-api-key", "sk-ant".into()))
        );
        let openrouter = endpoint(ProviderKind::OpenRouter, Some("sk-or")).auth_headers();
        assert!(openrouter.contains(&("authorization", "Bearer sk-or".into())));
        assert!(openrouter.iter().any(|(k, _)| *k == "x-title"));
        assert!(
            endpoint(ProviderKind::Ollama, None)
                .auth_headers()
                .is_empty()
        );
        assert_eq!(
            endpoint(ProviderKind::Ollama, None).relay_base(),
            "http://127.0.0.1:11434/v1"
        );
    }
}
