//! A run's events (steps, messages, inputs taken) as data the writer can merge:
//! consecutive events of a batch are written together with few statements. Each
//! run's mark is read once and moved once per batch (not once per event), and a
//! step that starts and ends within the batch is inserted once, complete.
//!
//! Invariants (the same as one event at a time):
//! - An event is stored at most once: one whose `seq` is no later than its run's
//!   stored mark (a worker's replay after a reconnect) stores nothing and answers
//!   false; so does an event of a run the store does not know.
//! - Events are written in the order they were queued (message positions follow
//!   that order); a batch's events are all stored or, on a failure, written again
//!   one by one so only the failing one is lost (the writer does that).

use std::collections::HashMap;

use chorus_proto::domain::{ChatMessage, Role, StepEnded, StepStarted};
use chorus_proto::tools::RunsIn;
use sqlx::AnyConnection;

use super::messages::insert_message;
use super::runs::Mark;
use super::{StoreError, format_epoch_ms, now};

/// What a run reported.
#[derive(Debug, Clone)]
pub(super) enum RunEvent {
    StepStarted(StepStarted),
    StepEnded(StepEnded),
    /// A message the run produced (a tool's result also completes its audit row).
    Message(ChatMessage),
    /// The run took the pending user message with this id into its history.
    InputTaken(u64),
    /// A CLI backend's run started (or went on with) this session of the CLI.
    CliSession(String),
    /// A call deferred for a person was carried out (or refused) by a later run:
    /// its audit row gets the result (`is_error`).
    ResumedCallDone {
        call_id: String,
        is_error: bool,
    },
}

/// One event of a run of an agent's thread, with its place in the run's sequence.
#[derive(Debug, Clone)]
pub(super) struct ThreadEvent {
    pub(super) agent: String,
    pub(super) thread: u64,
    pub(super) mark: Option<Mark>,
    pub(super) event: RunEvent,
}

/// Writes `events` in order inside the writer's open transaction; says for each
/// whether it was stored (false: a replay, or a run the store does not know).
pub(super) async fn write(
    conn: &mut AnyConnection,
    events: &[&ThreadEvent],
) -> Result<Vec<bool>, StoreError> {
    // Each run's stored mark, read once: None when the run is not known.
    let mut marks: HashMap<&str, Option<i64>> = HashMap::new();
    for event in events {
        if let Some(mark) = &event.mark
            && !marks.contains_key(mark.run_id.as_str())
        {
            let stored: Option<i64> = sqlx::query_scalar("SELECT last_seq FROM runs WHERE id = $1")
                .bind(&mark.run_id)
                .fetch_optional(&mut *conn)
                .await?;
            marks.insert(&mark.run_id, stored);
        }
    }
    // Which events are new, and how each run's mark moves.
    let mut moved: Vec<(&str, i64, i64)> = Vec::new(); // run, last seq, messages
    let stored: Vec<bool> = events
        .iter()
        .map(|event| {
            let Some(mark) = &event.mark else {
                return true;
            };
            let Some(Some(last)) = marks.get_mut(mark.run_id.as_str()) else {
                return false; // not a run the store knows
            };
            let seq = mark.seq as i64;
            // seq 0: not sequenced, always stored.
            if seq != 0 && seq <= *last {
                return false;
            }
            *last = (*last).max(seq);
            let message = matches!(event.event, RunEvent::Message(_)) as i64;
            match moved.iter_mut().find(|(run, ..)| *run == mark.run_id) {
                Some(entry) => {
                    entry.1 = entry.1.max(seq);
                    entry.2 += message;
                }
                None => moved.push((&mark.run_id, seq, message)),
            }
            true
        })
        .collect();

    // A step's end that follows its start in this batch is written with it.
    let mut ends: HashMap<(&str, u64, u32), usize> = HashMap::new();
    for (i, event) in events.iter().enumerate() {
        if let (true, RunEvent::StepEnded(step)) = (stored[i], &event.event) {
            ends.entry((&event.agent, event.thread, step.number))
                .or_insert(i);
        }
    }
    let mut written_with_start = vec![false; events.len()];
    for (i, event) in events.iter().enumerate() {
        if !stored[i] || written_with_start[i] {
            continue;
        }
        let (agent, thread) = (event.agent.as_str(), event.thread);
        match &event.event {
            RunEvent::StepStarted(step) => {
                let end = ends
                    .get(&(agent, thread, step.number))
                    .copied()
                    .filter(|&j| j > i)
                    .map(|j| {
                        written_with_start[j] = true;
                        match &events[j].event {
                            RunEvent::StepEnded(end) => end,
                            _ => unreachable!("only ends are indexed"),
                        }
                    });
                insert_step(conn, agent, thread, step, end).await?;
            }
            RunEvent::StepEnded(step) => end_step(conn, agent, thread, step).await?,
            RunEvent::Message(message) => {
                insert_message(conn, agent, thread, message, &now(), true).await?;
                // A tool's result completes its audit row, in the same transaction.
                if let (Role::Tool, Some(call_id)) = (message.role, &message.tool_call_id) {
                    super::audit::record_result(
                        conn,
                        agent,
                        thread,
                        call_id,
                        if message.is_error { "error" } else { "ok" },
                    )
                    .await?;
                }
            }
            RunEvent::CliSession(session_id) => {
                // Only a sequenced event names its run.
                if let Some(mark) = &event.mark {
                    sqlx::query("UPDATE runs SET cli_session = $2 WHERE id = $1")
                        .bind(&mark.run_id)
                        .bind(session_id)
                        .execute(&mut *conn)
                        .await?;
                }
            }
            RunEvent::ResumedCallDone { call_id, is_error } => {
                super::audit::record_result(
                    conn,
                    agent,
                    thread,
                    call_id,
                    if *is_error { "error" } else { "ok" },
                )
                .await?;
            }
            RunEvent::InputTaken(message_id) => {
                sqlx::query(
                    "UPDATE messages SET position = (SELECT COALESCE(MAX(position), 0) + 1 \
                     FROM messages WHERE agent_name = $1 AND thread_id = $2) \
                     WHERE agent_name = $1 AND thread_id = $2 AND id = $3 AND position IS NULL",
                )
                .bind(agent)
                .bind(thread as i64)
                .bind(*message_id as i64)
                .execute(&mut *conn)
                .await?;
            }
        }
    }
    let at = now();
    for (run, last_seq, messages) in moved {
        sqlx::query(
            "UPDATE runs SET last_seq = CASE WHEN $2 > last_seq THEN $2 ELSE last_seq END, \
             stored = stored + $3, updated_at = $4 WHERE id = $1",
        )
        .bind(run)
        .bind(last_seq)
        .bind(messages)
        .bind(&at)
        .execute(&mut *conn)
        .await?;
    }
    Ok(stored)
}

/// Inserts a step; with its end when that came in the same batch.
async fn insert_step(
    conn: &mut AnyConnection,
    agent: &str,
    thread: u64,
    step: &StepStarted,
    end: Option<&StepEnded>,
) -> Result<(), StoreError> {
    let usage = end.and_then(|end| end.usage);
    sqlx::query(
        "INSERT INTO thread_steps (agent_name, thread_id, step_number, kind, description, \
         started_at, ended_at, duration_ms, failed, input_tokens, output_tokens, runs_in) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
    )
    .bind(agent)
    .bind(thread as i64)
    .bind(step.number as i64)
    .bind(step.kind.as_str())
    .bind(&step.description)
    .bind(format_epoch_ms(step.started_at_ms))
    .bind(end.map(|end| format_epoch_ms(end.ended_at_ms)))
    .bind(end.map(|end| end.duration_ms as i64))
    .bind(end.is_some_and(|end| end.failed) as i64)
    .bind(usage.map(|u| u.input_tokens as i64))
    .bind(usage.map(|u| u.output_tokens as i64))
    .bind(step.runs_in.map(RunsIn::as_str))
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Completes a step stored earlier.
async fn end_step(
    conn: &mut AnyConnection,
    agent: &str,
    thread: u64,
    step: &StepEnded,
) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE thread_steps SET ended_at = $4, duration_ms = $5, failed = $6, \
         input_tokens = $7, output_tokens = $8 \
         WHERE agent_name = $1 AND thread_id = $2 AND step_number = $3",
    )
    .bind(agent)
    .bind(thread as i64)
    .bind(step.number as i64)
    .bind(format_epoch_ms(step.ended_at_ms))
    .bind(step.duration_ms as i64)
    .bind(step.failed as i64)
    .bind(step.usage.map(|u| u.input_tokens as i64))
    .bind(step.usage.map(|u| u.output_tokens as i64))
    .execute(&mut *conn)
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use chorus_proto::domain::{StepKind, Usage};
    use tokio::sync::oneshot;

    use super::*;
    use crate::store::{NewRun, RunMark, Store, test_store_with_agent};

    fn started(number: u32) -> StepStarted {
        StepStarted {
            run_id: "r1".into(),
            number,
            kind: StepKind::LlmCall,
            description: format!("step {number}"),
            started_at_ms: 1_700_000_000_000,
            runs_in: None,
        }
    }

    fn ended(number: u32) -> StepEnded {
        StepEnded {
            run_id: "r1".into(),
            number,
            ended_at_ms: 1_700_000_000_250,
            duration_ms: 250,
            failed: false,
            usage: Some(Usage {
                input_tokens: 10,
                output_tokens: 3,
            }),
        }
    }

    /// Holds the writer until the returned sender is dropped or sent to, so the
    /// events queued meanwhile form one batch.
    async fn hold_writer(store: &Store) -> oneshot::Sender<()> {
        let (release, hold) = oneshot::channel::<()>();
        let _held = store
            .writer
            .submit(move |_| {
                Box::pin(async move {
                    let _ = hold.await;
                    Ok(())
                })
            })
            .await;
        release
    }

    async fn thread_with_run(store: &Store) -> u64 {
        let (thread, _) = store
            .start_thread("a", &ChatMessage::user("hi"), "api", None)
            .await
            .unwrap();
        store
            .insert_run(NewRun {
                agent: "a",
                thread,
                run_id: "r1",
                attempt: 1,
                first_step: 1,
                stalled: 0,
                trace_context: &Default::default(),
                backend: Default::default(),
            })
            .await
            .unwrap();
        thread
    }

    /// Events queued together are written together: a step that starts and ends in
    /// the batch is stored complete, a replay is not stored again, and an event that
    /// fails (a second step 1) is lost alone while the rest of the batch commits in
    /// order.
    #[tokio::test]
    async fn a_batch_of_events_is_written_together_and_a_failing_one_alone() {
        let (store, _dir) = test_store_with_agent().await;
        let thread = thread_with_run(&store).await;
        let mark = |seq| Some(RunMark { run_id: "r1", seq });
        let release = hold_writer(&store).await;
        let reply = ChatMessage::assistant("hello", vec![]);
        let results = vec![
            store
                .record_step_started("a", thread, &started(1), mark(1))
                .await,
            store
                .record_step_ended("a", thread, &ended(1), mark(2))
                .await,
            store.append_message("a", thread, &reply, mark(3)).await,
            // Step 1 exists: this one fails.
            store
                .record_step_started("a", thread, &started(1), mark(4))
                .await,
            // A replay of seq 3.
            store.append_message("a", thread, &reply, mark(3)).await,
            store
                .record_step_started("a", thread, &started(2), mark(5))
                .await,
        ];
        release.send(()).unwrap();
        let mut answers = Vec::new();
        for pending in results {
            answers.push(pending.await.map_err(|e| e.to_string()));
        }
        assert_eq!(answers[..3], [Ok(true), Ok(true), Ok(true)]);
        assert!(
            answers[3]
                .as_ref()
                .is_err_and(|e| e.to_lowercase().contains("unique")),
            "{:?}",
            answers[3]
        );
        assert_eq!(answers[4..], [Ok(false), Ok(true)]);

        let steps = store.thread_steps("a", thread).await.unwrap();
        let summary: Vec<_> = steps
            .iter()
            .map(|s| {
                (
                    s.number,
                    s.duration_ms,
                    s.input_tokens,
                    s.ended_at.is_some(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            [(1, Some(250), Some(10), true), (2, None, None, false)]
        );
        let contents: Vec<_> = store
            .thread_messages("a", thread)
            .await
            .unwrap()
            .into_iter()
            .map(|m| m.message.content)
            .collect();
        assert_eq!(contents, ["hi", "hello"]);
        let run = store.run("r1").await.unwrap().unwrap();
        assert_eq!((run.last_seq, run.stored), (5, 1));
    }

    /// An event of a run the store does not know is not stored, and does not keep
    /// the events around it from being stored.
    #[tokio::test]
    async fn an_event_of_an_unknown_run_is_not_stored() {
        let (store, _dir) = test_store_with_agent().await;
        let thread = thread_with_run(&store).await;
        let release = hold_writer(&store).await;
        let unknown = Some(RunMark {
            run_id: "gone",
            seq: 1,
        });
        let known = Some(RunMark {
            run_id: "r1",
            seq: 1,
        });
        let lost = store
            .append_message("a", thread, &ChatMessage::assistant("x", vec![]), unknown)
            .await;
        let kept = store
            .append_message("a", thread, &ChatMessage::assistant("y", vec![]), known)
            .await;
        release.send(()).unwrap();
        assert!(!lost.await.unwrap());
        assert!(kept.await.unwrap());
        let messages = store.thread_messages("a", thread).await.unwrap();
        assert_eq!(messages.last().unwrap().message.content, "y");
        assert_eq!(messages.len(), 2);
    }
}
