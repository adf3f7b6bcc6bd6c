//! The model catalogue (SPEC C3): at start and on demand, check each configured
//! provider's key and list its models; cache the result in
//! `<data-dir>/available_models.json`; resolve a model name to a provider.
//!
//! A provider that cannot be reached keeps the models it listed last time (a local
//! server that is down, or a hosted one with a bad minute, is reported, not fatal);
//! a provider that refuses its key loses them.
//!
//! Resolving a name is one rule, asked of each provider ([`verdict`]): a provider
//! whose list has the name takes it; one whose list has other names does not; one
//! with no list takes it on trust unless it refused our key, or it is a local server
//! (Ollama, LM Studio) that answered but could not list its models: their list is
//! how we know the server is what it claims, so the name is refused there. An
//! OpenAI-compatible server (`OPENAI_BASE_URL`) that cannot list is trusted, since
//! many cannot. `provider/model` asks that provider; a bare name goes to the first
//! provider, in resolution order, whose list has it, else to the only provider that
//! could be asked (local servers that are down do not count), by the same verdict.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::RwLock;
use std::time::Duration;

use chorus_proto::domain::{ModelLimits, ModelRoute};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::watch;

use super::{ALL_PROVIDERS, ProviderEndpoint, ProviderKind};
use crate::store::now;

/// What one provider offered at its last check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderModels {
    /// The last check succeeded.
    pub valid: bool,
    pub base_url: String,
    pub models: Vec<String>,
    /// Why the last check failed, and what to do.
    pub error: Option<String>,
    /// The server answered the last check (false: down or unreachable). A server
    /// that answered but listed nothing is the wrong server or refused us.
    #[serde(default = "reachable_by_default")]
    pub reachable: bool,
    /// The server refused our key (401/403): nothing can be sent there.
    #[serde(default)]
    pub key_refused: bool,
    pub checked_at: String,
    /// The limits the list gave, by model (OpenRouter: `context_length` and
    /// `top_provider.max_completion_tokens`; vLLM: `max_model_len`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub limits: BTreeMap<String, ModelLimits>,
}

fn reachable_by_default() -> bool {
    true
}

/// The contents of `available_models.json` and of `GET /api/models`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CatalogSnapshot {
    pub refreshed_at: Option<String>,
    /// By provider name.
    pub providers: BTreeMap<String, ProviderModels>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    #[error(
        "no model provider configured: set OPENAI_API_KEY, ANTHROPIC_API_KEY or OPENROUTER_API_KEY \
         (or OPENAI_BASE_URL for a local OpenAI-compatible server), or start Ollama (OLLAMA_BASE_URL) \
         or LM Studio (LMSTUDIO_BASE_URL), then restart chorus or check again with `chorus models \
         --refresh` (POST /api/models/refresh){details}"
    )]
    NoProviders { details: String },
    #[error(
        "unknown model '{model}'; known models: {known}. `chorus models` (GET /api/models) lists \
         them; \
         name a local model as ollama/<name> or lmstudio/<name>"
    )]
    Unknown { model: String, known: String },
    #[error(
        "cannot use '{model}': the {provider} server was reached but cannot list its models \
         ({reason}). Check {setting}, then check again with `chorus models --refresh` \
         (POST /api/models/refresh)"
    )]
    Unlisted {
        model: String,
        provider: &'static str,
        reason: String,
        setting: &'static str,
    },
}

/// What one provider says to a model name (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Verdict<'a> {
    /// Its list has the name (as listed: `llama3.2` is `llama3.2:latest` on Ollama).
    Listed(&'a str),
    /// Its list has other names.
    NotListed,
    /// It has no list to check against, and no reason to doubt it.
    Trusted,
    /// It has no list, and a request would fail for the reason given.
    Refused(&'a str),
}

fn verdict<'a>(kind: ProviderKind, entry: &'a ProviderModels, name: &'a str) -> Verdict<'a> {
    if let Some(listed) = find(kind, &entry.models, name) {
        return Verdict::Listed(listed);
    }
    if !entry.models.is_empty() {
        return Verdict::NotListed;
    }
    match &entry.error {
        Some(reason) if entry.key_refused || (entry.reachable && kind.is_local()) => {
            Verdict::Refused(reason)
        }
        // Down for now, listing nothing, or a compatible server without a model list.
        _ => Verdict::Trusted,
    }
}

/// Resolves `model` against a snapshot (pure; see the module docs for the rule).
pub fn resolve_in(snapshot: &CatalogSnapshot, model: &str) -> Result<ModelRoute, ResolveError> {
    let listed = |kind: ProviderKind| snapshot.providers.get(kind.name());
    let route = |kind: ProviderKind, api_model: &str| ModelRoute {
        provider: kind.name().to_string(),
        api: kind.api().to_string(),
        relay_path: format!("/llm/{}", kind.name()),
        model: api_model.to_string(),
        limits: listed(kind)
            .and_then(|entry| entry.limits.get(api_model))
            .copied()
            .unwrap_or_default(),
    };
    let decide =
        |kind: ProviderKind, entry: &ProviderModels, name: &str| match verdict(kind, entry, name) {
            Verdict::Listed(listed) => Some(Ok(route(kind, listed))),
            Verdict::Trusted => Some(Ok(route(kind, name))),
            Verdict::Refused(reason) => Some(Err(ResolveError::Unlisted {
                model: model.to_string(),
                provider: kind.name(),
                reason: reason.to_string(),
                setting: if entry.key_refused {
                    kind.setting_hint()
                } else {
                    kind.base_env()
                },
            })),
            Verdict::NotListed => None,
        };
    let explicit = model
        .split_once('/')
        .filter(|(_, rest)| !rest.is_empty())
        .and_then(|(prefix, rest)| Some((ProviderKind::parse(prefix)?, rest)));
    if let Some((kind, rest)) = explicit
        && let Some(entry) = listed(kind)
        && let Some(decided) = decide(kind, entry, rest)
    {
        return decided;
    }
    // A bare name (or a prefixed one its provider does not list: OpenRouter ids look
    // like `anthropic/claude-3.5-sonnet`): the first list that has it.
    for kind in ALL_PROVIDERS {
        if let Some(name) = listed(kind).and_then(|entry| find(kind, &entry.models, model)) {
            return Ok(route(kind, name));
        }
    }
    // No list has it: the only provider that could be asked (local servers nobody
    // runs do not count) decides, by the same verdict; with two, the name is not
    // guessed.
    let candidates: Vec<(ProviderKind, &ProviderModels)> = ALL_PROVIDERS
        .into_iter()
        .filter_map(|kind| listed(kind).map(|entry| (kind, entry)))
        .filter(|(kind, entry)| !kind.is_local() || entry.reachable)
        .collect();
    if let [(kind, entry)] = candidates.as_slice()
        && let Some(decided) = decide(*kind, entry, model)
    {
        return decided;
    }
    let known: Vec<String> = ALL_PROVIDERS
        .into_iter()
        .filter_map(|kind| listed(kind).map(|entry| (kind, entry)))
        .flat_map(|(kind, entry)| {
            entry.models.iter().map(move |m| {
                if kind.is_local() {
                    format!("{}/{m}", kind.name())
                } else {
                    m.clone()
                }
            })
        })
        .collect();
    if known.is_empty() {
        let details: Vec<String> = snapshot
            .providers
            .iter()
            .filter_map(|(name, entry)| entry.error.as_ref().map(|e| format!("{name}: {e}")))
            .collect();
        return Err(ResolveError::NoProviders {
            details: if details.is_empty() {
                String::new()
            } else {
                format!(" ({})", details.join("; "))
            },
        });
    }
    const SHOWN: usize = 30;
    let mut text = known
        .iter()
        .take(SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if known.len() > SHOWN {
        text.push_str(&format!(" and {} more", known.len() - SHOWN));
    }
    Err(ResolveError::Unknown {
        model: model.to_string(),
        known: text,
    })
}

/// A route's limits with the configured ones over them: set for the model as named
/// (`ollama/llama3.2`), as `provider/model`, or by the provider's own name.
pub fn with_configured(
    configured: &BTreeMap<String, ModelLimits>,
    named: &str,
    route: &ModelRoute,
) -> ModelLimits {
    let set = [
        named.to_string(),
        format!("{}/{}", route.provider, route.model),
        route.model.clone(),
    ]
    .iter()
    .find_map(|key| configured.get(key).copied())
    .unwrap_or_default();
    ModelLimits {
        max_tokens: set.max_tokens.or(route.limits.max_tokens),
        context_window: set.context_window.or(route.limits.context_window),
    }
}

/// The listed name for `wanted`; Ollama lists tags, so `llama3.2` finds `llama3.2:latest`.
fn find<'a>(kind: ProviderKind, models: &'a [String], wanted: &str) -> Option<&'a str> {
    models
        .iter()
        .find(|m| {
            *m == wanted || (kind == ProviderKind::Ollama && **m == format!("{wanted}:latest"))
        })
        .map(String::as_str)
}

pub struct Catalog {
    endpoints: Vec<ProviderEndpoint>,
    http: reqwest::Client,
    /// Where the catalogue is kept between starts (`None`: a one-off check).
    cache_path: Option<PathBuf>,
    snapshot: RwLock<CatalogSnapshot>,
    refreshed: watch::Sender<bool>,
    refreshing: tokio::sync::Mutex<()>,
    /// Configured limits by model name, over the listed ones.
    limits: BTreeMap<String, ModelLimits>,
}

/// How long a caller waits for the first discovery after start before using the cache.
const FIRST_REFRESH_WAIT: Duration = Duration::from_secs(15);

impl Catalog {
    /// A catalogue for `endpoints`, starting from the cache file when there is one.
    pub fn new(endpoints: Vec<ProviderEndpoint>, cache_path: PathBuf) -> Self {
        let mut snapshot = std::fs::read_to_string(&cache_path)
            .ok()
            .and_then(|text| serde_json::from_str::<CatalogSnapshot>(&text).ok())
            .unwrap_or_default();
        // Only providers configured now count.
        snapshot
            .providers
            .retain(|name, _| endpoints.iter().any(|e| e.kind.name() == name));
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(3))
            .timeout(Duration::from_secs(10))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default();
        Catalog {
            endpoints,
            http,
            cache_path: Some(cache_path),
            snapshot: RwLock::new(snapshot),
            refreshed: watch::Sender::new(false),
            refreshing: tokio::sync::Mutex::new(()),
            limits: BTreeMap::new(),
        }
    }

    /// Configured limits (`[models.limits."<model>"]`), which win over listed ones.
    pub fn with_limits(mut self, limits: BTreeMap<String, ModelLimits>) -> Self {
        self.limits = limits;
        self
    }

    /// A catalogue that reads and writes no cache (`chorus status`: a one-off check).
    pub fn uncached(endpoints: Vec<ProviderEndpoint>) -> Self {
        let mut catalog = Catalog::new(endpoints, PathBuf::new());
        catalog.cache_path = None;
        catalog.snapshot = RwLock::new(CatalogSnapshot::default());
        catalog
    }

    /// A catalogue that holds `snapshot` as discovered and never asks a provider:
    /// the in-process tests of runs (`chorus_test_support::fake_worker`), which
    /// resolve models without a model server and without the first discovery's wait.
    #[doc(hidden)]
    pub fn fixed(snapshot: CatalogSnapshot) -> Self {
        let catalog = Catalog::uncached(Vec::new());
        *catalog
            .snapshot
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = snapshot;
        catalog.refreshed.send_replace(true);
        catalog
    }

    /// The client the catalogue asks providers with (no redirects, short timeouts),
    /// for the control plane's other calls to them (embeddings).
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    pub fn endpoint(&self, provider: &str) -> Option<&ProviderEndpoint> {
        self.endpoints.iter().find(|e| e.kind.name() == provider)
    }

    fn current(&self) -> CatalogSnapshot {
        self.snapshot
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The catalogue, after the first discovery (or its time limit).
    pub async fn snapshot(&self) -> CatalogSnapshot {
        let mut refreshed = self.refreshed.subscribe();
        let _ = tokio::time::timeout(FIRST_REFRESH_WAIT, refreshed.wait_for(|done| *done)).await;
        self.current()
    }

    pub async fn resolve(&self, model: &str) -> Result<ModelRoute, ResolveError> {
        let mut route = resolve_in(&self.snapshot().await, model)?;
        route.limits = with_configured(&self.limits, model, &route);
        Ok(route)
    }

    /// Checks every provider (in parallel), updates the cache file, and returns the
    /// new catalogue. Concurrent calls share one refresh.
    pub async fn refresh(&self) -> CatalogSnapshot {
        let _one_at_a_time = self.refreshing.lock().await;
        let previous = self.current();
        let checks = self.endpoints.iter().map(|endpoint| async move {
            let result = list_models(&self.http, endpoint).await;
            (endpoint, result)
        });
        let results = futures::future::join_all(checks).await;
        let mut next = CatalogSnapshot {
            refreshed_at: Some(now()),
            providers: BTreeMap::new(),
        };
        for (endpoint, result) in results {
            let name = endpoint.kind.name().to_string();
            let entry = match result {
                Ok((models, limits)) => ProviderModels {
                    valid: true,
                    base_url: endpoint.base_url.clone(),
                    models,
                    error: None,
                    reachable: true,
                    key_refused: false,
                    checked_at: now(),
                    limits,
                },
                Err(Failure {
                    message,
                    key_refused,
                    reachable,
                }) => {
                    // The provider may be fine (down, not refusing us): keep what it
                    // listed before.
                    let keep_models = !key_refused;
                    // A local server nobody asked for is probed in case it runs;
                    // that it does not is no news (`chorus status` still says so).
                    if endpoint.configured {
                        tracing::warn!(provider = %name, %message, "model discovery failed");
                    } else {
                        tracing::debug!(provider = %name, %message, "model discovery failed");
                    }
                    ProviderModels {
                        valid: false,
                        base_url: endpoint.base_url.clone(),
                        models: if keep_models {
                            previous
                                .providers
                                .get(&name)
                                .map(|p| p.models.clone())
                                .unwrap_or_default()
                        } else {
                            Vec::new()
                        },
                        error: Some(message),
                        reachable,
                        key_refused,
                        checked_at: now(),
                        limits: if keep_models {
                            previous
                                .providers
                                .get(&name)
                                .map(|p| p.limits.clone())
                                .unwrap_or_default()
                        } else {
                            BTreeMap::new()
                        },
                    }
                }
            };
            next.providers.insert(name, entry);
        }
        if let Some(path) = &self.cache_path
            && let Err(e) = write_cache(path, &next)
        {
            tracing::warn!(path = %path.display(), error = %e, "cannot write the model cache");
        }
        *self
            .snapshot
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = next.clone();
        self.refreshed.send_replace(true);
        let total: usize = next.providers.values().map(|p| p.models.len()).sum();
        tracing::info!(
            providers = next.providers.len(),
            models = total,
            "model catalogue refreshed"
        );
        next
    }
}

fn write_cache(path: &std::path::Path, snapshot: &CatalogSnapshot) -> std::io::Result<()> {
    let tmp = path.with_extension("json.tmp");
    let text = serde_json::to_string_pretty(snapshot).map_err(std::io::Error::other)?;
    // Private like everything in the data directory (see `private`).
    crate::private::write_file(&tmp, (text + "\n").as_bytes())?;
    std::fs::rename(&tmp, path)
}

struct Failure {
    message: String,
    /// The server refused our key (401/403).
    key_refused: bool,
    /// The server answered (with an error, or something that is not a model list).
    reachable: bool,
}

/// A model list: the names, and the limits it gave for some of them.
type Listed = (Vec<String>, BTreeMap<String, ModelLimits>);

async fn list_models(
    http: &reqwest::Client,
    endpoint: &ProviderEndpoint,
) -> Result<Listed, Failure> {
    let kind = endpoint.kind;
    if kind == ProviderKind::OpenRouter {
        // OpenRouter lists models to anyone; check the key on its own endpoint.
        get_json(http, endpoint, &format!("{}/key", endpoint.base_url)).await?;
    }
    let url = match kind {
        ProviderKind::Anthropic => format!("{}/v1/models?limit=1000", endpoint.base_url),
        ProviderKind::Ollama => format!("{}/api/tags", endpoint.base_url),
        ProviderKind::LmStudio => format!("{}/v1/models", endpoint.base_url),
        ProviderKind::OpenAi | ProviderKind::OpenRouter => format!("{}/models", endpoint.base_url),
    };
    let body = get_json(http, endpoint, &url).await?;
    let (list, field) = match kind {
        ProviderKind::Ollama => (body.get("models"), "name"),
        _ => (body.get("data"), "id"),
    };
    let items = list.and_then(Value::as_array).ok_or_else(|| Failure {
        message: format!("{url} answered without a model list"),
        key_refused: false,
        reachable: true,
    })?;
    let mut models = Vec::new();
    let mut limits = BTreeMap::new();
    for item in items {
        let Some(name) = item.get(field).and_then(Value::as_str) else {
            continue;
        };
        models.push(name.to_string());
        let listed = listed_limits(item);
        if listed != ModelLimits::default() {
            limits.insert(name.to_string(), listed);
        }
    }
    models.sort();
    models.dedup();
    Ok((models, limits))
}

/// The limits one entry of a model list gives, by the names the servers use.
pub fn listed_limits(item: &Value) -> ModelLimits {
    let number = |path: &str| {
        item.pointer(path)
            .and_then(Value::as_u64)
            .filter(|n| *n > 0)
    };
    ModelLimits {
        max_tokens: [
            "/top_provider/max_completion_tokens",
            "/max_completion_tokens",
            "/max_output_tokens",
        ]
        .iter()
        .find_map(|path| number(path))
        .map(|n| u32::try_from(n).unwrap_or(u32::MAX)),
        context_window: [
            "/context_length",
            "/max_model_len",
            "/context_window",
            "/max_context_length",
        ]
        .iter()
        .find_map(|path| number(path)),
    }
}

async fn get_json(
    http: &reqwest::Client,
    endpoint: &ProviderEndpoint,
    url: &str,
) -> Result<Value, Failure> {
    let mut request = http.get(url);
    for (name, value) in endpoint.auth_headers() {
        request = request.header(name, value);
    }
    let response = request.send().await.map_err(|e| Failure {
        message: format!(
            "cannot reach {} ({}): {}",
            endpoint.base_url,
            endpoint.kind.base_env(),
            root_cause(&e)
        ),
        key_refused: false,
        reachable: false,
    })?;
    let status = response.status();
    let code = status.as_u16();
    if !status.is_success() {
        // The server's own words say what is wrong; keep them (shortened).
        let body = response.text().await.unwrap_or_default();
        let reason = server_reason(&body);
        let said = if reason.is_empty() {
            String::new()
        } else {
            format!(": {reason}")
        };
        if code == 401 || code == 403 {
            return Err(Failure {
                message: format!(
                    "the key was refused ({code}{said}); check {}",
                    endpoint.kind.setting_hint()
                ),
                key_refused: true,
                reachable: true,
            });
        }
        let message = if endpoint.kind == ProviderKind::Ollama && code == 404 {
            format!(
                "not an Ollama server: {url} answered 404{said} (no /api/tags); check {}",
                endpoint.kind.base_env()
            )
        } else {
            format!("{url} answered {code}{said}")
        };
        return Err(Failure {
            message,
            key_refused: false,
            reachable: true,
        });
    }
    response.json().await.map_err(|e| Failure {
        message: format!("{url} did not answer with JSON: {e}"),
        key_refused: false,
        reachable: true,
    })
}

/// The reason in an error body: `error.message`, `error` as text, `message`, or the
/// text itself; at most 300 characters.
fn server_reason(body: &str) -> String {
    let json: Option<Value> = serde_json::from_str(body).ok();
    let from_json = json.as_ref().and_then(|v| {
        let error = v.get("error");
        error
            .and_then(|e| e.get("message"))
            .or(error)
            .or_else(|| v.get("message"))
            .or_else(|| v.get("detail"))
            .and_then(Value::as_str)
            .map(str::to_string)
    });
    let text = from_json.unwrap_or_else(|| body.trim().to_string());
    let mut short: String = text.chars().take(300).collect();
    if text.chars().count() > 300 {
        short.push('…');
    }
    short
}

fn root_cause(e: &dyn std::error::Error) -> String {
    let mut cause = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(entries: &[(&str, &[&str])]) -> CatalogSnapshot {
        CatalogSnapshot {
            refreshed_at: None,
            providers: entries
                .iter()
                .map(|(name, models)| {
                    (
                        name.to_string(),
                        ProviderModels {
                            valid: !models.is_empty(),
                            base_url: String::new(),
                            models: models
                                .iter()
                                .map(std::string::ToString::to_string)
                                .collect(),
                            error: models.is_empty().then(|| "cannot reach it".to_string()),
                            reachable: !models.is_empty(),
                            key_refused: false,
                            checked_at: String::new(),
                            limits: Default::default(),
                        },
                    )
                })
                .collect(),
        }
    }

    fn resolved(s: &CatalogSnapshot, model: &str) -> (String, String) {
        let route = resolve_in(s, model).unwrap();
        (route.provider, route.model)
    }

    #[test]
    fn limits_come_from_the_list_and_settings_win() {
        let openrouter = serde_json::json!({"id": "m", "context_length": 131072,
            "top_provider": {"max_completion_tokens": 4096}});
        assert_eq!(
            listed_limits(&openrouter),
            ModelLimits {
                max_tokens: Some(4096),
                context_window: Some(131072)
            }
        );
        let vllm = serde_json::json!({"id": "m", "max_model_len": 8192});
        assert_eq!(listed_limits(&vllm).context_window, Some(8192));
        assert_eq!(
            listed_limits(&serde_json::json!({"id": "m"})),
            ModelLimits::default()
        );

        let mut s = snapshot(&[("ollama", &["llama3.2:latest"])]);
        s.providers.get_mut("ollama").unwrap().limits.insert(
            "llama3.2:latest".into(),
            ModelLimits {
                max_tokens: None,
                context_window: Some(8192),
            },
        );
        let route = resolve_in(&s, "ollama/llama3.2").unwrap();
        assert_eq!(route.limits.context_window, Some(8192));
        let configured = BTreeMap::from([(
            "ollama/llama3.2".to_string(),
            ModelLimits {
                max_tokens: Some(512),
                context_window: None,
            },
        )]);
        assert_eq!(
            with_configured(&configured, "ollama/llama3.2", &route),
            ModelLimits {
                max_tokens: Some(512),
                context_window: Some(8192)
            }
        );
    }

    /// Each state a provider's last check can leave it in.
    #[derive(Debug, Clone, Copy)]
    enum State {
        ListsIt,
        ListsOthers,
        ListsNothing,
        Down,
        CannotList,
        KeyRefused,
    }

    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Outcome {
        Route(&'static str),
        Unlisted,
        Unknown,
        NoProviders,
    }

    fn entry(state: State) -> ProviderModels {
        let (models, error, reachable, key_refused): (&[&str], Option<&str>, bool, bool) =
            match state {
                State::ListsIt => (&["m"], None, true, false),
                State::ListsOthers => (&["other"], None, true, false),
                State::ListsNothing => (&[], None, true, false),
                State::Down => (&[], Some("cannot reach it"), false, false),
                State::CannotList => (&[], Some("answered 404: page not found"), true, false),
                State::KeyRefused => (&[], Some("the key was refused (401)"), true, true),
            };
        ProviderModels {
            valid: error.is_none(),
            base_url: String::new(),
            models: models
                .iter()
                .map(std::string::ToString::to_string)
                .collect(),
            error: error.map(str::to_string),
            reachable,
            key_refused,
            checked_at: String::new(),
            limits: Default::default(),
        }
    }

    fn outcome(s: &CatalogSnapshot, model: &str) -> Outcome {
        match resolve_in(s, model) {
            Ok(route) => {
                assert_eq!(route.model, "m", "{model}");
                Outcome::Route(ProviderKind::parse(&route.provider).unwrap().name())
            }
            Err(ResolveError::Unlisted { .. }) => Outcome::Unlisted,
            Err(ResolveError::Unknown { .. }) => Outcome::Unknown,
            Err(ResolveError::NoProviders { .. }) => Outcome::NoProviders,
        }
    }

    /// One rule for `provider/m` and bare `m`, for every kind of provider and every
    /// state its check can leave it in, with it the only provider configured.
    #[test]
    fn a_bare_name_and_a_prefixed_one_resolve_by_one_rule() {
        use Outcome::*;
        for kind in ALL_PROVIDERS {
            for state in [
                State::ListsIt,
                State::ListsOthers,
                State::ListsNothing,
                State::Down,
                State::CannotList,
                State::KeyRefused,
            ] {
                let s = CatalogSnapshot {
                    refreshed_at: None,
                    providers: BTreeMap::from([(kind.name().to_string(), entry(state))]),
                };
                let route = Route(kind.name());
                let explicit = match state {
                    State::ListsIt | State::ListsNothing | State::Down => route,
                    // A local server's list is how we know it is one.
                    State::CannotList if kind.is_local() => Unlisted,
                    // Many compatible servers (and a hosted API's bad minute) cannot list.
                    State::CannotList => route,
                    State::KeyRefused => Unlisted,
                    State::ListsOthers => Unknown,
                };
                let bare = match (state, explicit) {
                    // A bare name is not sent to a local server that is not running
                    // (they are probed whether anyone uses them or not).
                    (State::Down, _) if kind.is_local() => NoProviders,
                    (_, same) => same,
                };
                let prefixed = format!("{}/m", kind.name());
                assert_eq!(outcome(&s, &prefixed), explicit, "{prefixed} ({state:?})");
                assert_eq!(
                    outcome(&s, "m"),
                    bare,
                    "bare m on {} ({state:?})",
                    kind.name()
                );
            }
        }
    }

    /// With more than one provider, a bare name goes to the list that has it; a server
    /// that cannot list is asked only when it is the one provider that could be.
    #[test]
    fn a_non_ollama_server_on_ollamas_address_is_refused_in_both_forms() {
        let s = CatalogSnapshot {
            refreshed_at: None,
            providers: BTreeMap::from([
                ("ollama".to_string(), entry(State::CannotList)),
                ("lmstudio".to_string(), entry(State::Down)),
            ]),
        };
        assert_eq!(outcome(&s, "ollama/m"), Outcome::Unlisted);
        assert_eq!(outcome(&s, "m"), Outcome::Unlisted);
        let text = resolve_in(&s, "m").unwrap_err().to_string();
        assert!(
            text.starts_with("cannot use 'm': the ollama server was reached"),
            "{text}"
        );
        // The same server as OPENAI_BASE_URL is trusted in both forms.
        let s = CatalogSnapshot {
            refreshed_at: None,
            providers: BTreeMap::from([
                ("openai".to_string(), entry(State::CannotList)),
                ("ollama".to_string(), entry(State::Down)),
                ("lmstudio".to_string(), entry(State::Down)),
            ]),
        };
        assert_eq!(outcome(&s, "openai/m"), Outcome::Route("openai"));
        assert_eq!(outcome(&s, "m"), Outcome::Route("openai"));
        // A list elsewhere that has the name wins over trust.
        let mut both = s.clone();
        both.providers
            .insert("lmstudio".to_string(), entry(State::ListsIt));
        assert_eq!(outcome(&both, "m"), Outcome::Route("lmstudio"));
        // Two that could be asked, neither listing it: not guessed.
        let mut two = s;
        two.providers
            .insert("anthropic".to_string(), entry(State::CannotList));
        assert!(resolve_in(&two, "m").is_err());
        assert_eq!(outcome(&two, "openai/m"), Outcome::Route("openai"));
    }

    #[test]
    fn a_bare_name_goes_to_the_only_provider_when_it_cannot_list_models() {
        let unlisted = ProviderModels {
            valid: false,
            base_url: String::new(),
            models: Vec::new(),
            error: Some("http://x/v1/models answered 404".into()),
            reachable: true,
            key_refused: false,
            checked_at: String::new(),
            limits: Default::default(),
        };
        let mut s = snapshot(&[("ollama", &[]), ("lmstudio", &[])]);
        s.providers.insert("openai".into(), unlisted.clone());
        assert_eq!(
            resolved(&s, "my-model"),
            ("openai".to_string(), "my-model".to_string()),
            "local servers nobody runs do not count"
        );
        // Two that could answer: the name is not guessed.
        s.providers.insert("anthropic".into(), unlisted);
        assert!(resolve_in(&s, "my-model").is_err());
        // One that lists models but not this one: refused as unknown.
        let s = snapshot(&[("openai", &["gpt-4o"])]);
        assert!(matches!(
            resolve_in(&s, "my-model"),
            Err(ResolveError::Unknown { .. })
        ));
    }

    #[test]
    fn explicit_prefixes_then_first_listing_provider() {
        let s = snapshot(&[
            ("anthropic", &["claude-sonnet-4"]),
            ("openai", &["gpt-4o", "shared"]),
            ("openrouter", &["anthropic/claude-3.5-sonnet", "shared"]),
            ("ollama", &["llama3.2:latest"]),
            ("lmstudio", &[]),
        ]);
        let pairs = |a: &str, b: &str| (a.to_string(), b.to_string());
        assert_eq!(resolved(&s, "gpt-4o"), pairs("openai", "gpt-4o"));
        assert_eq!(
            resolved(&s, "shared"),
            pairs("openai", "shared"),
            "first match wins"
        );
        assert_eq!(
            resolved(&s, "openrouter/shared"),
            pairs("openrouter", "shared")
        );
        assert_eq!(
            resolved(&s, "ollama/llama3.2"),
            pairs("ollama", "llama3.2:latest")
        );
        assert_eq!(
            resolved(&s, "llama3.2:latest"),
            pairs("ollama", "llama3.2:latest")
        );
        // An OpenRouter id that looks like a prefix: anthropic does not list it.
        assert_eq!(
            resolved(&s, "anthropic/claude-3.5-sonnet"),
            pairs("openrouter", "anthropic/claude-3.5-sonnet")
        );
        // A local server that could not be listed: trust the explicit name.
        assert_eq!(
            resolved(&s, "lmstudio/qwen2.5"),
            pairs("lmstudio", "qwen2.5")
        );
        let route = resolve_in(&s, "claude-sonnet-4").unwrap();
        assert_eq!(route.api, ModelRoute::ANTHROPIC_MESSAGES);
        assert_eq!(route.relay_path, "/llm/anthropic");
    }

    #[test]
    fn unknown_models_name_the_known_ones() {
        let s = snapshot(&[("openai", &["gpt-4o"]), ("ollama", &["llama3.2:latest"])]);
        let err = resolve_in(&s, "gpt-5-turbo-ultra").unwrap_err();
        let text = err.to_string();
        assert!(text.contains("unknown model 'gpt-5-turbo-ultra'"), "{text}");
        assert!(text.contains("gpt-4o, ollama/llama3.2:latest"), "{text}");
        assert!(matches!(
            resolve_in(&s, "ollama/mistral"),
            Err(ResolveError::Unknown { .. })
        ));
        assert!(matches!(
            resolve_in(&s, "nosuch/gpt-4o"),
            Err(ResolveError::Unknown { .. })
        ));
    }

    #[test]
    fn a_server_that_answered_but_cannot_list_models_is_named() {
        let mut s = snapshot(&[("openai", &["gpt-4o"]), ("ollama", &[])]);
        let ollama = s.providers.get_mut("ollama").unwrap();
        ollama.reachable = true;
        ollama.error = Some(
            "not an Ollama server: http://x/api/tags answered 404: page not found (no /api/tags)"
                .into(),
        );
        let text = resolve_in(&s, "ollama/llama3.2").unwrap_err().to_string();
        assert!(
            text.starts_with("cannot use 'ollama/llama3.2': the ollama server was reached"),
            "{text}"
        );
        assert!(text.contains("not an Ollama server"), "{text}");
        assert!(text.contains("OLLAMA_BASE_URL"), "{text}");
    }

    #[test]
    fn server_reasons_are_kept_and_shortened() {
        assert_eq!(
            server_reason(r#"{"error": {"message": "model list disabled"}}"#),
            "model list disabled"
        );
        assert_eq!(server_reason(r#"{"error": "nope"}"#), "nope");
        assert_eq!(server_reason("404 page not found\n"), "404 page not found");
        assert_eq!(server_reason(&"x".repeat(1000)).chars().count(), 301);
    }

    #[test]
    fn with_nothing_listed_the_error_says_how_to_configure_a_provider() {
        let s = snapshot(&[("ollama", &[])]);
        let text = resolve_in(&s, "anything").unwrap_err().to_string();
        assert!(text.starts_with("no model provider configured"), "{text}");
        assert!(
            text.contains("OPENAI_API_KEY") && text.contains("ollama: cannot reach it"),
            "{text}"
        );
    }
}
