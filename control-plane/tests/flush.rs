//! The context flush (`memory::flush`) against the real store and memory files: a
//! span is written to the daily log once, with its provenance, however often the
//! flush is asked again; a log entry written before a crash is taken rather than
//! written twice; without a model the log still gets the user's requests; and a
//! model whose window is unknown never flushes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use chorus_control_plane::feed::ThreadFeed;
use chorus_control_plane::memory::flush::Flusher;
use chorus_control_plane::memory::{Memory, MemorySettings};
use chorus_control_plane::providers::catalog::{Catalog, CatalogSnapshot, ProviderModels};
use chorus_control_plane::store::AgentRecord;
use chorus_control_plane::summaries::{Purpose, Summarizer};
use chorus_proto::domain::{ChatMessage, ModelLimits};
use chorus_test_support::fake_worker::{MODEL, Plane, USER};

const A: &str = "a";

/// Answers every flush with `answer`, counting the requests.
struct Fixed {
    answer: Result<String, String>,
    calls: AtomicUsize,
}

impl Fixed {
    fn new(answer: Result<&str, &str>) -> Self {
        Fixed {
            answer: answer.map(str::to_string).map_err(str::to_string),
            calls: AtomicUsize::new(0),
        }
    }
}

#[tonic::async_trait]
impl Summarizer for Fixed {
    async fn summarize(
        &self,
        _agent: &AgentRecord,
        _messages: &[ChatMessage],
        purpose: Purpose,
    ) -> Result<String, String> {
        assert_eq!(purpose, Purpose::Flush);
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.answer.clone()
    }
}

fn catalog(window: Option<u64>) -> Catalog {
    let mut snapshot = CatalogSnapshot::default();
    snapshot.providers.insert(
        "openai".into(),
        ProviderModels {
            valid: true,
            base_url: "http://127.0.0.1:9/v1".into(),
            models: vec![MODEL.into()],
            error: None,
            reachable: true,
            key_refused: false,
            checked_at: "2026-01-01T00:00:00Z".into(),
            limits: Default::default(),
        },
    );
    let limits = BTreeMap::from([(
        MODEL.to_string(),
        ModelLimits {
            max_tokens: None,
            context_window: window,
        },
    )]);
    Catalog::fixed(snapshot).with_limits(limits)
}

struct Setup {
    plane: Plane,
    memory: Memory,
    feed: ThreadFeed,
    dir: tempfile::TempDir,
}

async fn setup() -> Setup {
    let plane = Plane::start().await;
    plane.add_agent(A).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join(A).join("memory")).unwrap();
    let memory = Memory::new(
        plane.store.clone(),
        plane.runs.clone(),
        MemorySettings {
            agents_root: dir.path().to_path_buf(),
            limit_bytes: 16384,
        },
        std::sync::Arc::new(catalog(None)),
        None,
    );
    Setup {
        plane,
        memory,
        feed: ThreadFeed::default(),
        dir,
    }
}

impl Setup {
    fn flusher<'a>(&'a self, catalog: &'a Catalog, summarizer: &'a Fixed) -> Flusher<'a> {
        Flusher {
            store: &self.plane.store,
            catalog,
            summarizer,
            memory: &self.memory,
            feed: &self.feed,
            // Low, so the span rules (not the size) decide in these tests.
            flush_at: 0.1,
            default_model: None,
        }
    }

    /// A thread of exchanges (each request about 1 KB, each answered): its message ids.
    async fn thread(&self, requests: &[&str]) -> (u64, Vec<u64>) {
        let store = &self.plane.store;
        let long = |r: &str| format!("{r}\n{}", "x".repeat(1000));
        let (thread, first) = store
            .start_thread(A, &ChatMessage::user(long(requests[0])), USER, None)
            .await
            .unwrap();
        let mut ids = vec![first];
        for (i, request) in requests.iter().enumerate() {
            if i > 0 {
                ids.push(
                    store
                        .add_user_message(A, thread, &long(request), false)
                        .await
                        .unwrap(),
                );
            }
            let answer = ChatMessage::assistant(format!("answer {i}"), vec![]);
            assert!(
                store
                    .append_message(A, thread, &answer, None)
                    .await
                    .await
                    .unwrap()
            );
            let stored = store.thread_messages(A, thread).await.unwrap();
            ids.push(stored.last().unwrap().id);
        }
        (thread, ids)
    }

    /// The flush entries of the agent's logs.
    fn entries(&self) -> Vec<String> {
        let mut found = Vec::new();
        for file in std::fs::read_dir(self.dir.path().join(A).join("memory")).unwrap() {
            let text = std::fs::read_to_string(file.unwrap().path()).unwrap();
            found.extend(
                text.lines()
                    .filter(|l| l.contains(" messages:"))
                    .map(str::to_string),
            );
        }
        found
    }
}

#[tokio::test]
async fn a_span_is_flushed_once_however_often_the_flush_is_asked() {
    let s = setup().await;
    let catalog = catalog(Some(1000));
    let model = Fixed::new(Ok("They planned a trip."));
    let (thread, ids) = s.thread(&["plan a trip", "to Lyon", "by train"]).await;

    let flushed = s
        .flusher(&catalog, &model)
        .flush(A, thread)
        .await
        .unwrap()
        .expect("due and a span to take");
    // The first exchange; the latest two stay whole.
    assert_eq!(
        (flushed.first_message_id, flushed.last_message_id),
        (ids[0], ids[1])
    );
    assert_eq!(flushed.messages, 2);
    let entries = s.entries();
    assert_eq!(entries.len(), 1, "{entries:#?}");
    assert!(
        entries[0].contains(&format!(
            "Earlier in thread {thread} (messages {}-{}): They planned a trip.",
            ids[0], ids[1]
        )) && entries[0].contains(&format!(
            "<!-- mem:{} thread:{thread} messages:{}-{} at:",
            flushed.entry_id, ids[0], ids[1]
        )),
        "{entries:#?}"
    );
    assert_eq!(
        s.plane.store.thread_flushes(A, thread).await.unwrap(),
        vec![flushed]
    );

    // Asked again (another run end, nothing new): nothing to take, no model call.
    for _ in 0..3 {
        assert_eq!(s.flusher(&catalog, &model).flush(A, thread).await, Ok(None));
    }
    assert_eq!(s.entries().len(), 1);
    assert_eq!(model.calls.load(Ordering::SeqCst), 1);

    // A later exchange moves the second one out of the kept part: only it is taken.
    s.plane
        .store
        .add_user_message(A, thread, "and back?", false)
        .await
        .unwrap();
    let next = s
        .flusher(&catalog, &model)
        .flush(A, thread)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (next.first_message_id, next.last_message_id),
        (ids[2], ids[3])
    );
    assert_eq!(s.entries().len(), 2);
}

#[tokio::test]
async fn an_entry_written_before_a_crash_is_taken_rather_than_written_twice() {
    let s = setup().await;
    let catalog = catalog(Some(1000));
    let model = Fixed::new(Ok("a summary"));
    let (thread, ids) = s.thread(&["one", "two", "three"]).await;
    // The log was written, and the control plane stopped before the store said so.
    let (path, entry) = s
        .memory
        .log_flush(A, "written before the crash", thread, ids[0], ids[1])
        .await
        .unwrap();
    let flushed = s
        .flusher(&catalog, &model)
        .flush(A, thread)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((flushed.log_path, flushed.entry_id), (path, entry));
    let entries = s.entries();
    assert_eq!(entries.len(), 1, "{entries:#?}");
    assert!(
        entries[0].contains("written before the crash"),
        "{entries:#?}"
    );
}

#[tokio::test]
async fn without_a_model_the_log_gets_the_users_requests() {
    let s = setup().await;
    let catalog = catalog(Some(1000));
    let model = Fixed::new(Err("agent 'a' has no connected worker"));
    let (thread, _) = s.thread(&["plan a trip", "to Lyon", "by train"]).await;
    s.flusher(&catalog, &model)
        .flush(A, thread)
        .await
        .unwrap()
        .unwrap();
    let entries = s.entries();
    assert!(
        entries[0].contains("The user asked: plan a trip <!-- mem:"),
        "{entries:#?}"
    );
}

#[tokio::test]
async fn a_model_whose_window_is_unknown_never_flushes() {
    let s = setup().await;
    let model = Fixed::new(Ok("a summary"));
    let (thread, _) = s.thread(&["one", "two", "three", "four"]).await;
    let unknown = catalog(None);
    assert_eq!(s.flusher(&unknown, &model).flush(A, thread).await, Ok(None));
    // The same thread with a known window flushes (the control).
    let known = catalog(Some(1000));
    assert!(
        s.flusher(&known, &model)
            .flush(A, thread)
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(model.calls.load(Ordering::SeqCst), 1);
}
