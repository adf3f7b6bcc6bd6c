//! Approval ids are 36-character UUIDs; `chorus approve 3f2a` takes a unique prefix
//! of a waiting one, resolved here against `GET /api/approvals`.

use serde_json::Value;

use super::client::Client;

/// A whole UUID is used as given (it may be answered already: the server says so).
const WHOLE: usize = 36;

/// The full id `given` stands for.
pub async fn resolve(client: &Client, given: &str) -> anyhow::Result<String> {
    if given.len() >= WHOLE {
        return Ok(given.to_string());
    }
    let waiting = client.get("/api/approvals").await?;
    pick(given, &waiting).map_err(|e| anyhow::anyhow!(e))
}

/// The one waiting approval whose id starts with `prefix` (pure).
pub fn pick(prefix: &str, waiting: &Value) -> Result<String, String> {
    let prefix = prefix.trim().to_ascii_lowercase();
    if prefix.is_empty() {
        return Err("give an approval id (chorus approvals lists them)".into());
    }
    let matches: Vec<&Value> = waiting
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["id"].as_str().is_some_and(|id| id.starts_with(&prefix)))
        .collect();
    match matches.as_slice() {
        [one] => Ok(one["id"].as_str().unwrap_or_default().to_string()),
        [] => Err(format!(
            "no waiting approval's id starts with '{prefix}'; chorus approvals lists them"
        )),
        several => Err(format!(
            "'{prefix}' starts the ids of {} waiting approvals; give more of it:\n{}",
            several.len(),
            several
                .iter()
                .map(|a| format!(
                    "  {}  {} thread {} {}",
                    a["id"].as_str().unwrap_or("?"),
                    a["agent"].as_str().unwrap_or("?"),
                    a["thread_id"],
                    a["tool"].as_str().unwrap_or("")
                ))
                .collect::<Vec<_>>()
                .join("\n")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_unique_prefix_names_one_approval_and_an_ambiguous_one_lists_them() {
        let waiting = json!([
            {"id": "3f2a9c00-0000-4000-8000-000000000001", "agent": "a", "thread_id": 1, "tool": "bash"},
            {"id": "3f2b1100-0000-4000-8000-000000000002", "agent": "b", "thread_id": 2, "tool": "create_file"},
        ]);
        assert_eq!(
            pick("3f2a", &waiting).unwrap(),
            "3f2a9c00-0000-4000-8000-000000000001"
        );
        assert_eq!(
            pick("3F2B", &waiting).unwrap(),
            "3f2b1100-0000-4000-8000-000000000002"
        );
        let ambiguous = pick("3f2", &waiting).unwrap_err();
        assert!(
            ambiguous.starts_with("'3f2' starts the ids of 2 waiting approvals")
                && ambiguous.contains("3f2a9c00-0000-4000-8000-000000000001  a thread 1 bash")
                && ambiguous.contains("3f2b1100"),
            "{ambiguous}"
        );
        assert!(
            pick("ff", &waiting)
                .unwrap_err()
                .contains("chorus approvals lists them")
        );
        assert!(pick("", &waiting).is_err());
    }
}
