//! The sessions service against a real SQLite store and real files.

use std::os::unix::fs::PermissionsExt;
use std::time::Instant;

use chorus_proto::domain::{ChatMessage, ToolCall};

use super::summary::FirstLineSummarizer;
use super::*;
use crate::store::{ThreadStatus, test_store_with_agent};

struct Fixed(Result<&'static str, &'static str>, Duration);

#[tonic::async_trait]
impl Summarizer for Fixed {
    async fn summarize(
        &self,
        _: &AgentRecord,
        _: &[ChatMessage],
        _: Purpose,
    ) -> Result<String, String> {
        tokio::time::sleep(self.1).await;
        self.0.map(str::to_string).map_err(str::to_string)
    }
}

struct Setup {
    sessions: Arc<Sessions>,
    store: Store,
    feed: ThreadFeed,
    agent: AgentRecord,
    root: PathBuf,
    _dir: tempfile::TempDir,
}

async fn setup(summarizer: Arc<dyn Summarizer>) -> Setup {
    let (store, dir) = test_store_with_agent().await;
    let root = dir.path().join("agents");
    let feed = ThreadFeed::default();
    let sessions = Sessions::new(
        store.clone(),
        root.clone(),
        feed.clone(),
        summarizer,
        ContextSettings::default(),
    );
    let agent = store.active_agent("a").await.unwrap().unwrap();
    Setup {
        sessions,
        store,
        feed,
        agent,
        root,
        _dir: dir,
    }
}

/// A thread with a user message, a tool call (invalid JSON arguments) and its
/// result, and an answer; returns its id.
async fn conversation(store: &Store, first: &str) -> u64 {
    let t = store
        .start_thread("a", &ChatMessage::user(first), "api", None)
        .await
        .unwrap()
        .0;
    let call = ToolCall {
        id: "c1".into(),
        name: "view".into(),
        arguments: "{broken".into(),
    };
    for m in [
        ChatMessage::assistant("", vec![call.clone()]),
        ChatMessage::tool_result(&call, "arguments are not JSON", true),
        ChatMessage::assistant("done", vec![]),
    ] {
        store.append_message("a", t, &m, None).await.await.unwrap();
    }
    t
}

#[tokio::test]
async fn a_save_writes_a_private_seed_format_file_and_a_row() {
    let s = setup(Arc::new(Fixed(
        Ok("Looked at the auth module"),
        Duration::ZERO,
    )))
    .await;
    let first = conversation(&s.store, "look at auth").await;
    let second = conversation(&s.store, "and at billing").await;
    let session = s
        .sessions
        .save(&s.agent, None, Trigger::ManualSave)
        .await
        .unwrap();
    assert_eq!(session.description, "Looked at the auth module");
    assert_eq!(session.message_count, 8);
    assert_eq!(session.trigger, "manual_save");
    let path = s.root.join("a/sessions").join(&session.file_name);
    assert!(
        session.file_name.ends_with(&format!(
            "_looked-at-the-auth-module_{}.json",
            &session.id[..8]
        )),
        "{}",
        session.file_name
    );
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let file = SessionFile::from_json(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(file.id, session.id);
    let threads: Vec<Option<u64>> = file.messages.iter().map(|m| m.thread_id).collect();
    assert_eq!(
        threads,
        [Some(first); 4]
            .into_iter()
            .chain([Some(second); 4])
            .collect::<Vec<_>>(),
        "grouped by thread, in order"
    );
    assert_eq!(file.chat_messages()[1].tool_calls[0].arguments, "{broken");
    let listed = s.sessions.history("a", None, 10).await.unwrap();
    assert_eq!(listed, [session]);
    // A save keeps the context; a given description is used as it is.
    let again = s
        .sessions
        .save(&s.agent, Some("  checkpoint ".into()), Trigger::ManualSave)
        .await
        .unwrap();
    assert_eq!(again.description, "checkpoint");
    assert!(matches!(
        s.sessions
            .save(&s.agent, Some(" ".into()), Trigger::ManualSave)
            .await,
        Err(SessionError::InvalidInput(_))
    ));
    // No temporary files are left.
    let names: Vec<String> = std::fs::read_dir(s.root.join("a/sessions"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names.iter().all(|n| !n.starts_with('.')), "{names:?}");
}

#[tokio::test]
async fn nothing_in_the_context_is_nothing_to_save() {
    let s = setup(Arc::new(FirstLineSummarizer)).await;
    let err = s
        .sessions
        .save(&s.agent, None, Trigger::ManualSave)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, SessionError::NothingToSave(m) if m.contains("nothing to save")),
        "{err}"
    );
}

#[tokio::test]
async fn a_failing_or_slow_summarizer_falls_back_to_the_first_line() {
    let s = setup(Arc::new(Fixed(Err("the model is down"), Duration::ZERO))).await;
    conversation(&s.store, "Fix the login bug\nit fails on Mondays").await;
    let session = s
        .sessions
        .save(&s.agent, None, Trigger::ManualSave)
        .await
        .unwrap();
    assert_eq!(session.description, "Fix the login bug");

    // At shutdown a summary that takes too long gives way to the first line, and
    // the whole save stays within its bound.
    let s = setup(Arc::new(Fixed(Ok("never seen"), Duration::from_secs(600)))).await;
    conversation(&s.store, "Slow summary").await;
    let started = Instant::now();
    assert_eq!(s.sessions.save_all(Duration::from_millis(500)).await, 1);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    let saved = s.sessions.history("a", None, 10).await.unwrap();
    assert_eq!(saved[0].description, "Slow summary");
    assert_eq!(saved[0].trigger, "shutdown");
}

#[tokio::test]
async fn clear_saves_then_ends_idle_threads_and_tells_the_feed() {
    let s = setup(Arc::new(FirstLineSummarizer)).await;
    let t = conversation(&s.store, "before the clear").await;
    s.store
        .set_thread_status("a", t, ThreadStatus::Idle, None)
        .await
        .unwrap();
    let mut live = s.feed.subscribe();
    let outcome = s.sessions.clear(&s.agent).await.unwrap();
    assert_eq!(outcome.cleared.threads_completed, [t]);
    let saved = outcome.saved.expect("the context was saved first");
    assert_eq!(saved.trigger, "context_clear");
    assert_eq!(saved.message_count, 4);
    let event = live.try_recv().unwrap();
    let data = event.event.data();
    assert_eq!(
        (event.thread_id, event.kind(), data["status"].as_str()),
        (Some(t), "status", Some("completed"))
    );
    assert!(matches!(
        s.sessions.save(&s.agent, None, Trigger::ManualSave).await,
        Err(SessionError::NothingToSave(_))
    ));
    // A second clear has nothing to save and nothing to end.
    let again = s.sessions.clear(&s.agent).await.unwrap();
    assert!(again.saved.is_none() && again.cleared.threads_completed.is_empty());
}

#[tokio::test]
async fn restore_makes_one_idle_thread_holding_the_session() {
    let s = setup(Arc::new(FirstLineSummarizer)).await;
    conversation(&s.store, "the old work").await;
    let old = s
        .sessions
        .save(&s.agent, Some("old work".into()), Trigger::ManualSave)
        .await
        .unwrap();
    s.sessions.clear(&s.agent).await.unwrap();
    conversation(&s.store, "something else").await;

    let restored = s.sessions.restore(&s.agent, &old.id, "api").await.unwrap();
    assert_eq!(restored.session, old);
    assert_eq!(
        restored.saved_before.as_ref().map(|x| x.message_count),
        Some(4),
        "the context it replaced was saved"
    );
    let thread = s
        .store
        .thread("a", restored.thread_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(thread.status, ThreadStatus::Idle);
    // The context is now exactly the session's messages, in the new thread.
    let cutoff = s
        .store
        .agent_context_cutoff("a", s.sessions.settings().window)
        .await
        .unwrap();
    let context = s.store.context_messages("a", &cutoff).await.unwrap();
    assert_eq!(context.len(), 4);
    assert!(context.iter().all(|(t, _)| *t == restored.thread_id));
    assert_eq!(context[0].1.content, "the old work");
    assert_eq!(context[1].1.tool_calls[0].arguments, "{broken");
    let thread = s
        .store
        .thread_messages("a", restored.thread_id)
        .await
        .unwrap();
    assert_eq!(thread.last().unwrap().id as i64, restored.message_id);

    assert!(matches!(
        s.sessions.restore(&s.agent, "no-such-id", "api").await,
        Err(SessionError::NotFound(_))
    ));
}

#[tokio::test]
async fn a_missing_corrupt_or_escaping_file_is_refused_and_changes_nothing() {
    let s = setup(Arc::new(FirstLineSummarizer)).await;
    conversation(&s.store, "keep me").await;
    let session = s
        .sessions
        .save(&s.agent, Some("kept".into()), Trigger::ManualSave)
        .await
        .unwrap();
    let dir = s.root.join("a/sessions");
    let path = dir.join(&session.file_name);
    let threads_before = s.store.threads("a").await.unwrap().len();

    std::fs::write(&path, "{ not json").unwrap();
    let err = s
        .sessions
        .restore(&s.agent, &session.id, "api")
        .await
        .unwrap_err();
    assert!(
        matches!(&err, SessionError::FileCorrupt(m) if m.contains("not a valid session file")),
        "{err}"
    );

    // A symlink leading out of the directory is not followed.
    let outside = s.root.join("outside.json");
    std::fs::rename(&path, &outside).unwrap();
    std::os::unix::fs::symlink(&outside, &path).unwrap();
    let err = s
        .sessions
        .restore(&s.agent, &session.id, "api")
        .await
        .unwrap_err();
    assert!(
        matches!(&err, SessionError::FileCorrupt(m) if m.contains("outside")),
        "{err}"
    );

    std::fs::remove_file(&path).unwrap();
    let err = s
        .sessions
        .restore(&s.agent, &session.id, "api")
        .await
        .unwrap_err();
    assert!(
        matches!(&err, SessionError::FileMissing(m) if m.contains("gone")),
        "{err}"
    );

    // A row naming a path instead of a file name is refused before any read.
    let sneaky = SessionRecord {
        id: "sneaky".into(),
        file_name: "../../chorus.db".into(),
        ..session.clone()
    };
    s.store.insert_session(&sneaky).await.unwrap();
    let err = s
        .sessions
        .restore(&s.agent, "sneaky", "api")
        .await
        .unwrap_err();
    assert!(
        matches!(&err, SessionError::FileCorrupt(m) if m.contains("not a file in")),
        "{err}"
    );

    // Nothing changed: no thread made, the context still there.
    assert_eq!(s.store.threads("a").await.unwrap().len(), threads_before);
    assert!(
        s.sessions
            .save(&s.agent, None, Trigger::ManualSave)
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn an_idle_save_saves_clears_and_notifies() {
    let s = setup(Arc::new(FirstLineSummarizer)).await;
    let mut live = s.feed.subscribe();
    conversation(&s.store, "idle soon").await;
    s.sessions.idle_save("a", Duration::from_secs(1)).await;

    let notification = live.try_recv().expect("a notification");
    assert_eq!(notification.kind(), "notification");
    let data = notification.event.data();
    assert_eq!(notification.thread_id, None);
    assert_eq!(data["kind"], "idle_save");
    let id = data["session_id"].as_str().unwrap().to_string();
    let text = data["text"].as_str().unwrap();
    assert!(
        text.starts_with("Session saved: idle soon. Context cleared after 1 second of inactivity.")
            && text.ends_with(&format!("Use context restore {id} to resume.")),
        "{text}"
    );
    let saved = s.sessions.history("a", None, 10).await.unwrap();
    assert_eq!(
        (saved.len(), saved[0].trigger.as_str()),
        (1, "idle_timeout")
    );
    assert!(matches!(
        s.sessions.save(&s.agent, None, Trigger::ManualSave).await,
        Err(SessionError::NothingToSave(_))
    ));
    // Nothing left: a second idle save saves and says nothing.
    s.sessions.idle_save("a", Duration::from_secs(1)).await;
    assert_eq!(s.sessions.history("a", None, 10).await.unwrap().len(), 1);
    assert!(live.try_recv().is_err());
}

/// Tells when it is asked, and answers only once released.
struct Gated {
    asked: tokio::sync::Notify,
    release: tokio::sync::Notify,
}

#[tonic::async_trait]
impl Summarizer for Gated {
    async fn summarize(
        &self,
        _: &AgentRecord,
        _: &[ChatMessage],
        _: Purpose,
    ) -> Result<String, String> {
        self.asked.notify_one();
        self.release.notified().await;
        Ok("summarised".into())
    }
}

#[tokio::test]
async fn an_idle_save_clears_only_what_it_saved() {
    let gated = Arc::new(Gated {
        asked: tokio::sync::Notify::new(),
        release: tokio::sync::Notify::new(),
    });
    let s = setup(gated.clone()).await;
    let t = conversation(&s.store, "before").await;
    let save = s.sessions.idle_save("a", Duration::from_secs(1));
    let reply = async {
        // A reply arrives while the summary is being written.
        gated.asked.notified().await;
        s.store
            .append_message("a", t, &ChatMessage::user("arrived during the save"), None)
            .await
            .await
            .unwrap();
        gated.release.notify_one();
    };
    tokio::join!(save, reply);
    let saved = s.sessions.history("a", None, 10).await.unwrap();
    assert_eq!(
        (saved[0].message_count, saved[0].description.as_str()),
        (4, "summarised")
    );
    let cutoff = s
        .store
        .agent_context_cutoff("a", s.sessions.settings().window)
        .await
        .unwrap();
    let context: Vec<String> = s
        .store
        .context_messages("a", &cutoff)
        .await
        .unwrap()
        .into_iter()
        .map(|(_, m)| m.content)
        .collect();
    assert_eq!(context, ["arrived during the save"]);
}
