//! Claude Code (`claude`, 2.1.332) as a [`Flavor`].
//!
//! ## Launch
//! `claude --bare -p --output-format stream-json --verbose --include-partial-messages
//! --model <m> --tools "" --strict-mcp-config --mcp-config <tmp>/chorus-mcp-<port>.json
//! --allowedTools mcp__chorus__<tool>,… --permission-mode dontAsk
//! --append-system-prompt-file <tmp>/chorus-instructions-<port>.md
//! [--resume <id> [--fork-session]]`, the prompt on stdin.
//! - `--bare`: no hooks, CLAUDE.md, plugin sync or MCP auto-discovery, and a system
//!   prompt of a few hundred bytes instead of ~25 KB (measured); it needs an API key,
//!   which the run credential is. `CLAUDE_CONFIG_DIR` is still set to the agent's home
//!   so sessions (`projects/<cwd-slug>/<id>.jsonl`) live there.
//! - `--tools ""` removes every built-in tool; the `chorus` MCP server (`chorus-tools
//!   mcp`) is the only source of tools and `--allowedTools` lists each one (wildcards
//!   do not match MCP tools). `dontAsk` never prompts (as root `bypassPermissions`
//!   refuses to start).
//! - A tool the MCP server lists that `--allowedTools` does not name is still offered
//!   to the model; its call is answered "Permission to use … has been denied because
//!   Claude Code is running in don't ask mode" and listed in `permission_denials`
//!   (measured). So the offered set is what `chorus-tools mcp` lists; the allow-list
//!   only keeps anything else from running.
//! - Files are named by the endpoint's port: it is unique among the worker's live runs,
//!   so two runs of one agent never share one.
//! - `CLAUDE_CODE_MAX_RETRIES=1`: the relay already retries the provider; the CLI's
//!   own ten retries with backoff turned a refused credential into minutes of waiting.
//!
//! ## Requests it makes (measured against the fake, 2.1.332, with this launch)
//! Only `POST <ANTHROPIC_BASE_URL>/v1/messages?beta=true`, always `stream: true`, with
//! headers `x-api-key: <token>`, `anthropic-version: 2023-06-01`, `anthropic-beta:
//! claude-code-20250219,interleaved-thinking-2025-05-14,effort-2025-11-24` (with
//! `CLAUDE_CODE_DISABLE_EXPERIMENTAL_BETAS=1`), `x-app: cli`, `X-Claude-Code-Session-Id`,
//! `anthropic-dangerous-direct-browser-access: true`, `X-Stainless-*`; body fields
//! `model, max_tokens (32000), messages, system (blocks with cache_control), tools
//! (mcp__chorus__*), metadata.user_id, thinking {type: adaptive}, output_config
//! {effort}, stream`. Without `--bare` the messages also carry a `{"role": "system"}`
//! message after the first user message. No token counting, no HEAD probe, no
//! small-model side request, no model list was seen in `-p` mode; nothing else.
//! An empty answer after a tool result (the proxy's turn end) makes it ask once more
//! with a `user` text "[Your previous response had no visible output. Please continue
//! and produce a user-visible response.]"; a second empty answer ends the turn with
//! result `""` (fixture `turn_end.jsonl`).
//!
//! ## Output (`stream-json`)
//! `system/init` (session id, tools, `mcp_servers[].status`), `system/status`,
//! `system/api_retry`, `stream_event` (the API's SSE events), `assistant` (one line per
//! content block; the blocks of one message share `message.id`), `user` (tool
//! results), and one `result` at the end (`is_error`, `api_error_status`, `errors` for
//! an unknown session). An API error gives a synthetic assistant message (model
//! `<synthetic>`) that is not the model's and is not passed on. Fixtures:
//! `fixtures/claude_code/`.

use chorus_proto::domain::{Backend, ModelRoute, ToolCall, Usage};
use serde_json::{Value, json};

use super::flavor::{Classified, CliEvent, ExitReport, Flavor, Launch, LaunchSpec, StreamParser};
use super::outcome::{self, Markers};

/// How Claude Code names the `chorus` MCP server's tools.
pub const CLAUDE_MCP_PREFIX: &str = "mcp__chorus__";

const MARKERS: Markers = Markers {
    cli: "Claude Code",
    unknown_session: &["No conversation found with session ID"],
};

pub struct ClaudeCode;

/// The endpoint's port, naming a run's files.
pub(crate) fn run_tag(endpoint: &str) -> &str {
    endpoint.rsplit(':').next().unwrap_or("run")
}

impl Flavor for ClaudeCode {
    fn backend(&self) -> Backend {
        Backend::ClaudeCode
    }

    fn model_api(&self) -> &'static str {
        ModelRoute::ANTHROPIC_MESSAGES
    }

    fn launch(&self, spec: &LaunchSpec<'_>) -> Launch {
        let tag = run_tag(spec.endpoint);
        let mcp_path = spec.tmp.join(format!("chorus-mcp-{tag}.json"));
        let instructions_path = spec.tmp.join(format!("chorus-instructions-{tag}.md"));
        let mcp = json!({"mcpServers": {"chorus": {
            "type": "stdio",
            "command": spec.chorus_tools,
            "args": ["mcp"],
            "env": {"CHORUS_TOOLS_URL": spec.endpoint, "CHORUS_TOOLS_TOKEN": spec.token},
        }}});
        let allowed: Vec<String> = spec
            .tools
            .iter()
            .map(|t| format!("{CLAUDE_MCP_PREFIX}{t}"))
            .collect();
        let mut args: Vec<String> = vec![
            "--bare".into(),
            "-p".into(),
            "--output-format".into(),
            "stream-json".into(),
            "--verbose".into(),
            "--include-partial-messages".into(),
            "--model".into(),
            spec.model.into(),
            "--tools".into(),
            String::new(),
            "--strict-mcp-config".into(),
            "--mcp-config".into(),
            mcp_path.display().to_string(),
            "--allowedTools".into(),
            allowed.join(","),
            "--permission-mode".into(),
            "dontAsk".into(),
            "--append-system-prompt-file".into(),
            instructions_path.display().to_string(),
        ];
        if let Some(session) = spec.session {
            args.push("--resume".into());
            args.push(session.id.clone());
            if session.fork {
                args.push("--fork-session".into());
            }
        }
        let env = [
            ("ANTHROPIC_BASE_URL", format!("{}/llm", spec.endpoint)),
            ("ANTHROPIC_API_KEY", spec.token.to_string()),
            ("ANTHROPIC_SMALL_FAST_MODEL", spec.model.to_string()),
            ("ANTHROPIC_DEFAULT_HAIKU_MODEL", spec.model.to_string()),
            (
                "CLAUDE_CONFIG_DIR",
                spec.home.join(".claude").display().to_string(),
            ),
            ("CLAUDE_CODE_TMPDIR", spec.tmp.display().to_string()),
            ("DISABLE_TELEMETRY", "1".into()),
            ("DISABLE_AUTOUPDATER", "1".into()),
            ("DISABLE_ERROR_REPORTING", "1".into()),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".into()),
            ("CLAUDE_CODE_DISABLE_EXPERIMENTAL_BETAS", "1".into()),
            ("CLAUDE_CODE_MAX_RETRIES", "1".into()),
            ("MCP_TOOL_TIMEOUT", super::MCP_CALL_LIMIT_MS.to_string()),
            ("CHORUS_TOOLS_URL", spec.endpoint.to_string()),
            ("CHORUS_TOOLS_TOKEN", spec.token.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        Launch {
            args: args.into_iter().map(Into::into).collect(),
            env,
            files: vec![
                (mcp_path, mcp.to_string()),
                (instructions_path, spec.instructions.to_string()),
            ],
            // `-p` with no prompt argument reads it from stdin, exactly as written.
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

/// A tool name as Chorus knows it.
fn chorus_name(name: &str) -> String {
    name.strip_prefix(CLAUDE_MCP_PREFIX)
        .unwrap_or(name)
        .to_string()
}

/// An assistant message being put together from its lines.
#[derive(Default)]
struct Pending {
    id: String,
    text: String,
    tool_calls: Vec<ToolCall>,
}

#[derive(Default)]
struct Parser {
    session_seen: bool,
    pending: Option<Pending>,
    /// The model call in progress: its input tokens (from `message_start`) and
    /// output tokens (from `message_delta`).
    call_usage: Option<Usage>,
}

impl Parser {
    fn flush(&mut self, out: &mut Vec<CliEvent>) {
        if let Some(p) = self.pending.take()
            && (!p.text.is_empty() || !p.tool_calls.is_empty())
        {
            out.push(CliEvent::Assistant {
                text: p.text,
                tool_calls: p.tool_calls,
            });
        }
    }

    fn stream_event(&mut self, event: &Value, out: &mut Vec<CliEvent>) {
        match event["type"].as_str().unwrap_or("") {
            "message_start" => {
                self.flush(out);
                let usage = &event["message"]["usage"];
                let input = [
                    "input_tokens",
                    "cache_creation_input_tokens",
                    "cache_read_input_tokens",
                ]
                .iter()
                .filter_map(|k| usage[*k].as_u64())
                .sum();
                self.call_usage = Some(Usage {
                    input_tokens: input,
                    output_tokens: usage["output_tokens"].as_u64().unwrap_or(0),
                });
                out.push(CliEvent::ModelCallStarted);
            }
            "content_block_delta" => {
                if let Some(text) = event["delta"]["text"].as_str()
                    && event["delta"]["type"] == "text_delta"
                    && !text.is_empty()
                {
                    out.push(CliEvent::TextDelta(text.to_string()));
                }
            }
            "message_delta" => {
                if let (Some(usage), Some(output)) = (
                    self.call_usage.as_mut(),
                    event["usage"]["output_tokens"].as_u64(),
                ) {
                    usage.output_tokens = output;
                }
            }
            "message_stop" => out.push(CliEvent::ModelCallEnded {
                usage: self.call_usage.take(),
            }),
            _ => {}
        }
    }

    fn assistant(&mut self, line: &Value, out: &mut Vec<CliEvent>) {
        let message = &line["message"];
        // An API error as Claude Code shows it to a person: not the model's words.
        if line["is_api_error_message"] == true || message["model"] == "<synthetic>" {
            return;
        }
        let id = message["id"].as_str().unwrap_or("").to_string();
        if self.pending.as_ref().is_some_and(|p| p.id != id) {
            self.flush(out);
        }
        let pending = self.pending.get_or_insert_with(|| Pending {
            id,
            ..Pending::default()
        });
        for block in message["content"].as_array().into_iter().flatten() {
            match block["type"].as_str().unwrap_or("") {
                "text" => pending.text.push_str(block["text"].as_str().unwrap_or("")),
                "tool_use" => pending.tool_calls.push(ToolCall {
                    id: block["id"].as_str().unwrap_or("").to_string(),
                    name: chorus_name(block["name"].as_str().unwrap_or("")),
                    arguments: block["input"].to_string(),
                }),
                _ => {}
            }
        }
    }

    fn user(&mut self, line: &Value, out: &mut Vec<CliEvent>) {
        self.flush(out);
        for block in line["message"]["content"].as_array().into_iter().flatten() {
            if block["type"] != "tool_result" {
                continue;
            }
            out.push(CliEvent::ToolResult {
                call_id: block["tool_use_id"].as_str().unwrap_or("").to_string(),
                content: content_text(&block["content"]),
                is_error: block["is_error"].as_bool().unwrap_or(false),
            });
        }
    }

    fn result(&mut self, line: &Value, out: &mut Vec<CliEvent>) {
        self.flush(out);
        let is_error = line["is_error"].as_bool().unwrap_or(false);
        let text = line["result"].as_str().unwrap_or("").to_string();
        if is_error {
            let errors: Vec<&str> = line["errors"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let said = if errors.is_empty() {
                text.clone()
            } else {
                errors.join("; ")
            };
            let message = match line["api_error_status"].as_u64() {
                Some(status) => {
                    outcome::api_error(Some(status), line["api_error_type"].as_str(), &said)
                }
                None => said,
            };
            out.push(CliEvent::Error { message });
        }
        let usage = &line["usage"];
        let usage = usage.is_object().then(|| Usage {
            input_tokens: usage["input_tokens"].as_u64().unwrap_or(0)
                + usage["cache_creation_input_tokens"].as_u64().unwrap_or(0)
                + usage["cache_read_input_tokens"].as_u64().unwrap_or(0),
            output_tokens: usage["output_tokens"].as_u64().unwrap_or(0),
        });
        out.push(CliEvent::Final {
            text,
            is_error,
            usage,
        });
    }
}

/// A tool result's content: a string, or text blocks.
fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

impl StreamParser for Parser {
    fn line(&mut self, line: &str) -> Result<Vec<CliEvent>, String> {
        let line = line.trim();
        if line.is_empty() {
            return Ok(Vec::new());
        }
        let value: Value = serde_json::from_str(line)
            .map_err(|e| format!("not a stream-json line ({e}): {}", preview(line)))?;
        let mut out = Vec::new();
        match value["type"].as_str() {
            Some("system") => {
                if value["subtype"] == "init" {
                    if !self.session_seen
                        && let Some(id) = value["session_id"].as_str()
                    {
                        self.session_seen = true;
                        out.push(CliEvent::Session { id: id.to_string() });
                    }
                    let tools = value["tools"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                        .map(chorus_name)
                        .collect();
                    let mcp_connected = value["mcp_servers"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|s| s["name"] == "chorus" && s["status"] == "connected");
                    out.push(CliEvent::Init {
                        tools,
                        mcp_connected,
                    });
                }
            }
            Some("stream_event") => self.stream_event(&value["event"], &mut out),
            Some("assistant") => self.assistant(&value, &mut out),
            Some("user") => self.user(&value, &mut out),
            Some("result") => self.result(&value, &mut out),
            Some(_) => {}
            None => {
                return Err(format!(
                    "a stream-json line without a type: {}",
                    preview(line)
                ));
            }
        }
        Ok(out)
    }

    fn finish(&mut self) -> Vec<CliEvent> {
        let mut out = Vec::new();
        self.flush(&mut out);
        out
    }
}

/// The start of a line, for an error message.
pub(crate) fn preview(line: &str) -> String {
    let mut end = line.len().min(120);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    if end < line.len() {
        format!("{}…", &line[..end])
    } else {
        line.to_string()
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use chorus_proto::domain::{CliSession, FailureKind};

    use super::*;
    use crate::backends::flavor::CliFailure;
    use crate::backends::outcome::replay;

    const TOOLS: &[&str] = &["file_read", "file_write"];

    fn with_spec<T>(session: Option<&CliSession>, f: impl FnOnce(&LaunchSpec<'_>) -> T) -> T {
        let tools: Vec<String> = TOOLS.iter().map(ToString::to_string).collect();
        f(&LaunchSpec {
            program: Path::new("/usr/bin/claude"),
            cwd: Path::new("/work/agent"),
            home: Path::new("/home/agent"),
            tmp: Path::new("/tmp/agent"),
            model: "claude-sonnet-4-5",
            endpoint: "http://127.0.0.1:40123",
            token: "0123abcd",
            chorus_tools: Path::new("/opt/chorus/chorus-tools"),
            tools: &tools,
            instructions: "You are Ada.",
            prompt: "-n \"hi\"\nthere",
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
        let launch = with_spec(None, |spec| ClaudeCode.launch(spec));
        assert_eq!(
            strings(&launch),
            [
                "--bare",
                "-p",
                "--output-format",
                "stream-json",
                "--verbose",
                "--include-partial-messages",
                "--model",
                "claude-sonnet-4-5",
                "--tools",
                "",
                "--strict-mcp-config",
                "--mcp-config",
                "/tmp/agent/chorus-mcp-40123.json",
                "--allowedTools",
                "mcp__chorus__file_read,mcp__chorus__file_write",
                "--permission-mode",
                "dontAsk",
                "--append-system-prompt-file",
                "/tmp/agent/chorus-instructions-40123.md",
            ]
        );
        assert_eq!(launch.stdin.as_deref(), Some("-n \"hi\"\nthere"));
        let env: std::collections::BTreeMap<_, _> = launch.env.iter().cloned().collect();
        let expected: std::collections::BTreeMap<String, String> = [
            ("ANTHROPIC_BASE_URL", "http://127.0.0.1:40123/llm"),
            ("ANTHROPIC_API_KEY", "0123abcd"),
            ("ANTHROPIC_SMALL_FAST_MODEL", "claude-sonnet-4-5"),
            ("ANTHROPIC_DEFAULT_HAIKU_MODEL", "claude-sonnet-4-5"),
            ("CLAUDE_CONFIG_DIR", "/home/agent/.claude"),
            ("CLAUDE_CODE_TMPDIR", "/tmp/agent"),
            ("DISABLE_TELEMETRY", "1"),
            ("DISABLE_AUTOUPDATER", "1"),
            ("DISABLE_ERROR_REPORTING", "1"),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
            ("CLAUDE_CODE_DISABLE_EXPERIMENTAL_BETAS", "1"),
            ("CLAUDE_CODE_MAX_RETRIES", "1"),
            ("MCP_TOOL_TIMEOUT", "3600000"),
            ("CHORUS_TOOLS_URL", "http://127.0.0.1:40123"),
            ("CHORUS_TOOLS_TOKEN", "0123abcd"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(env, expected, "exactly these, once each");
        assert_eq!(env.len(), launch.env.len(), "no variable twice");
        assert_eq!(launch.files.len(), 2);
        let (path, mcp) = &launch.files[0];
        assert_eq!(path, Path::new("/tmp/agent/chorus-mcp-40123.json"));
        let mcp: Value = serde_json::from_str(mcp).unwrap();
        assert_eq!(
            mcp,
            json!({"mcpServers": {"chorus": {"type": "stdio", "command": "/opt/chorus/chorus-tools",
                "args": ["mcp"], "env": {"CHORUS_TOOLS_URL": "http://127.0.0.1:40123",
                "CHORUS_TOOLS_TOKEN": "0123abcd"}}}})
        );
        assert_eq!(
            launch.files[1],
            (
                Path::new("/tmp/agent/chorus-instructions-40123.md").to_path_buf(),
                "You are Ada.".to_string()
            )
        );
    }

    #[test]
    fn a_session_is_resumed_or_forked() {
        let resume = CliSession {
            id: "46c50d05-1ac5-4c34-9965-8ace7edeb5c6".into(),
            fork: false,
        };
        let args = strings(&with_spec(Some(&resume), |spec| ClaudeCode.launch(spec)));
        assert_eq!(
            args[args.len() - 2..],
            ["--resume", "46c50d05-1ac5-4c34-9965-8ace7edeb5c6"]
        );
        let fork = CliSession {
            fork: true,
            ..resume
        };
        let args = strings(&with_spec(Some(&fork), |spec| ClaudeCode.launch(spec)));
        assert_eq!(
            args[args.len() - 3..],
            [
                "--resume",
                "46c50d05-1ac5-4c34-9965-8ace7edeb5c6",
                "--fork-session"
            ]
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
    fn a_turn_with_tool_calls_reads_as_one_message_per_model_call() {
        let (events, exit) = replay(
            &mut *ClaudeCode.parser(),
            include_str!("fixtures/claude_code/tool_calls.jsonl"),
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
                    id: "2ee0b3f6-4d60-4823-9983-16930cf95734".into()
                },
                CliEvent::Init {
                    tools: vec!["file_read".into(), "file_write".into()],
                    mcp_connected: true
                },
                CliEvent::ModelCallStarted,
                CliEvent::TextDelta("Let me read it.".into()),
                CliEvent::ModelCallEnded { usage },
                // Two `assistant` lines (text, tool_use) of one message: one Assistant.
                CliEvent::Assistant {
                    text: "Let me read it.".into(),
                    tool_calls: vec![call("toolu_01", "file_read", r#"{"path":"b.txt"}"#)]
                },
                CliEvent::ToolResult {
                    call_id: "toolu_01".into(),
                    content: "no such file: b.txt".into(),
                    is_error: true
                },
                CliEvent::ModelCallStarted,
                CliEvent::ModelCallEnded { usage },
                CliEvent::Assistant {
                    text: String::new(),
                    tool_calls: vec![call(
                        "toolu_01",
                        "file_write",
                        r#"{"content":"hello","path":"b.txt"}"#
                    )]
                },
                CliEvent::ToolResult {
                    call_id: "toolu_01".into(),
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
        assert_eq!(ClaudeCode.classify(&exit), None);
    }

    #[test]
    fn resumed_and_forked_sessions_say_their_id_and_a_plain_answer_is_final() {
        let (events, exit) = replay(
            &mut *ClaudeCode.parser(),
            include_str!("fixtures/claude_code/fork.jsonl"),
            0,
            "",
        );
        assert_eq!(
            events[0],
            CliEvent::Session {
                id: "62071adc-c560-4ce4-8711-8d72ad3114af".into()
            }
        );
        assert!(
            matches!(events.last(), Some(CliEvent::Final { text, is_error: false, .. }) if text == "forked ok")
        );
        assert_eq!(ClaudeCode.classify(&exit), None);
        let (events, _) = replay(
            &mut *ClaudeCode.parser(),
            include_str!("fixtures/claude_code/plain.jsonl"),
            0,
            "",
        );
        let texts: Vec<_> = events
            .iter()
            .filter_map(|e| match e {
                CliEvent::Assistant { text, .. } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(texts, ["hello plain"]);
    }

    #[test]
    fn an_ended_turn_is_a_good_empty_result() {
        // The proxy's empty answers after a turn-ending tool: Claude Code asks once
        // more (a `user` line with text, no tool result), then ends with `""`.
        let (events, exit) = replay(
            &mut *ClaudeCode.parser(),
            include_str!("fixtures/claude_code/turn_end.jsonl"),
            0,
            "",
        );
        let calls = events
            .iter()
            .filter(|e| matches!(e, CliEvent::ModelCallStarted))
            .count();
        assert_eq!(calls, 3, "{events:?}");
        assert!(
            !events
                .iter()
                .any(|e| matches!(e, CliEvent::Assistant { text, tool_calls } if text.is_empty() && tool_calls.is_empty())),
            "no empty message: {events:?}"
        );
        assert!(
            matches!(events.last(), Some(CliEvent::Final { text, is_error: false, .. }) if text.is_empty())
        );
        assert_eq!(ClaudeCode.classify(&exit), None);
    }

    #[test]
    fn a_failed_mcp_server_shows_in_init() {
        let (events, _) = replay(
            &mut *ClaudeCode.parser(),
            include_str!("fixtures/claude_code/mcp_failed.jsonl"),
            0,
            "",
        );
        assert_eq!(
            events[1],
            CliEvent::Init {
                tools: vec![],
                mcp_connected: false
            }
        );
    }

    #[test]
    fn api_errors_are_classified_with_what_to_do() {
        let (events, exit) = replay(
            &mut *ClaudeCode.parser(),
            include_str!("fixtures/claude_code/auth_refused.jsonl"),
            1,
            "",
        );
        assert!(
            !events
                .iter()
                .any(|e| matches!(e, CliEvent::Assistant { .. })),
            "the synthetic error message is not the model's: {events:?}"
        );
        assert_eq!(
            exit.last_error.as_deref(),
            Some(
                "API error 401 (authentication_error): Failed to authenticate. API Error: 401 \
                 scripted error"
            )
        );
        let c = ClaudeCode.classify(&exit).unwrap();
        assert_eq!(
            (c.kind, c.cause),
            (FailureKind::ModelError, CliFailure::AuthRefused)
        );
        assert!(
            c.message.contains("check the provider's API key"),
            "{}",
            c.message
        );

        let (_, exit) = replay(
            &mut *ClaudeCode.parser(),
            include_str!("fixtures/claude_code/rate_limited.jsonl"),
            1,
            "",
        );
        let c = ClaudeCode.classify(&exit).unwrap();
        assert_eq!(
            (c.kind, c.cause),
            (FailureKind::ModelError, CliFailure::RateLimited)
        );
    }

    #[test]
    fn an_unknown_session_is_told_apart() {
        let (events, exit) = replay(
            &mut *ClaudeCode.parser(),
            include_str!("fixtures/claude_code/no_session.jsonl"),
            1,
            include_str!("fixtures/claude_code/no_session.stderr"),
        );
        assert!(
            !events.iter().any(|e| matches!(e, CliEvent::Session { .. })),
            "the missing session's id is not a session: {events:?}"
        );
        let c = ClaudeCode.classify(&exit).unwrap();
        assert_eq!(c.cause, CliFailure::UnknownSession);
        // From the stream alone too (stderr lost).
        let exit = ExitReport {
            stderr_tail: String::new(),
            ..exit
        };
        assert_eq!(
            ClaudeCode.classify(&exit).unwrap().cause,
            CliFailure::UnknownSession
        );
    }

    #[test]
    fn lines_that_are_not_stream_json_are_errors() {
        let mut parser = ClaudeCode.parser();
        assert!(parser.line("Welcome to Claude Code!").is_err());
        assert!(parser.line(r#"{"no": "type"}"#).is_err());
        assert_eq!(parser.line("").unwrap(), vec![]);
        assert_eq!(
            parser
                .line(r#"{"type": "system", "subtype": "status"}"#)
                .unwrap(),
            vec![]
        );
        let (_, exit) = replay(&mut *ClaudeCode.parser(), "<html>\n", 0, "");
        assert_eq!(
            ClaudeCode.classify(&exit).unwrap().cause,
            CliFailure::MalformedStream
        );
        let (_, exit) = replay(
            &mut *ClaudeCode.parser(),
            include_str!("fixtures/claude_code/mcp_failed.jsonl")
                .lines()
                .next()
                .unwrap(),
            0,
            "",
        );
        assert_eq!(
            ClaudeCode.classify(&exit).unwrap().cause,
            CliFailure::NoResult
        );
    }

    #[test]
    fn the_version_is_read() {
        assert_eq!(
            ClaudeCode.parse_version(include_str!("fixtures/claude_code/version.txt")),
            Some((2, 1, 332))
        );
    }
}
