//! What trace export costs a run, through the real binaries: the same thread run
//! (one model call to a fake model that answers at once) timed with export off,
//! with the endpoint pointing at a closed port, and with a live OTLP receiver.
//!
//! `cargo build --bins && cargo bench --profile dev -p chorus-e2e --bench trace_export`
//! (or `--release` with `cargo build --release --bins`). Prints the median and 90th
//! percentile of the wall time from sending the message to the thread's end.
#![allow(clippy::expect_used)]

use std::time::{Duration, Instant};

use chorus_test_support::fake_model::text;
use chorus_test_support::{Chorus, FakeOpenAi, OtlpReceiver};

const RUNS: usize = 40;
const WARM_UP: usize = 3;

async fn measure(model: &chorus_test_support::FakeModel, env: &[(&str, String)]) -> Vec<Duration> {
    let mut builder = Chorus::builder().openai_fake(model);
    for (k, v) in env {
        builder = builder.env(k, v);
    }
    let chorus = builder.start().await.expect("chorus starts");
    chorus.create_agent("bench").await.expect("agent");
    chorus
        .wait_worker_running("bench", Duration::from_secs(30))
        .await
        .expect("worker");
    let mut times = Vec::new();
    for i in 0..WARM_UP + RUNS {
        model.push(text("Done."));
        let started = Instant::now();
        let id = chorus
            .send_message("bench", &format!("task {i}"))
            .await
            .expect("send");
        let thread = chorus
            .wait_thread_finished("bench", id, Duration::from_secs(30))
            .await
            .expect("finished");
        assert_eq!(thread["status"], "completed");
        if i >= WARM_UP {
            times.push(started.elapsed());
        }
    }
    times.sort();
    times
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[tokio::main]
async fn main() {
    let model = FakeOpenAi::start().await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let closed_url = format!(
        "http://127.0.0.1:{}",
        closed.local_addr().expect("addr").port()
    );
    drop(closed);
    let receiver = OtlpReceiver::start().await;
    let modes: Vec<(&str, Vec<(&str, String)>)> = vec![
        ("export off", vec![]),
        (
            "closed port (grpc)",
            vec![
                ("OTEL_EXPORTER_OTLP_ENDPOINT", closed_url),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc".into()),
            ],
        ),
        (
            "live receiver (http)",
            vec![("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.http_url.clone())],
        ),
    ];
    println!("{RUNS} thread runs each (one model call, fake model answering at once)");
    println!("{:<22} {:>10} {:>10}", "mode", "median ms", "p90 ms");
    for (name, env) in modes {
        let times = measure(&model, &env).await;
        let median = times[times.len() / 2];
        let p90 = times[times.len() * 9 / 10];
        println!("{name:<22} {:>10.1} {:>10.1}", ms(median), ms(p90));
    }
    println!(
        "spans received by the live receiver: {}",
        receiver.spans().len()
    );
}
