//! The board on a real store (SQLite, or Postgres with `CHORUS_TEST_POSTGRES`).

use std::collections::BTreeMap;

use super::*;
use crate::feed::FeedEvent;
use crate::store::{QuestionOption, test_store_with_agent};

struct Fixture {
    board: Board,
    feed: ThreadFeed,
    _dir: tempfile::TempDir,
}

async fn fixture() -> Fixture {
    let (store, dir) = test_store_with_agent().await; // agent "a"
    let feed = ThreadFeed::default();
    let settings = TaskSettings {
        attachment_max_bytes: 16,
        ..TaskSettings::default()
    };
    let board = Board::new(store, feed.clone(), settings, dir.path());
    Fixture {
        board,
        feed,
        _dir: dir,
    }
}

fn alice() -> Principal {
    Principal::person("alice")
}

fn task(title: &str) -> CreateTask {
    CreateTask {
        title: title.into(),
        description: format!("about {title}"),
        ..CreateTask::default()
    }
}

fn conflict_allowed(e: BoardError) -> (String, Vec<TaskStatus>) {
    match e {
        BoardError::Conflict { message, allowed } => (message, allowed),
        other => panic!("not a conflict: {other:?}"),
    }
}

#[tokio::test]
async fn a_task_is_created_planning_with_its_history_on_the_feed() {
    let f = fixture().await;
    let mut live = f.feed.subscribe();
    let created = f.board.create(task("Write docs"), &alice()).await.unwrap();
    assert_eq!(created.status, TaskStatus::Planning);
    assert_eq!(created.created_by, "alice");
    assert_eq!(created.limits.time_secs, 3600);
    assert_eq!(created.limits.model_calls, 200);
    assert_eq!(created.runs.as_deref(), Some(&[][..]));
    let history = f.board.history(created.id).await.unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(
        (history[0].kind, history[0].by.as_str()),
        (TaskEventKind::Created, "alice")
    );
    // On the feed: under the planner (no assignee yet), no thread.
    let event = live.try_recv().unwrap();
    assert_eq!((event.agent.as_str(), event.thread_id), ("planner", None));
    let FeedEvent::Task(change) = &event.event else {
        panic!("{event:?}")
    };
    assert_eq!(
        (change.task_id, change.event_id, change.status),
        (created.id, history[0].id, TaskStatus::Planning)
    );
    // A title is needed; the hook runs only when wired.
    let none = f.board.create(task("  "), &alice()).await.unwrap_err();
    assert!(matches!(none, BoardError::Invalid(_)), "{none:?}");
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let hook_seen = seen.clone();
    f.board.created(created.id);
    f.board
        .set_on_created(Arc::new(move |id| hook_seen.lock().unwrap().push(id)));
    f.board.created(created.id);
    assert_eq!(*seen.lock().unwrap(), vec![created.id]);
}

#[tokio::test]
async fn moves_follow_the_table_and_the_history_says_who() {
    let f = fixture().await;
    let id = f.board.create(task("t"), &alice()).await.unwrap().id;
    // planning → active is not a move: 409 naming the allowed ones, nothing changed.
    let (message, allowed) = conflict_allowed(
        f.board
            .transition(id, TaskStatus::Active, &alice(), None)
            .await
            .unwrap_err(),
    );
    assert_eq!(
        message,
        format!(
            "task {id} is planning; it cannot go to active (allowed: awaiting_input, planned, failed)"
        )
    );
    assert_eq!(
        allowed,
        [
            TaskStatus::AwaitingInput,
            TaskStatus::Planned,
            TaskStatus::Failed
        ]
    );
    let planner = Principal::agent("planner", 3);
    let planned = f
        .board
        .transition(id, TaskStatus::Planned, &planner, None)
        .await
        .unwrap();
    assert_eq!(planned.status, TaskStatus::Planned);
    f.board
        .transition(id, TaskStatus::Active, &alice(), None)
        .await
        .unwrap();
    f.board
        .transition(
            id,
            TaskStatus::Blocked,
            &Principal::agent("a", 4),
            Some("no key".into()),
        )
        .await
        .map(|t| assert_eq!(t.blocked_reason.as_deref(), Some("no key")))
        .unwrap();
    let resumed = f.board.press(id, Button::Resume, &alice()).await.unwrap();
    assert_eq!(
        (resumed.status, resumed.blocked_reason),
        (TaskStatus::Active, None)
    );
    let history = f.board.history(id).await.unwrap();
    let changes: Vec<(String, String, String)> = history
        .iter()
        .filter(|e| e.kind == TaskEventKind::StatusChanged)
        .map(|e| {
            (
                e.data["from"].as_str().unwrap().to_string(),
                e.data["to"].as_str().unwrap().to_string(),
                e.by.clone(),
            )
        })
        .collect();
    let expected = [
        ("planning", "planned", "agent:planner:3"),
        ("planned", "active", "alice"),
        ("active", "blocked", "agent:a:4"),
        ("blocked", "active", "alice"),
    ]
    .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()));
    assert_eq!(changes, expected);
    assert!(history.windows(2).all(|w| w[0].id < w[1].id));
}

#[tokio::test]
async fn pause_blocks_with_who_paused_and_buttons_refuse_where_they_do_not_apply() {
    let f = fixture().await;
    let created = f.board.create(task("t"), &alice()).await.unwrap();
    let id = created.id;
    // The view says which buttons are valid, and whether the plan may be edited.
    assert_eq!(
        (created.actions, created.plan_editable),
        (vec!["fail"], true)
    );
    let (message, allowed) = conflict_allowed(
        f.board
            .press(id, Button::Pause, &alice())
            .await
            .unwrap_err(),
    );
    assert!(
        message.contains("pause is for active or waiting tasks"),
        "{message}"
    );
    assert_eq!(allowed.len(), 3);
    for to in [TaskStatus::Planned, TaskStatus::Active] {
        f.board.transition(id, to, &alice(), None).await.unwrap();
    }
    let paused = f.board.press(id, Button::Pause, &alice()).await.unwrap();
    assert_eq!(paused.status, TaskStatus::Blocked);
    assert_eq!(paused.blocked_reason.as_deref(), Some("paused by alice"));
    // No assignee: nothing to retry with.
    assert_eq!(
        (paused.actions, paused.plan_editable),
        (vec!["resume", "complete", "fail"], false)
    );
    let done = f.board.press(id, Button::Complete, &alice()).await.unwrap();
    assert_eq!(done.status, TaskStatus::Completed);
    assert_eq!(done.actions, ["reopen"]);
    assert_eq!(f.board.get(id).await.unwrap().actions, ["reopen"]);
    // Reopened with an assignee: back to its plan; without: to the planner.
    let reopened = f.board.press(id, Button::Reopen, &alice()).await.unwrap();
    assert_eq!(reopened.status, TaskStatus::Planning);
}

#[tokio::test]
async fn the_plan_is_editable_before_start_only_and_names_an_agent() {
    let f = fixture().await;
    let id = f.board.create(task("t"), &alice()).await.unwrap().id;
    let wrong = f
        .board
        .update(
            id,
            PlanFields {
                assignee: Some(Some("nobody".into())),
                ..PlanFields::default()
            },
            &alice(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&wrong, BoardError::Invalid(m) if m == "'nobody' is not an agent; the agents are: a"),
        "{wrong:?}"
    );
    let edited = f
        .board
        .update(
            id,
            PlanFields {
                summary: Some(Some("do it".into())),
                steps: Some(vec!["one".into(), "two".into()]),
                assignee: Some(Some("a".into())),
                ..PlanFields::default()
            },
            &alice(),
        )
        .await
        .unwrap();
    assert_eq!(edited.summary.as_deref(), Some("do it"));
    assert_eq!(edited.steps, ["one", "two"]);
    assert_eq!(edited.assignee.as_deref(), Some("a"));
    let history = f.board.history(id).await.unwrap();
    let last = history.last().unwrap();
    assert_eq!(last.kind, TaskEventKind::PlanEdited);
    assert_eq!(last.data["fields"], json!(["summary", "steps", "assignee"]));
    for to in [TaskStatus::Planned, TaskStatus::Active] {
        f.board.transition(id, to, &alice(), None).await.unwrap();
    }
    let locked = f
        .board
        .update(
            id,
            PlanFields {
                summary: Some(None),
                ..PlanFields::default()
            },
            &alice(),
        )
        .await
        .unwrap_err();
    assert!(matches!(locked, BoardError::Conflict { .. }), "{locked:?}");
    // The title may still change.
    let renamed = f
        .board
        .update(
            id,
            PlanFields {
                title: Some("t2".into()),
                ..PlanFields::default()
            },
            &alice(),
        )
        .await
        .unwrap();
    assert_eq!(
        (renamed.title.as_str(), renamed.summary.as_deref()),
        ("t2", Some("do it"))
    );
}

#[tokio::test]
async fn the_list_filters_by_status_agent_and_text() {
    let f = fixture().await;
    let one = f
        .board
        .create(task("Fix the 50% bug"), &alice())
        .await
        .unwrap()
        .id;
    let two = f
        .board
        .create(task("Write docs"), &alice())
        .await
        .unwrap()
        .id;
    let three = f
        .board
        .create(
            CreateTask {
                assignee: Some("a".into()),
                ..task("Delegated")
            },
            &alice(),
        )
        .await
        .unwrap();
    assert_eq!(three.status, TaskStatus::Planned);
    f.board
        .add_run(two, ThreadRole::Planner, "planner", "api", Some(1))
        .await
        .unwrap();
    let ids = |views: Vec<TaskView>| views.into_iter().map(|v| v.id).collect::<Vec<_>>();
    let all = f.board.list(&TaskFilter::default()).await.unwrap();
    assert!(all.iter().all(|v| v.runs.is_none()));
    assert_eq!(ids(all), [three.id, two, one]);
    let filter = |status, agent: Option<&str>, text: Option<&str>| TaskFilter {
        status,
        agent: agent.map(str::to_string),
        text: text.map(str::to_string),
    };
    let board = &f.board;
    let list = |filter: TaskFilter| async move { ids(board.list(&filter).await.unwrap()) };
    assert_eq!(
        list(filter(Some(TaskStatus::Planned), None, None)).await,
        [three.id]
    );
    assert_eq!(list(filter(None, Some("a"), None)).await, [three.id]);
    assert_eq!(list(filter(None, Some("planner"), None)).await, [two]);
    assert_eq!(list(filter(None, None, Some("50%"))).await, [one]);
    assert_eq!(list(filter(None, None, Some("DOCS"))).await, [two]);
    assert_eq!(list(filter(None, None, Some("about"))).await.len(), 3);
    assert!(list(filter(None, None, Some("5_%"))).await.is_empty());
}

#[tokio::test]
async fn questions_come_in_rounds_and_answers_are_all_or_none() {
    let f = fixture().await;
    let id = f.board.create(task("t"), &alice()).await.unwrap().id;
    let planner = Principal::agent("planner", 1);
    let q = |id: &str, options: Vec<QuestionOption>| NewQuestion {
        id: id.into(),
        question: format!("{id}?"),
        options,
        multi_select: false,
    };
    let option = QuestionOption {
        label: "yes".into(),
        description: "do".into(),
    };
    let dup = f
        .board
        .ask(id, &[q("q1", vec![]), q("q1", vec![])], &planner)
        .await
        .unwrap_err();
    assert!(matches!(dup, BoardError::Invalid(_)), "{dup:?}");
    let round = f
        .board
        .ask(
            id,
            &[q("q1", vec![option.clone()]), q("q2", vec![])],
            &planner,
        )
        .await
        .unwrap();
    assert_eq!(round, 1);
    let answers = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>()
    };
    let unknown = f
        .board
        .answer(id, &answers(&[("q1", "yes"), ("q9", "x")]), &alice())
        .await
        .unwrap_err();
    assert!(
        matches!(&unknown, BoardError::Invalid(m) if m.contains("'q9'") && m.contains("q1, q2")),
        "{unknown:?}"
    );
    // Nothing was written by the refused answer.
    assert_eq!(f.board.open_questions(id).await.unwrap().len(), 2);
    let answered = f
        .board
        .answer(id, &answers(&[("q1", "yes")]), &alice())
        .await
        .unwrap();
    assert_eq!(answered[0].answer.as_deref(), Some("yes"));
    assert_eq!(answered[0].answered_by.as_deref(), Some("alice"));
    assert_eq!(answered[0].options, [option]);
    let open = f.board.open_questions(id).await.unwrap();
    assert_eq!(
        open.iter().map(|q| q.id.as_str()).collect::<Vec<_>>(),
        ["q2"]
    );
    f.board
        .answer(id, &answers(&[("q2", "no")]), &alice())
        .await
        .unwrap();
    let none = f
        .board
        .answer(id, &answers(&[("q2", "again")]), &alice())
        .await
        .unwrap_err();
    assert!(matches!(none, BoardError::Conflict { .. }), "{none:?}");
    // A second round reuses ids; every round is kept.
    assert_eq!(
        f.board.ask(id, &[q("q1", vec![])], &planner).await.unwrap(),
        2
    );
    let view = f.board.get(id).await.unwrap();
    assert_eq!(
        view.questions
            .iter()
            .map(|q| (q.round, q.id.as_str()))
            .collect::<Vec<_>>(),
        [(1, "q1"), (1, "q2"), (2, "q1")]
    );
    assert_eq!(view.open_questions().len(), 1);
}

#[tokio::test]
async fn attachments_are_jailed_bounded_stored_and_listed() {
    let f = fixture().await;
    let id = f.board.create(task("t"), &alice()).await.unwrap().id;
    for bad in ["../x", "a/b", "a\\b", ".hidden", "", "a\0b", "..", "x\ny"] {
        let refused = f
            .board
            .add_attachment(id, bad, b"x", &alice())
            .await
            .unwrap_err();
        assert!(
            matches!(refused, BoardError::Invalid(_)),
            "{bad:?}: {refused:?}"
        );
    }
    assert!(!f.board.root.exists(), "nothing written for a refused name");
    let big = f
        .board
        .add_attachment(id, "big.txt", &[b'x'; 17], &alice())
        .await
        .unwrap_err();
    assert!(matches!(big, BoardError::Invalid(_)), "{big:?}");
    let added = f
        .board
        .add_attachment(id, "spec.md", b"# spec", &alice())
        .await
        .unwrap();
    assert_eq!((added.name.as_str(), added.size), ("spec.md", 6));
    let path = f.board.attachments_dir(id).join("spec.md");
    assert_eq!(std::fs::read(&path).unwrap(), b"# spec");
    // Replaced, not doubled.
    f.board
        .add_attachment(id, "spec.md", b"v2", &alice())
        .await
        .unwrap();
    let listed = f.board.attachments(id).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].size, 2);
    assert_eq!(
        std::fs::read_dir(f.board.attachments_dir(id))
            .unwrap()
            .count(),
        1,
        "no partial file left"
    );
    let kinds: Vec<_> = f
        .board
        .history(id)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(
        kinds,
        [
            TaskEventKind::Created,
            TaskEventKind::AttachmentAdded,
            TaskEventKind::AttachmentAdded
        ]
    );
}

#[tokio::test]
async fn runs_and_the_chain_are_recorded_and_a_going_run_holds_off_delete() {
    let f = fixture().await;
    let id = f.board.create(task("t"), &alice()).await.unwrap().id;
    f.board
        .add_attachment(id, "spec.md", b"s", &alice())
        .await
        .unwrap();
    let run = f
        .board
        .add_run(id, ThreadRole::Worker, "a", "api", Some(9))
        .await
        .unwrap();
    f.board
        .set_finishing(run, Some(&json!({"tool": "completion_report"})))
        .await
        .unwrap();
    let chorus = Principal::Scheduler;
    let chain = f.board.push_chain(id, "a", id, &chorus).await.unwrap();
    assert_eq!(chain.len(), 1);
    assert!(chain[0].ended_at.is_none());
    let (message, _) = conflict_allowed(f.board.delete(id, &alice()).await.unwrap_err());
    assert!(
        message.contains("DELETE /api/agents/a/threads/9"),
        "{message}"
    );
    let chain = f.board.complete_chain(id, "a", &chorus).await.unwrap();
    assert!(chain[0].ended_at.is_some());
    assert!(
        f.board
            .end_run(
                run,
                RunOutcome::Completed,
                Some(&json!({"summary": "ok"})),
                (10, 5, 2)
            )
            .await
            .unwrap()
    );
    assert!(
        !f.board
            .end_run(run, RunOutcome::Failed, None, (0, 0, 0))
            .await
            .unwrap(),
        "a run ends once"
    );
    let of_thread = f.board.run_of_thread("a", 9).await.unwrap().unwrap();
    assert_eq!(of_thread.id, run);
    assert_eq!(
        of_thread.finishing,
        Some(json!({"tool": "completion_report"}))
    );
    let view = f.board.get(id).await.unwrap();
    let runs = view.runs.unwrap();
    assert_eq!(
        (runs[0].outcome, runs[0].input_tokens, runs[0].model_calls),
        (Some(RunOutcome::Completed), 10, 2)
    );
    assert_eq!(view.chain, chain);
    let mut live = f.feed.subscribe();
    f.board.delete(id, &alice()).await.unwrap();
    // The feed says so, under the agent the task's events went under (its planner:
    // it has no assignee).
    let event = live.try_recv().unwrap();
    assert_eq!((event.agent.as_str(), event.thread_id), ("planner", None));
    assert_eq!(
        event.event,
        FeedEvent::TaskDeleted(crate::feed::TaskDeleted {
            task_id: id,
            by: "alice".into()
        })
    );
    assert!(matches!(
        f.board.get(id).await.unwrap_err(),
        BoardError::NotFound(_)
    ));
    assert!(!f.board.attachments_dir(id).exists());
    assert!(f.board.run(run).await.unwrap().is_none());
}

/// Moves racing from one status: exactly one passes the table from it, the others
/// are re-checked against where the winner took the task (compare-and-set).
#[tokio::test]
async fn racing_moves_from_one_status_cannot_both_pass() {
    let f = fixture().await;
    let board = std::sync::Arc::new(f.board);
    let id = board.create(task("t"), &alice()).await.unwrap().id;
    let mut racers = Vec::new();
    for i in 0..12 {
        let board = board.clone();
        // Half plan it, half ask: from planning both are moves, but only one can be
        // the move from planning; after it, planned → awaiting_input is refused
        // and awaiting_input → planned too.
        let to = if i % 2 == 0 {
            TaskStatus::Planned
        } else {
            TaskStatus::AwaitingInput
        };
        racers.push(tokio::spawn(async move {
            board
                .transition(id, to, &Principal::agent("planner", i), None)
                .await
        }));
    }
    let mut passed = 0;
    for racer in racers {
        match racer.await.unwrap() {
            Ok(_) => passed += 1,
            Err(BoardError::Conflict { .. }) => {}
            Err(other) => panic!("{other:?}"),
        }
    }
    let from_planning: Vec<_> = board
        .history(id)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == TaskEventKind::StatusChanged)
        .collect();
    assert_eq!(passed, 1, "{from_planning:?}");
    assert_eq!(from_planning.len(), 1);
    assert_eq!(from_planning[0].data["from"], "planning");
}

/// A task run shows what ran its thread's latest run (`runs.backend`), and what it
/// was recorded with before any run.
#[tokio::test]
async fn a_task_run_shows_the_backend_of_its_threads_latest_run() {
    let f = fixture().await;
    let id = f.board.create(task("t"), &alice()).await.unwrap().id;
    let (thread, _) = f
        .board
        .store
        .start_thread(
            "a",
            &chorus_proto::domain::ChatMessage::user("go"),
            "api",
            None,
        )
        .await
        .unwrap();
    let run = f
        .board
        .add_run(id, ThreadRole::Worker, "a", "api", Some(thread))
        .await
        .unwrap();
    let backend_of = |runs: Vec<crate::store::TaskRun>| {
        runs.into_iter()
            .find(|r| r.id == run)
            .map(|r| r.backend)
            .unwrap()
    };
    assert_eq!(
        backend_of(f.board.store.task_runs(id).await.unwrap()),
        "api"
    );
    let context = Default::default();
    for (run_id, attempt, backend) in [
        ("r1", 1, chorus_proto::domain::Backend::Api),
        ("r2", 2, chorus_proto::domain::Backend::ClaudeCode),
    ] {
        f.board
            .store
            .insert_run(crate::store::NewRun {
                agent: "a",
                thread,
                run_id,
                attempt,
                first_step: 1,
                stalled: 0,
                trace_context: &context,
                backend,
            })
            .await
            .unwrap();
    }
    assert_eq!(
        backend_of(f.board.store.task_runs(id).await.unwrap()),
        "claude-code"
    );
    let of_thread = f.board.run_of_thread("a", thread).await.unwrap().unwrap();
    assert_eq!(of_thread.backend, "claude-code");
    assert_eq!(
        serde_json::to_value(&of_thread).unwrap()["backend"],
        "claude-code",
        "what the task views show"
    );
}
