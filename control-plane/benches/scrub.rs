//! Cost of scrubbing known secrets from what the model relay forwards (issue 9): a
//! 1 MiB JSON request body (a long history) against the secrets a control plane
//! holds (three provider keys and the API token), once with no secret in the body
//! (the usual case) and once with each secret in it a few times.
//!
//! `cargo bench -p chorus-control-plane --bench scrub`

use std::hint::black_box;
use std::time::Instant;

use chorus_control_plane::secrets::KnownSecrets;

const BODY_BYTES: usize = 1024 * 1024;
const ROUNDS: usize = 200;

fn secrets() -> Vec<String> {
    vec![
        "sk-proj-4f9a0c2e7b1d8e6f3a5c9b0d2e4f6a8c".into(),
        "sk-ant-api03-9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a".into(),
        "sk-or-v1-0123456789abcdef0123456789abcdef".into(),
        "3f1e5d7c9b2a4c6e8f0a1b3d5e7f9a2c4e6b8d0f1a3c5e7b9d2f4a6c8e0b1d3f".into(),
    ]
}

/// A chat-completions body of about `BODY_BYTES`, with `planted` copies of every
/// secret spread through its tool results.
fn body(secrets: &[String], planted: usize) -> String {
    let line = "fn main() { println!(\\\"hello, world\\\"); } // some source a tool read\\n";
    let mut messages = Vec::new();
    let mut size = 0;
    let mut i = 0;
    while size < BODY_BYTES {
        let mut content = line.repeat(64);
        if i < planted * secrets.len() {
            content.push_str(&format!("OPENAI_API_KEY={}\\n", secrets[i % secrets.len()]));
        }
        let message = format!(r#"{{"role":"tool","tool_call_id":"c{i}","content":"{content}"}}"#);
        size += message.len();
        messages.push(message);
        i += 1;
    }
    format!(
        r#"{{"model":"m","stream":true,"messages":[{}]}}"#,
        messages.join(",")
    )
}

fn measure(name: &str, known: &KnownSecrets, body: &str) {
    let start = Instant::now();
    for _ in 0..ROUNDS {
        let mut text = body.to_string();
        black_box(known.scrub_found(&mut text));
        black_box(text);
    }
    let per = start.elapsed() / ROUNDS as u32;
    let copy = {
        let start = Instant::now();
        for _ in 0..ROUNDS {
            black_box(body.to_string());
        }
        start.elapsed() / ROUNDS as u32
    };
    println!(
        "{name:<40} {:>7.1} KiB  {per:>10.2?} per body (of which {copy:.2?} the copy)",
        body.len() as f64 / 1024.0
    );
}

fn main() {
    let secrets = secrets();
    let known = KnownSecrets::new(secrets.clone());
    let clean = body(&secrets, 0);
    let dirty = body(&secrets, 3);
    assert!(!known.scrubbed(&dirty).contains(&secrets[0]));
    measure("no secret in the body", &known, &clean);
    measure("4 secrets, 3 times each", &known, &dirty);
}
