//! What `chorus task …` asks the API for: arguments in, paths and JSON bodies out
//! (pure, so each is unit-tested without a server).

use serde_json::{Map, Value, json};

/// `GET /api/tasks` with the filters given (each value escaped).
pub fn list_path(status: Option<&str>, agent: Option<&str>, search: Option<&str>) -> String {
    let query: Vec<String> = [("status", status), ("agent", agent), ("q", search)]
        .into_iter()
        .filter_map(|(key, value)| {
            let value = value.filter(|v| !v.is_empty())?;
            Some(format!("{key}={}", escape(value)))
        })
        .collect();
    if query.is_empty() {
        "/api/tasks".to_string()
    } else {
        format!("/api/tasks?{}", query.join("&"))
    }
}

/// A query value as `application/x-www-form-urlencoded` writes it.
fn escape(value: &str) -> String {
    let mut out = String::new();
    for byte in value.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'*' => {
                out.push(byte as char);
            }
            b' ' => out.push('+'),
            other => out.push_str(&format!("%{other:02X}")),
        }
    }
    out
}

/// The body of `POST /api/tasks`.
pub fn create_body(title: &str, description: Option<&str>, review: bool) -> Value {
    json!({
        "title": title,
        "description": description.unwrap_or(""),
        "review": review,
    })
}

/// `q1=text` pairs as the body of `POST /api/tasks/{id}/answers`: split at the first
/// `=`, so an answer may hold one; a question answered twice is a mistake, not a
/// silent overwrite.
pub fn answers_body(pairs: &[String]) -> anyhow::Result<Value> {
    let mut answers = Map::new();
    for pair in pairs {
        let Some((id, text)) = pair.split_once('=') else {
            anyhow::bail!(
                "'{pair}' is not <question id>=<answer>; for example: chorus task answer 7 q1=\"Postgres\" \
                 (chorus task show 7 lists the questions and their ids)"
            );
        };
        let id = id.trim();
        if id.is_empty() {
            anyhow::bail!("'{pair}' has no question id before '='");
        }
        if answers
            .insert(id.to_string(), Value::from(text.to_string()))
            .is_some()
        {
            anyhow::bail!("question {id} is answered twice; give each question one answer");
        }
    }
    Ok(json!({ "answers": answers }))
}

/// The plan fields `chorus task edit` changes (`PATCH /api/tasks/{id}`). A list
/// given (`--requirement …` repeated) replaces the whole list.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct EditArgs {
    #[arg(long)]
    pub title: Option<String>,
    #[arg(long, short = 'd')]
    pub description: Option<String>,
    #[arg(long)]
    pub summary: Option<String>,
    /// The agent to work the task.
    #[arg(long)]
    pub assignee: Option<String>,
    /// A requirement (repeat for each; the list given replaces the task's).
    #[arg(long = "requirement")]
    pub requirements: Vec<String>,
    /// An acceptance criterion (repeat for each; replaces the task's list).
    #[arg(long = "acceptance")]
    pub acceptance_criteria: Vec<String>,
    /// A step of the plan (repeat for each, in order; replaces the task's steps).
    #[arg(long = "step")]
    pub steps: Vec<String>,
    /// Whether a person accepts the report before the task is completed: on or off.
    #[arg(long, value_parser = ["on", "off"])]
    pub review: Option<String>,
}

impl EditArgs {
    /// The PATCH body; an error when nothing would change.
    pub fn body(&self) -> anyhow::Result<Value> {
        let mut body = Map::new();
        for (key, value) in [
            ("title", &self.title),
            ("description", &self.description),
            ("summary", &self.summary),
            ("assignee", &self.assignee),
        ] {
            if let Some(value) = value {
                body.insert(key.to_string(), Value::from(value.as_str()));
            }
        }
        for (key, list) in [
            ("requirements", &self.requirements),
            ("acceptance_criteria", &self.acceptance_criteria),
            ("steps", &self.steps),
        ] {
            if !list.is_empty() {
                body.insert(key.to_string(), json!(list));
            }
        }
        if let Some(review) = &self.review {
            body.insert("review".into(), Value::from(review == "on"));
        }
        if body.is_empty() {
            anyhow::bail!(
                "nothing to change: give at least one of --title, --description, --summary, --assignee, \
                 --requirement, --acceptance, --step, --review"
            );
        }
        Ok(Value::Object(body))
    }
}

/// A line typed at an open question, as the answer to send: a number picks that
/// option (several, comma-separated, when the question allows more than one), any
/// other text is the answer itself. `Err` says what to type instead.
pub fn typed_answer(line: &str, question: &Value) -> Result<String, String> {
    let line = line.trim();
    if line.is_empty() {
        return Err("an empty answer; type one (or a number from the list)".into());
    }
    let options: Vec<&str> = question["options"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| o["label"].as_str())
        .collect();
    let picks: Vec<&str> = line.split(',').map(str::trim).collect();
    let numbers: Option<Vec<usize>> = picks.iter().map(|p| p.parse::<usize>().ok()).collect();
    let Some(numbers) = numbers.filter(|_| !options.is_empty()) else {
        return Ok(line.to_string());
    };
    if numbers.len() > 1 && question["multi_select"] != true {
        return Err("this question takes one option; type one number".into());
    }
    let mut labels = Vec::new();
    for n in numbers {
        match n.checked_sub(1).and_then(|i| options.get(i)) {
            Some(label) => labels.push(*label),
            None => return Err(format!("no option {n}; type 1 to {}", options.len())),
        }
    }
    Ok(labels.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_filters_become_an_escaped_query() {
        assert_eq!(list_path(None, None, None), "/api/tasks");
        assert_eq!(
            list_path(Some("planned"), Some("coder"), Some("fix & test")),
            "/api/tasks?status=planned&agent=coder&q=fix+%26+test"
        );
        assert_eq!(list_path(None, Some(""), None), "/api/tasks");
        assert_eq!(
            list_path(None, None, Some("é/?")),
            "/api/tasks?q=%C3%A9%2F%3F"
        );
    }

    #[test]
    fn answers_are_split_at_the_first_equals_sign() {
        let body = answers_body(&["q1=Postgres".into(), " q2 =a=b".into()]).unwrap();
        assert_eq!(body, json!({"answers": {"q1": "Postgres", "q2": "a=b"}}));
        let e = answers_body(&["Postgres".into()]).unwrap_err().to_string();
        assert!(e.contains("<question id>=<answer>"), "{e}");
        let e = answers_body(&["=x".into()]).unwrap_err().to_string();
        assert!(e.contains("no question id"), "{e}");
        let e = answers_body(&["q1=a".into(), "q1=b".into()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("answered twice"), "{e}");
    }

    #[test]
    fn an_edit_sends_only_what_was_given_and_lists_whole() {
        let edit = EditArgs {
            summary: Some("Add a cache".into()),
            requirements: vec!["fast".into(), "correct".into()],
            review: Some("on".into()),
            ..EditArgs::default()
        };
        assert_eq!(
            edit.body().unwrap(),
            json!({"summary": "Add a cache", "requirements": ["fast", "correct"], "review": true})
        );
        let e = EditArgs::default().body().unwrap_err().to_string();
        assert!(e.starts_with("nothing to change"), "{e}");
    }

    #[test]
    fn a_typed_number_picks_an_option_and_text_is_the_answer() {
        let q = json!({"id": "q1", "options": [{"label": "SQLite"}, {"label": "Postgres"}],
                       "multi_select": false});
        assert_eq!(typed_answer("2", &q).unwrap(), "Postgres");
        assert_eq!(typed_answer(" both, really ", &q).unwrap(), "both, really");
        assert!(typed_answer("1,2", &q).unwrap_err().contains("one option"));
        assert!(typed_answer("3", &q).unwrap_err().contains("1 to 2"));
        assert!(typed_answer("  ", &q).is_err());
        let multi = json!({"options": [{"label": "a"}, {"label": "b"}, {"label": "c"}],
                           "multi_select": true});
        assert_eq!(typed_answer("1, 3", &multi).unwrap(), "a, c");
        // Without options a number is just text.
        assert_eq!(typed_answer("42", &json!({"options": []})).unwrap(), "42");
    }

    #[test]
    fn a_task_is_created_with_an_empty_description_unless_given() {
        assert_eq!(
            create_body("Fix it", None, true),
            json!({"title": "Fix it", "description": "", "review": true})
        );
    }
}
