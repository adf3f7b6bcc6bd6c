//! OpenCode (`opencode`, 1.18.33) as a [`Flavor`].
//!
//! ## Launch
//! `opencode run --format json --pure --title Chorus [--session <id> [--fork]]`, the
//! prompt on stdin (a prompt given as an argument reaches the model quoted and
//! escaped), with `OPENCODE_CONFIG_CONTENT` holding the whole config:
//! - provider `chorus`: `@ai-sdk/openai-compatible` (bundled, nothing is installed)
//!   with `baseURL = <endpoint>/llm/v1`, `apiKey = <run credential>`, the one model
//!   with `tool_call: true`; `model` and `small_model` = `chorus/<m>`;
//!   `enabled_providers = ["chorus"]`;
//! - MCP server `chorus`: `chorus-tools mcp` with `CHORUS_TOOLS_URL`/`_TOKEN`;
//! - `permission`: `"*": "deny"` and `"chorus_<tool>": "allow"` for each offered
//!   tool, so nothing resolves to "ask" (headless "ask" hangs or exits 0 silently);
//!   denied tools (built-ins, and an MCP tool not named) are not even offered to
//!   the model (measured);
//! - the instructions as a file in `instructions` (appended to its system prompt);
//! - `experimental.mcp_timeout` `MCP_CALL_LIMIT_MS` (default about 60 s), `autoupdate` off,
//!   `share` disabled, `snapshot` off (it would keep a git copy of the workspace).
//!
//! `--title` skips the title side request; `--pure` loads no external plugins.
//! `XDG_*` point into the agent's home (sessions live in its data dir).
//!
//! ## Requests it makes (measured against the fake, 1.18.33, with this launch)
//! Only `POST <baseURL>/chat/completions`, `stream: true`, `stream_options:
//! {include_usage: true}`, `max_tokens: 32000`, `tool_choice: "auto"` with `tools`
//! (`chorus_*`, `parameters` with `additionalProperties: false`), the system prompt
//! as a `system` message; headers `Authorization: Bearer <token>`, `x-session-id`,
//! `x-session-affinity`, `User-Agent: opencode/<v> ai-sdk/…`. Without `--title` a
//! first request without tools asks for a title (`"You are a title generator…"`).
//! No model list, no HEAD probe.
//!
//! ## Output (`--format json`)
//! `step_start`, `text` (a whole text part, once finished), `tool_use` (only once the
//! call finished: `state.status` `completed` with `output` or `error` with `error`),
//! `step_finish` (`reason` `tool-calls` or `stop`, `tokens`), `error` (the API error,
//! then exit 1). Every line has `sessionID`. There is no start-up report (a failed MCP
//! server only shows as model requests without tools) and no final line: the turn's
//! result is the text of the last step when it finished with `stop`. An unknown
//! `--session` prints `Error: Session not found` on stderr, nothing on stdout, exit 1.
//! A 429 is retried with backoff without end and without a line (5 tries in 60 s
//! measured): the run's time limit ends it. Fixtures: `fixtures/opencode/`.

use std::ffi::OsString;

use chorus_proto::domain::{Backend, ModelRoute, ToolCall, Usage};
use serde_json::{Value, json};

use super::claude_code::{preview, run_tag};
use super::flavor::{Classified, CliEvent, ExitReport, Flavor, Launch, LaunchSpec, StreamParser};
use super::outcome::{self, Markers};

/// How OpenCode names the `chorus` MCP server's tools.
pub const OPENCODE_MCP_PREFIX: &str = "chorus_";

/// OpenCode's provider id for the run endpoint.
const PROVIDER: &str = "chorus";

const MARKERS: Markers = Markers {
    cli: "OpenCode",
    unknown_session: &["Session not found"],
};

pub struct OpenCode;

/// The config OpenCode gets in `OPENCODE_CONFIG_CONTENT`.
fn config(spec: &LaunchSpec<'_>, instructions: &std::path::Path) -> Value {
    let mut permission = serde_json::Map::new();
    permission.insert("*".into(), json!("deny"));
    for tool in spec.tools {
        permission.insert(format!("{OPENCODE_MCP_PREFIX}{tool}"), json!("allow"));
    }
    let model = format!("{PROVIDER}/{}", spec.model);
    json!({
        "autoupdate": false,
        "share": "disabled",
        "snapshot": false,
        "model": model,
        "small_model": model,
        "enabled_providers": [PROVIDER],
        "provider": {PROVIDER: {
            "npm": "@ai-sdk/openai-compatible",
            "name": "Chorus",
            "options": {"baseURL": format!("{}/llm/v1", spec.endpoint), "apiKey": spec.token},
            "models": {spec.model: {"name": spec.model, "tool_call": true}},
        }},
        "mcp": {"chorus": {
            "type": "local",
            "command": [spec.chorus_tools, "mcp"],
            "environment": {"CHORUS_TOOLS_URL": spec.endpoint, "CHORUS_TOOLS_TOKEN": spec.token},
            "enabled": true,
        }},
        "permission": permission,
        "instructions": [instructions],
        "experimental": {"mcp_timeout": super::MCP_CALL_LIMIT_MS},
    })
}

impl Flavor for OpenCode {
    fn backend(&self) -> Backend {
        Backend::OpenCode
    }

    fn model_api(&self) -> &'static str {
        ModelRoute::OPENAI_CHAT
    }

    fn launch(&self, spec: &LaunchSpec<'_>) -> Launch {
        let instructions = spec
            .tmp
            .join(format!("chorus-instructions-{}.md", run_tag(spec.endpoint)));
        let mut args: Vec<OsString> = ["run", "--format", "json", "--pure", "--title", "Chorus"]
            .into_iter()
            .map(OsString::from)
            .collect();
        if let Some(session) = spec.session {
            args.push("--session".into());
            args.push(session.id.clone().into());
            if session.fork {
                args.push("--fork".into());
            }
        }
        let home = |rel: &str| spec.home.join(rel).display().to_string();
        let env = [
            (
                "OPENCODE_CONFIG_CONTENT",
                config(spec, &instructions).to_string(),
            ),
            ("XDG_CONFIG_HOME", home(".config")),
            ("XDG_DATA_HOME", home(".local/share")),
            ("XDG_CACHE_HOME", home(".cache")),
            ("XDG_STATE_HOME", home(".local/state")),
            ("OPENCODE_DISABLE_PROJECT_DISCOVERY", "1".into()),
            ("OPENCODE_DISABLE_MODELS_FETCH", "1".into()),
            ("OPENCODE_DISABLE_DEFAULT_PLUGINS", "1".into()),
            ("OPENCODE_DISABLE_CLAUDE_CODE", "1".into()),
            ("OPENCODE_DISABLE_LSP_DOWNLOAD", "1".into()),
            ("OPENCODE_DISABLE_AUTOUPDATE", "1".into()),
            ("OPENCODE_DISABLE_SHARE", "1".into()),
            ("CHORUS_TOOLS_URL", spec.endpoint.to_string()),
            ("CHORUS_TOOLS_TOKEN", spec.token.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        Launch {
            args,
            env,
            files: vec![(instructions, spec.instructions.to_string())],
            stdin: Some(spec.prompt.to_string()),
        }
    }

    fn parser(&self) -> Box<dyn StreamParser> {
        Box::new(Parser::default())
    }

    fn classify(&self, exit: &ExitReport) -> Option<Classified> {
        outcome::classify(&MARKERS, exit)
    }

    fn parse_version(&self, output: &str) -> Option<(u32, u32, u32)> {
        outcome::parse_version(output)
    }
}

/// One step (one model call and the tool calls it asked for), until `step_finish`.
#[derive(Default)]
struct Step {
    text: String,
    tool_calls: Vec<ToolCall>,
    results: Vec<CliEvent>,
}

#[derive(Default)]
struct Parser {
    session_seen: bool,
    step: Option<Step>,
    /// The text of the last step that finished with reason `stop`, while no step
    /// came after it.
    stopped_with: Option<String>,
    total: Option<Usage>,
    errored: bool,
}

impl Parser {
    fn step(&mut self) -> &mut Step {
        self.step.get_or_insert_with(Step::default)
    }

    fn step_finish(&mut self, part: &Value, out: &mut Vec<CliEvent>) {
        let step = self.step.take().unwrap_or_default();
        let tokens = &part["tokens"];
        let usage = tokens.is_object().then(|| Usage {
            input_tokens: tokens["input"].as_u64().unwrap_or(0)
                + tokens["cache"]["read"].as_u64().unwrap_or(0)
                + tokens["cache"]["write"].as_u64().unwrap_or(0),
            output_tokens: tokens["output"].as_u64().unwrap_or(0)
                + tokens["reasoning"].as_u64().unwrap_or(0),
        });
        if let Some(usage) = usage {
            let total = self.total.get_or_insert_with(Usage::default);
            total.input_tokens += usage.input_tokens;
            total.output_tokens += usage.output_tokens;
        }
        out.push(CliEvent::ModelCallEnded { usage });
        if !step.text.is_empty() || !step.tool_calls.is_empty() {
            out.push(CliEvent::Assistant {
                text: step.text.clone(),
                tool_calls: step.tool_calls,
            });
        }
        out.extend(step.results);
        self.stopped_with = (part["reason"] == "stop").then_some(step.text);
    }
}

impl StreamParser for Parser {
    fn line(&mut self, line: &str) -> Result<Vec<CliEvent>, String> {
        let line = line.trim();
        if line.is_empty() {
            return Ok(Vec::new());
        }
        let value: Value = serde_json::from_str(line)
            .map_err(|e| format!("not an OpenCode JSON line ({e}): {}", preview(line)))?;
        let Some(kind) = value["type"].as_str() else {
            return Err(format!(
                "an OpenCode JSON line without a type: {}",
                preview(line)
            ));
        };
        let mut out = Vec::new();
        if !self.session_seen
            && let Some(id) = value["sessionID"].as_str()
        {
            self.session_seen = true;
            out.push(CliEvent::Session { id: id.to_string() });
        }
        let part = &value["part"];
        match kind {
            "step_start" => {
                self.step = Some(Step::default());
                self.stopped_with = None;
                out.push(CliEvent::ModelCallStarted);
            }
            "text" => {
                let text = part["text"].as_str().unwrap_or("");
                if !text.is_empty() {
                    self.step().text.push_str(text);
                    out.push(CliEvent::TextDelta(text.to_string()));
                }
            }
            "tool_use" => {
                let state = &part["state"];
                let name = part["tool"].as_str().unwrap_or("");
                let call_id = part["callID"].as_str().unwrap_or("").to_string();
                let is_error = state["status"] == "error";
                let content = if is_error {
                    state["error"].as_str().unwrap_or("")
                } else {
                    state["output"].as_str().unwrap_or("")
                };
                let step = self.step();
                step.tool_calls.push(ToolCall {
                    id: call_id.clone(),
                    name: name
                        .strip_prefix(OPENCODE_MCP_PREFIX)
                        .unwrap_or(name)
                        .to_string(),
                    arguments: state["input"].to_string(),
                });
                step.results.push(CliEvent::ToolResult {
                    call_id,
                    content: content.to_string(),
                    is_error,
                });
            }
            "step_finish" => self.step_finish(part, &mut out),
            "error" => {
                self.errored = true;
                let error = &value["error"];
                let data = &error["data"];
                let message = data["message"]
                    .as_str()
                    .or_else(|| error["message"].as_str())
                    .unwrap_or("unknown error");
                let message = match data["statusCode"].as_u64() {
                    Some(status) => outcome::api_error(Some(status), None, message),
                    None => match error["name"].as_str() {
                        Some(name) => format!("{name}: {message}"),
                        None => message.to_string(),
                    },
                };
                out.push(CliEvent::Error { message });
            }
            _ => {}
        }
        Ok(out)
    }

    fn finish(&mut self) -> Vec<CliEvent> {
        let mut out = Vec::new();
        if self.errored {
            return out;
        }
        if let Some(text) = self.stopped_with.take() {
            out.push(CliEvent::Final {
                text,
                is_error: false,
                usage: self.total,
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use chorus_proto::domain::{CliSession, FailureKind};

    use super::*;
    use crate::backends::flavor::CliFailure;
    use crate::backends::outcome::replay;

    fn with_spec<T>(session: Option<&CliSession>, f: impl FnOnce(&LaunchSpec<'_>) -> T) -> T {
        let tools = vec!["file_read".to_string(), "file_write".to_string()];
        f(&LaunchSpec {
            program: Path::new("/usr/bin/opencode"),
            cwd: Path::new("/work/agent"),
            home: Path::new("/home/agent"),
            tmp: Path::new("/tmp/agent"),
            model: "gpt-5-mini",
            endpoint: "http://127.0.0.1:40124",
            token: "0123abcd",
            chorus_tools: Path::new("/opt/chorus/chorus-tools"),
            tools: &tools,
            instructions: "You are Ada.",
            prompt: "say \"hi\"",
            session,
        })
    }

    fn strings(launch: &Launch) -> Vec<String> {
        launch
            .args
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn it_is_launched_with_chorus_tools_only_and_the_run_credential() {
        let launch = with_spec(None, |spec| OpenCode.launch(spec));
        assert_eq!(
            strings(&launch),
            ["run", "--format", "json", "--pure", "--title", "Chorus"]
        );
        assert_eq!(launch.stdin.as_deref(), Some("say \"hi\""));
        let env: std::collections::BTreeMap<_, _> = launch.env.iter().cloned().collect();
        assert_eq!(env.len(), launch.env.len(), "no variable twice");
        let config: Value = serde_json::from_str(&env["OPENCODE_CONFIG_CONTENT"]).unwrap();
        assert_eq!(
            config,
            json!({
                "autoupdate": false, "share": "disabled", "snapshot": false,
                "model": "chorus/gpt-5-mini", "small_model": "chorus/gpt-5-mini",
                "enabled_providers": ["chorus"],
                "provider": {"chorus": {"npm": "@ai-sdk/openai-compatible", "name": "Chorus",
                    "options": {"baseURL": "http://127.0.0.1:40124/llm/v1", "apiKey": "0123abcd"},
                    "models": {"gpt-5-mini": {"name": "gpt-5-mini", "tool_call": true}}}},
                "mcp": {"chorus": {"type": "local", "command": ["/opt/chorus/chorus-tools", "mcp"],
                    "environment": {"CHORUS_TOOLS_URL": "http://127.0.0.1:40124",
                                    "CHORUS_TOOLS_TOKEN": "0123abcd"},
                    "enabled": true}},
                "permission": {"*": "deny", "chorus_file_read": "allow", "chorus_file_write": "allow"},
                "instructions": ["/tmp/agent/chorus-instructions-40124.md"],
                "experimental": {"mcp_timeout": 3600000},
            })
        );
        let rest: Vec<(&str, &str)> = launch
            .env
            .iter()
            .filter(|(k, _)| k != "OPENCODE_CONFIG_CONTENT")
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            rest,
            [
                ("XDG_CONFIG_HOME", "/home/agent/.config"),
                ("XDG_DATA_HOME", "/home/agent/.local/share"),
                ("XDG_CACHE_HOME", "/home/agent/.cache"),
                ("XDG_STATE_HOME", "/home/agent/.local/state"),
                ("OPENCODE_DISABLE_PROJECT_DISCOVERY", "1"),
                ("OPENCODE_DISABLE_MODELS_FETCH", "1"),
                ("OPENCODE_DISABLE_DEFAULT_PLUGINS", "1"),
                ("OPENCODE_DISABLE_CLAUDE_CODE", "1"),
                ("OPENCODE_DISABLE_LSP_DOWNLOAD", "1"),
                ("OPENCODE_DISABLE_AUTOUPDATE", "1"),
                ("OPENCODE_DISABLE_SHARE", "1"),
                ("CHORUS_TOOLS_URL", "http://127.0.0.1:40124"),
                ("CHORUS_TOOLS_TOKEN", "0123abcd"),
            ]
        );
        assert_eq!(
            launch.files,
            [(
                Path::new("/tmp/agent/chorus-instructions-40124.md").to_path_buf(),
                "You are Ada.".to_string()
            )]
        );
    }

    #[test]
    fn a_session_is_resumed_or_forked() {
        let resume = CliSession {
            id: "ses_de6ebf350ffesqOjBTacj7RuKC".into(),
            fork: false,
        };
        let args = strings(&with_spec(Some(&resume), |spec| OpenCode.launch(spec)));
        assert_eq!(args[6..], ["--session", "ses_de6ebf350ffesqOjBTacj7RuKC"]);
        let fork = CliSession {
            fork: true,
            ..resume
        };
        let args = strings(&with_spec(Some(&fork), |spec| OpenCode.launch(spec)));
        assert_eq!(
            args[6..],
            ["--session", "ses_de6ebf350ffesqOjBTacj7RuKC", "--fork"]
        );
    }

    fn call(id: &str, name: &str, arguments: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    #[test]
    fn a_turn_with_tool_calls_reads_as_steps_and_a_final_text() {
        let (events, exit) = replay(
            &mut *OpenCode.parser(),
            include_str!("fixtures/opencode/tool_calls.jsonl"),
            0,
            "",
        );
        let usage = Some(Usage {
            input_tokens: 20,
            output_tokens: 10,
        });
        assert_eq!(
            events,
            [
                CliEvent::Session {
                    id: "ses_de6e9f7f8ffe9paKV7UarCH8b9".into()
                },
                CliEvent::ModelCallStarted,
                CliEvent::TextDelta("Let me read it.".into()),
                CliEvent::ModelCallEnded { usage },
                CliEvent::Assistant {
                    text: "Let me read it.".into(),
                    tool_calls: vec![call("call_1", "file_read", r#"{"path":"b.txt"}"#)]
                },
                CliEvent::ToolResult {
                    call_id: "call_1".into(),
                    content: "no such file: b.txt".into(),
                    is_error: true
                },
                CliEvent::ModelCallStarted,
                CliEvent::ModelCallEnded { usage },
                CliEvent::Assistant {
                    text: String::new(),
                    tool_calls: vec![call(
                        "call_1",
                        "file_write",
                        r#"{"content":"hello","path":"b.txt"}"#
                    )]
                },
                CliEvent::ToolResult {
                    call_id: "call_1".into(),
                    content: r#"wrote {"path": "b.txt", "content": "hello"}"#.into(),
                    is_error: false
                },
                CliEvent::ModelCallStarted,
                CliEvent::TextDelta("done".into()),
                CliEvent::ModelCallEnded { usage },
                CliEvent::Assistant {
                    text: "done".into(),
                    tool_calls: vec![]
                },
                CliEvent::Final {
                    text: "done".into(),
                    is_error: false,
                    usage: Some(Usage {
                        input_tokens: 60,
                        output_tokens: 30
                    })
                },
            ]
        );
        assert_eq!(OpenCode.classify(&exit), None);
    }

    #[test]
    fn resumed_and_forked_sessions_end_with_their_last_text() {
        for (fixture, session, text) in [
            (
                include_str!("fixtures/opencode/fork.jsonl"),
                "ses_de6eb8168ffeuqrbyl1wOylof7",
                "forked",
            ),
            (
                include_str!("fixtures/opencode/plain.jsonl"),
                "ses_de6ebc10affeoQn3vWolvCqQfA",
                "plain hi",
            ),
        ] {
            let (events, exit) = replay(&mut *OpenCode.parser(), fixture, 0, "");
            assert_eq!(events[0], CliEvent::Session { id: session.into() });
            assert!(
                matches!(events.last(), Some(CliEvent::Final { text: t, is_error: false, .. }) if t == text),
                "{events:?}"
            );
            assert_eq!(OpenCode.classify(&exit), None);
        }
    }

    #[test]
    fn a_turn_cut_after_a_tool_call_has_no_final() {
        let fixture = include_str!("fixtures/opencode/tool_calls.jsonl");
        let cut: Vec<&str> = fixture.lines().take(4).collect();
        let (events, exit) = replay(&mut *OpenCode.parser(), &cut.join("\n"), 0, "");
        assert!(
            !events.iter().any(|e| matches!(e, CliEvent::Final { .. })),
            "{events:?}"
        );
        assert_eq!(
            OpenCode.classify(&exit).unwrap().cause,
            CliFailure::NoResult
        );
    }

    #[test]
    fn api_errors_and_unknown_sessions_are_classified() {
        let (events, exit) = replay(
            &mut *OpenCode.parser(),
            include_str!("fixtures/opencode/auth_refused.jsonl"),
            1,
            "",
        );
        assert_eq!(
            events[1],
            CliEvent::Error {
                message: "API error 401: scripted error".into()
            }
        );
        let c = OpenCode.classify(&exit).unwrap();
        assert_eq!(
            (c.kind, c.cause),
            (FailureKind::ModelError, CliFailure::AuthRefused)
        );

        let (events, exit) = replay(
            &mut *OpenCode.parser(),
            "",
            1,
            include_str!("fixtures/opencode/no_session.stderr"),
        );
        assert_eq!(events, vec![]);
        assert_eq!(
            OpenCode.classify(&exit).unwrap().cause,
            CliFailure::UnknownSession
        );
    }

    #[test]
    fn a_failed_mcp_server_is_not_in_the_stream() {
        // OpenCode says nothing when its MCP server fails: the model is asked
        // without tools. The run endpoint (no `GET /tools` before the first model
        // request) is where that shows.
        let (events, _) = replay(
            &mut *OpenCode.parser(),
            include_str!("fixtures/opencode/mcp_failed.jsonl"),
            0,
            "",
        );
        assert!(
            !events.iter().any(|e| matches!(e, CliEvent::Init { .. })),
            "{events:?}"
        );
    }

    #[test]
    fn lines_that_are_not_its_json_are_errors_and_the_version_is_read() {
        let mut parser = OpenCode.parser();
        assert!(parser.line("\u{1b}[91mError: \u{1b}[0mboom").is_err());
        assert!(parser.line(r#"{"sessionID": "x"}"#).is_err());
        assert_eq!(
            OpenCode.parse_version(include_str!("fixtures/opencode/version.txt")),
            Some((1, 18, 33))
        );
    }
}
