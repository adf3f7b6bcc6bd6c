//! The command face: `chorus-tools <tool> '<json>'` and `chorus-tools list`, for
//! CLIs that can only run commands. What it prints and how it exits is the
//! contract (see `Outcome`).

use std::io::Write;
use std::process::ExitCode;

use serde_json::{Map, Value};

use crate::endpoint::{Endpoint, EndpointError, ToolSpec};

/// How the command ends; the exit code is what a calling CLI reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The tool ran and its result is on stdout.
    Ok,
    /// The tool's result is an error (refused, failed, bad arguments); it is on stdout.
    ToolError,
    /// No call was made, or its answer never came: a sentence on stderr.
    CouldNotCall,
}

impl From<Outcome> for ExitCode {
    fn from(outcome: Outcome) -> Self {
        ExitCode::from(match outcome {
            Outcome::Ok => 0,
            Outcome::ToolError => 1,
            Outcome::CouldNotCall => 2,
        })
    }
}

/// The call's arguments: a JSON object (absent means `{}`, for tools without any).
pub fn parse_arguments(text: Option<&str>) -> Result<Map<String, Value>, String> {
    let Some(text) = text else {
        return Ok(Map::new());
    };
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(format!(
            "the arguments must be a JSON object, like '{{\"path\": \"notes.md\"}}'; got {}",
            kind_of(&other)
        )),
        Err(e) => Err(format!(
            "the arguments are not valid JSON ({e}); give one JSON object in single quotes, \
             like '{{\"path\": \"notes.md\"}}'"
        )),
    }
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The first line of a tool's description, for `list`.
pub fn summary(spec: &ToolSpec) -> &str {
    spec.description.lines().next().unwrap_or("").trim()
}

/// `chorus-tools <tool> '<json>'`.
pub async fn call(tool: &str, arguments: Option<&str>) -> Outcome {
    let arguments = match parse_arguments(arguments) {
        Ok(arguments) => arguments,
        Err(sentence) => return could_not_call(&sentence),
    };
    let endpoint = match Endpoint::from_env() {
        Ok(endpoint) => endpoint,
        Err(e) => return could_not_call(&e.to_string()),
    };
    match endpoint.call(tool, &arguments).await {
        Ok(outcome) => {
            print_out(&outcome.content);
            if outcome.is_error {
                Outcome::ToolError
            } else {
                Outcome::Ok
            }
        }
        Err(e) => endpoint_failed(&e),
    }
}

/// `chorus-tools list`: one line per offered tool, name and first line of its description.
pub async fn list() -> Outcome {
    let endpoint = match Endpoint::from_env() {
        Ok(endpoint) => endpoint,
        Err(e) => return could_not_call(&e.to_string()),
    };
    match endpoint.list().await {
        Ok(tools) => {
            let width = tools.iter().map(|t| t.name.len()).max().unwrap_or(0);
            let text: String = tools
                .iter()
                .map(|t| format!("{:width$}  {}\n", t.name, summary(t)))
                .collect();
            print_out(text.trim_end_matches('\n'));
            Outcome::Ok
        }
        Err(e) => endpoint_failed(&e),
    }
}

fn endpoint_failed(e: &EndpointError) -> Outcome {
    could_not_call(&e.to_string())
}

fn could_not_call(sentence: &str) -> Outcome {
    let _ = writeln!(std::io::stderr(), "chorus-tools: {sentence}");
    Outcome::CouldNotCall
}

fn print_out(text: &str) {
    let mut out = std::io::stdout().lock();
    // A closed stdout (the caller stopped reading) is not worth a panic.
    let _ = writeln!(out, "{text}");
    let _ = out.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_must_be_an_object() {
        assert_eq!(parse_arguments(None).unwrap(), Map::new());
        let map = parse_arguments(Some(r#"{"path":"a.md"}"#)).unwrap();
        assert_eq!(map["path"], "a.md");
        let err = parse_arguments(Some("[1]")).unwrap_err();
        assert!(
            err.contains("must be a JSON object") && err.contains("an array"),
            "{err}"
        );
        let err = parse_arguments(Some("{path: a}")).unwrap_err();
        assert!(err.contains("not valid JSON"), "{err}");
    }

    #[test]
    fn summary_is_the_first_line() {
        let spec = ToolSpec {
            name: "file_read".into(),
            description: "Read a file.\nMore detail.".into(),
            input_schema: Map::new(),
        };
        assert_eq!(summary(&spec), "Read a file.");
    }
}
