//! Worker-side overhead per tool-loop turn, against a model that answers instantly.
//!
//! The fake model does all the worker-side work of a real turn except the network:
//! it builds the whole request body (system prompt, full history, tool schemas) as
//! the OpenAI client would, then decodes a streamed reply through
//! the real SSE decoder and stream state. Each turn then runs a real tool (`view` of
//! a 40-line file) and reports its steps and messages through the event sink. The
//! permission check is the control plane's (a gRPC round trip, not worker work) and
//! is left out here (`AllowAll`).
//!
//! Run: `cargo bench -p chorus-worker --bench tool_loop`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use chorus_proto::domain::{ChatMessage, ModelRoute, RetryPolicy};
use chorus_worker::gate::AllowAll;
use chorus_worker::model::http::StreamFormat;
use chorus_worker::model::openai::{StreamState, request_json};
use chorus_worker::model::sse::SseDecoder;
use chorus_worker::model::{ModelClient, ModelError, ModelReply, ModelRequest};
use chorus_worker::tool_loop::{
    self, ClientFactory, EventSink, LiveAgent, LoopInput, ModelSelection,
};
use chorus_worker::tools::ToolBox;
use chorus_worker::tools::jail::Workspace;
use tokio_util::sync::CancellationToken;

const TOOL_TURN: &str = concat!(
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Let me look.\"}}]}\n\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"view\",\"arguments\":\"\"}}]}}]}\n\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"path\\\": \\\"src/main.rs\\\"}\"}}]}}]}\n\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1200,\"completion_tokens\":30}}\n\n",
    "data: [DONE]\n\n",
);
const FINAL_TURN: &str = concat!(
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"All done.\"}}]}\n\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
    "data: [DONE]\n\n",
);

struct InstantModel {
    turns: usize,
    calls: Mutex<Vec<Instant>>,
}

impl ModelClient for InstantModel {
    async fn stream(
        &self,
        request: &ModelRequest<'_>,
        on_text: &mut (dyn FnMut(&str) + Send),
    ) -> Result<ModelReply, ModelError> {
        let n = {
            let mut calls = self.calls.lock().unwrap();
            calls.push(Instant::now());
            calls.len()
        };
        let body = request_json(request, true);
        black_box(body.len());
        let sse = if n < self.turns {
            TOOL_TURN
        } else {
            FINAL_TURN
        };
        let mut decoder = SseDecoder::new();
        let mut state = StreamState::default();
        for event in decoder.push(sse.as_bytes()) {
            if state.apply("bench", &event, on_text)? {
                break;
            }
        }
        state.finish("bench")
    }
}

struct Factory<'a>(&'a InstantModel);

impl<'a> ClientFactory for Factory<'a> {
    type Client = &'a InstantModel;
    fn client(&self, _route: &ModelRoute) -> Result<&'a InstantModel, ModelError> {
        Ok(self.0)
    }
}

impl ModelClient for &InstantModel {
    async fn stream(
        &self,
        request: &ModelRequest<'_>,
        on_text: &mut (dyn FnMut(&str) + Send),
    ) -> Result<ModelReply, ModelError> {
        (**self).stream(request, on_text).await
    }
}

struct Measured {
    mean_turn: Duration,
    last20_turn: Duration,
}

async fn one_run(tools: &ToolBox, turns: usize) -> Measured {
    let model = InstantModel {
        turns,
        calls: Mutex::new(Vec::new()),
    };
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let drain = tokio::spawn(async move { while rx.recv().await.is_some() {} });
    let (_agent_tx, agent_rx) = tokio::sync::watch::channel(LiveAgent {
        model: ModelSelection {
            display: "bench".into(),
            route: ModelRoute {
                provider: "bench".into(),
                api: ModelRoute::OPENAI_CHAT.into(),
                relay_path: "/llm/bench".into(),
                model: "bench".into(),
                limits: Default::default(),
            },
        },
        system_prompt: "You are a general-purpose AI agent with a workspace. Use your tools."
            .into(),
        tools: std::sync::Arc::new(
            chorus_proto::tools::TOOLS
                .iter()
                .map(|t| t.spec(&Default::default()))
                .collect(),
        ),
        docs_dir: None,
        identity: String::new(),
        memory: String::new(),
        relevant: String::new(),
    });
    let input = LoopInput {
        run_id: "bench",
        messages: vec![ChatMessage::user("Read src/main.rs over and over.")],
        inputs: Vec::new(),
        inbox: Default::default(),
        board: None,
        first_step_number: 1,
        max_iterations: turns as u32 + 1,
        retry: RetryPolicy::default(),
        agent: agent_rx,
        resumed: None,
    };
    let started = Instant::now();
    let text = tool_loop::run(
        &Factory(&model),
        &AllowAll,
        tools,
        input,
        &EventSink::new(tx),
        &CancellationToken::new(),
    )
    .await
    .expect("the run completes");
    let total = started.elapsed();
    assert_eq!(text, "All done.");
    drain.abort();
    let calls = model.calls.into_inner().unwrap();
    assert_eq!(calls.len(), turns);
    let tail = &calls[calls.len().saturating_sub(21)..];
    Measured {
        mean_turn: total / turns as u32,
        last20_turn: (tail[tail.len() - 1] - tail[0]) / (tail.len() as u32 - 1),
    }
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let file: String = (1..=40)
        .map(|i| format!("    let line_{i} = compute({i}); // some code\n"))
        .collect();
    std::fs::create_dir_all(dir.path().join("src")).unwrap();
    std::fs::write(dir.path().join("src/main.rs"), file).unwrap();
    let tools = ToolBox::new(Workspace::new(dir.path()), Default::default());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    println!(
        "worker-side overhead per tool-loop turn (instant fake model, real tool, real SSE parsing)"
    );
    for (turns, runs) in [(20usize, 50u32), (200, 10)] {
        runtime.block_on(one_run(&tools, turns)); // warm-up
        let mut mean = Duration::ZERO;
        let mut tail = Duration::ZERO;
        let mut worst_tail = Duration::ZERO;
        for _ in 0..runs {
            let m = runtime.block_on(one_run(&tools, turns));
            mean += m.mean_turn;
            tail += m.last20_turn;
            worst_tail = worst_tail.max(m.last20_turn);
        }
        println!(
            "  {turns:>3}-turn conversation: mean {:>8.1} µs/turn; last 20 turns {:>8.1} µs/turn (worst run {:>8.1} µs) over {runs} runs",
            (mean / runs).as_secs_f64() * 1e6,
            (tail / runs).as_secs_f64() * 1e6,
            worst_tail.as_secs_f64() * 1e6,
        );
    }
}
