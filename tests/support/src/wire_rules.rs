//! What the real model APIs refuse, checked on every request a fake model gets.
//!
//! Each rule here is one a real server enforces with a 4xx or 5xx (OpenAI, Anthropic,
//! llama-cpp-python, Ollama, LM Studio). A request that breaks one is answered the
//! way the real API would and recorded, and the test fails with the reason when the
//! fake is dropped, so a request the real APIs would refuse cannot pass a test.

use std::collections::HashSet;

use serde_json::Value;

/// `^[a-zA-Z0-9_-]{1,64}$`: the tool names OpenAI and Anthropic accept.
pub fn valid_tool_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// The request fields chat completions takes; OpenAI refuses any other with
/// "Unrecognized request argument supplied".
const OPENAI_KEYS: &[&str] = &[
    "model",
    "messages",
    "max_tokens",
    "max_completion_tokens",
    "stream",
    "stream_options",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "temperature",
    "top_p",
    "n",
    "stop",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "logprobs",
    "top_logprobs",
    "user",
    "response_format",
    "seed",
    "reasoning_effort",
    "metadata",
    "store",
    "modalities",
    "prediction",
    "service_tier",
    "verbosity",
    "prompt_cache_key",
    "safety_identifier",
];

/// The request fields the Messages API takes (with the betas Claude Code sends); any
/// other is refused with "Extra inputs are not permitted".
const ANTHROPIC_KEYS: &[&str] = &[
    "model",
    "messages",
    "max_tokens",
    "system",
    "tools",
    "tool_choice",
    "stream",
    "metadata",
    "thinking",
    "temperature",
    "top_p",
    "top_k",
    "stop_sequences",
    "context_management",
    "output_config",
    "service_tier",
    "container",
    "mcp_servers",
];

fn unknown_keys(body: &Value, known: &[&str], says: &str, problems: &mut Vec<String>) {
    for key in body.as_object().into_iter().flat_map(|o| o.keys()) {
        if !known.contains(&key.as_str()) {
            problems.push(format!("{key}: {says}"));
        }
    }
}

/// Blocks marked `cache_control` anywhere in a request (system, tools, messages):
/// the API takes at most 4, each `{"type": "ephemeral"}` (optionally with a `ttl`).
fn cache_control_problems(body: &Value, problems: &mut Vec<String>) {
    let mut marks = Vec::new();
    let blocks = |v: Option<&Value>| -> Vec<Value> {
        v.and_then(Value::as_array).cloned().unwrap_or_default()
    };
    for block in blocks(body.get("system"))
        .iter()
        .chain(blocks(body.get("tools")).iter())
    {
        if let Some(mark) = block.get("cache_control") {
            marks.push(mark.clone());
        }
    }
    for message in blocks(body.get("messages")) {
        for block in blocks(message.get("content")) {
            if let Some(mark) = block.get("cache_control") {
                marks.push(mark.clone());
            }
        }
    }
    if marks.len() > 4 {
        problems.push(format!(
            "A maximum of 4 blocks with cache_control may be provided. Found {}.",
            marks.len()
        ));
    }
    for mark in marks {
        if mark.get("type").and_then(Value::as_str) != Some("ephemeral") {
            problems.push(format!(
                "cache_control.type: must be 'ephemeral', not {mark}"
            ));
        }
    }
}

/// `thinking`, `metadata`, `output_config` and `context_management` as the API
/// checks them.
fn anthropic_options_problems(body: &Value, problems: &mut Vec<String>) {
    if let Some(thinking) = body.get("thinking") {
        match thinking.get("type").and_then(Value::as_str) {
            Some("enabled") => {
                let budget = thinking.get("budget_tokens").and_then(Value::as_u64);
                let max = body.get("max_tokens").and_then(Value::as_u64).unwrap_or(0);
                match budget {
                    Some(b) if b >= 1024 && b < max => {}
                    _ => problems.push(
                        "thinking.budget_tokens: must be at least 1024 and less than max_tokens"
                            .into(),
                    ),
                }
            }
            Some("disabled" | "adaptive") => {}
            _ => problems.push(format!(
                "thinking.type: must be 'enabled', 'disabled' or 'adaptive', not {thinking}"
            )),
        }
        let on = thinking.get("type").and_then(Value::as_str) != Some("disabled");
        if on
            && body
                .get("temperature")
                .is_some_and(|t| t.as_f64() != Some(1.0))
        {
            problems.push("temperature may only be set to 1 when thinking is enabled".into());
        }
    }
    if let Some(metadata) = body.get("metadata") {
        match metadata.as_object() {
            Some(fields) => {
                for (key, value) in fields {
                    if key != "user_id" {
                        problems.push(format!("metadata.{key}: Extra inputs are not permitted"));
                    } else if !value.is_string() {
                        problems.push("metadata.user_id: must be a string".into());
                    }
                }
            }
            None => problems.push("metadata: must be an object".into()),
        }
    }
    if let Some(config) = body.get("output_config") {
        if let Some(effort) = config.get("effort")
            && !matches!(effort.as_str(), Some("low" | "medium" | "high" | "max"))
        {
            problems.push(format!(
                "output_config.effort: must be 'low', 'medium', 'high' or 'max', not {effort}"
            ));
        }
        if !config.is_object() {
            problems.push("output_config: must be an object".into());
        }
    }
    if let Some(management) = body.get("context_management")
        && !management.get("edits").is_none_or(Value::is_array)
    {
        problems.push("context_management.edits: must be an array".into());
    }
}

fn positive_int(body: &Value, key: &str) -> bool {
    body.get(key).and_then(Value::as_u64).is_some_and(|n| n > 0)
}

/// Problems with a chat-completions request (OpenAI, and the servers that copy it).
pub fn openai_problems(body: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    unknown_keys(
        body,
        OPENAI_KEYS,
        "Unrecognized request argument supplied",
        &mut problems,
    );
    // OpenAI: "The 'stream_options' parameter is only allowed when 'stream' is enabled."
    if body.get("stream_options").is_some() && body.get("stream") != Some(&Value::Bool(true)) {
        problems.push(
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.".into(),
        );
    }
    if !body.get("model").is_some_and(Value::is_string) {
        problems.push("'model' must be a string".to_string());
    }
    if body.get("max_tokens").is_some() && !positive_int(body, "max_tokens") {
        problems.push("'max_tokens' must be a positive integer".to_string());
    }
    if let Some(tools) = body.get("tools") {
        let Some(tools) = tools.as_array() else {
            return vec!["'tools' must be an array".into()];
        };
        for (i, tool) in tools.iter().enumerate() {
            if tool.get("type").and_then(Value::as_str) != Some("function") {
                problems.push(format!("tools[{i}].type must be 'function'"));
            }
            let name = tool
                .pointer("/function/name")
                .and_then(Value::as_str)
                .unwrap_or("");
            if !valid_tool_name(name) {
                problems.push(format!(
                    "tools[{i}].function.name '{name}' does not match '^[a-zA-Z0-9_-]{{1,64}}$'"
                ));
            }
        }
    }
    // OpenAI: "'tool_choice' is only allowed when 'tools' are specified"; vLLM:
    // "When using `tool_choice`, `tools` must be set."
    if let Some(choice) = body.get("tool_choice") {
        let named = choice.get("type").and_then(Value::as_str) == Some("function")
            && choice
                .pointer("/function/name")
                .is_some_and(Value::is_string);
        let known = matches!(choice.as_str(), Some("none" | "auto" | "required"));
        if !known && !named {
            problems.push(format!(
                "'tool_choice' must be 'none', 'auto', 'required' or a named function, not {choice}"
            ));
        }
        let no_tools = body
            .get("tools")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty);
        if no_tools {
            problems.push("'tool_choice' is only allowed when 'tools' are specified".into());
        }
    }
    let Some(messages) = body.get("messages").and_then(Value::as_array) else {
        problems.push("'messages' must be an array".into());
        return problems;
    };
    if messages.is_empty() {
        problems.push("'messages' must not be empty".into());
    }
    // Tool calls still waiting for their result: every call of an assistant turn
    // must be answered by tool messages right after it.
    let mut open: Vec<String> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
        if role != "tool" && !open.is_empty() {
            problems.push(format!(
                "messages[{i}]: an assistant message with 'tool_calls' must be followed by tool \
                 messages responding to each 'tool_call_id' (missing: {})",
                open.join(", ")
            ));
            open.clear();
        }
        let content = m.get("content");
        match role {
            "system" | "user" => {
                if !content.is_some_and(|c| c.is_string() || c.is_array()) {
                    problems.push(format!(
                        "messages[{i}] ({role}): 'content' must be a string or an array"
                    ));
                }
            }
            "assistant" => {
                let calls = m.get("tool_calls").and_then(Value::as_array);
                // llama-cpp-python answers `null` and a missing content with a 500.
                if !content.is_some_and(Value::is_string) {
                    problems.push(format!(
                        "messages[{i}] (assistant): 'content' must be a string (\"\" with tool \
                         calls); null or missing content is refused by some servers"
                    ));
                }
                for (j, call) in calls.into_iter().flatten().enumerate() {
                    let id = call.get("id").and_then(Value::as_str).unwrap_or("");
                    let name = call
                        .pointer("/function/name")
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    if id.is_empty() {
                        problems.push(format!("messages[{i}].tool_calls[{j}] has no id"));
                    }
                    if !valid_tool_name(name) {
                        problems.push(format!(
                            "messages[{i}].tool_calls[{j}].function.name '{name}' does not match \
                             '^[a-zA-Z0-9_-]{{1,64}}$'"
                        ));
                    }
                    if !call
                        .pointer("/function/arguments")
                        .is_some_and(Value::is_string)
                    {
                        problems.push(format!(
                            "messages[{i}].tool_calls[{j}].function.arguments must be a string"
                        ));
                    }
                    open.push(id.to_string());
                }
            }
            "tool" => {
                let id = m.get("tool_call_id").and_then(Value::as_str).unwrap_or("");
                match open.iter().position(|o| o == id) {
                    Some(at) => {
                        open.remove(at);
                    }
                    None => problems.push(format!(
                        "messages[{i}]: a tool message must respond to a preceding tool call \
                         ('{id}' is not one)"
                    )),
                }
                if !content.is_some_and(Value::is_string) {
                    problems.push(format!("messages[{i}] (tool): 'content' must be a string"));
                }
            }
            other => problems.push(format!("messages[{i}]: unknown role '{other}'")),
        }
    }
    if !open.is_empty() {
        problems.push(format!(
            "the last assistant message's tool calls have no results: {}",
            open.join(", ")
        ));
    }
    problems
}

/// Problems with an Anthropic Messages request.
pub fn anthropic_problems(body: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    unknown_keys(
        body,
        ANTHROPIC_KEYS,
        "Extra inputs are not permitted",
        &mut problems,
    );
    cache_control_problems(body, &mut problems);
    anthropic_options_problems(body, &mut problems);
    if !positive_int(body, "max_tokens") {
        problems.push("'max_tokens' is required and must be a positive integer".to_string());
    }
    if let Some(system) = body.get("system")
        && !(system.is_string() || system.is_array())
    {
        problems.push("'system' must be a string or an array of blocks".into());
    }
    if let Some(tools) = body.get("tools").and_then(Value::as_array) {
        for (i, tool) in tools.iter().enumerate() {
            let name = tool.get("name").and_then(Value::as_str).unwrap_or("");
            if !valid_tool_name(name) {
                problems.push(format!(
                    "tools.{i}.name: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$' ('{name}')"
                ));
            }
            if tool.pointer("/input_schema/type").and_then(Value::as_str) != Some("object") {
                problems.push(format!("tools.{i}.input_schema.type must be 'object'"));
            }
        }
    }
    let Some(messages) = body.get("messages").and_then(Value::as_array) else {
        problems.push("'messages' must be an array".into());
        return problems;
    };
    if messages.is_empty() {
        problems.push("messages: at least one message is required".into());
    }
    // The API (and Bedrock) refuse tool blocks in a request that offers no tools.
    let has_tools = body
        .get("tools")
        .and_then(Value::as_array)
        .is_some_and(|tools| !tools.is_empty());
    let tool_blocks = messages.iter().any(|m| {
        m.get("content")
            .and_then(Value::as_array)
            .is_some_and(|blocks| {
                blocks.iter().any(|b| {
                    matches!(
                        b.get("type").and_then(Value::as_str),
                        Some("tool_use" | "tool_result")
                    )
                })
            })
    });
    if tool_blocks && !has_tools {
        problems.push(
            "Requests which include `tool_use` or `tool_result` blocks must define tools.".into(),
        );
    }
    let mut previous_role = "";
    let mut open: HashSet<String> = HashSet::new();
    for (i, m) in messages.iter().enumerate() {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
        // Claude Code (2.1.332, without `--bare`) puts its environment in a `system`
        // message after the first user message, and the API it is built for takes
        // it: text only, never first, outside the user/assistant alternation.
        if role == "system" && i > 0 {
            let text_only = match m.get("content") {
                Some(Value::String(s)) => !s.is_empty(),
                Some(Value::Array(blocks)) => {
                    !blocks.is_empty()
                        && blocks
                            .iter()
                            .all(|b| b.get("type").and_then(Value::as_str) == Some("text"))
                }
                _ => false,
            };
            if !text_only {
                problems.push(format!(
                    "messages.{i}: a system message must be non-empty text"
                ));
            }
            continue;
        }
        if role != "user" && role != "assistant" {
            problems.push(format!(
                "messages.{i}.role: must be 'user' or 'assistant', not '{role}'"
            ));
        }
        if i == 0 && role != "user" {
            problems.push("messages.0: the first message must use the 'user' role".into());
        }
        if role == previous_role {
            problems.push(format!(
                "messages.{i}: roles must alternate between 'user' and 'assistant'"
            ));
        }
        previous_role = role;
        let blocks: Vec<Value> = match m.get("content") {
            Some(Value::String(s)) if s.is_empty() => {
                problems.push(format!("messages.{i}: content must not be empty"));
                Vec::new()
            }
            Some(Value::String(s)) => vec![serde_json::json!({"type": "text", "text": s})],
            Some(Value::Array(blocks)) if blocks.is_empty() => {
                problems.push(format!("messages.{i}: content must not be empty"));
                Vec::new()
            }
            Some(Value::Array(blocks)) => blocks.clone(),
            _ => {
                problems.push(format!("messages.{i}.content must be a string or an array"));
                Vec::new()
            }
        };
        let mut seen_other = false;
        let mut answered: HashSet<String> = HashSet::new();
        for (j, block) in blocks.iter().enumerate() {
            match block.get("type").and_then(Value::as_str).unwrap_or("") {
                "text" => {
                    seen_other = true;
                    if block
                        .get("text")
                        .and_then(Value::as_str)
                        .is_none_or(str::is_empty)
                    {
                        problems.push(format!(
                            "messages.{i}.content.{j}.text: text content blocks must be non-empty"
                        ));
                    }
                }
                "tool_use" if role == "assistant" => {
                    let name = block.get("name").and_then(Value::as_str).unwrap_or("");
                    if !valid_tool_name(name) {
                        problems.push(format!(
                            "messages.{i}.content.{j}.name: '{name}' does not match \
                             '^[a-zA-Z0-9_-]{{1,64}}$'"
                        ));
                    }
                    if !block.get("input").is_some_and(Value::is_object) {
                        problems.push(format!("messages.{i}.content.{j}.input must be an object"));
                    }
                    let id = block.get("id").and_then(Value::as_str).unwrap_or("");
                    open.insert(id.to_string());
                }
                "tool_result" if role == "user" => {
                    if seen_other {
                        problems.push(format!(
                            "messages.{i}: tool_result blocks must come first in the content"
                        ));
                    }
                    let id = block
                        .get("tool_use_id")
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    if !open.contains(id) {
                        problems.push(format!(
                            "messages.{i}.content.{j}: unexpected tool_use_id '{id}' in \
                             tool_result blocks: each tool_result must have a corresponding \
                             tool_use block in the previous message"
                        ));
                    }
                    answered.insert(id.to_string());
                }
                other => problems.push(format!(
                    "messages.{i}.content.{j}: a '{other}' block is not allowed in a {role} message"
                )),
            }
        }
        if role == "user" {
            let missing: Vec<&String> = open.iter().filter(|id| !answered.contains(*id)).collect();
            if !missing.is_empty() {
                problems.push(format!(
                    "messages.{i}: tool_use ids were found without tool_result blocks \
                     immediately after: {missing:?}"
                ));
            }
            open.clear();
        }
    }
    if previous_role == "assistant" && !open.is_empty() {
        problems.push("the last message has tool_use blocks without results".into());
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_rules_catch_what_real_apis_refuse() {
        let good = json!({"model": "m", "max_tokens": 10, "messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "file_read", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "a", "content": "x"},
        ], "tools": [{"type": "function", "function": {"name": "file_read", "parameters": {}}}]});
        assert_eq!(openai_problems(&good), Vec::<String>::new());

        let mut bad = good.clone();
        bad["tools"][0]["function"]["name"] = json!("file.read");
        bad["messages"][2]["content"] = Value::Null;
        bad["messages"][3]["tool_call_id"] = json!("b");
        let problems = openai_problems(&bad);
        assert_eq!(problems.len(), 4, "{problems:#?}");
        let mut auto = good;
        auto["tool_choice"] = json!("auto");
        assert_eq!(openai_problems(&auto), Vec::<String>::new());
        auto["tool_choice"] = json!("sometimes");
        auto.as_object_mut().unwrap().remove("tools");
        assert_eq!(
            openai_problems(&auto).len(),
            2,
            "an unknown choice, and no tools"
        );

        let good = json!({"model": "m", "max_tokens": 10, "system": "s", "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "view", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "x"},
                                         {"type": "text", "text": "and?"}]},
        ], "tools": [{"name": "view", "input_schema": {"type": "object"}}]});
        assert_eq!(anthropic_problems(&good), Vec::<String>::new());
        let mut bad = good.clone();
        bad["messages"][2]["content"] = json!([{"type": "text", "text": ""}]);
        let problems = anthropic_problems(&bad);
        assert_eq!(problems.len(), 2, "{problems:#?}"); // empty text, unanswered tool_use
        // Tool blocks without tools: what a summary request used to send.
        let mut bad = good;
        bad.as_object_mut().unwrap().remove("tools");
        assert_eq!(
            anthropic_problems(&bad),
            ["Requests which include `tool_use` or `tool_result` blocks must define tools."]
        );
    }

    /// Requests the real CLIs sent (Claude Code 2.1.332 with and without `--bare`,
    /// OpenCode 1.18.33), recorded from a loopback fake: the real APIs take them,
    /// so the rules must too; and each rule added for them bites.
    #[test]
    fn the_real_clis_requests_pass_and_their_variations_are_caught() {
        let read = |text: &str| -> Value { serde_json::from_str(text).unwrap() };
        let claude = read(include_str!("../fixtures/claude_code_request.json"));
        let bare = read(include_str!("../fixtures/claude_code_bare_request.json"));
        let opencode = read(include_str!("../fixtures/opencode_request.json"));
        let title = read(include_str!("../fixtures/opencode_title_request.json"));
        assert_eq!(anthropic_problems(&claude), Vec::<String>::new());
        assert_eq!(anthropic_problems(&bare), Vec::<String>::new());
        assert_eq!(openai_problems(&opencode), Vec::<String>::new());
        assert_eq!(openai_problems(&title), Vec::<String>::new());
        assert_eq!(
            claude["messages"][1]["role"], "system",
            "the case the rule is for"
        );

        let bad = |mut body: Value, change: fn(&mut Value), rules: fn(&Value) -> Vec<String>| {
            change(&mut body);
            rules(&body)
        };
        let one = |problems: Vec<String>, says: &str| {
            assert_eq!(problems.len(), 1, "{problems:#?}");
            assert!(problems[0].contains(says), "{problems:#?}");
        };
        one(
            bad(
                claude.clone(),
                |b| b["betas"] = json!(["x"]),
                anthropic_problems,
            ),
            "Extra inputs are not permitted",
        );
        one(
            bad(
                claude.clone(),
                |b| b["thinking"] = json!({"type": "enabled", "budget_tokens": 10}),
                anthropic_problems,
            ),
            "budget_tokens",
        );
        one(
            bad(
                claude.clone(),
                |b| b["temperature"] = json!(0.2),
                anthropic_problems,
            ),
            "temperature may only be set to 1",
        );
        one(
            bad(
                claude.clone(),
                |b| b["metadata"]["session"] = json!("s"),
                anthropic_problems,
            ),
            "metadata.session",
        );
        one(
            bad(
                claude.clone(),
                |b| b["output_config"] = json!({"effort": "extreme"}),
                anthropic_problems,
            ),
            "output_config.effort",
        );
        let first = bad(
            claude.clone(),
            |b| b["messages"][0]["role"] = json!("system"),
            anthropic_problems,
        );
        assert!(
            first.iter().any(|p| p.contains("first message")),
            "{first:#?}"
        );
        one(
            bad(
                claude,
                |b| {
                    for block in b["system"].as_array_mut().unwrap() {
                        block["cache_control"] = json!({"type": "ephemeral"});
                    }
                    b["tools"][0]["cache_control"] = json!({"type": "ephemeral"});
                    b["tools"][1]["cache_control"] = json!({"type": "ephemeral"});
                },
                anthropic_problems,
            ),
            "A maximum of 4 blocks with cache_control",
        );
        one(
            bad(
                opencode.clone(),
                |b| b["stream"] = json!(false),
                openai_problems,
            ),
            "stream_options",
        );
        one(
            bad(opencode, |b| b["thinking"] = json!({}), openai_problems),
            "Unrecognized request argument",
        );
    }
}
