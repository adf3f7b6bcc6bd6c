//! Embeddings, asked by the control plane itself (it holds the providers' keys;
//! workers never see them): OpenAI-compatible servers' `POST <base>/embeddings`
//! (OpenAI, OpenRouter, LM Studio below `/v1`) and Ollama's `POST /api/embed`, both
//! `{"model", "input": [texts]}`. At most [`MAX_BATCH`] texts a request, each cut to
//! [`MAX_TEXT_CHARS`], and a deadline of [`TIMEOUT`]. An error says what failed and
//! never carries the key (it is only ever in a header).

use std::time::Duration;

use serde_json::{Value, json};

use super::{ProviderEndpoint, ProviderKind};

/// Most texts one request embeds.
pub const MAX_BATCH: usize = 64;
/// Most characters of one text embedded (embedding models take a few thousand
/// tokens; the rest of a long text is left out of its vector, not of search).
pub const MAX_TEXT_CHARS: usize = 4000;
/// One request's deadline.
pub const TIMEOUT: Duration = Duration::from_secs(15);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EmbedError {
    #[error("{provider} offers no embeddings")]
    Unsupported { provider: &'static str },
    #[error("the embeddings request to {url} failed: {reason}")]
    Failed { url: String, reason: String },
    #[error("{url} answered {reason}")]
    BadAnswer { url: String, reason: String },
}

/// Where a provider's embeddings endpoint is.
pub fn url(endpoint: &ProviderEndpoint) -> Result<String, EmbedError> {
    match endpoint.kind {
        ProviderKind::Anthropic => Err(EmbedError::Unsupported {
            provider: endpoint.kind.name(),
        }),
        ProviderKind::Ollama => Ok(format!("{}/api/embed", endpoint.base_url)),
        _ => Ok(format!("{}/embeddings", endpoint.relay_base())),
    }
}

/// The request body (the same shape for both formats).
pub fn body(model: &str, texts: &[String]) -> Value {
    let input: Vec<String> = texts
        .iter()
        .map(|t| t.chars().take(MAX_TEXT_CHARS).collect())
        .collect();
    json!({"model": model, "input": input})
}

/// The vectors of an answer, in the order of the texts: OpenAI's
/// `{"data": [{"index", "embedding"}]}` or Ollama's `{"embeddings": [[…]]}`; one per
/// text, all of one size, or an error saying what is wrong.
pub fn parse(kind: ProviderKind, answer: &Value, count: usize) -> Result<Vec<Vec<f32>>, String> {
    let numbers = |v: &Value| -> Option<Vec<f32>> {
        v.as_array()?
            .iter()
            .map(|x| x.as_f64().map(|x| x as f32))
            .collect()
    };
    let vectors: Vec<Vec<f32>> = if kind == ProviderKind::Ollama {
        answer
            .get("embeddings")
            .and_then(Value::as_array)
            .ok_or("no \"embeddings\" list")?
            .iter()
            .map(|v| numbers(v).ok_or("an embedding that is not a list of numbers"))
            .collect::<Result<_, _>>()?
    } else {
        let data = answer
            .get("data")
            .and_then(Value::as_array)
            .ok_or("no \"data\" list")?;
        let mut indexed: Vec<(u64, Vec<f32>)> = Vec::with_capacity(data.len());
        for (i, item) in data.iter().enumerate() {
            let index = item
                .get("index")
                .and_then(Value::as_u64)
                .unwrap_or(i as u64);
            let vector = item
                .get("embedding")
                .and_then(numbers)
                .ok_or("an embedding that is not a list of numbers")?;
            indexed.push((index, vector));
        }
        indexed.sort_by_key(|(i, _)| *i);
        indexed.into_iter().map(|(_, v)| v).collect()
    };
    if vectors.len() != count {
        return Err(format!("{} embeddings for {count} texts", vectors.len()));
    }
    if let Some(first) = vectors.first() {
        if first.is_empty() {
            return Err("empty embeddings".into());
        }
        if vectors.iter().any(|v| v.len() != first.len()) {
            return Err("embeddings of different sizes in one answer".into());
        }
    }
    Ok(vectors)
}

/// Embeds `texts` (at most [`MAX_BATCH`]) with `model` at `endpoint`.
pub async fn embed(
    http: &reqwest::Client,
    endpoint: &ProviderEndpoint,
    model: &str,
    texts: &[String],
) -> Result<Vec<Vec<f32>>, EmbedError> {
    if texts.is_empty() {
        return Ok(Vec::new());
    }
    let url = url(endpoint)?;
    let mut request = http
        .post(&url)
        .timeout(TIMEOUT)
        .json(&body(model, &texts[..texts.len().min(MAX_BATCH)]));
    for (name, value) in endpoint.auth_headers() {
        request = request.header(name, value);
    }
    let failed = |reason: String| EmbedError::Failed {
        url: url.clone(),
        reason,
    };
    let response = request.send().await.map_err(|e| {
        failed(if e.is_timeout() {
            format!("no answer within {} s", TIMEOUT.as_secs())
        } else {
            // Without the URL again (it is said above); never a header.
            e.without_url().to_string()
        })
    })?;
    let status = response.status();
    let text = response
        .text()
        .await
        .map_err(|e| failed(e.without_url().to_string()))?;
    if !status.is_success() {
        let snippet: String = text.chars().take(200).collect();
        return Err(EmbedError::BadAnswer {
            url,
            reason: format!("{status}: {snippet}"),
        });
    }
    let answer: Value = serde_json::from_str(&text).map_err(|_| EmbedError::BadAnswer {
        url: url.clone(),
        reason: "with a body that is not JSON".into(),
    })?;
    let count = texts.len().min(MAX_BATCH);
    parse(endpoint.kind, &answer, count).map_err(|reason| EmbedError::BadAnswer { url, reason })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(kind: ProviderKind, base: &str) -> ProviderEndpoint {
        ProviderEndpoint {
            kind,
            base_url: base.into(),
            api_key: None,
            configured: true,
            embedding_model: Some("e".into()),
        }
    }

    #[test]
    fn each_provider_has_its_endpoint_and_anthropic_none() {
        assert_eq!(
            url(&endpoint(ProviderKind::OpenAi, "http://h/v1")).unwrap(),
            "http://h/v1/embeddings"
        );
        assert_eq!(
            url(&endpoint(ProviderKind::Ollama, "http://h:11434")).unwrap(),
            "http://h:11434/api/embed"
        );
        assert_eq!(
            url(&endpoint(ProviderKind::LmStudio, "http://h:1234")).unwrap(),
            "http://h:1234/v1/embeddings"
        );
        assert!(url(&endpoint(ProviderKind::Anthropic, "http://h")).is_err());
        let long = "é".repeat(MAX_TEXT_CHARS + 10);
        let b = body("m", &[long]);
        assert_eq!(
            b["input"][0].as_str().unwrap().chars().count(),
            MAX_TEXT_CHARS
        );
    }

    #[test]
    fn answers_are_read_in_the_texts_order_and_checked() {
        let openai = json!({"object": "list", "model": "e", "data": [
            {"object": "embedding", "index": 1, "embedding": [0.0, 1.0]},
            {"object": "embedding", "index": 0, "embedding": [1.0, 0.0]}
        ]});
        assert_eq!(
            parse(ProviderKind::OpenAi, &openai, 2).unwrap(),
            vec![vec![1.0, 0.0], vec![0.0, 1.0]]
        );
        assert!(parse(ProviderKind::OpenAi, &openai, 3).is_err());
        let ollama = json!({"model": "e", "embeddings": [[0.5, 0.5, 0.0]]});
        assert_eq!(
            parse(ProviderKind::Ollama, &ollama, 1).unwrap(),
            vec![vec![0.5, 0.5, 0.0]]
        );
        let ragged = json!({"embeddings": [[0.5], [0.5, 1.0]]});
        assert!(parse(ProviderKind::Ollama, &ragged, 2).is_err());
        assert!(parse(ProviderKind::Ollama, &json!({"error": "x"}), 1).is_err());
    }
}
