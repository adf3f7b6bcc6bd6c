//! What a first run needs to know (`chorus status`, and the block `chorus serve`
//! prints at start): which model providers are usable and why not, the default
//! model, where the data and the listeners are, whether Discord is on, and what to
//! set next. `Diagnosis` is gathered once (`diagnose`); turning it into text and
//! advice is pure. A running Chorus serves its own (`GET /api/status`, built by
//! [`ServerSetup`]) as JSON, which `chorus status` reads back into a `Diagnosis` and
//! renders with the same code, so the server's view and the start block read alike.
//!
//! Each provider is usable, refused, unreachable, not configured, or (a local server
//! nobody configured, probed at its default address) not running, said in one quiet line
//! in the provider's words and never as a warning. `chorus status` reads the server's
//! `GET /api/status` JSON back into a `Diagnosis`; only when no Chorus answers does it
//! make one uncached check of this shell's settings (`Catalog::uncached`), shown as this
//! shell's, never as the server's.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::config::Settings;
use crate::providers::catalog::{Catalog, CatalogSnapshot, resolve_in};
use crate::providers::{ALL_PROVIDERS, ProviderKind};

/// How one provider stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderState {
    /// Nothing configures it (no key; a local server not asked for).
    NotConfigured,
    /// It answered with its models.
    Usable { models: usize, base_url: String },
    /// Configured, but its check failed: why, and whether the server answered.
    Failed { error: String, reachable: bool },
    /// A local server probed at its default address (nobody configured it) that
    /// does not run there: no news, one quiet line.
    NotRunning { base_url: String },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diagnosis {
    /// The version of the chorus that made it.
    #[serde(default)]
    pub version: String,
    pub data_dir: PathBuf,
    /// Where the store is (never a password).
    pub database: String,
    /// Where workers come from, and whether their link is TLS.
    pub workers: String,
    pub http_addr: SocketAddr,
    pub grpc_addr: SocketAddr,
    #[serde(with = "provider_list")]
    pub providers: Vec<(ProviderKind, ProviderState)>,
    pub default_model: Option<String>,
    /// Where the default model goes (`provider/model`), or why it cannot be used.
    #[serde(with = "route")]
    pub default_route: Option<Result<String, String>>,
    /// A model a usable provider lists, to suggest.
    pub example_model: Option<String>,
    /// Whether `DISCORD_TOKEN` is set (the bot then connects).
    pub discord_token: bool,
    /// `chorus status` only: whether a Chorus answers at the HTTP address.
    pub server_running: Option<bool>,
    /// What only a running Chorus knows (`GET /api/status`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live: Option<Live>,
    /// Whether each CLI backend can run where agents are served (a running Chorus's
    /// workers' probe); empty when not known.
    #[serde(default)]
    pub backends: Vec<chorus_proto::domain::BackendStatus>,
}

/// A running Chorus's agents and workers, and when it last checked the providers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Live {
    pub agents: u64,
    /// Workers by state (`starting`, `running`, `restarting`).
    pub workers: BTreeMap<String, u64>,
    /// When the providers were last checked (`chorus models --refresh` checks again).
    pub providers_checked_at: Option<String>,
    /// How the Discord bot's connection stands, when it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discord: Option<crate::discord::connection::DiscordState>,
}

/// What a running Chorus knows of its own set-up, to diagnose itself on request
/// (`GET /api/status`): its settings, where it actually listens (a port 0 resolved)
/// and whether it runs the Discord front end.
#[derive(Clone)]
pub struct ServerSetup {
    pub settings: Settings,
    pub http_addr: SocketAddr,
    pub grpc_addr: SocketAddr,
}

impl ServerSetup {
    /// The server's diagnosis for the catalogue as it last checked it.
    pub fn diagnosis(&self, snapshot: &CatalogSnapshot, live: Live) -> Diagnosis {
        let mut diagnosis =
            diagnosis_from(&self.settings, snapshot, self.settings.discord.is_some());
        diagnosis.http_addr = self.http_addr;
        diagnosis.grpc_addr = self.grpc_addr;
        diagnosis.server_running = Some(true);
        diagnosis.live = Some(live);
        diagnosis
    }
}

/// The providers as a list of objects (`{"provider", "state", …}`), for API users.
mod provider_list {
    use super::*;

    /// A closed set: what a provider's state is called in the API.
    #[derive(Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    enum State {
        NotConfigured,
        Usable,
        Refused,
        Unreachable,
        /// A local server nobody configured, not answering at its default address.
        NotRunning,
    }

    #[derive(Serialize, Deserialize)]
    struct Entry {
        provider: ProviderKind,
        state: State,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        models: Option<usize>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        base_url: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    }

    pub fn serialize<S: serde::Serializer>(
        providers: &[(ProviderKind, ProviderState)],
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        let entries: Vec<Entry> = providers
            .iter()
            .map(|(kind, state)| {
                let mut entry = Entry {
                    provider: *kind,
                    state: State::NotConfigured,
                    models: None,
                    base_url: None,
                    error: None,
                };
                match state {
                    ProviderState::NotConfigured => {}
                    ProviderState::Usable { models, base_url } => {
                        entry.state = State::Usable;
                        entry.models = Some(*models);
                        entry.base_url = Some(base_url.clone());
                    }
                    ProviderState::Failed { error, reachable } => {
                        entry.state = if *reachable {
                            State::Refused
                        } else {
                            State::Unreachable
                        };
                        entry.error = Some(error.clone());
                    }
                    ProviderState::NotRunning { base_url } => {
                        entry.state = State::NotRunning;
                        entry.base_url = Some(base_url.clone());
                    }
                }
                entry
            })
            .collect();
        entries.serialize(serializer)
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Vec<(ProviderKind, ProviderState)>, D::Error> {
        let entries = Vec::<Entry>::deserialize(deserializer)?;
        Ok(entries
            .into_iter()
            .map(|e| {
                let error = e.error.unwrap_or_default();
                let state = match e.state {
                    State::NotConfigured => ProviderState::NotConfigured,
                    State::Usable => ProviderState::Usable {
                        models: e.models.unwrap_or(0),
                        base_url: e.base_url.unwrap_or_default(),
                    },
                    State::Refused => ProviderState::Failed {
                        error,
                        reachable: true,
                    },
                    State::Unreachable => ProviderState::Failed {
                        error,
                        reachable: false,
                    },
                    State::NotRunning => ProviderState::NotRunning {
                        base_url: e.base_url.unwrap_or_default(),
                    },
                };
                (e.provider, state)
            })
            .collect())
    }
}

/// The default model's route as `{"route": "provider/model"}` or `{"error": "…"}`.
mod route {
    use super::*;

    #[derive(Serialize, Deserialize)]
    struct Route {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        route: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    }

    pub fn serialize<S: serde::Serializer>(
        value: &Option<Result<String, String>>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        value
            .as_ref()
            .map(|r| Route {
                route: r.as_ref().ok().cloned(),
                error: r.as_ref().err().cloned(),
            })
            .serialize(serializer)
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Result<String, String>>, D::Error> {
        Ok(
            Option::<Route>::deserialize(deserializer)?.map(|r| match r.route {
                Some(route) => Ok(route),
                None => Err(r.error.unwrap_or_default()),
            }),
        )
    }
}

/// Whether `DISCORD_TOKEN` is set (and not empty).
pub fn discord_token_set() -> bool {
    std::env::var_os("DISCORD_TOKEN").is_some_and(|v| !v.is_empty())
}

/// `chorus status` when it shows this shell's settings: every provider checked from
/// here; `server_running`: whether a Chorus answers at the address.
pub async fn local(settings: &Settings, server_running: bool) -> Diagnosis {
    let catalog = Catalog::uncached(settings.providers.clone());
    let mut diagnosis = diagnose(settings, &catalog, discord_token_set()).await;
    diagnosis.server_running = Some(server_running);
    diagnosis
}

/// Checks every provider the settings configure (once, in parallel) and gathers
/// the rest from the settings and the environment.
pub async fn diagnose(settings: &Settings, catalog: &Catalog, discord_token: bool) -> Diagnosis {
    let snapshot = catalog.refresh().await;
    diagnosis_from(settings, &snapshot, discord_token)
}

/// The diagnosis for a catalogue already checked (pure).
pub fn diagnosis_from(
    settings: &Settings,
    snapshot: &CatalogSnapshot,
    discord_token: bool,
) -> Diagnosis {
    let providers = ALL_PROVIDERS
        .into_iter()
        .map(|kind| {
            let state = match snapshot.providers.get(kind.name()) {
                None => ProviderState::NotConfigured,
                Some(p) if p.valid => ProviderState::Usable {
                    models: p.models.len(),
                    base_url: p.base_url.clone(),
                },
                Some(p) if !p.reachable && probed_only(settings, kind) => {
                    ProviderState::NotRunning {
                        base_url: p.base_url.clone(),
                    }
                }
                Some(p) => ProviderState::Failed {
                    error: p.error.clone().unwrap_or_else(|| "no answer".into()),
                    reachable: p.reachable,
                },
            };
            (kind, state)
        })
        .collect();
    let example_model = ALL_PROVIDERS.into_iter().find_map(|kind| {
        let p = snapshot.providers.get(kind.name()).filter(|p| p.valid)?;
        let model = p.models.first()?;
        Some(if kind.is_local() {
            format!("{}/{model}", kind.name())
        } else {
            model.clone()
        })
    });
    Diagnosis {
        version: env!("CARGO_PKG_VERSION").to_string(),
        data_dir: settings.data_dir.clone(),
        database: settings.database.describe(&settings.data_dir),
        workers: match (&settings.workers.launcher, &settings.workers.tls) {
            (crate::config::LauncherKind::Local, _) => {
                "launched here, one process per agent".to_string()
            }
            (crate::config::LauncherKind::Remote, tls) => format!(
                "dial in with {} (chorus-worker --control-plane <url> --data-dir <dir>); link {}",
                match &settings.workers.join_token {
                    Some(_) =>
                        "CHORUS_JOIN_TOKEN (shared: every holder may serve any agent) or a worker credential (chorus worker token create <name>)",
                    None =>
                        "a worker credential each (chorus worker token create <name>, given to the worker as CHORUS_JOIN_TOKEN)",
                },
                match tls {
                    Some(t) if t.client_ca.is_some() => "TLS, client certificates required",
                    Some(_) => "TLS",
                    None => "plaintext: keep it on a private network",
                }
            ),
        },
        http_addr: settings.http_addr,
        grpc_addr: settings.grpc_addr,
        providers,
        default_route: settings.default_model.as_ref().map(|model| {
            resolve_in(snapshot, model)
                .map(|route| format!("{}/{}", route.provider, route.model))
                .map_err(|e| e.to_string())
        }),
        default_model: settings.default_model.clone(),
        example_model,
        discord_token,
        server_running: None,
        live: None,
        backends: Vec::new(),
    }
}

/// Whether `kind` is only probed at its default address: nobody configured it.
fn probed_only(settings: &Settings, kind: ProviderKind) -> bool {
    settings
        .providers
        .iter()
        .any(|endpoint| endpoint.kind == kind && !endpoint.configured)
}

impl Diagnosis {
    pub fn usable(&self) -> bool {
        self.providers
            .iter()
            .any(|(_, state)| matches!(state, ProviderState::Usable { .. }))
    }

    /// What to do next, most basic first.
    pub fn next_steps(&self) -> Vec<String> {
        let mut steps = Vec::new();
        if !self.usable() {
            steps.push(
                "no usable model provider: set OPENAI_API_KEY, ANTHROPIC_API_KEY or \
                 OPENROUTER_API_KEY (or OPENAI_BASE_URL for a local OpenAI-compatible server), \
                 or start Ollama or LM Studio; then restart chorus"
                    .to_string(),
            );
        }
        match (&self.default_model, &self.default_route) {
            (None, _) if self.usable() => steps.push(format!(
                "no default model: set CHORUS_DEFAULT_MODEL{} or give each agent one \
                 (chorus agent create <name> --model <model>)",
                self.example_model
                    .as_ref()
                    .map(|m| format!(" (e.g. {m})"))
                    .unwrap_or_default()
            )),
            (Some(model), Some(Err(why))) if self.usable() => {
                steps.push(format!("the default model '{model}' cannot be used: {why}"))
            }
            _ => {}
        }
        if self.server_running == Some(false) {
            steps.push(format!(
                "chorus is not running at http://{}: start it with chorus serve",
                self.http_addr
            ));
        }
        if steps.is_empty() {
            steps.push(
                "ready: chorus agent create <name>, then chorus send <name> \"<what to do>\""
                    .to_string(),
            );
        }
        steps
    }

    /// The block `chorus status` and `chorus serve` print.
    pub fn render(&self) -> String {
        let version = if self.version.is_empty() {
            env!("CARGO_PKG_VERSION")
        } else {
            &self.version
        };
        let mut out = format!("Chorus {version}\n");
        out.push_str(&format!("  data dir:       {}\n", self.data_dir.display()));
        out.push_str(&format!("  database:       {}\n", self.database));
        out.push_str(&format!("  workers:        {}\n", self.workers));
        out.push_str(&format!(
            "  listening:      http://{} (API), {} (workers){}\n",
            self.http_addr,
            self.grpc_addr,
            match self.server_running {
                Some(true) => "; running",
                Some(false) => "; not running",
                None => "",
            }
        ));
        out.push_str(&format!(
            "  discord:        {}\n",
            if let Some(state) = self.live.as_ref().and_then(|l| l.discord.as_ref()) {
                // The running server's own word on its connection.
                state.describe()
            } else if self.discord_token && self.server_running.is_none() {
                // `chorus serve`'s banner: the bot connects beside it, and the log
                // says "discord: connected as …" (or why it cannot) once it knows.
                "connecting (DISCORD_TOKEN is set): agents answer in their channels \
                 once it is connected"
                    .to_string()
            } else if self.discord_token {
                "on (DISCORD_TOKEN is set): agents answer in their channels; slash \
                 commands and approval buttons act"
                    .to_string()
            } else {
                "off (set DISCORD_TOKEN to connect a bot)".to_string()
            }
        ));
        if let Some(live) = &self.live {
            let workers = if live.workers.is_empty() {
                "none".to_string()
            } else {
                live.workers
                    .iter()
                    .map(|(state, n)| format!("{n} {state}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            out.push_str(&format!(
                "  agents:         {}; workers: {workers}\n",
                live.agents
            ));
        }
        match self
            .live
            .as_ref()
            .and_then(|l| l.providers_checked_at.as_ref())
        {
            Some(at) => out.push_str(&format!("  providers:      checked {at}\n")),
            None => out.push_str("  providers:\n"),
        }
        for (kind, state) in &self.providers {
            let line = describe_state(*kind, state);
            out.push_str(&format!("    {:<12}{line}\n", kind.name()));
        }
        let default = match (&self.default_model, &self.default_route) {
            (None, _) => "none".to_string(),
            (Some(model), Some(Ok(route))) => format!("{model} (via {route})"),
            (Some(model), Some(Err(_))) => format!("{model} (cannot be used)"),
            (Some(model), None) => model.clone(),
        };
        out.push_str(&format!("  default model:  {default}\n"));
        if !self.backends.is_empty() {
            out.push_str("  backends:\n");
            for status in &self.backends {
                out.push_str(&format!("    {}\n", describe_backend(status)));
            }
        }
        for (i, step) in self.next_steps().iter().enumerate() {
            let head = if i == 0 {
                "  next:           "
            } else {
                "                  "
            };
            out.push_str(&format!("{head}{step}\n"));
        }
        out
    }
}

/// One CLI backend's state in a line: `claude-code: usable (2.1.332, /usr/bin/claude)`
/// or `opencode: not usable — <reason>`.
pub fn describe_backend(status: &chorus_proto::domain::BackendStatus) -> String {
    if status.usable {
        let found: Vec<&str> = [status.version.as_deref(), status.path.as_deref()]
            .into_iter()
            .flatten()
            .collect();
        match found.is_empty() {
            true => format!("{}: usable", status.backend),
            false => format!("{}: usable ({})", status.backend, found.join(", ")),
        }
    } else {
        format!(
            "{}: not usable — {}",
            status.backend,
            status.reason.as_deref().unwrap_or("no reason given")
        )
    }
}

/// One provider's state in a sentence (`chorus status`, Discord's `/settings`).
pub fn describe_state(kind: ProviderKind, state: &ProviderState) -> String {
    match state {
        ProviderState::NotConfigured => format!(
            "not configured (set {})",
            kind.key_env().unwrap_or(kind.base_env())
        ),
        ProviderState::Usable { models, base_url } => {
            let plural = if *models == 1 { "" } else { "s" };
            format!("usable: {models} model{plural} at {base_url}")
        }
        ProviderState::NotRunning { base_url } => format!(
            "not running at {base_url} (probed by default; set {} if it runs elsewhere)",
            kind.base_env()
        ),
        ProviderState::Failed { error, reachable } => format!(
            "{}: {error}",
            if *reachable { "refused" } else { "unreachable" }
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::catalog::ProviderModels;

    fn diagnosis(providers: &[(&str, ProviderModels)], default_model: Option<&str>) -> Diagnosis {
        diagnosis_with(providers, default_model, |_| None)
    }

    fn diagnosis_with(
        providers: &[(&str, ProviderModels)],
        default_model: Option<&str>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Diagnosis {
        let snapshot = CatalogSnapshot {
            refreshed_at: None,
            providers: providers
                .iter()
                .map(|(name, p)| (name.to_string(), p.clone()))
                .collect(),
        };
        let mut settings = Settings::resolve(
            crate::config::ServeArgs::default(),
            crate::config::FileSettings::default(),
            env,
        )
        .unwrap();
        settings.default_model = default_model.map(str::to_string);
        diagnosis_from(&settings, &snapshot, false)
    }

    fn provider(
        valid: bool,
        models: &[&str],
        error: Option<&str>,
        reachable: bool,
    ) -> ProviderModels {
        ProviderModels {
            valid,
            base_url: "http://127.0.0.1:9/v1".into(),
            models: models
                .iter()
                .map(std::string::ToString::to_string)
                .collect(),
            error: error.map(str::to_string),
            reachable,
            key_refused: error.is_some_and(|e| e.starts_with("the key was refused")),
            checked_at: "2026-11-23T00:00:00.000Z".into(),
            limits: Default::default(),
        }
    }

    #[test]
    fn with_no_provider_it_says_what_to_set() {
        let d = diagnosis(&[], None);
        let text = d.render();
        assert!(
            text.contains("openai      not configured (set OPENAI_API_KEY)"),
            "{text}"
        );
        assert!(
            text.contains("ollama      not configured (set OLLAMA_BASE_URL)"),
            "{text}"
        );
        assert!(
            text.contains("next:           no usable model provider: set OPENAI_API_KEY"),
            "{text}"
        );
        assert!(!d.usable());
    }

    #[test]
    fn a_refused_key_is_named_with_the_providers_words() {
        let refused = provider(
            false,
            &[],
            Some("the key was refused (401: bad key); check OPENAI_API_KEY"),
            true,
        );
        let d = diagnosis(&[("openai", refused)], Some("gpt-4o"));
        let text = d.render();
        assert!(
            text.contains("openai      refused: the key was refused (401: bad key)"),
            "{text}"
        );
        assert!(text.contains("no usable model provider"), "{text}");
        let down = provider(
            false,
            &[],
            Some("cannot reach http://127.0.0.1:11434 (OLLAMA_BASE_URL)"),
            false,
        );
        // Asked for (OLLAMA_BASE_URL set) and down: that is news.
        let text = diagnosis_with(&[("ollama", down.clone())], None, |name| {
            (name == "OLLAMA_BASE_URL").then(|| "http://127.0.0.1:9".to_string())
        })
        .render();
        assert!(
            text.contains("ollama      unreachable: cannot reach"),
            "{text}"
        );
        // Only probed at its default address: one quiet line.
        let text = diagnosis(&[("ollama", down)], None).render();
        assert!(
            text.contains(
                "ollama      not running at http://127.0.0.1:9/v1 (probed by default; \
                 set OLLAMA_BASE_URL if it runs elsewhere)"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_working_provider_leads_to_a_default_model_then_to_an_agent() {
        let ok = provider(true, &["fake-model", "other"], None, true);
        let d = diagnosis(&[("openai", ok.clone())], None);
        assert_eq!(
            d.next_steps(),
            [
                "no default model: set CHORUS_DEFAULT_MODEL (e.g. fake-model) or give each agent one \
              (chorus agent create <name> --model <model>)"
            ]
        );
        let d = diagnosis(&[("openai", ok.clone())], Some("fake-model"));
        let text = d.render();
        assert!(text.contains("openai      usable: 2 models at"), "{text}");
        assert!(
            text.contains("default model:  fake-model (via openai/fake-model)"),
            "{text}"
        );
        assert!(
            text.contains("next:           ready: chorus agent create"),
            "{text}"
        );
        let d = diagnosis(&[("openai", ok)], Some("no-such-model"));
        assert!(d.next_steps()[0].starts_with("the default model 'no-such-model' cannot be used"));
    }

    /// `chorus status` reads the server's diagnosis back from `GET /api/status`.
    #[test]
    fn a_diagnosis_survives_json_and_names_each_providers_state() {
        let ok = provider(true, &["fake-model"], None, true);
        let refused = provider(false, &[], Some("the key was refused (401)"), true);
        let mut d = diagnosis(
            &[("openai", ok), ("anthropic", refused)],
            Some("fake-model"),
        );
        // Ollama nobody configured, silent at its default address.
        for (kind, state) in &mut d.providers {
            if *kind == ProviderKind::Ollama {
                *state = ProviderState::NotRunning {
                    base_url: "http://127.0.0.1:11434".into(),
                };
            }
        }
        d.live = Some(Live {
            agents: 2,
            workers: [("running".to_string(), 2)].into(),
            providers_checked_at: Some("2026-11-23T00:00:00.000Z".into()),
            discord: Some(crate::discord::connection::DiscordState::Unreachable {
                reason: "the connection was refused".into(),
            }),
        });
        d.backends = vec![
            chorus_proto::domain::BackendStatus {
                backend: chorus_proto::domain::Backend::ClaudeCode,
                usable: true,
                version: Some("2.1.332".into()),
                reason: None,
                path: Some("/usr/bin/claude".into()),
            },
            chorus_proto::domain::BackendStatus {
                backend: chorus_proto::domain::Backend::OpenCode,
                usable: false,
                version: None,
                reason: Some(
                    "opencode is not installed: npm install -g opencode-ai@1.18.33".into(),
                ),
                path: None,
            },
        ];
        let json = serde_json::to_value(&d).unwrap();
        assert_eq!(json["backends"][0]["backend"], "claude-code");
        assert_eq!(json["backends"][1]["usable"], false);
        assert_eq!(json["providers"][0]["provider"], "anthropic");
        assert_eq!(json["providers"][0]["state"], "refused");
        assert_eq!(json["providers"][1]["state"], "usable");
        assert_eq!(json["providers"][1]["models"], 1);
        assert_eq!(json["providers"][2]["state"], "not_configured");
        assert_eq!(json["default_route"]["route"], "openai/fake-model");
        let ollama = json["providers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["provider"] == "ollama")
            .unwrap();
        assert_eq!(ollama["state"], "not_running", "{ollama}");
        let back: Diagnosis = serde_json::from_value(json).unwrap();
        assert_eq!(back, d);
        let text = back.render();
        assert!(
            text.contains("agents:         2; workers: 2 running"),
            "{text}"
        );
        assert!(
            text.contains("providers:      checked 2026-11-23"),
            "{text}"
        );
        assert!(
            text.contains("    claude-code: usable (2.1.332, /usr/bin/claude)\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "    opencode: not usable — opencode is not installed: npm install -g opencode-ai@1.18.33\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "discord:        cannot reach Discord: the connection was refused; retrying every 5 s"
            ),
            "{text}"
        );
    }
}
