//! Following a task live (`chorus task create|answer|start|follow`): the feed's
//! events and the task as the API shows it in, what to print and whether the wait
//! is over out. Pure: the I/O is in `task::watch`.
//!
//! A task's work happens in threads (its `runs` name them), so their events are
//! shown as `chorus send` shows a thread's, by the same `Follow`. Events of a thread
//! not yet known (its run is recorded a moment after it starts) are kept, a bounded
//! number, and shown once the task names the thread. Task events (feed kind `task`,
//! `{"task_id", "kind", "by", "data", …}`) are read as raw JSON: each one of this
//! task's makes the caller read the task again, and only the task's status (with
//! what it waits on) decides when the wait ends.

use std::collections::{HashMap, VecDeque};

use serde_json::Value;

use super::render;
use crate::cli::follow::{Action, Follow};
use crate::cli::render::Style;
use crate::feed::FeedEvent;

/// Events of unknown threads kept for when the task names them.
const PENDING: usize = 2000;

/// The part of a task's life being followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Until the planner has planned or asked.
    Planning,
    /// Until the worker has reported, or needs a person.
    Work,
}

impl Phase {
    /// The phase a task in `status` is in; `None` when nothing is going on to follow.
    pub fn of(status: &str) -> Option<Phase> {
        match status {
            "planning" | "awaiting_input" => Some(Phase::Planning),
            "active" | "waiting" => Some(Phase::Work),
            _ => None,
        }
    }
}

/// Whether the wait is over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Going,
    /// Over; `ok` false when the task failed or is blocked (exit 1).
    Done {
        ok: bool,
    },
}

/// Whether following `phase` ends at this state of the task. Planning goes on while
/// the planner works (a task `awaiting_input` whose questions are all answered is
/// the planner reading the answers); work goes on while the task is `active` or
/// waits on another agent (a delegate, an `ask_agent`, a running step), and ends
/// when a person is needed (a question, an approval, a review) or the task ended.
pub fn verdict(phase: Phase, task: &Value) -> Verdict {
    let status = task["status"].as_str().unwrap_or("");
    let waits_on = task["waiting_on"]["kind"].as_str().unwrap_or("");
    match (phase, status) {
        (_, "failed" | "blocked") => Verdict::Done { ok: false },
        (Phase::Planning, "planning") => Verdict::Going,
        (Phase::Planning, "awaiting_input") if render::open_questions(task).is_empty() => {
            Verdict::Going
        }
        (Phase::Work, "active") => Verdict::Going,
        (Phase::Work, "waiting") if matches!(waits_on, "delegate" | "agent" | "step") => {
            Verdict::Going
        }
        _ => Verdict::Done { ok: true },
    }
}

/// What to print when the wait is over: the questions, the plan, the report, or
/// what the task waits on, with the command that moves it on.
pub fn ending(task: &Value, style: Style, now: chrono::DateTime<chrono::Utc>) -> String {
    let id = task["id"].to_string();
    let status = task["status"].as_str().unwrap_or("?");
    let mut out = format!(
        "{} {}\n",
        style.bold(&format!("task {id}")),
        render::status(style, status)
    );
    match status {
        "awaiting_input" => {
            out.push_str(&render::questions(task, style));
            out.push_str(&render::how_to_answer(task));
        }
        "planned" => {
            out.push_str(&render::plan(task));
            out.push_str(&format!(
                "Start it: chorus task start {id}   (change the plan first: chorus task edit {id} …)\n"
            ));
        }
        "review" => {
            out.push_str(&render::report(&task["report"], style));
            out.push_str(&format!(
                "Accept it: chorus task accept {id}   or send it back: chorus task send-back {id} \"<what to change>\"\n"
            ));
        }
        "waiting" => {
            if let Some(waiting) = render::waiting_on(task, now) {
                out.push_str(&format!("Waiting on {waiting}\n"));
            }
            if !render::open_questions(task).is_empty() {
                out.push_str(&render::questions(task, style));
                out.push_str(&render::how_to_answer(task));
            }
        }
        "blocked" => {
            if let Some(reason) = task["blocked_reason"].as_str() {
                out.push_str(&format!("Blocked: {reason}\n"));
            }
            out.push_str(&render::report(&task["report"], style));
            out.push_str(&format!(
                "Retry it: chorus task retry {id}   or tell the agent more: chorus task message {id} \"…\"\n"
            ));
        }
        _ => out.push_str(&render::report(&task["report"], style)),
    }
    out
}

/// What the caller does after an event.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Step {
    /// Text to print, in order.
    pub print: Vec<String>,
    /// Read the task again (one of its events came, or events were lost).
    pub reread: bool,
}

/// A task event as a line while following (none for tool calls: the thread's own
/// steps show them, and for `created`: the command said so).
pub fn task_event_line(data: &Value, style: Style) -> Option<String> {
    let kind = data["kind"].as_str().unwrap_or("?");
    if matches!(kind, "tool_call" | "created") {
        return None;
    }
    let detail = render::event_detail(kind, &data["data"]);
    Some(style.yellow(&format!(
        "* {kind} by {}{}\n",
        data["by"].as_str().unwrap_or("?"),
        if detail.is_empty() {
            String::new()
        } else {
            format!(": {detail}")
        }
    )))
}

/// A thread: its agent's name and its id (ids are per agent).
type ThreadKey = (String, u64);

pub struct TaskFollow {
    task_id: u64,
    style: Style,
    /// Each thread of the task, with the line that names it.
    threads: HashMap<ThreadKey, (Follow, String)>,
    /// The thread whose lines were printed last (a new one gets its name first).
    last: Option<ThreadKey>,
    /// Events of threads the task has not named yet.
    pending: VecDeque<(ThreadKey, FeedEvent)>,
}

impl TaskFollow {
    pub fn new(task_id: u64, style: Style) -> TaskFollow {
        TaskFollow {
            task_id,
            style,
            threads: HashMap::new(),
            last: None,
            pending: VecDeque::new(),
        }
    }

    /// Whether `agent`'s thread `thread_id` is one of the task's.
    pub fn follows(&self, agent: &str, thread_id: u64) -> bool {
        self.threads.contains_key(&(agent.to_string(), thread_id))
    }

    /// Takes the threads the task (as just read) names in its runs; what was kept
    /// of a new one's events is printed now.
    pub fn learn(&mut self, task: &Value) -> Vec<String> {
        // The planner's thread is named as soon as planning starts, its run's a
        // moment later.
        let planner = task["planner_thread"].as_u64().map(|thread_id| {
            (
                thread_id,
                task["planner_agent"].as_str().unwrap_or("planner"),
                "planner",
            )
        });
        let runs = task["runs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|run| {
                Some((
                    run["thread_id"].as_u64()?,
                    run["agent"].as_str().unwrap_or("?"),
                    run["role"].as_str().unwrap_or("?"),
                ))
            });
        let mut out = Vec::new();
        for (thread_id, agent, role) in planner.into_iter().chain(runs) {
            let key = (agent.to_string(), thread_id);
            if self.threads.contains_key(&key) {
                continue;
            }
            let name = format!("== {agent} ({role}), thread {thread_id}");
            self.threads
                .insert(key.clone(), (Follow::new(thread_id, self.style), name));
            let (kept, others): (VecDeque<_>, VecDeque<_>) = std::mem::take(&mut self.pending)
                .into_iter()
                .partition(|(k, _)| *k == key);
            self.pending = others;
            for (_, event) in kept {
                out.extend(self.thread_event(&key, &event));
            }
        }
        out
    }

    /// One event of the feed (its SSE event name and data).
    pub fn on_feed(&mut self, kind: &str, data: &Value) -> Step {
        match kind {
            "reset" => {
                return Step {
                    print: Vec::new(),
                    reread: true,
                };
            }
            "task" => {
                if data["task_id"].as_u64() != Some(self.task_id) {
                    return Step::default();
                }
                return Step {
                    print: task_event_line(data, self.style).into_iter().collect(),
                    reread: true,
                };
            }
            "task_deleted" if data["task_id"].as_u64() == Some(self.task_id) => {
                // The read that follows finds it gone, and following ends.
                let by = data["by"].as_str().unwrap_or("?");
                return Step {
                    print: vec![format!("* deleted by {by}\n")],
                    reread: true,
                };
            }
            _ => {}
        }
        let (Some(agent), Some(thread_id)) = (data["agent"].as_str(), data["thread_id"].as_u64())
        else {
            return Step::default();
        };
        let key = (agent.to_string(), thread_id);
        // A kind this build does not know (a newer server's) is not this follower's.
        let Ok(event) = FeedEvent::from_wire(kind, data.clone()) else {
            return Step::default();
        };
        if !self.threads.contains_key(&key) {
            if self.pending.len() == PENDING {
                self.pending.pop_front();
            }
            self.pending.push_back((key, event));
            return Step::default();
        }
        Step {
            print: self.thread_event(&key, &event),
            reread: false,
        }
    }

    fn thread_event(&mut self, key: &ThreadKey, event: &FeedEvent) -> Vec<String> {
        let style = self.style;
        let thread_id = key.1;
        let Some((follow, name)) = self.threads.get_mut(key) else {
            return Vec::new();
        };
        let mut texts = Vec::new();
        for action in follow.on_event(Some(thread_id), event) {
            match action {
                Action::Print(text) => texts.push(text),
                Action::Ask {
                    approval_id,
                    question,
                } => texts.push(format!(
                    "{question}\n  answer with: chorus approve {approval_id}  (or chorus deny {approval_id})\n"
                )),
                Action::Answered { .. } => {}
                // The turn ended; the task's status (read next) says what follows.
                Action::Done { status, error } => texts.push(style.dim(&format!(
                    "   turn {status}{}\n",
                    error.map(|e| format!(": {e}")).unwrap_or_default()
                ))),
            }
        }
        if !texts.is_empty() && self.last.as_ref() != Some(key) {
            let lead = if self.last.is_some() { "\n" } else { "" };
            texts.insert(0, format!("{lead}{}\n", style.bold(name)));
            self.last = Some(key.clone());
        }
        texts
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const PLAIN: Style = Style { color: false };

    fn task(status: &str) -> Value {
        json!({"id": 7, "status": status, "questions": [], "runs": [], "waiting_on": null,
               "report": null})
    }

    #[test]
    fn planning_ends_at_a_plan_or_open_questions_and_work_at_a_person_or_the_end() {
        use Phase::*;
        use Verdict::*;
        assert_eq!(verdict(Planning, &task("planning")), Going);
        assert_eq!(verdict(Planning, &task("planned")), Done { ok: true });
        assert_eq!(verdict(Planning, &task("failed")), Done { ok: false });
        let mut asked = task("awaiting_input");
        asked["questions"] = json!([{"id": "q1", "question": "?", "answer": null}]);
        assert_eq!(verdict(Planning, &asked), Done { ok: true });
        // Answered, the planner reads the answers: still planning.
        asked["questions"][0]["answer"] = json!("yes");
        assert_eq!(verdict(Planning, &asked), Going);

        assert_eq!(verdict(Work, &task("active")), Going);
        for (kind, expected) in [
            ("delegate", Going),
            ("agent", Going),
            ("step", Going),
            ("question", Done { ok: true }),
            ("person", Done { ok: true }),
            ("approval", Done { ok: true }),
        ] {
            let mut waiting = task("waiting");
            waiting["waiting_on"] = json!({"kind": kind, "detail": "", "since": "…"});
            assert_eq!(verdict(Work, &waiting), expected, "{kind}");
        }
        assert_eq!(verdict(Work, &task("review")), Done { ok: true });
        assert_eq!(verdict(Work, &task("completed")), Done { ok: true });
        assert_eq!(verdict(Work, &task("blocked")), Done { ok: false });
        assert_eq!(verdict(Work, &task("failed")), Done { ok: false });

        assert_eq!(Phase::of("awaiting_input"), Some(Planning));
        assert_eq!(Phase::of("waiting"), Some(Work));
        assert_eq!(Phase::of("completed"), None);
    }

    #[test]
    fn a_threads_early_events_are_shown_once_the_task_names_it() {
        let mut f = TaskFollow::new(7, PLAIN);
        // The planner's thread starts before the task's run names it.
        let early = f.on_feed(
            "step_started",
            &json!({"agent": "planner", "thread_id": 3, "number": 1, "kind": "llm_call",
                    "description": "Calling model m"}),
        );
        assert_eq!(early, Step::default());
        // Another task's event is not this one's; this task's makes it read again.
        assert_eq!(
            f.on_feed(
                "task",
                &json!({"task_id": 8, "kind": "started", "by": "api", "data": {}})
            ),
            Step::default()
        );
        let step = f.on_feed(
            "task",
            &json!({"task_id": 7, "kind": "planning_started", "by": "chorus", "data": {},
                    "status": "planning"}),
        );
        assert_eq!(step.print, vec!["* planning_started by chorus\n"]);
        assert!(step.reread);
        let mut t = task("planning");
        t["runs"] = json!([{"id": 1, "role": "planner", "agent": "planner", "thread_id": 3}]);
        assert_eq!(
            f.learn(&t).concat(),
            "== planner (planner), thread 3\n-> step 1: Calling model m\n"
        );
        assert_eq!(f.learn(&t), Vec::<String>::new());
        assert!(f.follows("planner", 3) && !f.follows("coder", 3));
        // The task names its planner's thread before the run does.
        let mut g = TaskFollow::new(7, PLAIN);
        g.on_feed(
            "step_started",
            &json!({"agent": "planner", "thread_id": 5, "number": 1, "kind": "tool", "description": "view ."}),
        );
        let mut named = task("planning");
        named["planner_thread"] = json!(5);
        named["planner_agent"] = json!("planner");
        assert_eq!(
            g.learn(&named).concat(),
            "== planner (planner), thread 5\n-> step 1: view .\n"
        );
        let ended = f.on_feed(
            "status",
            &json!({"agent": "planner", "thread_id": 3, "status": "completed"}),
        );
        assert_eq!(ended.print.concat(), "   turn completed\n");
        // A status change reads as from -> to; tool calls are the thread's steps.
        let changed = f.on_feed(
            "task",
            &json!({"task_id": 7, "kind": "status_changed", "by": "chorus",
                    "data": {"from": "planning", "to": "awaiting_input", "reason": null}}),
        );
        assert_eq!(
            changed.print,
            vec!["* status_changed by chorus: planning -> awaiting_input\n"]
        );
        let tool = f.on_feed(
            "task",
            &json!({"task_id": 7, "kind": "tool_call", "by": "agent:planner:3", "data": {}}),
        );
        assert!(tool.print.is_empty() && tool.reread);
        assert!(f.on_feed("reset", &json!({})).reread);
        let other = f.on_feed("task_deleted", &json!({"task_id": 8, "by": "alice"}));
        assert!(other.print.is_empty() && !other.reread);
        let deleted = f.on_feed("task_deleted", &json!({"task_id": 7, "by": "alice"}));
        assert_eq!(deleted.print, vec!["* deleted by alice\n"]);
        assert!(deleted.reread);
    }

    #[test]
    fn each_thread_is_named_when_its_lines_begin() {
        let mut f = TaskFollow::new(7, PLAIN);
        let mut t = task("active");
        // Thread ids are per agent: the planner's thread 3 and coder's thread 3.
        t["runs"] = json!([{"role": "planner", "agent": "planner", "thread_id": 3},
                           {"role": "worker", "agent": "coder", "thread_id": 3}]);
        assert!(f.learn(&t).is_empty());
        let line = |f: &mut TaskFollow, agent: &str, n: u32| {
            f.on_feed(
                "step_started",
                &json!({"agent": agent, "thread_id": 3, "number": n, "kind": "tool", "description": "view ."}),
            )
            .print
            .concat()
        };
        assert_eq!(
            line(&mut f, "coder", 1),
            "== coder (worker), thread 3\n-> step 1: view .\n"
        );
        assert_eq!(line(&mut f, "coder", 2), "-> step 2: view .\n");
        assert_eq!(
            line(&mut f, "planner", 1),
            "\n== planner (planner), thread 3\n-> step 1: view .\n"
        );
    }

    #[test]
    fn the_ending_gives_the_command_that_moves_the_task_on() {
        let now = chrono::Utc::now();
        let mut asked = task("awaiting_input");
        asked["questions"] = json!([{"id": "q1", "question": "Which?", "answer": null,
                                     "options": [{"label": "a", "description": ""}]}]);
        let text = ending(&asked, PLAIN, now);
        assert!(
            text.starts_with("task 7 awaiting_input\n[q1] Which?\n    1. a\n    open\n"),
            "{text}"
        );
        assert!(text.contains("chorus task answer 7 q1="), "{text}");
        let mut planned = task("planned");
        planned["summary"] = json!("Do it");
        planned["assignee"] = json!("coder");
        let text = ending(&planned, PLAIN, now);
        assert!(
            text.contains("Plan: Do it\nAssignee: coder\nStart it: chorus task start 7"),
            "{text}"
        );
        let mut review = task("review");
        review["report"] = json!({"status": "complete", "summary": "Done", "output": ""});
        let text = ending(&review, PLAIN, now);
        assert!(
            text.contains("Report (complete): Done\nAccept it: chorus task accept 7"),
            "{text}"
        );
    }
}
