//! Workers' spans come in here: an OTLP `TraceService` on the worker link's
//! address, open only to a connected worker's credential. Each batch is labelled
//! with the agent whose credential sent it (a worker cannot pass its spans off as
//! another agent's) and queued for the collector like the control plane's own.

use std::sync::Arc;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use tonic::{Request, Response, Status};

use super::collector::Collector;
use crate::secrets::{KnownSecrets, bearer_token};
use crate::workers::registry::Registry;

/// The resource attribute naming the agent a worker's spans belong to.
pub const AGENT_ATTRIBUTE: &str = "chorus.agent";

pub struct TraceRelay {
    registry: Arc<Registry>,
    collector: Collector,
    secrets: KnownSecrets,
}

impl TraceRelay {
    pub fn server(
        registry: Arc<Registry>,
        collector: Collector,
        secrets: KnownSecrets,
    ) -> TraceServiceServer<TraceRelay> {
        TraceServiceServer::new(TraceRelay {
            registry,
            collector,
            secrets,
        })
    }
}

/// Replaces every known secret in the batch's span and event attributes (a
/// worker's recorded messages may quote a key it was shown).
pub fn scrub(batch: &mut ExportTraceServiceRequest, secrets: &KnownSecrets) {
    fn scrub_values(attributes: &mut [KeyValue], secrets: &KnownSecrets) {
        for kv in attributes {
            if let Some(AnyValue {
                value: Some(any_value::Value::StringValue(text)),
            }) = kv.value.as_mut()
            {
                secrets.scrub(text);
            }
        }
    }
    for resource in &mut batch.resource_spans {
        for scope in &mut resource.scope_spans {
            for span in &mut scope.spans {
                scrub_values(&mut span.attributes, secrets);
                for event in &mut span.events {
                    scrub_values(&mut event.attributes, secrets);
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

#[tonic::async_trait]
impl TraceService for TraceRelay {
    async fn export(
        &self,
        request: Request<ExportTraceServiceRequest>,
    ) -> Result<Response<ExportTraceServiceResponse>, Status> {
        let agent = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(bearer_token)
            .and_then(|token| self.registry.agent_for_credential(token))
            .ok_or_else(|| {
                Status::unauthenticated("spans are taken from connected workers only")
            })?;
        let mut batch = request.into_inner();
        label(&mut batch, &agent);
        scrub(&mut batch, &self.secrets);
        self.collector.send(batch);
        Ok(Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::trace::v1::ResourceSpans;

    #[test]
    fn a_batch_is_labelled_with_the_sending_agent_whatever_it_claimed() {
        let claimed = KeyValue {
            key: AGENT_ATTRIBUTE.into(),
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue("someone-else".into())),
            }),
            ..KeyValue::default()
        };
        let mut batch = ExportTraceServiceRequest {
            resource_spans: vec![
                ResourceSpans {
                    resource: Some(Resource {
                        attributes: vec![claimed],
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
            assert_eq!(
                agents[0].value.as_ref().unwrap().value,
                Some(any_value::Value::StringValue("helper".into()))
            );
        }
    }

    #[test]
    fn known_secrets_are_scrubbed_from_span_and_event_attributes() {
        use opentelemetry_proto::tonic::trace::v1::span::Event;
        use opentelemetry_proto::tonic::trace::v1::{ScopeSpans, Span};
        let text = |s: &str| KeyValue {
            key: "gen_ai.input.messages".into(),
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue(s.into())),
            }),
            ..KeyValue::default()
        };
        let mut batch = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans: vec![Span {
                        attributes: vec![text("my key is sk-live-0123456789 ok")],
                        events: vec![Event {
                            attributes: vec![text("sk-live-0123456789")],
                            ..Event::default()
                        }],
                        ..Span::default()
                    }],
                    ..ScopeSpans::default()
                }],
                ..ResourceSpans::default()
            }],
        };
        scrub(
            &mut batch,
            &KnownSecrets::new(["sk-live-0123456789".to_string()]),
        );
        let shown = format!("{batch:?}");
        assert!(!shown.contains("sk-live-0123456789"), "{shown}");
        assert!(shown.contains("my key is"), "{shown}");
    }
}
