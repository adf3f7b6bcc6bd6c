//! The live feed (`GET /api/events…`) followed across drops, for `chorus send` and
//! `chorus events`: a stream that ends or breaks is opened again with
//! `Last-Event-ID`, so nothing is missed or shown twice (the server sends `reset`
//! when the gap is no longer kept), pausing longer after each failure.

use std::collections::VecDeque;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;

use super::client::Client;
use super::sse::{SseEvent, SseParser};

/// Reopenings in a row that brought no event before the feed counts as lost.
const RECONNECTS: u32 = 5;

pub struct Feed<'c> {
    client: &'c Client,
    path: String,
    last_id: Option<String>,
    parser: SseParser,
    chunks: Option<BoxStream<'static, reqwest::Result<Vec<u8>>>>,
    ready: VecDeque<SseEvent>,
    /// Reopenings since the last event.
    failures: u32,
    /// Why the last reopening failed, for the final error.
    last_error: Option<String>,
}

impl<'c> Feed<'c> {
    /// Opens the feed at `path`; this first connection's error is the answer (a
    /// wrong agent, a token).
    pub async fn open(client: &'c Client, path: &str) -> anyhow::Result<Feed<'c>> {
        let mut feed = Feed {
            client,
            path: path.to_string(),
            last_id: None,
            parser: SseParser::default(),
            chunks: None,
            ready: VecDeque::new(),
            failures: 0,
            last_error: None,
        };
        feed.connect().await?;
        Ok(feed)
    }

    async fn connect(&mut self) -> anyhow::Result<()> {
        let response = self
            .client
            .stream(&self.path, self.last_id.as_deref())
            .await?;
        self.chunks = Some(
            response
                .bytes_stream()
                .map(|r| r.map(|b| b.to_vec()))
                .boxed(),
        );
        self.parser = SseParser::default();
        Ok(())
    }

    /// The next event; `Err` once the feed stayed lost through every reopening.
    /// Cancel-safe: what was read is kept, and a reopening cut short starts again.
    pub async fn next(&mut self) -> anyhow::Result<SseEvent> {
        loop {
            if let Some(event) = self.ready.pop_front() {
                self.failures = 0;
                if event.id.is_some() {
                    self.last_id = event.id.clone();
                }
                return Ok(event);
            }
            let Some(chunks) = self.chunks.as_mut() else {
                self.reopen().await?;
                continue;
            };
            match chunks.next().await {
                Some(Ok(bytes)) => self.ready.extend(self.parser.push(&bytes)),
                end => {
                    if let Some(Err(e)) = end {
                        tracing::debug!(error = %e, "event stream broke");
                    }
                    self.chunks = None;
                    self.failures += 1;
                }
            }
        }
    }

    /// Opens the stream again from the last event seen, after a pause that grows
    /// with each failure.
    async fn reopen(&mut self) -> anyhow::Result<()> {
        if self.failures > RECONNECTS {
            anyhow::bail!(
                "lost the live feed{}",
                self.last_error
                    .as_deref()
                    .map(|e| format!(" ({e})"))
                    .unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(250 * 2u64.pow(self.failures.min(4)))).await;
        if let Err(e) = self.connect().await {
            self.last_error = Some(e.to_string());
            self.failures += 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use axum::Router;
    use axum::http::HeaderMap;
    use axum::routing::get;

    use super::*;
    use crate::cli::client::ClientArgs;

    /// A feed that drops the stream after each event: the next connection must
    /// carry the last id seen, and the events come once each, in order.
    #[tokio::test]
    async fn a_dropped_stream_is_reopened_from_the_last_event_seen() {
        let asked: Arc<Mutex<Vec<Option<String>>>> = Arc::default();
        let seen = asked.clone();
        let app = Router::new().route(
            "/api/events",
            get(move |headers: HeaderMap| {
                let seen = seen.clone();
                async move {
                    let last = headers
                        .get("last-event-id")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_string);
                    let next: u32 = last
                        .as_deref()
                        .map_or(1, |id| id.parse::<u32>().unwrap() + 1);
                    seen.lock().unwrap().push(last);
                    (
                        [("content-type", "text/event-stream")],
                        format!("id: {next}\nevent: step\ndata: {{\"n\":{next}}}\n\n"),
                    )
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        let client = Client::new(&ClientArgs {
            url: format!("http://{addr}"),
            token: Some("t".into()),
            data_dir: std::path::PathBuf::from("/nonexistent"),
            json: false,
        })
        .unwrap();

        let mut feed = Feed::open(&client, "/api/events").await.unwrap();
        for n in 1..=3 {
            let event = feed.next().await.unwrap();
            assert_eq!(event.id.as_deref(), Some(n.to_string().as_str()));
            assert_eq!(event.data, format!("{{\"n\":{n}}}"));
        }
        assert_eq!(
            *asked.lock().unwrap(),
            vec![None, Some("1".to_string()), Some("2".to_string())]
        );
    }
}
