//! Issue 14's table, measured through the real binaries with a fake model that
//! answers at once: a run of N model calls is N - 1 `view` tool calls and a final
//! answer, profile `open`, thread titles off.
//!
//! `cargo build --release --bins && cargo bench -p chorus-e2e --bench throughput`
//! (or `--profile dev` after `cargo build --bins`: slower, for a quick look).
//! Prints, with the load average: CPU per model call of the control plane and of
//! the worker in a run of 20 and of 200 calls (A), and in replies continuing that
//! conversation (E); model calls per second with 100 threads of 20 calls at once
//! over 10 agents (B); agent create → worker ready (C); memory of 100 idle agents (D).
#![allow(clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use chorus_test_support::fake_model::{text, tool_call};
use chorus_test_support::{Chorus, FakeOpenAi, Reply};
use serde_json::{Value, json};

/// A run of N model calls: the user message says N; the model calls `view` until
/// the run has N - 1 tool results, then answers. Each call id is new, as a real
/// model's are.
fn answer(body: &Value) -> Reply {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let wanted: usize = messages
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .and_then(|c| c.trim().parse().ok())
        .unwrap_or(1);
    let results = messages.iter().filter(|m| m["role"] == "tool").count();
    if results + 1 >= wanted {
        text("Done.")
    } else {
        tool_call(&format!("v{results}"), "view", json!({"path": ".gitkeep"}))
    }
}

/// [`answer`], after 500 ms (the scale check's slow model).
fn slow_answer(body: &Value) -> Reply {
    Reply::Delayed(Duration::from_millis(500), Box::new(answer(body)))
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

/// The mean over `pids` of a memory figure (`key` in `/proc/<pid>/<file>`), in MB.
fn mean_mb(pids: &[u32], file: &str, key: &str) -> f64 {
    let kb: u64 = pids
        .iter()
        .map(|pid| memory_kb(&format!("/proc/{pid}/{file}"), key))
        .sum();
    kb as f64 / 1024.0 / pids.len().max(1) as f64
}

/// `threads` runs of `calls` model calls at once, spread over the agents
/// `<prefix>-0` … `<prefix>-<agents - 1>`; returns when every one completed.
async fn all_at_once(
    chorus: &Arc<Chorus>,
    prefix: &str,
    agents: usize,
    threads: usize,
    calls: usize,
) {
    let tasks: Vec<_> = (0..threads)
        .map(|t| {
            let chorus = chorus.clone();
            let agent = format!("{prefix}-{}", t % agents);
            tokio::spawn(async move { run(&chorus, &agent, calls, None).await })
        })
        .collect();
    for task in tasks {
        task.await.expect("every thread completes");
    }
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
        .env("CHORUS_MAX_ITERATIONS", "100000")
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

/// One message asking for a run of `calls` model calls (a reply to `reply_to`, if
/// given), followed to the thread's end; returns the id of the thread's last
/// message, to reply to next.
async fn run(chorus: &Chorus, agent: &str, calls: usize, reply_to: Option<u64>) -> u64 {
    let mut body = json!({"content": calls.to_string()});
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

fn print_cpu(what: &str, control_plane: Duration, worker: Duration) {
    println!(
        "{what} CPU per call {:.2} ms control plane, {:.2} ms worker, {:.2} ms both",
        control_plane.as_secs_f64() * 1e3,
        worker.as_secs_f64() * 1e3,
        (control_plane + worker).as_secs_f64() * 1e3
    );
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
    model.set_chunk_pause(Duration::ZERO);
    println!("load average at start: {}", load());

    // THROUGHPUT_PHASES=AB runs only those phases, e.g. to profile one.
    let phases = std::env::var("THROUGHPUT_PHASES").unwrap_or_else(|_| "AEBCDS".into());
    if phases.contains('A') || phases.contains('E') {
        phase_a(&model, phases.contains('E')).await;
    }
    if phases.contains('B') {
        phase_b(&model).await;
    }
    if phases.contains('C') || phases.contains('D') {
        phase_cd(&model).await;
    }
    if phases.contains('S') {
        model.set_fallback(slow_answer);
        phase_s(&model).await;
    }
    println!("load average at end: {}", load());
}

async fn phase_a(model: &chorus_test_support::FakeModel, continuing: bool) {
    // A: CPU per model call in one run of 20 and of 200 calls (the history grows
    // with each call); E: continuing that conversation (a reply to its end).
    let chorus = start(model).await;
    eprintln!("control plane pid {}", chorus.pid());
    let worker = create(&chorus, "long").await;
    let mut last = 0;
    let long: usize = std::env::var("THROUGHPUT_LONG_RUN")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(200);
    for calls in [20, long] {
        let (cp0, w0, calls0) = (cpu(chorus.pid()), cpu(worker), model.requests().len());
        let started = Instant::now();
        last = run(&chorus, "long", calls, None).await;
        let made = (model.requests().len() - calls0) as u32;
        print_cpu(
            &format!(
                "A  one run of {made} model calls ({:.1} ms each):",
                started.elapsed().as_secs_f64() * 1e3 / f64::from(made)
            ),
            (cpu(chorus.pid()) - cp0) / made,
            (cpu(worker) - w0) / made,
        );
    }
    if !continuing {
        return;
    }
    let (cp0, w0, calls0) = (cpu(chorus.pid()), cpu(worker), model.requests().len());
    for _ in 0..10 {
        last = run(&chorus, "long", 2, Some(last)).await;
    }
    let made = (model.requests().len() - calls0) as u32;
    print_cpu(
        "E  10 replies continuing that conversation (2 calls each):",
        (cpu(chorus.pid()) - cp0) / made,
        (cpu(worker) - w0) / made,
    );
}

async fn phase_b(model: &chorus_test_support::FakeModel) {
    // B: model calls per second, 100 threads of 20 calls at once over 10 agents.
    let chorus = Arc::new(start(model).await);
    eprintln!("control plane pid {}", chorus.pid());
    for a in 0..10 {
        create(&chorus, &format!("busy-{a}")).await;
    }
    let calls0 = model.requests().len();
    let cp0 = cpu(chorus.pid());
    let started = Instant::now();
    all_at_once(&chorus, "busy", 10, 100, 20).await;
    let took = started.elapsed();
    let calls = model.requests().len() - calls0;
    let cp = cpu(chorus.pid()) - cp0;
    println!(
        "B  100 threads x 20 calls over 10 agents: {calls} model calls in {:.1} s = {:.0} calls/s (control plane CPU {:.1} s, {:.2} ms per call)",
        took.as_secs_f64(),
        calls as f64 / took.as_secs_f64(),
        cp.as_secs_f64(),
        cp.as_secs_f64() * 1e3 / calls as f64
    );
}

async fn phase_cd(model: &chorus_test_support::FakeModel) {
    // C and D: agent create → worker ready, and 100 idle agents' memory.
    let chorus = start(model).await;
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
    println!(
        "D  100 idle agents: control plane RSS {:.1} MB, worker PSS {:.2} MB each",
        rss as f64 / 1024.0,
        mean_mb(&workers, "smaps_rollup", "Pss:")
    );
}

/// S: the scale check: 1,000 threads over 100 agents at once, each a run of two
/// model calls that take 500 ms each; all must complete.
async fn phase_s(model: &chorus_test_support::FakeModel) {
    let chorus = Arc::new(start(model).await);
    let mut workers = Vec::new();
    for a in 0..100 {
        workers.push(create(&chorus, &format!("scale-{a}")).await);
    }
    let cp0 = cpu(chorus.pid());
    let started = Instant::now();
    all_at_once(&chorus, "scale", 100, 1000, 2).await;
    let took = started.elapsed();
    let status = format!("/proc/{}/status", chorus.pid());
    println!(
        "S  1000 threads over 100 agents, 500 ms model: all completed in {:.1} s; control plane CPU {:.1} s, RSS {:.1} MB (peak {:.1} MB)",
        took.as_secs_f64(),
        (cpu(chorus.pid()) - cp0).as_secs_f64(),
        memory_kb(&status, "VmRSS:") as f64 / 1024.0,
        memory_kb(&status, "VmHWM:") as f64 / 1024.0,
    );
    println!(
        "S  then idle: worker PSS {:.2} MB, RSS {:.2} MB each",
        mean_mb(&workers, "smaps_rollup", "Pss:"),
        mean_mb(&workers, "status", "VmRSS:")
    );
}
