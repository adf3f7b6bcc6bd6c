//! Counters and histograms for `GET /metrics`, in the Prometheus text format
//! (version 0.0.4). One registry for the process ([`global`]): the places that see
//! something happen count it (a run ending in the runs actor, a decision in the
//! gate, a write in the store), and what is a state rather than an event (workers by
//! state, pending approvals, feed subscribers) is read at scrape time by the
//! handler. Counting is a short lock on a small map; nothing here does I/O.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// Upper bounds (seconds) of the latency buckets: from a fast tool to a long
/// model call.
const BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];

#[derive(Debug, Default, Clone)]
struct Histogram {
    /// Count per bucket of `BUCKETS` (not cumulative), then the overflow.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, seconds: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; BUCKETS.len() + 1];
        }
        let index = BUCKETS
            .iter()
            .position(|bound| seconds <= *bound)
            .unwrap_or(BUCKETS.len());
        self.counts[index] += 1;
        self.sum += seconds;
        self.count += 1;
    }
}

/// One metric's series, by label values.
#[derive(Debug)]
struct Family<T> {
    name: &'static str,
    help: &'static str,
    labels: &'static [&'static str],
    series: BTreeMap<Vec<String>, T>,
}

impl<T: Default> Family<T> {
    fn new(name: &'static str, help: &'static str, labels: &'static [&'static str]) -> Self {
        Family {
            name,
            help,
            labels,
            series: BTreeMap::new(),
        }
    }

    fn get(&mut self, values: &[&str]) -> &mut T {
        self.series
            .entry(
                values
                    .iter()
                    .map(std::string::ToString::to_string)
                    .collect(),
            )
            .or_default()
    }
}

#[derive(Debug)]
struct Registry {
    runs_started: Family<u64>,
    runs_ended: Family<u64>,
    model_calls: Family<u64>,
    model_tokens: Family<u64>,
    model_call_seconds: Family<Histogram>,
    tool_seconds: Family<Histogram>,
    permission_decisions: Family<u64>,
    worker_restarts: Family<u64>,
    db_write_seconds: Family<Histogram>,
    spans_dropped: Family<u64>,
}

impl Registry {
    fn new() -> Registry {
        Registry {
            runs_started: Family::new(
                "chorus_runs_started_total",
                "Thread runs queued for a worker (each attempt counts)",
                &[],
            ),
            runs_ended: Family::new(
                "chorus_runs_ended_total",
                "Threads that ended, by status (completed, failed, killed)",
                &["status"],
            ),
            model_calls: Family::new(
                "chorus_model_calls_total",
                "Model calls made by workers, by provider and model",
                &["provider", "model", "outcome"],
            ),
            model_tokens: Family::new(
                "chorus_model_tokens_total",
                "Tokens used by model calls, by provider, model and direction",
                &["provider", "model", "direction"],
            ),
            model_call_seconds: Family::new(
                "chorus_model_call_duration_seconds",
                "How long model calls took, as the worker measured them",
                &["provider", "model"],
            ),
            tool_seconds: Family::new(
                "chorus_tool_duration_seconds",
                "How long tool calls took, as the worker measured them",
                &[],
            ),
            permission_decisions: Family::new(
                "chorus_permission_decisions_total",
                "Tool checks decided by the gate, by outcome",
                &["decision"],
            ),
            worker_restarts: Family::new(
                "chorus_worker_restarts_total",
                "Worker processes restarted after they ended",
                &[],
            ),
            db_write_seconds: Family::new(
                "chorus_db_write_duration_seconds",
                "How long database write transactions took, commit included",
                &[],
            ),
            spans_dropped: Family::new(
                "chorus_trace_spans_dropped_total",
                "Trace spans not exported, by reason (export: the collector unreachable, refusing or slow; over_budget: a worker sent more than its spans per second)",
                &["reason"],
            ),
        }
    }
}

fn registry() -> &'static Mutex<Registry> {
    static REGISTRY: OnceLock<Mutex<Registry>> = OnceLock::new();
    REGISTRY.get_or_init(|| Mutex::new(Registry::new()))
}

fn with<R>(f: impl FnOnce(&mut Registry) -> R) -> R {
    f(&mut registry()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner))
}

pub fn run_started() {
    with(|r| *r.runs_started.get(&[]) += 1);
}

pub fn run_ended(status: &str) {
    with(|r| *r.runs_ended.get(&[status]) += 1);
}

pub fn model_call(
    provider: &str,
    model: &str,
    failed: bool,
    took: Duration,
    tokens: Option<(u64, u64)>,
) {
    with(|r| {
        let outcome = if failed { "error" } else { "ok" };
        *r.model_calls.get(&[provider, model, outcome]) += 1;
        r.model_call_seconds
            .get(&[provider, model])
            .observe(took.as_secs_f64());
        if let Some((input, output)) = tokens {
            *r.model_tokens.get(&[provider, model, "input"]) += input;
            *r.model_tokens.get(&[provider, model, "output"]) += output;
        }
    });
}

pub fn tool_call(took: Duration) {
    with(|r| r.tool_seconds.get(&[]).observe(took.as_secs_f64()));
}

pub fn permission_decision(decision: &str) {
    with(|r| *r.permission_decisions.get(&[decision]) += 1);
}

pub fn worker_restarted() {
    with(|r| *r.worker_restarts.get(&[]) += 1);
}

/// Why trace spans were not exported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanDrop {
    /// The collector was unreachable, refused them, or did not keep up.
    Export,
    /// A worker sent more than its budget (the trace relay's token bucket).
    OverBudget,
}

impl SpanDrop {
    pub fn as_str(self) -> &'static str {
        match self {
            SpanDrop::Export => "export",
            SpanDrop::OverBudget => "over_budget",
        }
    }
}

pub fn spans_dropped(reason: SpanDrop, spans: u64) {
    with(|r| *r.spans_dropped.get(&[reason.as_str()]) += spans);
}

pub fn db_write(took: Duration) {
    with(|r| r.db_write_seconds.get(&[]).observe(took.as_secs_f64()));
}

/// What is read at scrape time.
#[derive(Debug, Default, Clone)]
pub struct Gauges {
    pub pending_approvals: u64,
    /// Workers by state (`running`, `starting`, `restarting`).
    pub workers: BTreeMap<String, u64>,
    pub feed_subscribers: u64,
    pub agents: u64,
    /// Dial-in worker links waiting for an agent (remote launcher; else 0).
    pub idle_dial_in: u64,
}

/// `value` as a Prometheus label value (backslash, quote and newline escaped).
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn labels(names: &[&str], values: &[String], extra: Option<(&str, String)>) -> String {
    let mut pairs: Vec<String> = names
        .iter()
        .zip(values)
        .map(|(n, v)| format!("{n}=\"{}\"", escape(v)))
        .collect();
    if let Some((n, v)) = extra {
        pairs.push(format!("{n}=\"{v}\""));
    }
    if pairs.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", pairs.join(","))
    }
}

fn counter(out: &mut String, family: &Family<u64>) {
    let _ = writeln!(out, "# HELP {} {}", family.name, family.help);
    let _ = writeln!(out, "# TYPE {} counter", family.name);
    if family.series.is_empty() && family.labels.is_empty() {
        let _ = writeln!(out, "{} 0", family.name);
    }
    for (values, n) in &family.series {
        let _ = writeln!(
            out,
            "{}{} {n}",
            family.name,
            labels(family.labels, values, None)
        );
    }
}

fn histogram(out: &mut String, family: &Family<Histogram>) {
    let _ = writeln!(out, "# HELP {} {}", family.name, family.help);
    let _ = writeln!(out, "# TYPE {} histogram", family.name);
    let empty = Histogram {
        counts: vec![0; BUCKETS.len() + 1],
        ..Histogram::default()
    };
    let mut series: Vec<(Vec<String>, &Histogram)> =
        family.series.iter().map(|(k, v)| (k.clone(), v)).collect();
    if series.is_empty() && family.labels.is_empty() {
        series.push((Vec::new(), &empty));
    }
    for (values, h) in series {
        let mut cumulative = 0;
        for (i, bound) in BUCKETS.iter().enumerate() {
            cumulative += h.counts.get(i).copied().unwrap_or(0);
            let _ = writeln!(
                out,
                "{}_bucket{} {cumulative}",
                family.name,
                labels(family.labels, &values, Some(("le", bound.to_string())))
            );
        }
        let _ = writeln!(
            out,
            "{}_bucket{} {}",
            family.name,
            labels(family.labels, &values, Some(("le", "+Inf".into()))),
            h.count
        );
        let plain = labels(family.labels, &values, None);
        let _ = writeln!(out, "{}_sum{plain} {}", family.name, h.sum);
        let _ = writeln!(out, "{}_count{plain} {}", family.name, h.count);
    }
}

fn gauge(out: &mut String, name: &str, help: &str, series: &[(String, u64)]) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} gauge");
    for (labels, value) in series {
        let _ = writeln!(out, "{name}{labels} {value}");
    }
}

/// Everything, in the Prometheus text format.
pub fn render(gauges: &Gauges) -> String {
    let mut out = String::new();
    with(|r| {
        counter(&mut out, &r.runs_started);
        counter(&mut out, &r.runs_ended);
        counter(&mut out, &r.model_calls);
        counter(&mut out, &r.model_tokens);
        histogram(&mut out, &r.model_call_seconds);
        histogram(&mut out, &r.tool_seconds);
        counter(&mut out, &r.permission_decisions);
        counter(&mut out, &r.worker_restarts);
        histogram(&mut out, &r.db_write_seconds);
        counter(&mut out, &r.spans_dropped);
    });
    gauge(
        &mut out,
        "chorus_pending_approvals",
        "Approval requests waiting for a person",
        &[(String::new(), gauges.pending_approvals)],
    );
    let workers: Vec<(String, u64)> = ["starting", "running", "restarting"]
        .iter()
        .map(|state| {
            (
                format!("{{state=\"{state}\"}}"),
                gauges.workers.get(*state).copied().unwrap_or(0),
            )
        })
        .collect();
    gauge(
        &mut out,
        "chorus_workers",
        "Worker processes by state",
        &workers,
    );
    gauge(
        &mut out,
        "chorus_agents",
        "Active agents",
        &[(String::new(), gauges.agents)],
    );
    gauge(
        &mut out,
        "chorus_dial_in_links_idle",
        "Dial-in worker links waiting for an agent (free capacity; remote launcher)",
        &[(String::new(), gauges.idle_dial_in)],
    );
    gauge(
        &mut out,
        "chorus_feed_subscribers",
        "Clients following the live feed",
        &[(String::new(), gauges.feed_subscribers)],
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative_and_labels_are_escaped() {
        let mut family = Family::<Histogram>::new("h_seconds", "help", &["model"]);
        family.get(&["a\"b"]).observe(0.003);
        family.get(&["a\"b"]).observe(7.0);
        family.get(&["a\"b"]).observe(500.0);
        let mut out = String::new();
        histogram(&mut out, &family);
        assert!(
            out.contains("h_seconds_bucket{model=\"a\\\"b\",le=\"0.001\"} 0"),
            "{out}"
        );
        assert!(
            out.contains("h_seconds_bucket{model=\"a\\\"b\",le=\"0.005\"} 1"),
            "{out}"
        );
        assert!(
            out.contains("h_seconds_bucket{model=\"a\\\"b\",le=\"10\"} 2"),
            "{out}"
        );
        assert!(
            out.contains("h_seconds_bucket{model=\"a\\\"b\",le=\"+Inf\"} 3"),
            "{out}"
        );
        assert!(out.contains("h_seconds_count{model=\"a\\\"b\"} 3"), "{out}");
    }
}
