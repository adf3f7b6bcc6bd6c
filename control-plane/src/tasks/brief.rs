//! The messages the engine writes into task threads: the brief a planner or a
//! worker starts from, and what comes back to a waiting thread (answers, a
//! delegate's report, another agent's answer, a person's message). Pure text.

use chorus_proto::tools::{CompletionReport, Plan, QuestionOption};

use super::contract::{self, Contract};
use crate::store::ThreadRole;

/// An agent the planner may assign, as it is shown the list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentLine {
    pub name: String,
    /// The first line of its system prompt: what it is for.
    pub about: String,
}

/// A question and its answer, as a brief shows them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answered {
    pub question: String,
    pub answer: String,
}

/// What a task says about itself, for its briefs.
#[derive(Debug, Clone, Default)]
pub struct TaskText {
    pub id: u64,
    pub title: String,
    pub description: String,
    pub plan: Option<Plan>,
    pub answered: Vec<Answered>,
    /// Attachment names (they are in the task's directory).
    pub attachments: Vec<String>,
    /// Messages people sent before the work started.
    pub messages: Vec<String>,
}

fn finishing_note(contract: &Contract) -> String {
    let tools: Vec<String> = contract.tools().map(|t| format!("`{t}`")).collect();
    format!(
        "Every turn of yours must end with a call of {}: those calls end your turn, and \
         whatever answers them comes back as your next message.",
        tools.join(" or ")
    )
}

fn bullets(items: &[String]) -> String {
    items
        .iter()
        .map(|i| format!("- {i}"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn task_head(task: &TaskText) -> String {
    let mut text = format!(
        "# Task {}: {}\n\n{}\n",
        task.id, task.title, task.description
    );
    if !task.attachments.is_empty() {
        text.push_str(&format!(
            "\nAttachments (in the task's directory):\n{}\n",
            bullets(&task.attachments)
        ));
    }
    if !task.answered.is_empty() {
        text.push_str("\nQuestions answered so far:\n");
        for a in &task.answered {
            text.push_str(&format!("- {}\n  Answer: {}\n", a.question, a.answer));
        }
    }
    text
}

/// The planner's first message.
pub fn planner(task: &TaskText, agents: &[AgentLine]) -> String {
    let agents = if agents.is_empty() {
        "(there are no agents yet: ask the person which agent should be created)".to_string()
    } else {
        bullets(
            &agents
                .iter()
                .map(|a| format!("{}: {}", a.name, a.about))
                .collect::<Vec<_>>(),
        )
    };
    format!(
        "{}\nPlan this task. The agents you may assign it to:\n{agents}\n\n{}",
        task_head(task),
        finishing_note(contract::of(ThreadRole::Planner))
    )
}

/// A worker's first message: the task, its plan and answers, where to work.
pub fn worker(task: &TaskText, workdir: &str, previous: Option<&str>) -> String {
    let mut text = task_head(task);
    if let Some(plan) = &task.plan {
        text.push_str(&format!("\n## Plan\n{}\n", plan.summary));
        for (title, items) in [
            ("Requirements", &plan.requirements),
            ("Acceptance criteria", &plan.acceptance_criteria),
            ("Steps", &plan.steps),
        ] {
            if !items.is_empty() {
                text.push_str(&format!("\n{title}:\n{}\n", bullets(items)));
            }
        }
    }
    for message in &task.messages {
        text.push_str(&format!("\nA message for you: {message}\n"));
    }
    if let Some(previous) = previous {
        text.push_str(&format!(
            "\nAn earlier attempt at this task ended like this:\n{previous}\n"
        ));
    }
    text.push_str(&format!(
        "\nYou work in `{workdir}/` of your workspace: your file tools and commands start \
         there. {}",
        finishing_note(contract::of(ThreadRole::Worker))
    ));
    text
}

/// The first message of a delegate's sub-task.
pub fn delegated(from_agent: &str, parent_task: u64, instructions: &str) -> String {
    format!("Agent {from_agent} hands you a sub-task of task {parent_task}:\n\n{instructions}")
}

/// The first message of an agent asked a question by another.
pub fn asked(from_agent: &str, question: &str) -> String {
    format!(
        "Agent {from_agent} asks you:\n\n{question}\n\nAnswer in your reply: its text is \
         your answer. You may use your tools first to find out."
    )
}

/// Answers to the questions a thread asked, as its next message.
pub fn answers(answered: &[Answered]) -> String {
    let mut text = String::from("Answers to your questions:\n");
    for a in answered {
        text.push_str(&format!("- {}\n  Answer: {}\n", a.question, a.answer));
    }
    text
}

/// A delegate's report, as the delegating thread's next message.
pub fn delegate_report(agent: &str, task: u64, report: &CompletionReport) -> String {
    let mut text = format!(
        "Sub-task {task} (agent {agent}) reported {}.\nSummary: {}\n",
        report.status.as_str(),
        report.summary
    );
    if !report.output.is_empty() {
        text.push_str(&format!("Output:\n{}\n", report.output));
    }
    if let Some(reason) = &report.blocked_reason {
        text.push_str(&format!("Blocked because: {reason}\n"));
    }
    text
}

/// A delegate that broke its contract or failed, as the delegating thread's next message.
pub fn delegate_failed(agent: &str, task: u64, why: &str) -> String {
    format!("Sub-task {task} (agent {agent}) failed: {why}")
}

/// Another agent's answer, as the asking thread's next message.
pub fn agent_answer(agent: &str, answer: &str) -> String {
    format!("Agent {agent} answers:\n\n{answer}")
}

/// A person's message into a task's thread.
pub fn person_message(by: &str, message: &str) -> String {
    format!("Message from {by}: {message}")
}

/// A person sends a report back for more work.
pub fn sent_back(by: &str, message: &str) -> String {
    format!(
        "{by} reviewed your report and sent the task back: {message}\n\nContinue the work, \
         then report again with `completion_report`."
    )
}

/// The options of a question, for people reading it in text.
pub fn options_text(options: &[QuestionOption]) -> String {
    options
        .iter()
        .map(|o| {
            if o.description.is_empty() {
                o.label.clone()
            } else {
                format!("{} ({})", o.label, o.description)
            }
        })
        .collect::<Vec<_>>()
        .join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_brief_carries_the_plan_the_answers_and_the_contract() {
        let task = TaskText {
            id: 7,
            title: "Greet".into(),
            description: "Say hello".into(),
            plan: Some(Plan {
                summary: "Write a greeting".into(),
                requirements: vec!["hello.txt".into()],
                acceptance_criteria: vec!["it exists".into()],
                steps: vec!["write it".into()],
                assignee: "coder".into(),
            }),
            answered: vec![Answered {
                question: "Language?".into(),
                answer: "English".into(),
            }],
            attachments: vec!["spec.md".into()],
            messages: Vec::new(),
        };
        let text = worker(&task, "tasks/7", None);
        for part in [
            "Task 7: Greet",
            "Write a greeting",
            "- hello.txt",
            "Answer: English",
            "spec.md",
            "`tasks/7/`",
            "`completion_report`",
        ] {
            assert!(text.contains(part), "{part} in {text}");
        }
        let text = planner(
            &task,
            &[AgentLine {
                name: "coder".into(),
                about: "writes code".into(),
            }],
        );
        assert!(text.contains("- coder: writes code"), "{text}");
        assert!(text.contains("`submit_plan` or `ask_questions`"), "{text}");
    }
}
