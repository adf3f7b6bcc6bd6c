//! Traces exported over OTLP from the real binaries to a receiver speaking real
//! OTLP (the official protobuf definitions), over gRPC and HTTP/protobuf.

use std::time::{Duration, Instant};

use chorus_test_support::fake_model::text;
use chorus_test_support::{Chorus, FakeOpenAi, OtlpReceiver};

async fn run_one(chorus: &Chorus, agent: &str) -> anyhow::Result<()> {
    chorus.create_agent(agent).await?;
    let id = chorus.send_message(agent, "Say hello").await?;
    let thread = chorus
        .wait_thread_finished(agent, id, Duration::from_secs(30))
        .await?;
    anyhow::ensure!(thread["status"] == "completed", "{thread:#}");
    Ok(())
}

/// Chorus exporting traces to `endpoint` (over gRPC when `grpc`, else
/// HTTP/protobuf), its spans handed over every 100 ms.
fn exporting(
    model: &chorus_test_support::FakeModel,
    endpoint: &str,
    grpc: bool,
) -> chorus_test_support::chorus::ChorusBuilder {
    let builder = Chorus::builder()
        .openai_fake(model)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        .env("OTEL_BSP_SCHEDULE_DELAY", "100");
    if grpc {
        builder.env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    } else {
        builder
    }
}

/// The control plane's `run` span, once received.
async fn control_plane_run(
    receiver: &OtlpReceiver,
) -> anyhow::Result<chorus_test_support::otlp::ReceivedSpan> {
    receiver
        .wait_for("the run span", Duration::from_secs(30), |spans| {
            spans
                .iter()
                .find(|s| s.name == "run" && s.service == "chorus")
                .cloned()
        })
        .await
}

#[tokio::test]
async fn a_run_is_exported_over_grpc_with_the_configured_headers() -> anyhow::Result<()> {
    let receiver = OtlpReceiver::start().await;
    let model = FakeOpenAi::start().await;
    model.push(text("Hello."));
    let chorus = exporting(&model, &receiver.grpc_url, true)
        .env("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=collector-secret-1")
        .start()
        .await?;
    run_one(&chorus, "traced").await?;
    let run = receiver
        .wait_for("the run span", Duration::from_secs(30), |spans| {
            spans
                .iter()
                .find(|s| s.name == "run" && s.attr("agent") == "traced")
                .cloned()
        })
        .await?;
    assert_eq!(run.service, "chorus");
    assert_eq!(run.parent_span_id, "", "a run is a root: {run:?}");
    assert_eq!(run.attr("thread_id"), "1");
    assert!(
        receiver
            .headers()
            .iter()
            .any(|h| h.get("x-api-key").map(String::as_str) == Some("collector-secret-1")),
        "{:?}",
        receiver.headers()
    );
    // The collector's key is a secret like any other: not in the log.
    assert!(!chorus.output().contains("collector-secret-1"));
    Ok(())
}

#[tokio::test]
async fn a_run_is_exported_over_http_protobuf_with_the_service_name_set() -> anyhow::Result<()> {
    let receiver = OtlpReceiver::start().await;
    let model = FakeOpenAi::start().await;
    model.push(text("Hello."));
    let chorus = exporting(&model, &receiver.http_url, false)
        .env("OTEL_SERVICE_NAME", "chorus-staging")
        .env("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=staging")
        .start()
        .await?;
    run_one(&chorus, "traced").await?;
    let run = receiver
        .wait_for("the run span", Duration::from_secs(30), |spans| {
            spans.iter().find(|s| s.name == "run").cloned()
        })
        .await?;
    assert_eq!(run.service, "chorus-staging");
    Ok(())
}

#[tokio::test]
async fn without_an_endpoint_nothing_is_exported_and_a_closed_port_slows_nothing()
-> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    model.push(text("Hello."));
    let quiet = Chorus::builder().openai_fake(&model).start().await?;
    run_one(&quiet, "plain").await?;
    assert!(!quiet.output().contains("exporting traces"));

    // A collector that is not there: the run completes as it would without one,
    // and the loss is said once.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = closed.local_addr()?.port();
    drop(closed);
    model.push(text("Hello."));
    let chorus = exporting(&model, &format!("http://127.0.0.1:{port}"), true)
        .start()
        .await?;
    let started = Instant::now();
    run_one(&chorus, "unheard").await?;
    let took = started.elapsed();
    assert!(took < Duration::from_secs(20), "took {took:?}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !chorus.output().contains("trace spans dropped") {
        anyhow::ensure!(
            Instant::now() < deadline,
            "no drop logged: {}",
            chorus.output()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(chorus.output().matches("trace spans dropped").count(), 1);
    // And counted.
    let scraped = scrape(&chorus, true).await?;
    assert!(value(&scraped, "chorus_trace_spans_dropped_total", &[]) > 0.0);
    Ok(())
}

#[tokio::test]
async fn a_wrong_otlp_setting_stops_serve_with_the_variable_named() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let started = Chorus::builder()
        .openai_fake(&model)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
        .start()
        .await;
    let error = format!("{:#}", started.err().expect("refused"));
    assert!(
        error.contains("OTEL_EXPORTER_OTLP_PROTOCOL must be grpc or http/protobuf"),
        "{error}"
    );
    Ok(())
}

#[tokio::test]
async fn one_trace_spans_the_control_plane_and_the_worker() -> anyhow::Result<()> {
    use chorus_test_support::fake_model::tool_call;
    let receiver = OtlpReceiver::start().await;
    let model = FakeOpenAi::start().await;
    model.push(tool_call(
        "c1",
        "view",
        serde_json::json!({"path": ".gitkeep"}),
    ));
    model.push(text("Seen."));
    let chorus = exporting(&model, &receiver.grpc_url, true).start().await?;
    run_one(&chorus, "traced").await?;
    let spans = receiver
        .wait_for("the worker's spans", Duration::from_secs(30), |spans| {
            let tools = spans.iter().filter(|s| s.name == "tool").count();
            let calls = spans.iter().filter(|s| s.name == "llm_call").count();
            (tools >= 1 && calls >= 2).then(|| spans.to_vec())
        })
        .await?;
    let root = spans
        .iter()
        .find(|s| s.name == "run" && s.service == "chorus")
        .expect("the control plane's run span");
    let worker_run = spans
        .iter()
        .find(|s| s.name == "run" && s.service == "chorus-worker")
        .expect("the worker's run span");
    assert_eq!(worker_run.parent_span_id, root.span_id);
    assert_eq!(worker_run.trace_id, root.trace_id);
    let by_id = |id: &str| spans.iter().find(|s| s.span_id == id);
    for name in ["llm_call", "tool"] {
        for s in spans.iter().filter(|s| s.name == name) {
            assert_eq!(s.trace_id, root.trace_id, "{s:?}");
            assert_eq!(s.parent_span_id, worker_run.span_id, "{s:?}");
        }
    }
    // The relay's forwarding is part of the model call it forwards.
    // (A thread's title is written outside the run: its own trace.)
    let relays: Vec<_> = spans
        .iter()
        .filter(|s| s.name == "llm_relay" && s.trace_id == root.trace_id)
        .collect();
    assert_eq!(relays.len(), 2, "one per model call of the run");
    for relay in relays {
        let parent = by_id(&relay.parent_span_id).expect("the relay span's parent");
        assert_eq!(parent.name, "llm_call", "{relay:?}");
    }

    // GenAI semantic conventions and OpenInference names, with the fake's usage
    // (20 in, 10 out per call).
    let calls: Vec<_> = spans.iter().filter(|s| s.name == "llm_call").collect();
    for call in &calls {
        assert_eq!(call.attr("gen_ai.operation.name"), "chat");
        assert_eq!(call.attr("gen_ai.provider.name"), "openai");
        assert_eq!(call.attr("gen_ai.request.model"), "fake-model");
        assert_eq!(call.attr("gen_ai.response.model"), "fake-model");
        assert_eq!(call.attr("gen_ai.usage.input_tokens"), 20);
        assert_eq!(call.attr("gen_ai.usage.output_tokens"), 10);
        assert_eq!(call.attr("openinference.span.kind"), "LLM");
        assert_eq!(call.attr("llm.model_name"), "fake-model");
        assert_eq!(call.attr("llm.token_count.total"), 30);
        assert_eq!(call.attr("chorus.agent"), "traced");
        assert_eq!(call.attr("chorus.thread_id"), 1);
        assert!(
            !call.attributes.contains_key("gen_ai.input.messages"),
            "no message contents unless the operator opts in"
        );
    }
    let mut reasons: Vec<_> = calls
        .iter()
        .map(|c| c.attr("gen_ai.response.finish_reasons").clone())
        .collect();
    reasons.sort_by_key(std::string::ToString::to_string);
    assert_eq!(
        reasons,
        [
            serde_json::json!(["stop"]),
            serde_json::json!(["tool_calls"])
        ]
    );
    let tool = spans.iter().find(|s| s.name == "tool").unwrap();
    assert_eq!(tool.attr("gen_ai.operation.name"), "execute_tool");
    assert_eq!(tool.attr("gen_ai.tool.name"), "view");
    assert_eq!(tool.attr("gen_ai.tool.call.id"), "c1");
    assert_eq!(tool.attr("openinference.span.kind"), "TOOL");
    assert_eq!(root.attr("openinference.span.kind"), "AGENT");
    assert_eq!(root.attr("chorus.thread_id"), 1);
    // The permission check is made in the worker's run, decided in the control plane.
    let check = spans
        .iter()
        .find(|s| s.name == "permission" && s.trace_id == root.trace_id)
        .expect("the permission span");
    assert_eq!(check.parent_span_id, worker_run.span_id);
    assert_eq!(check.service, "chorus");
    assert_eq!(check.attr("decision"), "allow");
    assert_eq!(check.attr("gen_ai.tool.call.id"), "c1");
    // No control-plane copies of the worker's steps.
    assert!(!spans.iter().any(|s| s.name == "step"));
    Ok(())
}

#[tokio::test]
async fn the_wait_for_an_approval_is_a_span_with_its_outcome() -> anyhow::Result<()> {
    use chorus_test_support::fake_model::tool_call;
    let receiver = OtlpReceiver::start().await;
    let model = FakeOpenAi::start().await;
    model.push(tool_call(
        "c1",
        "create_file",
        serde_json::json!({"path": "a.txt", "content": "a"}),
    ));
    model.push(text("Written."));
    let chorus = exporting(&model, &receiver.http_url, false).start().await?;
    chorus
        .create_agent_with(serde_json::json!({
            "name": "careful",
            "permissions": {"allow": ["tool:view:.*"], "ask": ["tool:create_file:.*"]},
        }))
        .await?;
    let id = chorus.send_message("careful", "write a").await?;
    let deadline = Instant::now() + Duration::from_secs(30);
    let approval = loop {
        let pending: serde_json::Value = chorus
            .api(reqwest::Method::GET, "/api/approvals")
            .send()
            .await?
            .json()
            .await?;
        if let Some(first) = pending.as_array().and_then(|a| a.first()) {
            break first["id"].as_str().unwrap().to_string();
        }
        anyhow::ensure!(Instant::now() < deadline, "no approval asked");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let answered = chorus
        .api(reqwest::Method::POST, &format!("/api/approvals/{approval}"))
        .json(&serde_json::json!({"decision": "approve"}))
        .send()
        .await?;
    assert_eq!(answered.status(), 200);
    chorus
        .wait_thread_finished("careful", id, Duration::from_secs(30))
        .await?;
    let spans = receiver
        .wait_for("the approval wait", Duration::from_secs(30), |spans| {
            let has = |name: &str| {
                spans
                    .iter()
                    .any(|s| s.name == name && s.service == "chorus")
            };
            (has("approval_wait") && has("run")).then(|| spans.to_vec())
        })
        .await?;
    let wait = spans.iter().find(|s| s.name == "approval_wait").unwrap();
    assert_eq!(wait.attr("outcome"), "approved");
    assert_eq!(wait.attr("by"), "api");
    assert_eq!(wait.attr("approval_id"), approval.as_str());
    let check = spans
        .iter()
        .find(|s| s.span_id == wait.parent_span_id)
        .expect("its permission check");
    assert_eq!(check.name, "permission");
    assert_eq!(check.attr("decision"), "allow");
    let run = spans
        .iter()
        .find(|s| s.name == "run" && s.service == "chorus")
        .unwrap();
    assert_eq!(
        wait.trace_id, run.trace_id,
        "the wait is part of the run's trace"
    );
    Ok(())
}

/// `/metrics`, parsed by a real Prometheus text parser.
async fn scrape(chorus: &Chorus, token: bool) -> anyhow::Result<prometheus_parse::Scrape> {
    let request = if token {
        chorus.api(reqwest::Method::GET, "/metrics")
    } else {
        chorus.anonymous(reqwest::Method::GET, "/metrics")
    };
    let response = request.send().await?;
    anyhow::ensure!(response.status() == 200, "{}", response.status());
    let text = response.text().await?;
    let lines = text.lines().map(|l| Ok(l.to_string()));
    Ok(prometheus_parse::Scrape::parse(lines)?)
}

fn value(scrape: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == name)
        .filter(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match &s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => *v,
            prometheus_parse::Value::Histogram(buckets) => {
                buckets.iter().map(|b| b.count).fold(0.0, f64::max)
            }
            prometheus_parse::Value::Summary(_) => 0.0,
        })
        .sum()
}

#[tokio::test]
async fn metrics_parse_as_prometheus_text_and_move_as_runs_happen() -> anyhow::Result<()> {
    use chorus_test_support::fake_model::tool_call;
    let model = FakeOpenAi::start().await;
    let chorus = Chorus::builder().openai_fake(&model).start().await?;
    // Behind the token by default.
    let anonymous = chorus
        .anonymous(reqwest::Method::GET, "/metrics")
        .send()
        .await?;
    assert_eq!(anonymous.status(), 401);
    let before = scrape(&chorus, true).await?;
    assert_eq!(value(&before, "chorus_runs_started_total", &[]), 0.0);

    model.push(tool_call(
        "c1",
        "view",
        serde_json::json!({"path": ".gitkeep"}),
    ));
    model.push(text("Seen."));
    run_one(&chorus, "counted").await?;
    let after = scrape(&chorus, true).await?;
    assert_eq!(value(&after, "chorus_runs_started_total", &[]), 1.0);
    assert_eq!(
        value(
            &after,
            "chorus_runs_ended_total",
            &[("status", "completed")]
        ),
        1.0
    );
    let call = [("provider", "openai"), ("model", "fake-model")];
    assert_eq!(
        value(
            &after,
            "chorus_model_calls_total",
            &[call[0], call[1], ("outcome", "ok")]
        ),
        2.0
    );
    assert_eq!(
        value(
            &after,
            "chorus_model_tokens_total",
            &[call[0], call[1], ("direction", "input")]
        ),
        40.0
    );
    assert_eq!(
        value(
            &after,
            "chorus_model_tokens_total",
            &[call[0], call[1], ("direction", "output")]
        ),
        20.0
    );
    assert_eq!(
        value(&after, "chorus_model_call_duration_seconds_count", &call),
        2.0
    );
    assert_eq!(
        value(&after, "chorus_tool_duration_seconds_count", &[]),
        1.0
    );
    assert_eq!(
        value(
            &after,
            "chorus_permission_decisions_total",
            &[("decision", "allow")]
        ),
        1.0
    );
    assert_eq!(
        value(&after, "chorus_workers", &[("state", "running")]),
        1.0
    );
    assert_eq!(value(&after, "chorus_agents", &[]), 1.0);
    assert!(value(&after, "chorus_db_write_duration_seconds_count", &[]) > 0.0);

    // `[metrics] open = true`: a scraper needs no token.
    let open = Chorus::builder()
        .openai_fake(&model)
        .config("[metrics]\nopen = true\n")
        .start()
        .await?;
    let scraped = scrape(&open, false).await?;
    assert_eq!(value(&scraped, "chorus_agents", &[]), 0.0);
    Ok(())
}

#[tokio::test]
async fn json_logs_carry_trace_ids_and_workers_lines_their_agent() -> anyhow::Result<()> {
    let receiver = OtlpReceiver::start().await;
    let model = FakeOpenAi::start().await;
    model.push(text("Hello."));
    let chorus = exporting(&model, &receiver.http_url, false)
        .env("CHORUS_LOG_FORMAT", "json")
        .start()
        .await?;
    run_one(&chorus, "logged").await?;
    let run = control_plane_run(&receiver).await?;
    let output = chorus.output();
    let lines: Vec<serde_json::Value> = output
        .lines()
        .filter(|l| !l.starts_with("chorus ready"))
        .map(|l| serde_json::from_str(l).map_err(|e| anyhow::anyhow!("not JSON ({e}): {l}")))
        .collect::<anyhow::Result<_>>()?;
    // A line logged inside the run's span leads to its trace.
    let started = lines
        .iter()
        .find(|l| l["message"] == "run ended" && l["process"].is_null())
        .expect("the control plane's run ended line");
    assert_eq!(started["trace_id"], run.trace_id.as_str(), "{started}");
    assert_eq!(started["span_id"], run.span_id.as_str());
    assert_eq!(started["agent"], "logged");
    // The worker's lines come through, labelled with their agent.
    let worker = lines
        .iter()
        .find(|l| l["process"] == "chorus-worker" && l["message"] == "run completed")
        .expect("the worker's run completed line");
    assert_eq!(worker["agent"], "logged");
    assert_eq!(worker["level"], "INFO");
    Ok(())
}

#[tokio::test]
async fn a_callers_traceparent_makes_the_run_its_child() -> anyhow::Result<()> {
    let receiver = OtlpReceiver::start().await;
    let model = FakeOpenAi::start().await;
    model.push(text("Hello."));
    let chorus = exporting(&model, &receiver.http_url, false).start().await?;
    chorus.create_agent("called").await?;
    let caller_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let caller_span = "00f067aa0ba902b7";
    let sent = chorus
        .api(reqwest::Method::POST, "/api/agents/called/messages")
        .header("traceparent", format!("00-{caller_trace}-{caller_span}-01"))
        .json(&serde_json::json!({"content": "Say hello"}))
        .send()
        .await?;
    assert_eq!(sent.status(), 202);
    let run = control_plane_run(&receiver).await?;
    assert_eq!(run.trace_id, caller_trace);
    assert_eq!(run.parent_span_id, caller_span);
    Ok(())
}

#[tokio::test]
async fn a_resumed_run_continues_the_interrupted_ones_trace() -> anyhow::Result<()> {
    let receiver = OtlpReceiver::start().await;
    let model = FakeOpenAi::start().await;
    // The first call hangs; the worker dies during it; the resumed run asks again.
    model.push(chorus_test_support::Reply::Delayed(
        Duration::from_secs(60),
        Box::new(text("too late")),
    ));
    model.push(text("Finished after the crash."));
    let chorus = exporting(&model, &receiver.http_url, false).start().await?;
    chorus.create_agent("fragile").await?;
    let worker = chorus
        .wait_worker_running("fragile", Duration::from_secs(15))
        .await?;
    let id = chorus.send_message("fragile", "take your time").await?;
    model.wait_for_requests(1, Duration::from_secs(15)).await;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(worker as i32),
        nix::sys::signal::Signal::SIGKILL,
    )?;
    let thread = chorus
        .wait_thread_finished("fragile", id, Duration::from_secs(30))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    let runs = receiver
        .wait_for(
            "both attempts' run spans",
            Duration::from_secs(30),
            |spans| {
                let runs: Vec<_> = spans
                    .iter()
                    .filter(|s| s.name == "run" && s.service == "chorus")
                    .cloned()
                    .collect();
                (runs.len() >= 2).then_some(runs)
            },
        )
        .await?;
    let first = runs.iter().find(|r| r.attr("attempt") == "1").unwrap();
    let second = runs.iter().find(|r| r.attr("attempt") == "2").unwrap();
    assert_eq!(
        second.trace_id, first.trace_id,
        "one trace for the thread run"
    );
    assert_eq!(second.parent_span_id, first.span_id);
    let (event, attributes) = second
        .events
        .iter()
        .find(|(name, _)| name == "resumed")
        .expect("a resumed event");
    assert_eq!(event, "resumed");
    assert!(
        attributes["reason"].as_str().unwrap().contains("worker"),
        "{attributes:?}"
    );
    Ok(())
}

#[tokio::test]
async fn message_contents_are_recorded_only_on_opt_in_and_without_secrets() -> anyhow::Result<()> {
    let receiver = OtlpReceiver::start().await;
    let model = FakeOpenAi::start().await;
    model.push(text("The answer is 42."));
    let chorus = exporting(&model, &receiver.http_url, false)
        .config("[telemetry]\nrecord_content = true\n")
        .start()
        .await?;
    chorus.create_agent("open-book").await?;
    // The user pastes the provider's key; it must not reach the collector.
    let id = chorus
        .send_message("open-book", "What is the answer? My key is sk-openai-test")
        .await?;
    chorus
        .wait_thread_finished("open-book", id, Duration::from_secs(30))
        .await?;
    let call = receiver
        .wait_for("the model call", Duration::from_secs(30), |spans| {
            spans.iter().find(|s| s.name == "llm_call").cloned()
        })
        .await?;
    let input = call
        .attr("gen_ai.input.messages")
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(input.contains("What is the answer?"), "{input}");
    assert!(!input.contains("sk-openai-test"), "{input}");
    let output = call.attr("gen_ai.output.messages").to_string();
    assert!(output.contains("The answer is 42."), "{output}");
    assert_eq!(call.attr("output.value"), "The answer is 42.");
    Ok(())
}

mod relayed {
    //! What a worker sends the trace relay, sent as a hostile worker would: with
    //! a connected worker's real credential (captured from the binary's stdin).

    use std::time::{Duration, Instant};

    use chorus_test_support::fake_model::text;
    use chorus_test_support::otlp::export_as;
    use chorus_test_support::otlp::proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use chorus_test_support::otlp::proto::tonic::common::v1::{
        AnyValue, ArrayValue, InstrumentationScope, KeyValue, KeyValueList, any_value,
    };
    use chorus_test_support::otlp::proto::tonic::resource::v1::Resource;
    use chorus_test_support::otlp::proto::tonic::trace::v1::span::{Event, Link};
    use chorus_test_support::otlp::proto::tonic::trace::v1::{
        ResourceSpans, ScopeSpans, Span, Status,
    };
    use chorus_test_support::{FakeOpenAi, OtlpReceiver};

    use super::super::relay::{capturing_worker, wait_for_file};
    use super::{exporting, run_one, scrape, value};

    const PROVIDER_KEY: &str = "sk-live-SPANKEY-4e7a1c9b30";
    const API_TOKEN: &str = "chorus-SPANTOKEN-9a2f6d0e84";

    fn text_value(s: &str) -> AnyValue {
        AnyValue {
            value: Some(any_value::Value::StringValue(s.into())),
        }
    }

    fn kv(key: &str, value: AnyValue) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Some(value),
            ..KeyValue::default()
        }
    }

    fn hex_bytes(hex: &str) -> Vec<u8> {
        (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect()
    }

    /// A span with both secrets in every string field, nested values included,
    /// marked `probe = <name>`, in trace `trace_id`, linking to `link_to`.
    fn leaky_span(probe: &str, trace_id: Vec<u8>, link_to: Vec<u8>) -> Span {
        let s = || format!("key {PROVIDER_KEY} token {API_TOKEN}");
        let nested = AnyValue {
            value: Some(any_value::Value::ArrayValue(ArrayValue {
                values: vec![
                    text_value(&s()),
                    AnyValue {
                        value: Some(any_value::Value::KvlistValue(KeyValueList {
                            values: vec![kv(&s(), text_value(&s()))],
                        })),
                    },
                    AnyValue {
                        value: Some(any_value::Value::BytesValue(s().into_bytes())),
                    },
                ],
            })),
        };
        let attrs = || {
            vec![
                kv("probe", text_value(probe)),
                kv(&s(), text_value(&s())),
                kv("nested", nested.clone()),
            ]
        };
        Span {
            trace_id,
            span_id: vec![1, 2, 3, 4, 5, 6, 7, 8],
            trace_state: format!("k={API_TOKEN}"),
            name: s(),
            kind: 1,
            start_time_unix_nano: 1,
            end_time_unix_nano: 2,
            attributes: attrs(),
            events: vec![Event {
                name: s(),
                attributes: attrs(),
                ..Event::default()
            }],
            links: vec![Link {
                trace_id: link_to,
                span_id: vec![8, 7, 6, 5, 4, 3, 2, 1],
                trace_state: s(),
                attributes: attrs(),
                ..Link::default()
            }],
            status: Some(Status {
                message: s(),
                code: 2,
            }),
            ..Span::default()
        }
    }

    fn batch(spans: Vec<Span>, secret_text: &str) -> ExportTraceServiceRequest {
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(Resource {
                    attributes: vec![
                        kv("service.name", text_value("chorus-worker")),
                        kv("chorus.agent", text_value("victim")),
                        kv("leak", text_value(secret_text)),
                    ],
                    ..Resource::default()
                }),
                scope_spans: vec![ScopeSpans {
                    scope: Some(InstrumentationScope {
                        name: secret_text.into(),
                        version: secret_text.into(),
                        attributes: vec![kv("leak", text_value(secret_text))],
                        ..InstrumentationScope::default()
                    }),
                    spans,
                    schema_url: secret_text.into(),
                }],
                schema_url: secret_text.into(),
            }],
        }
    }

    /// The trace of the control plane's run span of `agent`.
    async fn run_trace(receiver: &OtlpReceiver, agent: &str) -> anyhow::Result<String> {
        receiver
            .wait_for("the run span", Duration::from_secs(30), |spans| {
                spans
                    .iter()
                    .find(|s| s.name == "run" && s.service == "chorus" && s.attr("agent") == agent)
                    .map(|s| s.trace_id.clone())
            })
            .await
    }

    #[tokio::test]
    async fn a_workers_spans_reach_the_collector_scrubbed_and_only_in_its_own_traces()
    -> anyhow::Result<()> {
        let receiver = OtlpReceiver::start().await;
        let model = FakeOpenAi::start().await;
        let tmp = tempfile::tempdir()?;
        let chorus = exporting(&model, &receiver.grpc_url, true)
            .env("OPENAI_API_KEY", PROVIDER_KEY)
            .env(
                "CHORUS_WORKER_BIN",
                &capturing_worker(tmp.path())?.display().to_string(),
            )
            .api_token(API_TOKEN)
            .start()
            .await?;
        model.push(text("Hello."));
        run_one(&chorus, "victim").await?;
        let victim_trace = run_trace(&receiver, "victim").await?;
        // The next worker launched is the spy's: its credential is the one captured.
        std::fs::remove_file(tmp.path().join("credential"))?;
        model.push(text("Hello."));
        run_one(&chorus, "spy").await?;
        let credential =
            wait_for_file(&tmp.path().join("credential"), Duration::from_secs(10)).await?;
        let spy_trace = run_trace(&receiver, "spy").await?;
        assert_ne!(spy_trace, victim_trace);

        let secret_text = format!("{PROVIDER_KEY}/{API_TOKEN}");
        let sent = batch(
            vec![
                leaky_span("own", hex_bytes(&spy_trace), hex_bytes(&victim_trace)),
                leaky_span("grafted", hex_bytes(&victim_trace), hex_bytes(&spy_trace)),
            ],
            &secret_text,
        );
        // The control: what is sent holds both secrets, in dozens of places.
        let encoded = occurrences(&sent, PROVIDER_KEY);
        assert!(encoded > 20, "{encoded}");
        export_as(&chorus.grpc_url, &credential, sent).await?;

        let probes = receiver
            .wait_for("the probe spans", Duration::from_secs(30), |spans| {
                let probes: Vec<_> = spans
                    .iter()
                    .filter(|s| s.attributes.contains_key("probe"))
                    .cloned()
                    .collect();
                (probes.len() == 2).then_some(probes)
            })
            .await?;
        for raw in receiver.raw() {
            for secret in [PROVIDER_KEY, API_TOKEN] {
                assert!(
                    !raw.windows(secret.len()).any(|w| w == secret.as_bytes()),
                    "{secret} reached the collector"
                );
            }
        }
        let probe = |name: &str| {
            probes
                .iter()
                .find(|s| s.attr("probe") == name)
                .unwrap()
                .clone()
        };
        assert_eq!(probe("own").name, "key [redacted] token [redacted]");
        assert_eq!(
            probe("own").trace_id,
            spy_trace,
            "its own run's trace is kept"
        );
        let grafted = probe("grafted");
        assert_ne!(
            grafted.trace_id, victim_trace,
            "grafted into the victim's trace"
        );
        assert_ne!(grafted.trace_id, spy_trace);
        // Labelled with the agent that sent it, whatever it claimed.
        let labelled = receiver.raw().iter().any(|raw| {
            let s = String::from_utf8_lossy(raw);
            s.contains("chorus.agent") && s.contains("spy") && s.contains("probe")
        });
        assert!(labelled);
        // Nothing in the victim's trace but what the control plane and its own
        // worker made.
        let in_victim: Vec<_> = receiver
            .spans()
            .into_iter()
            .filter(|s| s.trace_id == victim_trace)
            .collect();
        assert!(
            in_victim
                .iter()
                .all(|s| !s.attributes.contains_key("probe")),
            "{in_victim:#?}"
        );
        Ok(())
    }

    fn occurrences(batch: &ExportTraceServiceRequest, secret: &str) -> usize {
        let encoded = format!("{batch:?}");
        encoded.matches(secret).count()
    }

    #[tokio::test]
    async fn a_flood_of_spans_from_one_worker_is_bounded_and_counted() -> anyhow::Result<()> {
        let receiver = OtlpReceiver::start().await;
        let model = FakeOpenAi::start().await;
        let tmp = tempfile::tempdir()?;
        let chorus = exporting(&model, &receiver.grpc_url, true)
            .env(
                "CHORUS_WORKER_BIN",
                &capturing_worker(tmp.path())?.display().to_string(),
            )
            .start()
            .await?;
        chorus.create_agent("flooder").await?;
        let credential =
            wait_for_file(&tmp.path().join("credential"), Duration::from_secs(10)).await?;
        chorus
            .wait_worker_running("flooder", Duration::from_secs(15))
            .await?;
        let flood = || {
            let spans = (0..2_000)
                .map(|i| Span {
                    trace_id: vec![7; 16],
                    span_id: (i as u64 + 1).to_be_bytes().to_vec(),
                    name: "flood".into(),
                    start_time_unix_nano: 1,
                    end_time_unix_nano: 2,
                    ..Span::default()
                })
                .collect();
            batch(spans, "x")
        };
        let started = Instant::now();
        let mut sent = 0u64;
        while started.elapsed() < Duration::from_secs(5) {
            export_as(&chorus.grpc_url, &credential, flood()).await?;
            sent += 2_000;
        }
        let took = started.elapsed().as_secs_f64();
        let dropped_total = |scraped: &prometheus_parse::Scrape| {
            value(
                scraped,
                "chorus_trace_spans_dropped_total",
                &[("reason", "over_budget")],
            )
        };
        let dropped = dropped_total(&scrape(&chorus, true).await?) as u64;
        let accepted = sent - dropped;
        // 5,000 at once, then 1,000 a second.
        let bound = 5_000.0 + 1_000.0 * took;
        println!(
            "flood: sent {sent} spans in {took:.1} s ({:.0}/s); accepted {accepted} ({:.0}/s), dropped {dropped}",
            sent as f64 / took,
            accepted as f64 / took
        );
        assert!(
            sent > 2 * bound as u64,
            "the flood was no flood: {sent} sent"
        );
        assert!(
            accepted as f64 <= bound + 1.0,
            "{accepted} accepted in {took:.1} s"
        );
        assert!(accepted >= 5_000, "{accepted} accepted");
        // What was accepted reaches the collector (the worker's own spans share the
        // budget, so a few more of ours may have been the ones kept), and no more.
        let received = receiver
            .wait_for("the accepted spans", Duration::from_secs(30), |spans| {
                let n = spans.iter().filter(|s| s.name == "flood").count() as u64;
                (n >= accepted).then_some(n)
            })
            .await?;
        assert!(received as f64 <= bound + 1.0, "{received} received");
        Ok(())
    }
}
