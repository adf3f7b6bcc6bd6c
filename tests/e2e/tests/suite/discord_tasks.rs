//! The task board in Discord through the real binary, serenity connected to the fake
//! Discord and a fake model: `/task create|answer|show|start|list` and the posts in
//! the tasks channel (`[tasks] discord_channel`).

use std::time::Duration;

use chorus_test_support::fake_model::tool_call;
use chorus_test_support::{FakeDiscord, FakeOpenAi};
use reqwest::Method;
use serde_json::{Value, json};

use super::discord::with_bot_config;

const OPERATOR_ROLE: &str = "111";
const OPERATOR: &str = "600000000000000002";
const VIEWER: &str = "600000000000000003";
/// Where commands are run (no agent's channel: task commands need none).
const LOBBY: &str = "700000000000000300";
const TASKS: &str = "700000000000000301";
const WAIT: Duration = Duration::from_secs(60);

fn sub(name: &str, options: Value) -> Value {
    json!([{"name": name, "type": 1, "options": options}])
}

fn string(name: &str, value: &str) -> Value {
    json!({"name": name, "type": 3, "value": value})
}

fn integer(name: &str, value: u64) -> Value {
    json!({"name": name, "type": 4, "value": value})
}

/// The text a command finally answered (at once, or as the edit of a deferral),
/// and whether only its caller sees it.
async fn answer_of(discord: &FakeDiscord, token: &str) -> anyhow::Result<(String, bool)> {
    discord
        .wait_for("a command's answer", WAIT, |d| {
            d.answers(token).into_iter().find_map(|(kind, body)| {
                let (content, flags) = match kind.as_str() {
                    "callback" => (&body["data"]["content"], &body["data"]["flags"]),
                    _ => (&body["content"], &body["flags"]),
                };
                let private = flags.as_u64().unwrap_or(0) & 64 != 0;
                content.as_str().map(|c| (c.to_string(), private))
            })
        })
        .await
}

async fn run(
    discord: &FakeDiscord,
    user: &str,
    roles: &[&str],
    options: Value,
) -> anyhow::Result<(String, bool)> {
    let token = discord.slash(user, roles, LOBBY, "task", options);
    answer_of(discord, &token).await
}

/// The bot's posts in the tasks channel, oldest first.
fn tasks_posts(discord: &FakeDiscord) -> Vec<String> {
    discord
        .posted()
        .into_iter()
        .filter(|m| m["channel_id"] == TASKS)
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// A task made with `/task create`: the planner's questions are posted in the tasks
/// channel, answered one at a time with `/task answer` (an option by its number),
/// planned, shown, started with `/task start`; the worker's question is posted and
/// answered too, and the end posted with the report's summary. A viewer may look
/// but not create or answer.
#[tokio::test]
async fn a_task_is_created_answered_and_started_from_discord_and_its_questions_and_end_are_posted()
-> anyhow::Result<()> {
    let discord = FakeDiscord::start().await;
    let model = FakeOpenAi::start().await;
    let config = format!(
        "[discord.roles]\n\"{OPERATOR_ROLE}\" = \"operator\"\n\n[tasks]\ndiscord_channel = \"{TASKS}\"\n"
    );
    let chorus = with_bot_config(&discord, &model, &config).await?;
    chorus
        .create_agent_with(json!({"name": "coder", "system_prompt": "You write code."}))
        .await?;
    let create = sub(
        "create",
        json!([
            string("title", "Greet"),
            string("description", "Write a greeting file"),
        ]),
    );

    // A viewer is refused as for the other commands, and no task is made.
    let (said, private) = run(&discord, VIEWER, &[], create.clone()).await?;
    assert!(private, "{said}");
    assert!(
        said.contains("Only an operator or an admin may create or change tasks"),
        "{said}"
    );
    let listed: Value = chorus
        .api(Method::GET, "/api/tasks")
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(listed["tasks"], json!([]), "{listed:#}");

    model.push(tool_call(
        "p1",
        "ask_questions",
        json!({"questions": [
        {"id": "q1", "question": "Which greeting?",
         "options": [{"label": "hello", "description": "plain"}, {"label": "hi"}]},
        {"id": "q2", "question": "Which file name?"}]}),
    ));
    let (said, _) = run(&discord, OPERATOR, &[OPERATOR_ROLE], create).await?;
    assert!(said.contains("Created task **#1** Greet"), "{said}");
    assert!(said.contains(&format!("<#{TASKS}>")), "{said}");
    let listed: Value = chorus
        .api(Method::GET, "/api/tasks")
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(listed["tasks"][0]["title"], "Greet", "{listed:#}");
    assert_eq!(
        listed["tasks"][0]["created_by"],
        format!("discord:{OPERATOR}")
    );

    // The planner's questions, posted with their options and how to answer.
    let asked = discord
        .wait_for("the questions posted", WAIT, |d| {
            tasks_posts(d)
                .into_iter()
                .find(|p| p.contains("Which greeting?"))
        })
        .await?;
    assert!(asked.contains("**Task #1: Greet**"), "{asked}");
    assert!(asked.contains("the planner (**planner**) asks"), "{asked}");
    assert!(
        asked.contains("1. **hello** — plain") && asked.contains("2. **hi**"),
        "{asked}"
    );
    assert!(asked.contains("`q2` Which file name?"), "{asked}");
    assert!(
        asked.contains("/task answer id:1 question:<id> answer:"),
        "{asked}"
    );
    chorus.wait_task(1, "awaiting_input", WAIT).await?;

    // One answer is kept until the other comes; then both go to the planner.
    let answer = |q: &str, a: &str| {
        sub(
            "answer",
            json!([integer("id", 1), string("question", q), string("answer", a)]),
        )
    };
    let (said, _) = run(&discord, OPERATOR, &[OPERATOR_ROLE], answer("q1", "1")).await?;
    assert!(said.contains("Still open: q2"), "{said}");
    let waiting = chorus.task(1).await?;
    assert_eq!(waiting["status"], "awaiting_input", "{waiting:#}");
    assert!(waiting["questions"][0]["answer"].is_null(), "{waiting:#}");
    let (said, _) = run(&discord, VIEWER, &[], answer("q2", "greeting.txt")).await?;
    assert!(
        said.contains("Only an operator"),
        "a viewer may not answer: {said}"
    );

    model.push(tool_call(
        "p2",
        "submit_plan",
        json!({"summary": "Write a greeting file", "requirements": ["greeting.txt says hello"],
               "acceptance_criteria": ["the file exists"], "steps": ["write greeting.txt"],
               "assignee": "coder"}),
    ));
    let (said, _) = run(
        &discord,
        OPERATOR,
        &[OPERATOR_ROLE],
        answer("q2", "greeting.txt"),
    )
    .await?;
    assert!(
        said.contains("Answered `q1`, `q2` of task **#1**"),
        "{said}"
    );
    let planned = chorus.wait_task(1, "planned", WAIT).await?;
    assert_eq!(
        planned["questions"][0]["answer"], "hello",
        "option 1 by its number"
    );
    assert_eq!(
        planned["questions"][1]["answered_by"],
        format!("discord:{OPERATOR}")
    );

    // Anyone may look: status, what it waits on, the plan.
    let (shown, _) = run(
        &discord,
        VIEWER,
        &[],
        sub("show", json!([integer("id", 1)])),
    )
    .await?;
    assert!(shown.contains("**Task #1: Greet** — planned"), "{shown}");
    assert!(shown.contains("Waits on: start since <t:"), "{shown}");
    assert!(shown.contains("**Plan:** Write a greeting file"), "{shown}");
    assert!(shown.contains("Assignee: **coder**"), "{shown}");

    // The worker asks a person too: posted, and answered without naming the
    // question (the only one open).
    model.push(tool_call(
        "c0",
        "ask_question",
        json!({"question": "Add a newline at the end?", "options": [{"label": "yes"}, {"label": "no"}]}),
    ));
    model.push(tool_call(
        "c1",
        "completion_report",
        json!({"status": "complete", "summary": "wrote greeting.txt", "output": "greeting.txt: hello"}),
    ));
    let (said, _) = run(
        &discord,
        OPERATOR,
        &[OPERATOR_ROLE],
        sub("start", json!([integer("id", 1)])),
    )
    .await?;
    assert!(said.contains("Started task **#1**"), "{said}");
    assert!(said.contains("**coder** works on it"), "{said}");
    let asked = discord
        .wait_for("the worker's question posted", WAIT, |d| {
            tasks_posts(d)
                .into_iter()
                .find(|p| p.contains("Add a newline at the end?"))
        })
        .await?;
    assert!(asked.contains("**coder** asks"), "{asked}");
    assert!(asked.contains("`q3` Add a newline"), "{asked}");
    assert!(
        asked.contains("/task answer id:1 question:q3 answer:"),
        "{asked}"
    );
    chorus.wait_task(1, "waiting", WAIT).await?;
    let (said, _) = run(
        &discord,
        OPERATOR,
        &[OPERATOR_ROLE],
        sub("answer", json!([integer("id", 1), string("answer", "2")])),
    )
    .await?;
    assert!(said.contains("Answered `q3` of task **#1**"), "{said}");
    let done = discord
        .wait_for("the end posted", WAIT, |d| {
            tasks_posts(d)
                .into_iter()
                .find(|p| p.contains("is **completed**"))
        })
        .await?;
    assert!(
        done.contains("**Task #1: Greet** is **completed** (coder)"),
        "{done}"
    );
    assert!(
        done.contains("**Report** (complete): wrote greeting.txt"),
        "{done}"
    );
    let done_task = chorus.task(1).await?;
    assert_eq!(done_task["status"], "completed");
    assert_eq!(
        done_task["questions"][2]["answer"], "no",
        "option 2 by its number"
    );
    // Only the questions and the end were posted there, in that order.
    let posts = tasks_posts(&discord);
    assert_eq!(posts.len(), 3, "{posts:#?}");
    assert!(
        posts[0].contains("Which greeting?") && posts[1] == asked && posts[2] == done,
        "{posts:#?}"
    );

    let (list, _) = run(
        &discord,
        VIEWER,
        &[],
        sub("list", json!([string("status", "completed")])),
    )
    .await?;
    assert!(list.contains("`#1` **completed** Greet · coder"), "{list}");
    let (bad, private) = run(
        &discord,
        VIEWER,
        &[],
        sub("list", json!([string("status", "done")])),
    )
    .await?;
    assert!(
        private && bad.contains("'done' is not a task status"),
        "{bad}"
    );
    assert!(discord.strays().is_empty(), "{:?}", discord.strays());
    Ok(())
}

/// A task with review ends in `review` (posted with how to accept it), one whose
/// worker reports it blocked is posted with the reason.
#[tokio::test]
async fn a_review_and_a_block_are_posted_with_the_report_and_the_reason() -> anyhow::Result<()> {
    let discord = FakeDiscord::start().await;
    let model = FakeOpenAi::start().await;
    let config = format!(
        "[discord.roles]\n\"{OPERATOR_ROLE}\" = \"operator\"\n\n[tasks]\ndiscord_channel = \"{TASKS}\"\n"
    );
    let chorus = with_bot_config(&discord, &model, &config).await?;
    chorus
        .create_agent_with(json!({"name": "coder", "system_prompt": "You write code."}))
        .await?;
    let plan = json!({"summary": "Do it", "requirements": [], "acceptance_criteria": [],
                      "steps": ["do it"], "assignee": "coder"});
    let reports = [
        json!({"status": "complete", "summary": "all done", "output": "done"}),
        json!({"status": "blocked", "summary": "stuck", "output": "",
               "blocked_reason": "the disk is full"}),
    ];
    for (id, report) in (1u64..).zip(reports) {
        model.push(tool_call("p", "submit_plan", plan.clone()));
        let mut options = vec![string("title", &format!("Job {id}"))];
        if id == 1 {
            options.push(json!({"name": "review", "type": 5, "value": true}));
        }
        let (said, _) = run(
            &discord,
            OPERATOR,
            &[OPERATOR_ROLE],
            sub("create", Value::Array(options)),
        )
        .await?;
        assert!(said.contains(&format!("Created task **#{id}**")), "{said}");
        chorus.wait_task(id, "planned", WAIT).await?;
        model.push(tool_call("w", "completion_report", report));
        run(
            &discord,
            OPERATOR,
            &[OPERATOR_ROLE],
            sub("start", json!([integer("id", id)])),
        )
        .await?;
    }
    let review = discord
        .wait_for("the review posted", WAIT, |d| {
            tasks_posts(d)
                .into_iter()
                .find(|p| p.contains("is **review**"))
        })
        .await?;
    assert!(
        review.contains("**Task #1: Job 1** is **review** (coder)"),
        "{review}"
    );
    assert!(
        review.contains("**Report** (complete): all done"),
        "{review}"
    );
    assert!(review.contains("`chorus task accept 1`"), "{review}");
    let blocked = discord
        .wait_for("the block posted", WAIT, |d| {
            tasks_posts(d)
                .into_iter()
                .find(|p| p.contains("is **blocked**"))
        })
        .await?;
    assert!(
        blocked.contains("**Task #2: Job 2** is **blocked**"),
        "{blocked}"
    );
    assert!(blocked.contains("Why: the disk is full"), "{blocked}");
    assert_eq!(chorus.task(2).await?["status"], "blocked");
    Ok(())
}
