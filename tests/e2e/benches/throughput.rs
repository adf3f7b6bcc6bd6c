//! Issue 14's table, measured through the real binaries with a fake model that
//! answers at once: each turn is a `view` tool call and a final answer (two model
//! calls), profile `open`, thread titles off.
//!
//! `cargo build --release --bins && cargo bench -p chorus-e2e --bench throughput`
//! (or `--profile dev` after `cargo build --bins`: slower, for a quick look).
//! Prints, with the load average: CPU per model call of the control plane and of
//! the worker over a 200-turn thread; model calls per second with 100 threads of 20
//! turns over 10 agents; agent create → worker ready; memory of 100 idle agents.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chorus_test_support::fake_model::{text, tool_call};
use chorus_test_support::{Chorus, FakeOpenAi, Reply};
use serde_json::{Value, json};

/// A turn: a user message gets a `view`, its result gets the answer.
fn answer(body: &Value) -> Reply {
    let last = body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .map(|m| m["role"].as_str().unwrap_or("").to_string())
        .unwrap_or_default();
    if last == "tool" {
        text("Done.")
    } else {
        tool_call("v", "view", json!({"path": ".gitkeep"}))
    }
}

/// User and system CPU time of a process, from /proc (clock ticks of 10 ms).
fn cpu(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    // After the command: state is field 3; utime 14, stime 15.
    let ticks = |n: usize| {
        fields
            .get(n - 3)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Duration::from_millis((ticks(14) + ticks(15)) * 10)
}

fn memory_kb(path: &str, key: &str) -> u64 {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

async fn start(model: &chorus_test_support::FakeModel) -> Chorus {
    Chorus::builder()
        .openai_fake(model)
        .config("[threads]\ntitles = false\n")
        .start()
        .await
        .expect("chorus starts")
}

async fn create(chorus: &Chorus, name: &str) -> u32 {
    chorus
        .create_agent_with(json!({"name": name, "permissions": "open"}))
        .await
        .expect("agent");
    chorus
        .wait_worker_running(name, Duration::from_secs(60))
        .await
        .expect("worker")
}

/// One turn: the message (a reply to `reply_to`, if given), to the thread's end;
/// returns the id of the thread's last message, to reply to next.
async fn turn(chorus: &Chorus, agent: &str, reply_to: Option<u64>) -> u64 {
    let mut body = json!({"content": "next"});
    if let Some(id) = reply_to {
        body["reply_to"] = json!(id);
    }
    let sent: Value = chorus
        .api(
            reqwest::Method::POST,
            &format!("/api/agents/{agent}/messages"),
        )
        .json(&body)
        .send()
        .await
        .expect("send")
        .json()
        .await
        .expect("sent");
    let thread = sent["thread_id"].as_u64().expect("thread id");
    let mut events = chorus
        .open_thread_events(agent, thread)
        .await
        .expect("events");
    events.rest().await.expect("to the end");
    let shown = chorus.thread(agent, thread).await.expect("thread");
    assert_eq!(shown["status"], "completed", "{shown}");
    shown["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["id"].as_u64())
        .expect("last message id")
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

#[tokio::main]
async fn main() {
    let model = FakeOpenAi::start().await;
    model.set_fallback(answer);
    println!("load average at start: {}", load());

    // A: CPU per model call over one thread of 200 turns.
    let chorus = start(&model).await;
    let worker = create(&chorus, "long").await;
    let (cp0, w0, calls0) = (cpu(chorus.pid()), cpu(worker), model.requests().len());
    let mut last = None;
    for _ in 0..200 {
        last = Some(turn(&chorus, "long", last).await);
    }
    let calls = (model.requests().len() - calls0) as u32;
    let cp = (cpu(chorus.pid()) - cp0) / calls;
    let w = (cpu(worker) - w0) / calls;
    println!(
        "A  200 turns, {calls} model calls: CPU per call {:.2} ms control plane, {:.2} ms worker, {:.2} ms both",
        cp.as_secs_f64() * 1e3,
        w.as_secs_f64() * 1e3,
        (cp + w).as_secs_f64() * 1e3
    );
    drop(chorus);

    // B: model calls per second, 100 threads × 20 turns over 10 agents.
    let chorus = Arc::new(start(&model).await);
    for a in 0..10 {
        create(&chorus, &format!("busy-{a}")).await;
    }
    let calls0 = model.requests().len();
    let cp0 = cpu(chorus.pid());
    let started = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..100 {
        let chorus = chorus.clone();
        tasks.push(tokio::spawn(async move {
            let agent = format!("busy-{}", t % 10);
            let mut last = None;
            for _ in 0..20 {
                last = Some(turn(&chorus, &agent, last).await);
            }
        }));
    }
    for task in tasks {
        task.await.expect("threads");
    }
    let took = started.elapsed();
    let calls = model.requests().len() - calls0;
    println!(
        "B  100 threads x 20 turns over 10 agents: {calls} model calls in {:.1} s = {:.0} calls/s (control plane CPU {:.1} s)",
        took.as_secs_f64(),
        calls as f64 / took.as_secs_f64(),
        (cpu(chorus.pid()) - cp0).as_secs_f64()
    );
    drop(chorus);

    // C and D: agent create → worker ready, and 100 idle agents' memory.
    let chorus = start(&model).await;
    let mut ready = Vec::new();
    let mut workers = Vec::new();
    for a in 0..100 {
        let started = Instant::now();
        workers.push(create(&chorus, &format!("idle-{a}")).await);
        ready.push(started.elapsed());
    }
    ready.sort();
    println!(
        "C  agent create -> worker ready: median {:.0} ms, p90 {:.0} ms (100 agents)",
        ready[50].as_secs_f64() * 1e3,
        ready[90].as_secs_f64() * 1e3
    );
    let rss = memory_kb(&format!("/proc/{}/status", chorus.pid()), "VmRSS:");
    let pss: u64 = workers
        .iter()
        .map(|pid| memory_kb(&format!("/proc/{pid}/smaps_rollup"), "Pss:"))
        .sum();
    println!(
        "D  100 idle agents: control plane RSS {:.1} MB, worker PSS {:.2} MB each",
        rss as f64 / 1024.0,
        pss as f64 / 1024.0 / workers.len() as f64
    );
    println!("load average at end: {}", load());
}
