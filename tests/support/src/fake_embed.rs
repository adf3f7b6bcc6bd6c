//! The fake model's embeddings, in the real wire formats: OpenAI's
//! `POST /v1/embeddings` (`{"object": "list", "data": [{"object": "embedding",
//! "index", "embedding"}], "model", "usage"}`) and Ollama's `POST /api/embed`
//! (`{"model", "embeddings": [[…]]}`). Requests are checked as strictly as the real
//! servers do ([`problems`]: a known model, `input` a non-empty string or list of
//! non-empty strings, no unknown fields).
//!
//! Vectors are deterministic bags of concepts ([`concept_vector`]): each dimension is
//! one concept of a small synonym table, so texts that share no word but mean the
//! same ("automobile colour", "a crimson sedan") have a positive cosine, and texts
//! about nothing in the table have a zero vector (no likeness to anything). That is
//! what lets a test show a fact found only through vectors.

use serde_json::{Value, json};

/// The concepts: each dimension counts the words of one group in a text.
pub const CONCEPTS: &[&[&str]] = &[
    &["car", "automobile", "sedan", "vehicle", "auto"],
    &["red", "crimson", "scarlet", "ruby"],
    &["colour", "color", "hue", "shade", "paint"],
    &["dog", "puppy", "hound", "canine"],
    &["food", "meal", "dinner", "lunch", "cuisine"],
    &["spicy", "hot", "chili", "fiery"],
    &["house", "home", "flat", "apartment", "residence"],
    &["city", "town", "village"],
    &["doctor", "physician", "dentist", "clinic"],
    &["birthday", "anniversary", "celebration"],
];

/// How embedding requests are answered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum EmbedMode {
    /// Concept vectors.
    #[default]
    Normal,
    /// This status with the format's error body.
    Status(u16),
    /// Vectors one dimension longer than usual (a different model behind the name).
    WrongDims,
}

/// The concept vector of a text (length [`CONCEPTS`]`.len()`).
pub fn concept_vector(text: &str) -> Vec<f32> {
    let mut v = vec![0.0f32; CONCEPTS.len()];
    for word in text.split(|c: char| !c.is_alphanumeric()) {
        let word = word.to_lowercase();
        for (i, group) in CONCEPTS.iter().enumerate() {
            if group.contains(&word.as_str()) {
                v[i] += 1.0;
            }
        }
    }
    v
}

/// The texts of a request's `input`.
pub fn inputs(body: &Value) -> Vec<String> {
    match &body["input"] {
        Value::String(s) => vec![s.clone()],
        Value::Array(items) => items
            .iter()
            .map(|i| i.as_str().unwrap_or_default().to_string())
            .collect(),
        _ => Vec::new(),
    }
}

/// What a real server would refuse in an embeddings request (`ollama`: `/api/embed`).
pub fn problems(body: &Value, ollama: bool, models: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let Some(fields) = body.as_object() else {
        return vec!["the body is not a JSON object".into()];
    };
    let allowed: &[&str] = if ollama {
        &[
            "model",
            "input",
            "truncate",
            "options",
            "keep_alive",
            "dimensions",
        ]
    } else {
        &["model", "input", "encoding_format", "dimensions", "user"]
    };
    for key in fields.keys() {
        if !allowed.contains(&key.as_str()) {
            out.push(format!("unknown field '{key}' in an embeddings request"));
        }
    }
    match body["model"].as_str() {
        Some(m) if models.iter().any(|known| known == m) => {}
        Some(m) => out.push(format!(
            "embeddings asked of model '{m}', not one of {models:?}"
        )),
        None => out.push("an embeddings request without a model".into()),
    }
    match &body["input"] {
        Value::String(s) if !s.is_empty() => {}
        Value::Array(items)
            if !items.is_empty()
                && items
                    .iter()
                    .all(|i| i.as_str().is_some_and(|s| !s.is_empty())) => {}
        other => out.push(format!(
            "input must be a non-empty string or a non-empty list of non-empty strings, not {other}"
        )),
    }
    out
}

/// The answer's body for `texts` in the format asked.
pub fn answer(texts: &[String], model: &str, ollama: bool, wrong_dims: bool) -> Value {
    let vectors: Vec<Vec<f32>> = texts
        .iter()
        .map(|t| {
            let mut v = concept_vector(t);
            if wrong_dims {
                v.push(1.0);
            }
            v
        })
        .collect();
    let tokens: usize = texts.iter().map(|t| t.split_whitespace().count()).sum();
    if ollama {
        json!({"model": model, "embeddings": vectors, "total_duration": 1000,
               "load_duration": 10, "prompt_eval_count": tokens})
    } else {
        let data: Vec<Value> = vectors
            .iter()
            .enumerate()
            .map(|(i, v)| json!({"object": "embedding", "index": i, "embedding": v}))
            .collect();
        json!({"object": "list", "data": data, "model": model,
               "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})
    }
}

/// The error body a real server sends with `status`.
pub fn error_body(status: u16, ollama: bool) -> Value {
    if ollama {
        json!({"error": format!("embedding failed ({status})")})
    } else {
        json!({"error": {"message": format!("The server had an error ({status})"),
                         "type": "server_error", "param": null, "code": null}})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_sharing_no_word_share_concepts() {
        let q = concept_vector("automobile colour?");
        let fact = concept_vector("Ada drives a crimson sedan.");
        let dot: f32 = q.iter().zip(&fact).map(|(a, b)| a * b).sum();
        assert!(dot > 0.0);
        assert!(concept_vector("nothing here").iter().all(|x| *x == 0.0));
        let models = vec!["e".to_string()];
        assert!(problems(&json!({"model": "e", "input": ["a"]}), false, &models).is_empty());
        assert_eq!(
            problems(&json!({"model": "x", "input": [""], "k": 1}), true, &models).len(),
            3
        );
    }
}
