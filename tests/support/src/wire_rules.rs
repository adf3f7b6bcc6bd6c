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

fn positive_int(body: &Value, key: &str) -> bool {
    body.get(key).and_then(Value::as_u64).is_some_and(|n| n > 0)
}

/// Problems with a chat-completions request (OpenAI, and the servers that copy it).
pub fn openai_problems(body: &Value) -> Vec<String> {
    let mut problems = Vec::new();
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
}
