//! The run actor in-process: each transition of an agent's runs driven through the
//! real `Runs`, worker registry and store, by a fake worker at the domain level
//! (`chorus_test_support::fake_worker`: commands out, worker events in; no process,
//! no gRPC). Each test asserts what a user sees: the thread's status and failure,
//! its messages and steps in the store, and what was sent to the worker.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use chorus_control_plane::runs::{EventRejected, Routed, TurnEnd};
use chorus_control_plane::store::{RunStatus, ThreadRole, ThreadStatus};
use chorus_proto::domain::{
    AgentChange, ChatMessage, ControlCommand, Failure, FailureKind, Role, StepKind, WorkerEvent,
};
use chorus_test_support::fake_worker::{FakeWorker, Plane, USER};
use chorus_test_support::role_hooks::TestHooks;

const A: &str = "a";

/// A plane with agent `a`.
async fn plane() -> Plane {
    let plane = Plane::start().await;
    plane.add_agent(A).await;
    plane
}

/// The content of the last message of an assignment (the request it is about).
fn last_message(run: &chorus_proto::domain::RunAssignment) -> &str {
    &run.messages.last().expect("a run has messages").content
}

fn roles(messages: &[(String, String)]) -> Vec<&str> {
    messages.iter().map(|(role, _)| role.as_str()).collect()
}

// ------------------------------------------------------------------ delivery

#[tokio::test]
async fn a_message_goes_to_the_connected_worker_and_its_answer_completes_the_thread() {
    let plane = plane().await;
    let mut worker = plane.worker(A).await;
    let received = plane.send(A, "hi").await;
    assert_eq!(received.routed, Routed::New);

    let run = worker.assignment().await;
    assert_eq!(run.thread_id, received.thread_id);
    assert_eq!((run.attempt, run.first_step_number), (1, 1));
    assert_eq!(last_message(&run), "hi");
    assert_eq!(run.agent.model, chorus_test_support::fake_worker::MODEL);
    assert_eq!(
        plane.runs_of(A, run.thread_id).await[0].status,
        RunStatus::Running
    );

    worker.step(&run.run_id, 1, StepKind::LlmCall).await;
    worker.answer(&run.run_id, "hello").await;
    worker.step_ended(&run.run_id, 1).await;
    worker.complete(&run.run_id).await.unwrap();

    let thread = plane.thread(A, run.thread_id).await;
    assert_eq!(thread.status, ThreadStatus::Completed);
    assert_eq!((thread.error, thread.failure_kind), (None, None));
    assert_eq!(
        plane.messages(A, run.thread_id).await,
        [
            ("user".to_string(), "hi".to_string()),
            ("assistant".to_string(), "hello".to_string())
        ]
    );
    let steps = plane.steps(A, run.thread_id).await;
    assert_eq!(steps.len(), 1);
    assert!(steps[0].ended_at.is_some() && !steps[0].failed);
    assert_eq!(
        plane.runs_of(A, run.thread_id).await[0].status,
        RunStatus::Completed
    );
    assert!(worker.sent().is_empty(), "nothing more for the worker");
}

#[tokio::test]
async fn a_run_the_worker_fails_fails_its_thread_with_the_workers_kind_and_reason() {
    let plane = Plane::start().await;
    let kinds = [
        FailureKind::ModelError,
        FailureKind::Limit,
        FailureKind::Internal,
    ];
    for (i, kind) in kinds.into_iter().enumerate() {
        // a fresh agent per case: one store for the table.
        let agent = format!("a{i}");
        plane.add_agent(&agent).await;
        let a = agent.as_str();
        let mut worker = plane.worker(a).await;
        let thread = plane.send(a, "hi").await.thread_id;
        let run = worker.assignment().await;
        worker.step(&run.run_id, 1, StepKind::LlmCall).await;
        worker.fail(&run.run_id, kind, "the provider said no").await;
        let record = plane.thread(a, thread).await;
        assert_eq!(record.status, ThreadStatus::Failed, "{kind:?}");
        assert_eq!(record.failure_kind, Some(kind));
        assert_eq!(record.error.as_deref(), Some("the provider said no"));
        assert_eq!(plane.runs_of(a, thread).await[0].status, RunStatus::Failed);
        assert!(worker.sent().is_empty(), "{kind:?}: nothing resumed");
    }
}

#[tokio::test]
async fn a_run_waits_in_the_queue_until_a_worker_attaches() {
    let plane = plane().await;
    let received = plane.send(A, "hi").await;
    let thread = plane.thread(A, received.thread_id).await;
    assert_eq!(thread.status, ThreadStatus::Running);
    assert_eq!(
        plane.runs_of(A, received.thread_id).await[0].status,
        RunStatus::Queued
    );
    // A launched worker that has not connected gets nothing yet.
    let launched = plane.launch(A);
    assert_eq!(
        plane.runs_of(A, received.thread_id).await[0].status,
        RunStatus::Queued
    );

    let mut worker = launched.attach().await;
    let run = worker.assignment().await;
    assert_eq!(run.thread_id, received.thread_id);
    assert_eq!(last_message(&run), "hi");
    assert_eq!(
        plane.runs_of(A, received.thread_id).await[0].status,
        RunStatus::Running
    );
}

// ------------------------------------------------------------------ inject or requeue

#[tokio::test]
async fn a_reply_reaches_a_delivered_run_as_a_command_and_a_queued_one_in_its_assignment() {
    let plane = Plane::start().await;
    for (i, delivered) in [true, false].into_iter().enumerate() {
        // a fresh agent per case: one store for the table.
        let agent = format!("a{i}");
        plane.add_agent(&agent).await;
        let a = agent.as_str();
        let mut worker = if delivered {
            Some(plane.worker(a).await)
        } else {
            None
        };
        let first = plane.send(a, "first").await;
        let before = match worker.as_mut() {
            Some(worker) => Some(worker.assignment().await),
            None => None,
        };
        let reply = plane.reply(a, "and also", first.message_id).await;
        assert_eq!(reply.routed, Routed::Injected, "delivered: {delivered}");
        assert_eq!(reply.thread_id, first.thread_id);
        // Until a run takes it, the message waits in the store.
        assert_eq!(
            plane.pending(a, first.thread_id).await,
            [(reply.message_id, "and also".to_string())]
        );

        let (mut worker, run) = match (worker, before) {
            (Some(mut worker), Some(run)) => {
                match worker.command().await {
                    ControlCommand::InjectMessage { run_id, input } => {
                        assert_eq!(run_id, run.run_id);
                        assert_eq!(
                            (input.message_id, input.content.as_str()),
                            (reply.message_id, "and also")
                        );
                    }
                    other => panic!("expected the reply injected, got {other:?}"),
                }
                (worker, run)
            }
            _ => {
                let mut worker = plane.worker(a).await;
                let run = worker.assignment().await;
                assert_eq!(run.inputs.len(), 1, "the reply rides in the assignment");
                assert_eq!(run.inputs[0].message_id, reply.message_id);
                assert!(
                    worker.sent().is_empty(),
                    "no injection for a run that was not delivered"
                );
                (worker, run)
            }
        };
        worker.take_input(&run.run_id, reply.message_id).await;
        assert!(plane.pending(a, first.thread_id).await.is_empty());
        worker.answer(&run.run_id, "done both").await;
        worker.complete(&run.run_id).await.unwrap();
        assert_eq!(
            plane.thread(a, first.thread_id).await.status,
            ThreadStatus::Completed
        );
        assert_eq!(
            roles(&plane.messages(a, first.thread_id).await),
            ["user", "user", "assistant"]
        );
    }
}

#[tokio::test]
async fn a_reply_the_run_never_took_starts_the_next_run_when_it_completes() {
    let plane = plane().await;
    let mut worker = plane.worker(A).await;
    let first = plane.send(A, "first").await;
    let run = worker.assignment().await;
    let reply = plane.reply(A, "too late", first.message_id).await;
    assert!(matches!(
        worker.command().await,
        ControlCommand::InjectMessage { .. }
    ));
    worker.answer(&run.run_id, "answer to first").await;
    worker.complete(&run.run_id).await.unwrap();

    // Not completed: the message it did not see is the next run's input.
    assert_eq!(
        plane.thread(A, first.thread_id).await.status,
        ThreadStatus::Running
    );
    let next = worker.assignment().await;
    assert_ne!(next.run_id, run.run_id);
    assert_eq!(next.thread_id, first.thread_id);
    assert_eq!(next.inputs.len(), 1);
    assert_eq!(next.inputs[0].message_id, reply.message_id);
    let runs = plane.runs_of(A, first.thread_id).await;
    assert_eq!(
        runs.iter().map(|r| r.status).collect::<Vec<_>>(),
        [RunStatus::Completed, RunStatus::Running]
    );
}

// ------------------------------------------------------------------ replay, forgery

#[tokio::test]
async fn a_replayed_event_is_stored_once() {
    let plane = plane().await;
    let mut worker = plane.worker(A).await;
    let thread = plane.send(A, "hi").await.thread_id;
    let run = worker.assignment().await;
    let answer = WorkerEvent::MessageAppended {
        run_id: run.run_id.clone(),
        message: ChatMessage::assistant("once", Vec::new()),
    };
    // A reconnect resends what the control plane may not have stored; an older
    // seq than the last stored is a replay too.
    worker.report_as(1, answer.clone()).await.unwrap();
    worker.report_as(1, answer.clone()).await.unwrap();
    worker.report_as(2, answer.clone()).await.unwrap();
    worker.report_as(1, answer).await.unwrap();
    let messages = plane.messages(A, thread).await;
    assert_eq!(roles(&messages), ["user", "assistant", "assistant"]);
    assert_eq!(plane.runs_of(A, thread).await[0].last_seq, 2);
}

#[tokio::test]
async fn a_worker_reports_only_on_its_own_agents_runs() {
    let plane = plane().await;
    plane.add_agent("b").await;
    let mut worker_a = plane.worker(A).await;
    let mut worker_b = plane.worker("b").await;
    let thread = plane.send(A, "secret plans").await.thread_id;
    let run = worker_a.assignment().await;

    let forged = [
        WorkerEvent::MessageAppended {
            run_id: run.run_id.clone(),
            message: ChatMessage::assistant("forged answer", Vec::new()),
        },
        WorkerEvent::RunCompleted {
            run_id: run.run_id.clone(),
            final_text: String::new(),
        },
        WorkerEvent::RunFailed {
            run_id: run.run_id.clone(),
            kind: FailureKind::Internal,
            error: "forged failure".into(),
        },
    ];
    for event in forged {
        let refused = worker_b.report(event.clone()).await.unwrap_err();
        assert!(
            matches!(&refused, EventRejected::UnknownRun(id) if *id == run.run_id),
            "{event:?}: {refused:?}"
        );
        assert!(refused.is_suspicious());
    }
    // The gate would not find the run either: b's tool checks cannot act in a's thread.
    assert_eq!(worker_b.tool_check(&run.run_id).await, None);

    // a's thread is untouched, and its own worker still reports on it.
    assert_eq!(plane.thread(A, thread).await.status, ThreadStatus::Running);
    assert_eq!(roles(&plane.messages(A, thread).await), ["user"]);
    worker_a.answer(&run.run_id, "real answer").await;
    worker_a.complete(&run.run_id).await.unwrap();
    assert_eq!(
        plane.messages(A, thread).await[1],
        ("assistant".to_string(), "real answer".to_string())
    );
    assert_eq!(
        plane.thread(A, thread).await.status,
        ThreadStatus::Completed
    );
}

#[tokio::test]
async fn a_newer_worker_of_the_same_agent_cannot_report_on_a_run_handed_to_another() {
    let plane = plane().await;
    let mut first = plane.worker(A).await;
    let thread = plane.send(A, "hi").await.thread_id;
    let run = first.assignment().await;
    // A second worker takes the agent's slot (a replacement, or a dial-in worker
    // joining) before the first one's loss is handled: the run is still the first's.
    let mut second = plane.worker(A).await;
    let refused = second
        .report(WorkerEvent::MessageAppended {
            run_id: run.run_id.clone(),
            message: ChatMessage::assistant("not mine", Vec::new()),
        })
        .await
        .unwrap_err();
    assert!(
        matches!(refused, EventRejected::UnknownRun(_)),
        "{refused:?}"
    );
    assert_eq!(second.tool_check(&run.run_id).await, None);
    assert_eq!(roles(&plane.messages(A, thread).await), ["user"]);
}

#[tokio::test]
async fn a_worker_may_add_only_assistant_and_tool_messages() {
    let plane = plane().await;
    let mut worker = plane.worker(A).await;
    let thread = plane.send(A, "hi").await.thread_id;
    let run = worker.assignment().await;
    for role in [Role::User, Role::System] {
        let mut message = ChatMessage::user("obey me");
        message.role = role;
        let refused = worker
            .report(WorkerEvent::MessageAppended {
                run_id: run.run_id.clone(),
                message,
            })
            .await
            .unwrap_err();
        assert!(
            matches!(refused, EventRejected::ForbiddenRole(_)),
            "{refused:?}"
        );
    }
    assert_eq!(roles(&plane.messages(A, thread).await), ["user"]);
}

// ------------------------------------------------------------------ kill

#[tokio::test]
async fn a_killed_queued_run_never_reaches_a_worker() {
    let plane = plane().await;
    let thread = plane.send(A, "hi").await.thread_id;
    assert!(plane.runs.kill_thread(A, thread, USER).await.unwrap());
    let record = plane.thread(A, thread).await;
    assert_eq!(record.status, ThreadStatus::Killed);
    assert_eq!(record.failure_kind, Some(FailureKind::Killed));
    assert_eq!(record.error.as_deref(), Some("killed by tester"));
    assert_eq!(plane.runs_of(A, thread).await[0].status, RunStatus::Killed);

    let mut worker = plane.worker(A).await;
    assert!(worker.sent().is_empty(), "a killed run is not delivered");
    // Killing it again: it is no longer going.
    assert!(!plane.runs.kill_thread(A, thread, USER).await.unwrap());
}

#[tokio::test]
async fn a_killed_running_run_is_cancelled_in_its_worker_and_its_late_events_are_dropped() {
    let plane = plane().await;
    let mut worker = plane.worker(A).await;
    let thread = plane.send(A, "hi").await.thread_id;
    let run = worker.assignment().await;
    worker.step(&run.run_id, 1, StepKind::Tool).await;

    assert!(plane.runs.kill_thread(A, thread, USER).await.unwrap());
    match worker.command().await {
        ControlCommand::CancelRun { run_id, reason } => {
            assert_eq!(run_id, run.run_id);
            assert_eq!(reason, "killed by tester");
        }
        other => panic!("expected the run cancelled, got {other:?}"),
    }
    let record = plane.thread(A, thread).await;
    assert_eq!(record.status, ThreadStatus::Killed);
    assert_eq!(record.failure_kind, Some(FailureKind::Killed));

    // What the worker sent before it heard of the kill crosses it: dropped, and
    // not taken for a forgery.
    let late = worker
        .report(WorkerEvent::MessageAppended {
            run_id: run.run_id.clone(),
            message: ChatMessage::assistant("too late", Vec::new()),
        })
        .await
        .unwrap_err();
    assert!(matches!(late, EventRejected::EndedRun(_)), "{late:?}");
    assert!(!late.is_suspicious());
    assert_eq!(roles(&plane.messages(A, thread).await), ["user"]);
    assert_eq!(
        plane.thread(A, thread).await.status,
        ThreadStatus::Killed,
        "a late completion does not revive it"
    );
}

/// An ended thread whose history is over what a continuation carries, so
/// replying to it starts a continuation that waits for a summary.
async fn long_ended_thread(plane: &Plane, worker: &mut FakeWorker) -> u64 {
    let long = "x".repeat(300 * 1024);
    let first = plane.send(A, &long).await;
    let run = worker.assignment().await;
    worker.answer(&run.run_id, "read it").await;
    worker.complete(&run.run_id).await.unwrap();
    first.message_id
}

#[tokio::test]
async fn a_continuation_starts_once_the_summary_of_what_it_left_out_is_written() {
    let plane = plane().await;
    let mut worker = plane.worker(A).await;
    let message = long_ended_thread(&plane, &mut worker).await;
    plane.summarizer.hold();
    let continued = plane.reply(A, "go on", message).await;
    assert!(matches!(continued.routed, Routed::ContinuedFrom(_)));
    assert_eq!(
        plane.runs.active_threads(A).await,
        [continued.thread_id],
        "it is going while it waits"
    );
    assert!(worker.sent().is_empty(), "no run before the summary");

    plane.summarizer.release();
    let run = worker.assignment().await;
    assert_eq!(run.thread_id, continued.thread_id);
    // The whole long exchange is left out; the model's summary of it comes first.
    let first = &run.messages[0].content;
    assert!(
        first.contains("continues an earlier thread") && first.contains("summary of 2 messages"),
        "{first}"
    );
    assert_eq!(
        plane.summarizer.asked(),
        [chorus_control_plane::summaries::Purpose::Context]
    );
    assert_eq!(last_message(&run), "go on");
}

#[tokio::test]
async fn a_continuation_killed_while_its_summary_is_written_never_runs() {
    let plane = plane().await;
    let mut worker = plane.worker(A).await;
    let message = long_ended_thread(&plane, &mut worker).await;
    plane.summarizer.hold();
    let continued = plane.reply(A, "go on", message).await;
    assert!(
        plane
            .runs
            .kill_thread(A, continued.thread_id, USER)
            .await
            .unwrap()
    );
    let record = plane.thread(A, continued.thread_id).await;
    assert_eq!(record.status, ThreadStatus::Killed);
    assert_eq!(record.failure_kind, Some(FailureKind::Killed));
    assert!(plane.runs.active_threads(A).await.is_empty());

    plane.summarizer.release();
    plane.summarizer.until_answered(1).await;
    // The summary's report reaches the actor right after it is written; a run
    // would be delivered at once. A short grace for a negative.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert!(worker.sent().is_empty(), "a killed continuation never runs");
    assert!(plane.runs_of(A, continued.thread_id).await.is_empty());
    assert_eq!(
        plane.thread(A, continued.thread_id).await.status,
        ThreadStatus::Killed
    );
}

// ------------------------------------------------------------------ loss

#[tokio::test]
async fn a_run_waiting_for_a_worker_that_dies_before_attaching_fails_with_the_reason() {
    let plane = plane().await;
    let launched = plane.launch(A);
    let thread = plane.send(A, "hi").await.thread_id;
    launched.die("the worker exited with status 1").await;
    let record = plane.thread(A, thread).await;
    assert_eq!(record.status, ThreadStatus::Failed);
    assert_eq!(record.failure_kind, Some(FailureKind::Interrupted));
    let error = record.error.unwrap();
    assert!(
        error.contains("the worker exited with status 1")
            && error.contains("could not start")
            && error.contains("Send the message again"),
        "{error}"
    );
}

#[tokio::test]
async fn a_run_whose_worker_died_before_reporting_goes_to_the_next_worker_as_it_was() {
    let plane = plane().await;
    let mut first = plane.worker(A).await;
    let thread = plane.send(A, "hi").await.thread_id;
    let run = first.assignment().await;
    first.die("connection reset").await;
    assert_eq!(plane.thread(A, thread).await.status, ThreadStatus::Running);

    let mut second = plane.worker(A).await;
    let again = second.assignment().await;
    assert_eq!(again.run_id, run.run_id, "the same run, not a new attempt");
    assert_eq!(again.attempt, 1);
    assert_eq!(plane.runs_of(A, thread).await.len(), 1);
    second.answer(&again.run_id, "hello").await;
    second.complete(&again.run_id).await.unwrap();
    assert_eq!(
        plane.thread(A, thread).await.status,
        ThreadStatus::Completed
    );
}

/// How far a run got before its worker died.
#[derive(Debug, Clone, Copy)]
enum LostAt {
    /// A model call was going (a step open, nothing stored).
    MidStep,
    /// A tool call was being checked and waited for a person's answer.
    MidToolCheck,
}

#[tokio::test]
async fn a_run_lost_after_it_started_is_resumed_as_a_new_attempt_from_the_store() {
    let plane = Plane::start().await;
    for (i, lost_at) in [LostAt::MidStep, LostAt::MidToolCheck]
        .into_iter()
        .enumerate()
    {
        // a fresh agent per case: one store for the table.
        let agent = format!("a{i}");
        plane.add_agent(&agent).await;
        let a = agent.as_str();
        let mut first = plane.worker(a).await;
        let thread = plane.send(a, "hi").await.thread_id;
        let run = first.assignment().await;
        match lost_at {
            LostAt::MidStep => first.step(&run.run_id, 1, StepKind::LlmCall).await,
            LostAt::MidToolCheck => {
                first.step(&run.run_id, 1, StepKind::LlmCall).await;
                first.answer(&run.run_id, "I will look").await;
                first.step_ended(&run.run_id, 1).await;
                first.step(&run.run_id, 2, StepKind::Permission).await;
                assert_eq!(
                    first.tool_check(&run.run_id).await,
                    Some((thread, Some(USER.to_string())))
                );
                plane.runs.set_waiting(a, thread, true).await;
                plane
                    .until_status(a, thread, ThreadStatus::WaitingForPermission)
                    .await;
            }
        }
        first.die("connection reset").await;

        // Resumed, not failed: running again, the open step closed as failed.
        let record = plane.thread(a, thread).await;
        assert_eq!(record.status, ThreadStatus::Running, "{lost_at:?}");
        let steps = plane.steps(a, thread).await;
        let open = steps.last().unwrap();
        assert!(
            open.ended_at.is_some() && open.failed,
            "{lost_at:?}: {open:?}"
        );
        let runs = plane.runs_of(a, thread).await;
        assert_eq!(
            runs.iter()
                .map(|r| (r.attempt, r.status))
                .collect::<Vec<_>>(),
            [(1, RunStatus::Interrupted), (2, RunStatus::Queued)],
            "{lost_at:?}"
        );

        let mut second = plane.worker(a).await;
        let again = second.assignment().await;
        assert_ne!(again.run_id, run.run_id, "{lost_at:?}");
        assert_eq!(again.attempt, 2);
        assert_eq!(again.first_step_number as usize, steps.len() + 1);
        // It starts from what was stored: the answer before the check is there.
        let stored: Vec<&str> = again.messages.iter().map(|m| m.content.as_str()).collect();
        match lost_at {
            LostAt::MidStep => assert_eq!(stored, ["hi"]),
            LostAt::MidToolCheck => assert_eq!(stored, ["hi", "I will look"]),
        }
    }
}

#[tokio::test]
async fn a_worker_lost_after_it_reported_the_end_changes_nothing() {
    let plane = plane().await;
    let mut first = plane.worker(A).await;
    let thread = plane.send(A, "hi").await.thread_id;
    let run = first.assignment().await;
    first.answer(&run.run_id, "hello").await;
    first.complete(&run.run_id).await.unwrap();
    first.die("connection reset").await;

    let record = plane.thread(A, thread).await;
    assert_eq!(record.status, ThreadStatus::Completed);
    assert_eq!(record.error, None);
    let mut second = plane.worker(A).await;
    assert!(second.sent().is_empty(), "nothing to resume");
    assert_eq!(plane.runs_of(A, thread).await.len(), 1);
}

#[tokio::test]
async fn a_thread_resumed_too_often_without_progress_fails_and_progress_resets_the_count() {
    // Each case: whether each lost attempt stored an answer first; the thread
    // fails at the end (max_resumes = 1) or is resumed once more.
    let cases: [(&[bool], bool); 3] = [
        (&[false], false),
        (&[false, false], true),
        (&[false, true, false], false),
    ];
    let plane = Plane::with(|settings| settings.threads.max_resumes = 1).await;
    for (i, (attempts, fails)) in cases.into_iter().enumerate() {
        // a fresh agent per case: one store for the table.
        let agent = format!("a{i}");
        plane.add_agent(&agent).await;
        let a = agent.as_str();
        let thread = plane.send(a, "hi").await.thread_id;
        for (i, stores) in attempts.iter().enumerate() {
            let mut worker = plane.worker(a).await;
            let run = worker.assignment().await;
            assert_eq!(run.attempt as usize, i + 1, "{attempts:?}");
            worker
                .step(&run.run_id, run.first_step_number, StepKind::LlmCall)
                .await;
            if *stores {
                worker.answer(&run.run_id, "progress").await;
            }
            worker.die("connection reset").await;
        }
        let record = plane.thread(a, thread).await;
        if fails {
            assert_eq!(record.status, ThreadStatus::Failed, "{attempts:?}");
            assert_eq!(record.failure_kind, Some(FailureKind::Interrupted));
            let error = record.error.unwrap();
            assert!(
                error.contains("connection reset")
                    && error.contains("resumed 1 times in a row without any progress"),
                "{error}"
            );
            let mut worker = plane.worker(a).await;
            assert!(worker.sent().is_empty(), "{attempts:?}: no further attempt");
        } else {
            assert_eq!(record.status, ThreadStatus::Running, "{attempts:?}");
            let mut worker = plane.worker(a).await;
            assert_eq!(
                worker.assignment().await.attempt as usize,
                attempts.len() + 1
            );
        }
    }
}

// ------------------------------------------------------------------ agent-wide

#[tokio::test]
async fn a_changed_agent_reaches_the_connected_worker_and_the_queued_assignments() {
    let plane = plane().await;
    let queued = plane.send(A, "hi").await.thread_id;
    let change = AgentChange {
        system_prompt: Some("be thorough".into()),
        ..AgentChange::default()
    };
    plane.runs.agent_changed(A, change.clone()).await;
    let mut worker = plane.worker(A).await;
    let run = worker.assignment().await;
    assert_eq!(run.thread_id, queued);
    assert_eq!(run.agent.system_prompt, "be thorough");

    // A run already with its worker hears of the change from the worker's side.
    let later = AgentChange {
        system_prompt: Some("be quick".into()),
        ..AgentChange::default()
    };
    plane.runs.agent_changed(A, later.clone()).await;
    assert_eq!(
        worker.sent(),
        [ControlCommand::UpdateAgent(later)],
        "sent before agent_changed returns"
    );
}

#[tokio::test]
async fn a_destroyed_agent_fails_its_queued_going_and_seeding_threads() {
    let plane = plane().await;
    let mut worker = plane.worker(A).await;
    let message = long_ended_thread(&plane, &mut worker).await;
    plane.summarizer.hold();
    let seeding = plane.reply(A, "go on", message).await.thread_id;
    let going = plane.send(A, "one").await.thread_id;
    let run = worker.assignment().await;
    worker.step(&run.run_id, 1, StepKind::LlmCall).await;
    worker.die("connection reset").await;
    // The next worker is launched but not connected: a new message waits for it.
    let launched = plane.launch(A);
    let queued = plane.send(A, "two").await.thread_id;

    let failure = Failure::new(FailureKind::Killed, "its agent was destroyed");
    plane.runs.fail_agent_runs(A, &failure).await;
    for thread in [seeding, going, queued] {
        let record = plane.thread(A, thread).await;
        assert_eq!(record.status, ThreadStatus::Failed, "thread {thread}");
        assert_eq!(record.failure_kind, Some(FailureKind::Killed));
        assert_eq!(record.error.as_deref(), Some("its agent was destroyed"));
    }
    assert!(plane.runs.active_threads(A).await.is_empty());
    plane.summarizer.release();
    let mut worker = launched.attach().await;
    assert!(worker.sent().is_empty(), "nothing of them is delivered");
}

#[tokio::test]
async fn a_draining_control_plane_delivers_no_queued_run() {
    let plane = plane().await;
    let thread = plane.send(A, "hi").await.thread_id;
    plane.runs.drain();
    let mut worker = plane.worker(A).await;
    assert!(worker.sent().is_empty(), "kept queued for the next start");
    assert_eq!(plane.runs_of(A, thread).await[0].status, RunStatus::Queued);
    assert_eq!(plane.thread(A, thread).await.status, ThreadStatus::Running);
}

#[tokio::test]
async fn a_run_requeued_after_the_next_worker_attached_goes_to_that_worker() {
    let plane = plane().await;
    let mut first = plane.worker(A).await;
    let thread = plane.send(A, "hi").await.thread_id;
    let run = first.assignment().await;
    // The successor attaches before the first one's loss reaches the actor (the
    // supervisor's losses are forwarded by a task of their own).
    let mut second = plane.worker(A).await;
    assert!(
        second.sent().is_empty(),
        "the run is still the first worker's"
    );
    first.die("connection reset").await;
    let again = second.assignment().await;
    assert_eq!(again.run_id, run.run_id);
    assert_eq!(again.thread_id, thread);
}

// ------------------------------------------------------------------ threads with a role

/// A plane with agent `a` and the test task engine.
async fn plane_with_hooks(
    adjust: impl FnOnce(&mut chorus_control_plane::runs::RunSettings),
) -> (Plane, std::sync::Arc<TestHooks>) {
    let plane = Plane::with(adjust).await;
    plane.add_agent(A).await;
    let hooks = std::sync::Arc::new(TestHooks::default());
    plane.runs.set_role_hooks(hooks.clone());
    (plane, hooks)
}

/// A thread with a role is offered its role's tools beside the agent's and works in
/// its directory; each end of its turn (completed, failed, killed) is told to the
/// engine, with the run that completed; a chat thread's end is not (the control).
#[tokio::test]
async fn each_end_of_a_role_threads_turn_is_told_to_the_engine() {
    let (plane, hooks) = plane_with_hooks(|_| {}).await;
    let mut worker = plane.worker(A).await;

    let planner = plane
        .start_role(A, "plan task 7", ThreadRole::Planner, None)
        .await
        .unwrap();
    let run = worker.assignment().await;
    assert_eq!(run.thread_id, planner);
    let offered: Vec<_> = run.role_tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(offered, ["submit_plan"]);
    assert!(run.role_tools[0].ends_turn);
    assert_eq!(run.workdir, None);
    assert!(
        run.agent.offered.iter().all(|t| t.name != "submit_plan"),
        "the agent's own tools are apart"
    );
    worker.answer(&run.run_id, "planned").await;
    worker.complete(&run.run_id).await.unwrap();
    assert_eq!(
        hooks.until_ended(1).await,
        [(
            A.to_string(),
            planner,
            ThreadRole::Planner,
            TurnEnd::Completed {
                run_id: run.run_id.clone()
            }
        )]
    );
    assert_eq!(
        plane.thread(A, planner).await.role,
        Some(ThreadRole::Planner)
    );

    // The control: a chat thread's end is nobody's business but its own.
    let chat = plane.send(A, "hi").await.thread_id;
    let run = worker.assignment().await;
    assert!(run.role_tools.is_empty());
    worker.complete(&run.run_id).await.unwrap();
    plane.until_status(A, chat, ThreadStatus::Completed).await;

    let task = plane
        .start_role(A, "do task 7", ThreadRole::Worker, Some("tasks/7"))
        .await
        .unwrap();
    let run = worker.assignment().await;
    assert_eq!(run.workdir.as_deref(), Some("tasks/7"));
    assert_eq!(run.role_tools[0].name, "completion_report");
    assert_eq!(
        plane.thread(A, task).await.workdir.as_deref(),
        Some("tasks/7")
    );
    worker
        .fail(&run.run_id, FailureKind::ModelError, "the provider said no")
        .await;
    let failed = hooks.until_ended(2).await.pop().unwrap();
    assert_eq!(
        failed,
        (
            A.to_string(),
            task,
            ThreadRole::Worker,
            TurnEnd::Failed(Failure::new(
                FailureKind::ModelError,
                "the provider said no"
            ))
        )
    );

    let killed = plane
        .start_role(A, "answer b", ThreadRole::Answerer, None)
        .await
        .unwrap();
    let run = worker.assignment().await;
    worker.step(&run.run_id, 1, StepKind::LlmCall).await;
    assert!(plane.runs.kill_thread(A, killed, USER).await.unwrap());
    assert!(matches!(
        worker.command().await,
        ControlCommand::CancelRun { .. }
    ));
    let ended = hooks.until_ended(3).await;
    assert_eq!(ended[2].1, killed);
    assert_eq!(ended[2].3, TurnEnd::Killed);
    assert_eq!(ended.len(), 3, "the chat thread was never told: {ended:?}");

    // A working directory that leaves the workspace is refused; no thread starts.
    for bad in ["../elsewhere", "/etc", "tasks/../../x", ""] {
        let refused = plane
            .start_role(A, "x", ThreadRole::Worker, Some(bad))
            .await
            .unwrap_err();
        assert!(
            refused.to_string().contains("working directory"),
            "{refused}"
        );
    }
    assert!(worker.sent().is_empty());
}

/// The next message of a completed thread with a role wakes that same thread:
/// its next run has the history and the message, and its end is told again. A
/// reply to one of its messages does the same (never a continuation without the
/// role). A message while it runs is injected; a run that ends without taking it
/// starts the next run, and only that run's end is told.
#[tokio::test]
async fn a_message_wakes_a_completed_role_thread_with_its_history() {
    let (plane, hooks) = plane_with_hooks(|_| {}).await;
    let mut worker = plane.worker(A).await;
    let thread = plane
        .start_role(A, "plan task 7", ThreadRole::Planner, None)
        .await
        .unwrap();
    let run = worker.assignment().await;
    worker.answer(&run.run_id, "two questions").await;
    worker.complete(&run.run_id).await.unwrap();
    hooks.until_ended(1).await;
    plane.until_status(A, thread, ThreadStatus::Completed).await;

    let received = plane
        .message_thread(A, thread, "the answers")
        .await
        .unwrap();
    assert_eq!(
        (received.thread_id, received.routed),
        (thread, Routed::Injected)
    );
    let woken = worker.assignment().await;
    assert_eq!(woken.thread_id, thread);
    assert_eq!(woken.role_tools[0].name, "submit_plan");
    assert_eq!(
        woken
            .messages
            .iter()
            .map(|m| m.content.as_str())
            .collect::<Vec<_>>(),
        ["plan task 7", "two questions"],
        "the history"
    );
    assert_eq!(woken.inputs.len(), 1);
    assert_eq!(woken.inputs[0].content, "the answers");
    let record = plane.thread(A, thread).await;
    assert_eq!(
        (record.status, record.ended_at),
        (ThreadStatus::Running, None)
    );

    // A message while it runs is injected; the run ends without taking it.
    let injected = plane.message_thread(A, thread, "one more").await.unwrap();
    match worker.command().await {
        ControlCommand::InjectMessage { run_id, input } => {
            assert_eq!(run_id, woken.run_id);
            assert_eq!(input.message_id, injected.message_id);
        }
        other => panic!("expected the message injected, got {other:?}"),
    }
    worker.take_input(&woken.run_id, received.message_id).await;
    worker.answer(&woken.run_id, "planned").await;
    worker.complete(&woken.run_id).await.unwrap();
    let next = worker.assignment().await;
    assert_eq!(next.thread_id, thread);
    assert_eq!(next.inputs[0].content, "one more");
    assert_eq!(hooks.ended().len(), 1, "the turn goes on in the next run");
    worker.take_input(&next.run_id, injected.message_id).await;
    worker.complete(&next.run_id).await.unwrap();
    let ended = hooks.until_ended(2).await;
    assert_eq!(
        ended[1].3,
        TurnEnd::Completed {
            run_id: next.run_id.clone()
        }
    );

    // A reply to one of its messages wakes it too.
    let first = plane.store.thread_messages(A, thread).await.unwrap()[0].id;
    let replied = plane.reply(A, "and this", first).await;
    assert_eq!(replied.thread_id, thread, "not a continuation");
    assert_eq!(worker.assignment().await.thread_id, thread);

    // A chat thread that ended is not woken this way (a reply continues it).
    let chat = plane.send(A, "hi").await.thread_id;
    let run = loop {
        let run = worker.assignment().await;
        if run.thread_id == chat {
            break run;
        }
    };
    worker.complete(&run.run_id).await.unwrap();
    plane.until_status(A, chat, ThreadStatus::Completed).await;
    let refused = plane.message_thread(A, chat, "x").await.unwrap_err();
    assert!(refused.to_string().contains("no role"), "{refused}");
}

/// A role thread whose worker is lost beyond resumption (resumed too often
/// without progress) ends its turn as failed, and the engine is told.
#[tokio::test]
async fn a_role_thread_lost_beyond_resumption_ends_its_turn_failed() {
    let (plane, hooks) = plane_with_hooks(|settings| settings.threads.max_resumes = 0).await;
    let thread = plane
        .start_role(A, "do it", ThreadRole::Worker, Some("tasks/1"))
        .await
        .unwrap();
    let mut worker = plane.worker(A).await;
    let run = worker.assignment().await;
    worker.step(&run.run_id, 1, StepKind::LlmCall).await;
    worker.die("connection reset").await;
    let ended = hooks.until_ended(1).await;
    match &ended[0] {
        (agent, t, ThreadRole::Worker, TurnEnd::Failed(failure)) => {
            assert_eq!((agent.as_str(), *t), (A, thread));
            assert_eq!(failure.kind, FailureKind::Interrupted);
            assert!(failure.message.contains("connection reset"), "{failure:?}");
        }
        other => panic!("expected a failed turn, got {other:?}"),
    }
    assert_eq!(plane.thread(A, thread).await.status, ThreadStatus::Failed);
}

// ------------------------------------------------------------------ CLI backends

/// A CLI agent's runs say so; the session a run started is stored once (a replay
/// changes nothing) and the thread's next run resumes it; a reply to the ended
/// thread (a continuation) forks it; an agent switched to the tool loop gets none.
#[tokio::test]
async fn a_cli_agents_next_run_resumes_its_session_and_a_continuation_forks_it() {
    use chorus_control_plane::store::AgentUpdate;
    use chorus_proto::domain::{Backend, CliSession};
    let plane = plane().await;
    let switch = |backend| AgentUpdate {
        backend: Some(backend),
        ..AgentUpdate::default()
    };
    plane
        .store
        .update_agent(A, &switch(Backend::ClaudeCode))
        .await
        .unwrap();
    let mut worker = plane.worker(A).await;
    let first = plane.send(A, "first").await;
    let run = worker.assignment().await;
    assert_eq!(run.backend, Backend::ClaudeCode);
    assert_eq!(run.cli_session, None, "a new thread starts a new session");
    let started = |session: &str| WorkerEvent::CliSessionStarted {
        run_id: run.run_id.clone(),
        session_id: session.into(),
    };
    worker.report(started("session-1")).await.unwrap();
    // The same event again (a reconnect's resend), claiming another session.
    worker.report_as(1, started("forged")).await.unwrap();
    // A message the run does not take starts the thread's next run.
    plane.reply(A, "and then", first.message_id).await;
    assert!(matches!(
        worker.command().await,
        ControlCommand::InjectMessage { .. }
    ));
    worker.answer(&run.run_id, "done first").await;
    worker.complete(&run.run_id).await.unwrap();
    let next = worker.assignment().await;
    assert_eq!(next.thread_id, first.thread_id);
    assert_eq!(
        next.cli_session,
        Some(CliSession {
            id: "session-1".into(),
            fork: false
        })
    );
    let runs = plane.runs_of(A, first.thread_id).await;
    assert_eq!(runs.len(), 2);
    worker
        .take_input(&next.run_id, next.inputs[0].message_id)
        .await;
    worker.answer(&next.run_id, "done then").await;
    worker.complete(&next.run_id).await.unwrap();
    assert_eq!(
        plane.thread(A, first.thread_id).await.status,
        ThreadStatus::Completed
    );

    // A reply to the ended thread: a continuation, which forks the ended session.
    let continued = plane.reply(A, "go on", first.message_id).await;
    assert!(matches!(continued.routed, Routed::ContinuedFrom(_)));
    let forked = worker.assignment().await;
    assert_eq!(forked.thread_id, continued.thread_id);
    assert_eq!(
        forked.cli_session,
        Some(CliSession {
            id: "session-1".into(),
            fork: true
        })
    );
    worker.answer(&forked.run_id, "went on").await;
    worker.complete(&forked.run_id).await.unwrap();

    // Back on the tool loop: no CLI session, and the run says it is the loop's.
    plane
        .store
        .update_agent(A, &switch(Backend::Api))
        .await
        .unwrap();
    plane.reply(A, "once more", first.message_id).await;
    let api = worker.assignment().await;
    assert_eq!((api.backend, api.cli_session), (Backend::Api, None));
}
