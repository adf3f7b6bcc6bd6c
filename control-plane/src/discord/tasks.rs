//! The task board in Discord, the pure part: what `/task show` and `/task list` say,
//! what the tasks channel (`[tasks] discord_channel`) is told when a task asks, blocks
//! or finishes, and how `/task answer`'s one-at-a-time answers are gathered into the
//! whole round the engine takes at once ([`Pending`]).
//!
//! Gathered answers are kept in memory only: after a restart the questions still
//! open are answered again (each answer says which are still missing).

use std::collections::{BTreeMap, HashMap};

use crate::cli::render::one_line;
use crate::feed::TaskChange;
use crate::store::{QuestionRecord, TaskReport};
use crate::tasks::{TaskEventKind, TaskStatus, TaskView};

/// A stored time as Discord shows it to each reader ("3 minutes ago"), or as is.
pub fn when(at: &str) -> String {
    match chrono::DateTime::parse_from_rfc3339(at) {
        Ok(t) => format!("<t:{}:R>", t.timestamp()),
        Err(_) => at.to_string(),
    }
}

/// How to answer one of task `id`'s questions.
pub fn how_to_answer(id: u64, question: &str) -> String {
    format!("`/task answer id:{id} question:{question} answer:…`")
}

/// One question with its options, numbered (an option's number is an answer too).
fn question_text(q: &QuestionRecord) -> String {
    let mut out = format!("`{}` {}\n", q.id, one_line(&q.question, 400));
    for (i, o) in q.options.iter().enumerate() {
        out.push_str(&format!("  {}. **{}**", i + 1, one_line(&o.label, 100)));
        if !o.description.is_empty() {
            out.push_str(&format!(" — {}", one_line(&o.description, 160)));
        }
        out.push('\n');
    }
    if q.multi_select && !q.options.is_empty() {
        out.push_str("  (several may be chosen: name them all in one answer)\n");
    }
    out
}

fn report_text(report: &TaskReport) -> String {
    let status = serde_json::to_value(report.status)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let mut out = format!(
        "**Report** ({status}): {}\n",
        one_line(&report.summary, 600)
    );
    if let Some(reason) = &report.blocked_reason {
        out.push_str(&format!("Blocked: {}\n", one_line(reason, 400)));
    }
    out
}

/// What `/task show` says: status, wait, plan, open questions, report.
pub fn show(task: &TaskView) -> String {
    let mut out = format!(
        "**Task #{}: {}** — {} since {}{}\n",
        task.id,
        one_line(&task.title, 200),
        task.status,
        when(&task.status_since),
        if task.review { " (with review)" } else { "" },
    );
    if let Some(parent) = task.parent_id {
        out.push_str(&format!("Sub-task of #{parent}\n"));
    }
    if let Some(w) = &task.waiting_on {
        out.push_str(&format!(
            "Waits on: {} since {}\n",
            one_line(&w.detail, 300),
            when(&w.since)
        ));
    }
    if !task.description.trim().is_empty() {
        out.push_str(&format!("{}\n", one_line(&task.description, 400)));
    }
    if let Some(agent) = &task.assignee {
        out.push_str(&format!("Assignee: **{agent}**\n"));
    }
    if let Some(summary) = &task.summary {
        out.push_str(&format!("**Plan:** {}\n", one_line(summary, 400)));
        for (label, items) in [
            ("Requirements", &task.requirements),
            ("Acceptance", &task.acceptance_criteria),
            ("Steps", &task.steps),
        ] {
            if !items.is_empty() {
                out.push_str(&format!("{label}:\n"));
                for (i, item) in items.iter().take(10).enumerate() {
                    out.push_str(&format!("  {}. {}\n", i + 1, one_line(item, 200)));
                }
                if items.len() > 10 {
                    out.push_str(&format!("  … and {} more\n", items.len() - 10));
                }
            }
        }
    }
    let open = task.open_questions();
    if !open.is_empty() {
        out.push_str(&format!(
            "**Open questions** (answer each with {}):\n",
            how_to_answer(task.id, "<id>")
        ));
        for q in open {
            out.push_str(&question_text(q));
        }
    }
    if let Some(report) = &task.report {
        out.push_str(&report_text(report));
    }
    out
}

/// One line of `/task list`.
pub fn list_line(task: &TaskView) -> String {
    let mut out = format!(
        "- `#{}` **{}** {}",
        task.id,
        task.status,
        one_line(&task.title, 80)
    );
    if let Some(agent) = &task.assignee {
        out.push_str(&format!(" · {agent}"));
    }
    if let Some(w) = &task.waiting_on {
        out.push_str(&format!(
            " · waits on {} since {}",
            one_line(&w.detail, 80),
            when(&w.since)
        ));
    }
    out.push('\n');
    out
}

/// What the tasks channel is told of `change` (`task` as it is now), if anything:
/// questions to a person, a block, an end (completed, failed, review).
pub fn post_for(change: &TaskChange, task: &TaskView) -> Option<String> {
    let head = match task.parent_id {
        Some(parent) => format!(
            "**Task #{} (sub-task of #{parent}): {}**",
            task.id,
            one_line(&task.title, 200)
        ),
        None => format!("**Task #{}: {}**", task.id, one_line(&task.title, 200)),
    };
    match change.kind {
        TaskEventKind::QuestionAsked => {
            // A person's questions carry their ids; a question to an agent does not.
            let ids: Vec<&str> = change.data["ids"]
                .as_array()?
                .iter()
                .filter_map(|i| i.as_str())
                .collect();
            let round = change.data["round"].as_u64();
            let asked: Vec<&QuestionRecord> = task
                .questions
                .iter()
                .filter(|q| ids.contains(&q.id.as_str()))
                .filter(|q| round.is_none_or(|r| u64::from(q.round) == r))
                .collect();
            if asked.is_empty() {
                return None;
            }
            // Who asked: the agent the event is by (the planner, or the worker).
            let who = match crate::principal::Principal::parse(&change.by) {
                crate::principal::Principal::Agent { name, .. }
                    if task.planner_agent.as_deref() == Some(name.as_str()) =>
                {
                    format!("the planner (**{name}**) asks")
                }
                crate::principal::Principal::Agent { name, .. } => format!("**{name}** asks"),
                _ => "a question".to_string(),
            };
            let mut out = format!("❓ {head}: {who}:\n");
            for q in &asked {
                out.push_str(&question_text(q));
            }
            out.push_str(&match asked.as_slice() {
                [one] => format!("Answer with {}.", how_to_answer(task.id, &one.id)),
                _ => format!(
                    "Answer each with {} (they go on together once all are answered).",
                    how_to_answer(task.id, "<id>")
                ),
            });
            Some(out)
        }
        TaskEventKind::StatusChanged => {
            let to = TaskStatus::parse(change.data["to"].as_str()?)?;
            let mark = match to {
                TaskStatus::Completed => "✅",
                TaskStatus::Failed => "❌",
                TaskStatus::Blocked => "⛔",
                TaskStatus::Review => "👀",
                _ => return None,
            };
            let mut out = format!("{mark} {head} is **{to}**");
            if let Some(agent) = &task.assignee {
                out.push_str(&format!(" ({agent})"));
            }
            out.push('\n');
            if to == TaskStatus::Blocked || to == TaskStatus::Failed {
                let reason = change.data["reason"]
                    .as_str()
                    .or(task.blocked_reason.as_deref());
                if let Some(reason) = reason.filter(|r| !r.trim().is_empty()) {
                    out.push_str(&format!("Why: {}\n", one_line(reason, 600)));
                }
            }
            if let Some(report) = &task.report {
                out.push_str(&report_text(report));
            }
            if to == TaskStatus::Review {
                out.push_str(&format!(
                    "Accept it: `chorus task accept {0}`, or send it back: \
                     `chorus task send-back {0} \"<what to change>\"`.\n",
                    task.id
                ));
            }
            Some(out)
        }
        _ => None,
    }
}

/// An answer as given, or an option's label when it is that option's number.
pub fn resolve_answer(question: &QuestionRecord, answer: &str) -> String {
    let answer = answer.trim();
    match answer.parse::<usize>() {
        Ok(n) if n >= 1 && n <= question.options.len() => question.options[n - 1].label.clone(),
        _ => answer.to_string(),
    }
}

/// Where gathering a task's answers stands after one more.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gathered {
    /// Every open question has an answer: these go to the engine together.
    All(BTreeMap<String, String>),
    /// The answer to `noted` is kept; these are still open.
    Missing { noted: String, missing: Vec<String> },
}

/// Answers given one at a time, per task, until the round is whole.
#[derive(Debug, Default)]
pub struct Pending {
    /// Per task: the round the answers are for, and the answers.
    tasks: HashMap<u64, (u32, BTreeMap<String, String>)>,
}

impl Pending {
    /// Adds the answer to `question` (or to the only open one) of task `id`, whose
    /// open questions are `open`; an answer kept for a question no longer open is
    /// dropped. A question that is not open is refused, naming the open ones.
    pub fn add(
        &mut self,
        id: u64,
        open: &[&QuestionRecord],
        question: Option<&str>,
        answer: &str,
    ) -> Result<Gathered, String> {
        if open.is_empty() {
            return Err(format!("task {id} has no open questions"));
        }
        let ids: Vec<&str> = open.iter().map(|q| q.id.as_str()).collect();
        let asked = match question {
            Some(q) => open.iter().find(|o| o.id == q.trim()).ok_or_else(|| {
                format!(
                    "'{q}' is not an open question of task {id}; the open ones are: {}",
                    ids.join(", ")
                )
            })?,
            None if open.len() == 1 => &open[0],
            None => {
                return Err(format!(
                    "task {id} has {} open questions ({}): say which with `question:`",
                    open.len(),
                    ids.join(", ")
                ));
            }
        };
        // Answers kept for an earlier round (answered elsewhere meanwhile) are stale,
        // even where the new round reuses their ids.
        let round = asked.round;
        let (kept_round, kept) = self.tasks.entry(id).or_insert((round, BTreeMap::new()));
        if *kept_round != round {
            *kept_round = round;
            kept.clear();
        }
        kept.retain(|q, _| ids.contains(&q.as_str()));
        kept.insert(asked.id.clone(), resolve_answer(asked, answer));
        let missing: Vec<String> = ids
            .iter()
            .filter(|q| !kept.contains_key(**q))
            .map(ToString::to_string)
            .collect();
        if missing.is_empty() {
            let (_, all) = self.tasks.remove(&id).unwrap_or_default();
            Ok(Gathered::All(all))
        } else {
            Ok(Gathered::Missing {
                noted: asked.id.clone(),
                missing,
            })
        }
    }

    /// Puts back answers to round `round` the engine did not take (so answering
    /// again needs only what was wrong).
    pub fn restore(&mut self, id: u64, round: u32, answers: BTreeMap<String, String>) {
        self.tasks.insert(id, (round, answers));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::QuestionOption;
    use serde_json::json;

    fn question(id: &str, options: &[&str]) -> QuestionRecord {
        QuestionRecord {
            id: id.into(),
            round: 1,
            question: format!("What about {id}?"),
            options: options
                .iter()
                .map(|l| QuestionOption {
                    label: l.to_string(),
                    description: String::new(),
                })
                .collect(),
            multi_select: false,
            asked_at: "2026-11-26T10:00:00Z".into(),
            answer: None,
            answered_by: None,
            answered_at: None,
        }
    }

    #[test]
    fn answers_are_gathered_until_every_open_question_has_one() {
        let (q1, q2) = (question("q1", &["hello", "hi"]), question("q2", &[]));
        let open = [&q1, &q2];
        let mut pending = Pending::default();
        assert!(
            pending
                .add(7, &open, None, "x")
                .unwrap_err()
                .contains("say which")
        );
        assert!(
            pending
                .add(7, &open, Some("q9"), "x")
                .unwrap_err()
                .contains("open ones are: q1, q2")
        );
        assert_eq!(
            pending.add(7, &open, Some("q1"), "2"),
            Ok(Gathered::Missing {
                noted: "q1".into(),
                missing: vec!["q2".into()]
            })
        );
        let Ok(Gathered::All(all)) = pending.add(7, &open, Some("q2"), "greeting.txt") else {
            panic!("whole")
        };
        assert_eq!(all["q1"], "hi", "option 2 is its label");
        assert_eq!(all["q2"], "greeting.txt");
        // Nothing kept afterwards; a single open question needs no id.
        assert_eq!(
            pending.add(7, &[&q2], None, "a"),
            Ok(Gathered::All(BTreeMap::from([("q2".into(), "a".into())])))
        );
        assert!(pending.add(7, &[], None, "a").is_err());
        // A new round with the same ids does not take the old round's answers.
        pending.add(7, &open, Some("q1"), "hello").unwrap();
        let (mut r2q1, mut r2q2) = (q1.clone(), q2.clone());
        (r2q1.round, r2q2.round) = (2, 2);
        assert_eq!(
            pending.add(7, &[&r2q1, &r2q2], Some("q2"), "b"),
            Ok(Gathered::Missing {
                noted: "q2".into(),
                missing: vec!["q1".into()]
            })
        );
    }

    fn view(status: TaskStatus) -> TaskView {
        TaskView {
            id: 7,
            title: "Greet".into(),
            description: "Write a greeting file".into(),
            status,
            review: false,
            status_since: "2026-11-26T10:00:00Z".into(),
            created_at: "2026-11-26T10:00:00Z".into(),
            updated_at: "2026-11-26T10:00:00Z".into(),
            created_by: "discord:1".into(),
            parent_id: None,
            summary: None,
            requirements: Vec::new(),
            acceptance_criteria: Vec::new(),
            steps: Vec::new(),
            assignee: None,
            blocked_reason: None,
            report: None,
            questions: Vec::new(),
            attachments: Vec::new(),
            chain: Vec::new(),
            runs: None,
            waiting_on: None,
            planner_thread: None,
            planner_agent: None,
            limits: crate::tasks::view::Limits {
                time_secs: 3600,
                model_calls: 200,
            },
            actions: Vec::new(),
            plan_editable: false,
        }
    }

    fn change(kind: TaskEventKind, data: serde_json::Value) -> TaskChange {
        TaskChange {
            task_id: 7,
            event_id: 1,
            at: "2026-11-26T10:00:00Z".into(),
            kind,
            by: "chorus".into(),
            status: TaskStatus::AwaitingInput,
            data,
        }
    }

    #[test]
    fn a_persons_questions_are_posted_with_options_and_how_to_answer_and_an_agents_are_not() {
        let mut task = view(TaskStatus::Planning);
        task.planner_agent = Some("planner".into());
        task.questions = vec![question("q1", &["hello", "hi"]), question("q2", &[])];
        let mut asked = change(
            TaskEventKind::QuestionAsked,
            json!({"round": 1, "ids": ["q1", "q2"]}),
        );
        asked.by = "agent:planner:3".into();
        let post = post_for(&asked, &task).unwrap();
        assert!(post.contains("the planner (**planner**) asks"), "{post}");
        assert!(post.contains("`q1` What about q1?"), "{post}");
        assert!(post.contains("2. **hi**"), "{post}");
        assert!(post.contains("/task answer id:7 question:<id>"), "{post}");
        let to_agent = change(
            TaskEventKind::QuestionAsked,
            json!({"to": "reviewer", "question": "?"}),
        );
        assert_eq!(post_for(&to_agent, &task), None);
    }

    #[test]
    fn ends_and_blocks_are_posted_with_the_report_and_other_moves_are_not() {
        let mut task = view(TaskStatus::Completed);
        task.assignee = Some("coder".into());
        task.report = Some(TaskReport {
            status: crate::store::ReportStatus::Complete,
            summary: "wrote greeting.txt".into(),
            output: "long output".into(),
            blocked_reason: None,
        });
        let done = change(
            TaskEventKind::StatusChanged,
            json!({"from": "active", "to": "completed", "reason": null}),
        );
        let post = post_for(&done, &task).unwrap();
        assert!(post.contains("is **completed** (coder)"), "{post}");
        assert!(
            post.contains("**Report** (complete): wrote greeting.txt"),
            "{post}"
        );
        let blocked = change(
            TaskEventKind::StatusChanged,
            json!({"from": "active", "to": "blocked", "reason": "no disk"}),
        );
        assert!(post_for(&blocked, &task).unwrap().contains("Why: no disk"));
        task.parent_id = Some(3);
        assert!(
            post_for(&done, &task)
                .unwrap()
                .starts_with("✅ **Task #7 (sub-task of #3): Greet**")
        );
        let started = change(
            TaskEventKind::StatusChanged,
            json!({"from": "planned", "to": "active", "reason": null}),
        );
        assert_eq!(post_for(&started, &task), None);
        assert_eq!(
            post_for(&change(TaskEventKind::ToolCall, json!({})), &task),
            None
        );
    }

    #[test]
    fn resolve_keeps_text_and_numbers_out_of_range() {
        let q = question("q1", &["a"]);
        assert_eq!(resolve_answer(&q, "1"), "a");
        assert_eq!(resolve_answer(&q, "8080"), "8080");
        assert_eq!(resolve_answer(&q, " yes "), "yes");
    }
}
