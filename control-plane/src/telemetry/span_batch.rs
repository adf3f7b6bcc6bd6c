//! What the trace relay does to a worker's batch before it is forwarded, each a
//! pure pass over the OTLP messages: scrub every string of it, keep only as many
//! spans as the worker may send, put every span in a trace the worker may write to,
//! and label the batch with the sending agent.
//!
//! The scrub destructures every message in full (no `..`), so a field added to
//! OTLP does not compile until it is decided here; values are one recursive walk
//! over `AnyValue`, however deep arrays and key-value lists nest.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    AnyValue, ArrayValue, EntityRef, InstrumentationScope, KeyValue, KeyValueList, any_value,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::span::{Event, Link};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};

use super::run_traces::RunTraces;
use crate::secrets::{KnownSecrets, REDACTED};

/// The resource attribute naming the agent a worker's spans belong to.
pub const AGENT_ATTRIBUTE: &str = "chorus.agent";

pub fn span_count(batch: &ExportTraceServiceRequest) -> u64 {
    batch
        .resource_spans
        .iter()
        .flat_map(|r| &r.scope_spans)
        .map(|s| s.spans.len() as u64)
        .sum()
}

/// Keeps the first `keep` spans of the batch (in order), dropping the rest.
pub fn keep_first(batch: &mut ExportTraceServiceRequest, mut keep: u64) {
    for resource in &mut batch.resource_spans {
        for scope in &mut resource.scope_spans {
            let here = (scope.spans.len() as u64).min(keep);
            scope.spans.truncate(here as usize);
            keep -= here;
        }
        resource.scope_spans.retain(|s| !s.spans.is_empty());
    }
    batch.resource_spans.retain(|r| !r.scope_spans.is_empty());
}

/// Puts every span (and every link) of `agent`'s batch in a trace the agent may
/// write to (see [`RunTraces::admit`]).
pub fn admit_traces(batch: &mut ExportTraceServiceRequest, agent: &str, traces: &RunTraces) {
    for resource in &mut batch.resource_spans {
        for scope in &mut resource.scope_spans {
            for span in &mut scope.spans {
                span.trace_id = traces.admit(agent, &span.trace_id).to_vec();
                for link in &mut span.links {
                    link.trace_id = traces.admit(agent, &link.trace_id).to_vec();
                }
            }
        }
    }
}

/// Sets `chorus.agent` on every resource of the batch to `agent`.
pub fn label(batch: &mut ExportTraceServiceRequest, agent: &str) {
    for spans in &mut batch.resource_spans {
        let resource = spans.resource.get_or_insert_with(Resource::default);
        resource.attributes.retain(|kv| kv.key != AGENT_ATTRIBUTE);
        resource.attributes.push(KeyValue {
            key: AGENT_ATTRIBUTE.to_string(),
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue(agent.to_string())),
            }),
            ..KeyValue::default()
        });
    }
}

/// Replaces every known secret in every string of the batch: names, status
/// messages, trace states, schema URLs, attribute keys and values at any depth, of
/// spans, events, links, scopes and resources (a worker's recorded messages may
/// quote a key it was shown; a hostile worker may put one anywhere).
pub fn scrub(batch: &mut ExportTraceServiceRequest, secrets: &KnownSecrets) {
    let ExportTraceServiceRequest { resource_spans } = batch;
    for resource_spans in resource_spans {
        let ResourceSpans {
            resource,
            scope_spans,
            schema_url,
        } = resource_spans;
        secrets.scrub(schema_url);
        if let Some(Resource {
            attributes,
            dropped_attributes_count: _,
            entity_refs,
        }) = resource
        {
            attributes_(attributes, secrets);
            for EntityRef {
                schema_url,
                r#type,
                id_keys,
                description_keys,
            } in entity_refs
            {
                secrets.scrub(schema_url);
                secrets.scrub(r#type);
                id_keys.iter_mut().for_each(|k| secrets.scrub(k));
                description_keys.iter_mut().for_each(|k| secrets.scrub(k));
            }
        }
        for ScopeSpans {
            scope,
            spans,
            schema_url,
        } in scope_spans
        {
            secrets.scrub(schema_url);
            if let Some(InstrumentationScope {
                name,
                version,
                attributes,
                dropped_attributes_count: _,
            }) = scope
            {
                secrets.scrub(name);
                secrets.scrub(version);
                attributes_(attributes, secrets);
            }
            spans.iter_mut().for_each(|span| scrub_span(span, secrets));
        }
    }
}

fn scrub_span(span: &mut Span, secrets: &KnownSecrets) {
    let Span {
        trace_id: _,
        span_id: _,
        trace_state,
        parent_span_id: _,
        flags: _,
        name,
        kind: _,
        start_time_unix_nano: _,
        end_time_unix_nano: _,
        attributes,
        dropped_attributes_count: _,
        events,
        dropped_events_count: _,
        links,
        dropped_links_count: _,
        status,
    } = span;
    secrets.scrub(trace_state);
    secrets.scrub(name);
    attributes_(attributes, secrets);
    for Event {
        time_unix_nano: _,
        name,
        attributes,
        dropped_attributes_count: _,
    } in events
    {
        secrets.scrub(name);
        attributes_(attributes, secrets);
    }
    for Link {
        trace_id: _,
        span_id: _,
        trace_state,
        attributes,
        dropped_attributes_count: _,
        flags: _,
    } in links
    {
        secrets.scrub(trace_state);
        attributes_(attributes, secrets);
    }
    if let Some(Status { message, code: _ }) = status {
        secrets.scrub(message);
    }
}

fn attributes_(attributes: &mut [KeyValue], secrets: &KnownSecrets) {
    for KeyValue {
        key,
        value,
        key_strindex: _,
    } in attributes
    {
        secrets.scrub(key);
        if let Some(value) = value {
            any_value(value, secrets);
        }
    }
}

/// The one walk over a value, into arrays and key-value lists.
fn any_value(value: &mut AnyValue, secrets: &KnownSecrets) {
    use any_value::Value;
    let AnyValue { value } = value;
    match value {
        Some(Value::StringValue(text)) => secrets.scrub(text),
        Some(Value::ArrayValue(ArrayValue { values })) => {
            values.iter_mut().for_each(|v| any_value(v, secrets));
        }
        Some(Value::KvlistValue(KeyValueList { values })) => attributes_(values, secrets),
        Some(Value::BytesValue(bytes)) if secrets.found_in(bytes) => {
            *bytes = match String::from_utf8(std::mem::take(bytes)) {
                Ok(mut text) => {
                    secrets.scrub(&mut text);
                    text.into_bytes()
                }
                // Not text: the secret is somewhere in it; none of it goes on.
                Err(_) => REDACTED.as_bytes().to_vec(),
            };
        }
        Some(
            Value::BytesValue(_)
            | Value::BoolValue(_)
            | Value::IntValue(_)
            | Value::DoubleValue(_)
            | Value::StringValueStrindex(_),
        )
        | None => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "sk-live-0123456789";

    fn text(s: &str) -> AnyValue {
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

    /// A batch with the secret in every string field OTLP has, and in nested values.
    fn batch_with_secret_everywhere() -> ExportTraceServiceRequest {
        let s = || format!("x {SECRET} y");
        let nested = AnyValue {
            value: Some(any_value::Value::ArrayValue(ArrayValue {
                values: vec![
                    text(&s()),
                    AnyValue {
                        value: Some(any_value::Value::KvlistValue(KeyValueList {
                            values: vec![kv(&s(), text(&s()))],
                        })),
                    },
                    AnyValue {
                        value: Some(any_value::Value::BytesValue(s().into_bytes())),
                    },
                    AnyValue {
                        value: Some(any_value::Value::BytesValue(
                            [&[0xff, 0xfe][..], SECRET.as_bytes()].concat(),
                        )),
                    },
                ],
            })),
        };
        let attrs = || vec![kv(&s(), text(&s())), kv("nested", nested.clone())];
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(Resource {
                    attributes: attrs(),
                    dropped_attributes_count: 0,
                    entity_refs: vec![EntityRef {
                        schema_url: s(),
                        r#type: s(),
                        id_keys: vec![s()],
                        description_keys: vec![s()],
                    }],
                }),
                scope_spans: vec![ScopeSpans {
                    scope: Some(InstrumentationScope {
                        name: s(),
                        version: s(),
                        attributes: attrs(),
                        dropped_attributes_count: 0,
                    }),
                    spans: vec![Span {
                        trace_state: s(),
                        name: s(),
                        attributes: attrs(),
                        events: vec![Event {
                            name: s(),
                            attributes: attrs(),
                            ..Event::default()
                        }],
                        links: vec![Link {
                            trace_state: s(),
                            attributes: attrs(),
                            ..Link::default()
                        }],
                        status: Some(Status {
                            message: s(),
                            code: 2,
                        }),
                        ..Span::default()
                    }],
                    schema_url: s(),
                }],
                schema_url: s(),
            }],
        }
    }

    #[test]
    fn a_secret_is_scrubbed_from_every_string_at_any_depth() {
        let mut batch = batch_with_secret_everywhere();
        // The control: the secret is there to be found, some 40 times.
        let before = format!("{batch:?}");
        assert!(before.matches(SECRET).count() > 30, "{before}");
        scrub(&mut batch, &KnownSecrets::new([SECRET.to_string()]));
        let shown = format!("{batch:?}");
        assert!(!shown.contains(SECRET), "{shown}");
        // Bytes are shown as numbers by Debug: look for them too.
        let encoded = prost::Message::encode_to_vec(&batch);
        assert!(
            !encoded
                .windows(SECRET.len())
                .any(|w| w == SECRET.as_bytes()),
            "the secret is still in the encoded batch"
        );
        assert!(shown.contains("x [redacted] y"), "{shown}");
    }

    #[test]
    fn a_batch_is_labelled_with_the_sending_agent_whatever_it_claimed() {
        let mut batch = ExportTraceServiceRequest {
            resource_spans: vec![
                ResourceSpans {
                    resource: Some(Resource {
                        attributes: vec![kv(AGENT_ATTRIBUTE, text("someone-else"))],
                        ..Resource::default()
                    }),
                    ..ResourceSpans::default()
                },
                ResourceSpans::default(),
            ],
        };
        label(&mut batch, "helper");
        for spans in &batch.resource_spans {
            let agents: Vec<_> = spans
                .resource
                .as_ref()
                .unwrap()
                .attributes
                .iter()
                .filter(|kv| kv.key == AGENT_ATTRIBUTE)
                .collect();
            assert_eq!(agents.len(), 1);
            assert_eq!(agents[0].value, Some(text("helper")));
        }
    }

    fn spans(n: usize) -> Vec<Span> {
        (0..n)
            .map(|i| Span {
                name: format!("s{i}"),
                ..Span::default()
            })
            .collect()
    }

    fn names(batch: &ExportTraceServiceRequest) -> Vec<String> {
        batch
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .flat_map(|s| &s.spans)
            .map(|s| s.name.clone())
            .collect()
    }

    #[test]
    fn keeping_the_first_spans_crosses_scopes_and_resources_in_order() {
        let scope = |n| ScopeSpans {
            spans: spans(n),
            ..ScopeSpans::default()
        };
        let mut batch = ExportTraceServiceRequest {
            resource_spans: vec![
                ResourceSpans {
                    scope_spans: vec![scope(2), scope(3)],
                    ..ResourceSpans::default()
                },
                ResourceSpans {
                    scope_spans: vec![scope(4)],
                    ..ResourceSpans::default()
                },
            ],
        };
        assert_eq!(span_count(&batch), 9);
        keep_first(&mut batch, 4);
        assert_eq!(names(&batch), ["s0", "s1", "s0", "s1"]);
        assert_eq!(batch.resource_spans.len(), 1, "an emptied resource goes");
        keep_first(&mut batch, 0);
        assert!(batch.resource_spans.is_empty());
    }

    #[test]
    fn spans_and_links_are_put_in_traces_the_agent_may_write_to() {
        let traces = RunTraces::default();
        let given = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        traces.give(
            "a",
            &std::collections::HashMap::from([("traceparent".into(), given.into())]),
        );
        let own = super::super::run_traces::trace_id_of(given)
            .unwrap()
            .to_vec();
        let foreign = vec![9u8; 16];
        let mut batch = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans: vec![
                        Span {
                            trace_id: own.clone(),
                            links: vec![Link {
                                trace_id: foreign.clone(),
                                ..Link::default()
                            }],
                            ..Span::default()
                        },
                        Span {
                            trace_id: foreign.clone(),
                            ..Span::default()
                        },
                    ],
                    ..ScopeSpans::default()
                }],
                ..ResourceSpans::default()
            }],
        };
        admit_traces(&mut batch, "a", &traces);
        let spans = &batch.resource_spans[0].scope_spans[0].spans;
        assert_eq!(spans[0].trace_id, own, "its run's trace is kept");
        assert_ne!(spans[1].trace_id, foreign);
        assert_ne!(spans[0].links[0].trace_id, foreign);
        assert_eq!(
            spans[0].links[0].trace_id, spans[1].trace_id,
            "one foreign trace maps to one trace of the worker's own"
        );
    }
}
