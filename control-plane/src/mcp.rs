//! An agent's MCP servers (`mcp_servers`): the setting as a person writes it and the
//! store keeps it ([`McpServersSetting`], secrets only by reference), its resolution
//! into what the worker gets ([`McpSettings::resolve`]), and what each server's
//! worker last said about it ([`McpStates`], shown in `GET /api/agents/{name}`).
//!
//! The setting is `{"<name>": {"command", "args", "env"}}` (a stdio server) or
//! `{"<name>": {"url", "headers"}}` (streamable HTTP). A value in `env` or `headers`
//! is a string or a reference `{"secret": "NAME"}`, resolved from `[mcp.secrets]` in
//! chorus.toml or the control plane's environment variable `CHORUS_MCP_SECRET_NAME`
//! (both read at start, both among the known secrets that are scrubbed from what
//! workers report). The store and every view keep the reference; the value is put
//! in only when a run's assignment is built, for the worker that starts the server,
//! which gives it to that server alone. A plain value under a name that looks like a
//! secret's (`authorization`, `*token*`, `*key*`, `*secret*`, `*password*`) is
//! refused, so a secret is not stored in plain text by mistake.
//!
//! Parsing and resolution are pure; the states are memory only (a worker reports
//! them again when it starts its servers).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use chorus_proto::mcp::{McpServer, McpState, McpTransport, server_name_problem};
use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::secrets::Secret;

/// The prefix of the environment variables secrets are read from.
pub const SECRET_ENV_PREFIX: &str = "CHORUS_MCP_SECRET_";

/// The default deadline of one MCP call: well above the 60 s many clients cap a
/// tool call at, which long tools outlive.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(300);

/// At most this many servers per agent.
pub const MAX_SERVERS: usize = 16;

/// A value of `env` or `headers`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SettingValue {
    Plain(String),
    Secret(String),
}

impl SettingValue {
    fn to_json(&self) -> Value {
        match self {
            SettingValue::Plain(text) => Value::String(text.clone()),
            SettingValue::Secret(name) => json!({ "secret": name }),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerSetting {
    Stdio {
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, SettingValue>,
    },
    Http {
        url: String,
        headers: BTreeMap<String, SettingValue>,
    },
}

/// An agent's `mcp_servers`, checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct McpServersSetting(pub BTreeMap<String, ServerSetting>);

impl McpServersSetting {
    /// The setting from its JSON (a request's or the store's); `Err` says what is
    /// wrong and how to write it.
    pub fn parse(value: &Value) -> Result<McpServersSetting, String> {
        let Value::Object(servers) = value else {
            return Err(
                "mcp_servers must be an object of servers by name: {\"<name>\": {\"command\", \
                 \"args\", \"env\"}} or {\"<name>\": {\"url\", \"headers\"}}"
                    .into(),
            );
        };
        if servers.len() > MAX_SERVERS {
            return Err(format!(
                "mcp_servers has {} servers; at most {MAX_SERVERS}",
                servers.len()
            ));
        }
        let mut out = BTreeMap::new();
        for (name, server) in servers {
            if let Some(problem) = server_name_problem(name) {
                return Err(problem);
            }
            out.insert(
                name.clone(),
                parse_server(server).map_err(|e| format!("MCP server '{name}': {e}"))?,
            );
        }
        Ok(McpServersSetting(out))
    }

    /// The setting as stored and shown (references, never values).
    pub fn to_json(&self) -> Value {
        let mut servers = Map::new();
        for (name, server) in &self.0 {
            let table = |values: &BTreeMap<String, SettingValue>| {
                Value::Object(
                    values
                        .iter()
                        .map(|(k, v)| (k.clone(), v.to_json()))
                        .collect(),
                )
            };
            let value = match server {
                ServerSetting::Stdio { command, args, env } => {
                    json!({ "command": command, "args": args, "env": table(env) })
                }
                ServerSetting::Http { url, headers } => {
                    json!({ "url": url, "headers": table(headers) })
                }
            };
            servers.insert(name.clone(), value);
        }
        Value::Object(servers)
    }

    /// Every secret the setting refers to.
    pub fn secret_names(&self) -> impl Iterator<Item = &str> {
        self.0.values().flat_map(|server| {
            let values = match server {
                ServerSetting::Stdio { env, .. } => env.values(),
                ServerSetting::Http { headers, .. } => headers.values(),
            };
            values.filter_map(|v| match v {
                SettingValue::Secret(name) => Some(name.as_str()),
                SettingValue::Plain(_) => None,
            })
        })
    }
}

fn parse_server(value: &Value) -> Result<ServerSetting, String> {
    let Value::Object(fields) = value else {
        return Err(
            "must be an object: {\"command\", \"args\", \"env\"} or {\"url\", \"headers\"}".into(),
        );
    };
    let allowed: &[&str] = if fields.contains_key("url") {
        &["url", "headers"]
    } else {
        &["command", "args", "env"]
    };
    if let Some(unknown) = fields.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(format!(
            "unknown field '{unknown}'; a stdio server has command, args and env, a streamable \
             HTTP server url and headers"
        ));
    }
    if let Some(url) = fields.get("url") {
        let url = url.as_str().unwrap_or_default().trim();
        if !(url.starts_with("http://") || url.starts_with("https://")) || url.len() < 10 {
            return Err(format!("url '{url}' is not an http:// or https:// URL"));
        }
        let headers = values(fields.get("headers"), "headers", header_name_problem)?;
        return Ok(ServerSetting::Http {
            url: url.to_string(),
            headers,
        });
    }
    let command = match fields.get("command") {
        Some(Value::String(c)) if !c.trim().is_empty() => c.clone(),
        _ => return Err("needs a command (a stdio server) or a url (streamable HTTP)".into()),
    };
    let args = match fields.get("args") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|a| a.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or("args must be a list of strings")?,
        Some(_) => return Err("args must be a list of strings".into()),
    };
    let env = values(fields.get("env"), "env", env_name_problem)?;
    Ok(ServerSetting::Stdio { command, args, env })
}

fn values(
    value: Option<&Value>,
    what: &str,
    name_problem: fn(&str) -> Option<String>,
) -> Result<BTreeMap<String, SettingValue>, String> {
    let entries = match value {
        None | Some(Value::Null) => return Ok(BTreeMap::new()),
        Some(Value::Object(entries)) => entries,
        Some(_) => return Err(format!("{what} must be an object of names to values")),
    };
    let mut out = BTreeMap::new();
    for (name, value) in entries {
        if let Some(problem) = name_problem(name) {
            return Err(format!("{what}: {problem}"));
        }
        let value = match value {
            Value::String(text) if looks_secret(name) => {
                let _ = text;
                return Err(format!(
                    "{what}.{name} looks like a secret: give it by reference, {{\"secret\": \
                     \"NAME\"}}, with the value in [mcp.secrets] of chorus.toml or in \
                     {SECRET_ENV_PREFIX}NAME; a secret is never stored in plain text"
                ));
            }
            Value::String(text) => SettingValue::Plain(text.clone()),
            Value::Object(reference) if reference.len() == 1 => {
                match reference.get("secret").and_then(Value::as_str) {
                    Some(secret) if secret_name_ok(secret) => SettingValue::Secret(secret.into()),
                    _ => return Err(secret_form(what, name)),
                }
            }
            _ => return Err(secret_form(what, name)),
        };
        out.insert(name.clone(), value);
    }
    Ok(out)
}

fn secret_form(what: &str, name: &str) -> String {
    format!(
        "{what}.{name} must be a string or {{\"secret\": \"NAME\"}} (NAME: uppercase letters, \
         digits and '_')"
    )
}

fn secret_name_ok(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

/// Names under which a plain value is refused.
fn looks_secret(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    name == "authorization"
        || ["token", "key", "secret", "password", "credential"]
            .iter()
            .any(|word| name.contains(word))
}

fn env_name_problem(name: &str) -> Option<String> {
    let ok = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !ok {
        return Some(format!("'{name}' is not an environment variable name"));
    }
    // The sandbox's own; and nothing of Chorus's own reaches a tool process.
    if ["HOME", "TMPDIR", "PATH", "LD_PRELOAD", "LD_LIBRARY_PATH"].contains(&name)
        || name.starts_with("CHORUS_")
    {
        return Some(format!(
            "'{name}' is set by the sandbox and cannot be given"
        ));
    }
    None
}

fn header_name_problem(name: &str) -> Option<String> {
    let ok = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_".contains(c));
    let reserved = [
        "host",
        "content-length",
        "content-type",
        "accept",
        "mcp-session-id",
    ]
    .contains(&name.to_ascii_lowercase().as_str());
    (!ok || reserved).then(|| format!("'{name}' cannot be given as a header"))
}

/// `[mcp]`: the call deadline and the secrets references resolve from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpSettings {
    pub call_timeout: Duration,
    pub secrets: BTreeMap<String, Secret>,
}

impl Default for McpSettings {
    fn default() -> Self {
        McpSettings {
            call_timeout: DEFAULT_CALL_TIMEOUT,
            secrets: BTreeMap::new(),
        }
    }
}

impl McpSettings {
    /// Adds the secrets of the environment (`CHORUS_MCP_SECRET_<NAME>`); chorus.toml's
    /// `[mcp.secrets]` of the same name gives way to them.
    pub fn add_env(&mut self, vars: impl Iterator<Item = (String, String)>) {
        for (key, value) in vars {
            if let Some(name) = key.strip_prefix(SECRET_ENV_PREFIX)
                && secret_name_ok(name)
                && !value.is_empty()
            {
                self.secrets.insert(name.to_string(), Secret::new(value));
            }
        }
    }

    /// Every secret value, for the known secrets.
    pub fn values(&self) -> impl Iterator<Item = String> + '_ {
        self.secrets.values().map(|s| s.expose().to_string())
    }

    /// The references that resolve to nothing, as an error for the request that set them.
    pub fn missing(&self, setting: &McpServersSetting) -> Result<(), String> {
        let missing: Vec<&str> = setting
            .secret_names()
            .filter(|name| !self.secrets.contains_key(*name))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        Err(format!(
            "no secret named {}: add it to [mcp.secrets] in chorus.toml or set \
             {SECRET_ENV_PREFIX}<NAME> for chorus, then restart it",
            missing.join(", ")
        ))
    }

    /// What the worker gets: every reference replaced by its value.
    pub fn resolve(&self, setting: &McpServersSetting) -> Result<Vec<McpServer>, String> {
        self.missing(setting)?;
        let resolve = |values: &BTreeMap<String, SettingValue>| {
            values
                .iter()
                .map(|(k, v)| {
                    let value = match v {
                        SettingValue::Plain(text) => text.clone(),
                        SettingValue::Secret(name) => self
                            .secrets
                            .get(name)
                            .map(|s| s.expose().to_string())
                            .unwrap_or_default(),
                    };
                    (k.clone(), value)
                })
                .collect()
        };
        Ok(setting
            .0
            .iter()
            .map(|(name, server)| McpServer {
                name: name.clone(),
                transport: match server {
                    ServerSetting::Stdio { command, args, env } => McpTransport::Stdio {
                        command: command.clone(),
                        args: args.clone(),
                        env: resolve(env),
                    },
                    ServerSetting::Http { url, headers } => McpTransport::Http {
                        url: url.clone(),
                        headers: resolve(headers),
                    },
                },
                call_timeout_ms: u64::try_from(self.call_timeout.as_millis()).unwrap_or(u64::MAX),
            })
            .collect())
    }
}

/// What a worker last said about one server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServerStateView {
    pub state: McpState,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The tools as the agent's runs are offered them (`GET …/tools` lists them).
    #[serde(skip)]
    pub offered: Vec<chorus_proto::domain::ToolSpec>,
}

/// The latest state of every agent's servers, as their workers report them.
#[derive(Debug, Default)]
pub struct McpStates {
    states: Mutex<HashMap<(String, String), ServerStateView>>,
}

impl McpStates {
    pub fn report(
        &self,
        agent: &str,
        server: &str,
        state: McpState,
        tools: Vec<String>,
        offered: Vec<chorus_proto::domain::ToolSpec>,
        error: String,
    ) {
        self.lock().insert(
            (agent.to_string(), server.to_string()),
            ServerStateView {
                state,
                tools,
                error: (!error.is_empty()).then_some(error),
                offered,
            },
        );
    }

    /// The tools of the agent's configured servers that are running, by server, as
    /// its runs are offered them (before the profile's reach is applied).
    pub fn offered(
        &self,
        agent: &str,
        setting: &McpServersSetting,
    ) -> Vec<(String, chorus_proto::domain::ToolSpec)> {
        let states = self.lock();
        setting
            .0
            .keys()
            .filter_map(|name| {
                states
                    .get(&(agent.to_string(), name.clone()))
                    .filter(|s| s.state == McpState::Running)
                    .map(|s| (name, s))
            })
            .flat_map(|(name, s)| s.offered.iter().map(|t| (name.clone(), t.clone())))
            .collect()
    }

    /// The agent's worker is gone: its servers went with it (stdio) or will be
    /// connected again by the next one.
    pub fn worker_gone(&self, agent: &str) {
        self.lock().retain(|(a, _), _| a != agent);
    }

    /// The agent's configured servers with their states (`not_started` when no
    /// worker has reported one), each with its setting (references, never values).
    pub fn view(&self, agent: &str, setting: &McpServersSetting) -> Value {
        let states = self.lock();
        let shown = setting.to_json();
        let mut out = Map::new();
        for name in setting.0.keys() {
            let state = states
                .get(&(agent.to_string(), name.clone()))
                .cloned()
                .unwrap_or(ServerStateView {
                    state: McpState::NotStarted,
                    tools: Vec::new(),
                    error: None,
                    offered: Vec::new(),
                });
            let mut entry = serde_json::to_value(state).unwrap_or_default();
            if let (Value::Object(entry), Some(Value::Object(config))) =
                (&mut entry, shown.get(name))
            {
                entry.extend(config.clone());
            }
            out.insert(name.clone(), entry);
        }
        Value::Object(out)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), ServerStateView>> {
        self.states
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(value: Value) -> Result<McpServersSetting, String> {
        McpServersSetting::parse(&value)
    }

    #[test]
    fn both_forms_parse_and_are_shown_with_references_only() {
        let setting = parse(json!({
            "files": {"command": "/bin/srv", "args": ["--stdio"], "env": {"API_TOKEN": {"secret": "FILES_TOKEN"}, "MODE": "x"}},
            "web": {"url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": {"secret": "WEB"}}}
        }))
        .unwrap();
        assert_eq!(
            setting.secret_names().collect::<Vec<_>>(),
            ["FILES_TOKEN", "WEB"]
        );
        let shown = setting.to_json();
        assert_eq!(
            shown["files"]["env"]["API_TOKEN"],
            json!({"secret": "FILES_TOKEN"})
        );
        assert_eq!(parse(shown).unwrap(), setting, "the stored form reads back");
    }

    #[test]
    fn bad_settings_are_refused_saying_what_is_wrong() {
        for (bad, says) in [
            (json!([]), "must be an object"),
            (json!({"Bad-Name": {"command": "x"}}), "not allowed"),
            (json!({"a__b": {"command": "x"}}), "not allowed"),
            (json!({"s": {}}), "needs a command"),
            (
                json!({"s": {"command": "x", "cwd": "/"}}),
                "unknown field 'cwd'",
            ),
            (json!({"s": {"url": "ftp://x/y"}}), "not an http"),
            (
                json!({"s": {"command": "x", "args": [1]}}),
                "list of strings",
            ),
            (
                json!({"s": {"command": "x", "env": {"API_KEY": "sk-plain"}}}),
                "looks like a secret",
            ),
            (
                json!({"s": {"url": "http://h:1/m", "headers": {"Authorization": "Bearer x"}}}),
                "looks like a secret",
            ),
            (
                json!({"s": {"command": "x", "env": {"HOME": "/"}}}),
                "set by the sandbox",
            ),
            (
                json!({"s": {"command": "x", "env": {"A": {"secret": "lower"}}}}),
                "uppercase",
            ),
            (
                json!({"s": {"url": "http://h:1/m", "headers": {"mcp-session-id": "1"}}}),
                "cannot be given",
            ),
        ] {
            let error = parse(bad.clone()).unwrap_err();
            assert!(error.contains(says), "{bad}: {error}");
        }
    }

    #[test]
    fn resolution_puts_the_values_in_and_a_missing_secret_is_named() {
        let setting =
            parse(json!({"s": {"command": "x", "env": {"TOKEN": {"secret": "S1"}}}})).unwrap();
        let mut settings = McpSettings::default();
        let error = settings.resolve(&setting).unwrap_err();
        assert!(
            error.contains("S1") && error.contains("CHORUS_MCP_SECRET_"),
            "{error}"
        );
        settings.add_env(
            [
                ("CHORUS_MCP_SECRET_S1".to_string(), "value-1".to_string()),
                ("OTHER".to_string(), "no".to_string()),
            ]
            .into_iter(),
        );
        let servers = settings.resolve(&setting).unwrap();
        let McpTransport::Stdio { env, .. } = &servers[0].transport else {
            panic!("stdio")
        };
        assert_eq!(env["TOKEN"], "value-1");
        assert_eq!(servers[0].call_timeout_ms, 300_000);
        assert_eq!(settings.values().collect::<Vec<_>>(), ["value-1"]);
    }

    /// What the worker offers of a server's tools follows the profile's rules.
    #[test]
    fn the_profile_s_reach_offers_only_the_mcp_tools_its_rules_can_match() {
        let profile = |rules: Value| {
            let setting: crate::permissions::PermissionsSetting =
                serde_json::from_value(rules).unwrap();
            crate::permissions::Profile::from_setting(&setting).unwrap()
        };
        let narrow = profile(json!({"allow": ["tool:mcp__demo__echo:.*", "tool:view:.*"],
                                    "ask": ["tool:mcp__web__(a|b):.*"]}))
        .mcp_reach();
        assert!(narrow.reaches("mcp__demo__echo"));
        assert!(narrow.reaches("mcp__web__a") && narrow.reaches("mcp__web__b"));
        for no in ["mcp__demo__secret_word", "mcp__web__c", "mcp__other__echo"] {
            assert!(!narrow.reaches(no), "{no}");
        }
        let open = profile(json!({"allow": ["tool:.*"]})).mcp_reach();
        assert!(open.reaches("mcp__demo__secret_word"));
        let none = profile(json!({"allow": ["tool:view:.*"]})).mcp_reach();
        assert!(!none.reaches("mcp__demo__echo"));
    }

    #[test]
    fn the_view_shows_each_configured_server_with_its_latest_state() {
        let setting =
            parse(json!({"a": {"command": "x"}, "b": {"url": "http://h:1/mcp"}})).unwrap();
        let states = McpStates::default();
        let echo = chorus_proto::domain::ToolSpec {
            name: "mcp__a__echo".into(),
            wire_name: "mcp__a__echo".into(),
            description: "(MCP server a) Echoes.".into(),
            schema_json: "{}".into(),
            runs_in: chorus_proto::tools::RunsIn::Worker,
            ends_turn: false,
        };
        states.report(
            "ag",
            "a",
            McpState::Running,
            vec!["echo".into()],
            vec![echo.clone()],
            String::new(),
        );
        states.report(
            "other",
            "b",
            McpState::Failed,
            vec![],
            vec![],
            "boom".into(),
        );
        let view = states.view("ag", &setting);
        assert_eq!(view["a"]["state"], "running");
        assert_eq!(view["a"]["tools"], json!(["echo"]));
        assert_eq!(view["a"]["command"], "x");
        assert_eq!(view["b"]["state"], "not_started");
        assert_eq!(
            states.offered("ag", &setting),
            vec![("a".to_string(), echo)],
            "a running server's tools are listed as offered"
        );
        states.report(
            "ag",
            "b",
            McpState::Failed,
            vec![],
            vec![],
            "it died".into(),
        );
        assert_eq!(states.view("ag", &setting)["b"]["error"], "it died");
        states.report("ag", "a", McpState::Failed, vec![], vec![], "gone".into());
        assert!(
            states.offered("ag", &setting).is_empty(),
            "none of a failed one"
        );
        states.worker_gone("ag");
        assert_eq!(states.view("ag", &setting)["b"]["state"], "not_started");
    }
}
