//! The OpenTelemetry SDK behind [`Traces`](super::Traces) (feature `otel`): a tracer provider
//! per server with a batch processor and the OTLP/HTTP protobuf exporter, and the spans'
//! attributes (OpenTelemetry's semantic conventions for HTTP clients on each attempt).

use std::borrow::Cow;
use std::time::Duration;

use kxp_verify::TraceParent;
use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId,
    TraceState, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, InstrumentationScope, KeyValue};
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider, Span};

use super::{Ingested, Source, TracesError};
use crate::engine::dispatch::Outcome;
use crate::model::{Job, Trace};

/// The provider (which owns the exporter and its batch thread) and its tracer.
#[derive(Debug)]
pub(super) struct Export {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

impl Export {
    /// Exports to `traces_url` (`…/v1/traces`).
    pub(super) fn start(traces_url: &str) -> Result<Export, TracesError> {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(traces_url)
            .with_http_client(OwnRuntime::new()?)
            .build()
            .map_err(|e| TracesError::Exporter(e.to_string()))?;
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource())
            .build();
        let scope = InstrumentationScope::builder("kxp-sender")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build();
        let tracer = provider.tracer_with_scope(scope);
        Ok(Export { provider, tracer })
    }

    pub(super) fn ingest(&self, parent: Option<&Trace>, source: Source) -> Span {
        let kind = match source {
            Source::Api => SpanKind::Server,
            Source::Broker(_) => SpanKind::Consumer,
        };
        self.tracer
            .span_builder("kxp.ingest")
            .with_kind(kind)
            .with_attributes([KeyValue::new("kxp.ingest.source", source_name(source))])
            .start_with_context(&self.tracer, &parent_context(parent))
    }

    pub(super) fn attempt(&self, job: &Job, number: i64) -> Span {
        let parent = job
            .traceparent
            .as_deref()
            .and_then(TraceParent::parse)
            .map(|parent| Trace {
                parent,
                state: job.tracestate.clone(),
            });
        let mut attributes = vec![
            KeyValue::new("kxp.event.id", job.event_id.as_str().to_owned()),
            KeyValue::new("kxp.event.type", job.event_type.clone()),
            KeyValue::new("kxp.endpoint.id", job.endpoint_id.as_str().to_owned()),
            KeyValue::new("kxp.delivery.id", job.id.as_str().to_owned()),
            KeyValue::new("kxp.attempt", number),
            KeyValue::new("http.request.method", "POST"),
        ];
        if let Some((full, host, port)) = shown_url(&job.url) {
            attributes.push(KeyValue::new("url.full", full));
            attributes.push(KeyValue::new("server.address", host));
            attributes.push(KeyValue::new("server.port", i64::from(port)));
        }
        self.tracer
            .span_builder("POST")
            .with_kind(SpanKind::Client)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, &parent_context(parent.as_ref()))
    }

    /// Flushes and stops the batch processor, off the async threads: its exports run on the
    /// exporter's own runtime, which the provider waits for.
    pub(super) async fn shutdown(&self) {
        let provider = self.provider.clone();
        let stopped = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        if let Ok(Err(e)) = stopped {
            tracing::warn!(target: "kxp_sender", error = %e, "traces: the last spans may not have been exported");
        }
    }
}

/// The resource: the standard variables' (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`), with
/// `service.name` `kxp` unless they name one.
fn resource() -> Resource {
    let named = std::env::var_os("OTEL_SERVICE_NAME").is_some()
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES")
            .is_ok_and(|attributes| attributes.contains("service.name="));
    let builder = Resource::builder();
    if named {
        builder.build()
    } else {
        builder.with_service_name("kxp").build()
    }
}

/// The context a span starts in: the producer's span as a remote parent, or none (a new trace).
fn parent_context(parent: Option<&Trace>) -> Context {
    let Some(parent) = parent else {
        return Context::new();
    };
    let tp = parent.parent;
    let state = parent
        .state
        .as_deref()
        .and_then(|state| state.parse::<TraceState>().ok())
        .unwrap_or_default();
    Context::new().with_remote_span_context(SpanContext::new(
        TraceId::from_bytes(tp.trace_id()),
        SpanId::from_bytes(tp.parent_id()),
        TraceFlags::new(tp.flags()),
        true,
        state,
    ))
}

pub(super) fn traceparent(span: &Span) -> Option<TraceParent> {
    let context = span.span_context();
    TraceParent::new(
        context.trace_id().to_bytes(),
        context.span_id().to_bytes(),
        context.trace_flags().to_u8(),
    )
}

pub(super) fn end_ingest(mut span: Span, ended: Ingested<'_>, event_type: Option<&str>) {
    if let Some(event_type) = event_type {
        span.set_attribute(KeyValue::new("kxp.event.type", event_type.to_owned()));
    }
    let (outcome, id) = match ended {
        Ingested::Created { id } => ("created", Some(id)),
        Ingested::Replayed { id } => ("replayed", Some(id)),
        Ingested::Refused { code } => {
            let code = code.as_str().to_owned();
            span.set_attribute(KeyValue::new("error.type", code.clone()));
            span.set_status(Status::error(code));
            ("refused", None)
        }
    };
    span.set_attribute(KeyValue::new("kxp.outcome", outcome));
    if let Some(id) = id {
        span.set_attribute(KeyValue::new("kxp.event.id", id.to_owned()));
    }
    span.end();
}

pub(super) fn end_attempt(mut span: Span, outcome: &Outcome, took: Duration) {
    let duration_ms = i64::try_from(took.as_millis()).unwrap_or(i64::MAX);
    span.set_attribute(KeyValue::new("kxp.duration_ms", duration_ms));
    if let Some(status) = outcome.status() {
        span.set_attribute(KeyValue::new(
            "http.response.status_code",
            i64::from(status),
        ));
    }
    let (name, error): (&str, Option<Cow<'static, str>>) = match outcome {
        Outcome::Delivered { .. } => ("delivered", None),
        Outcome::Rejected { status, .. } => ("rejected", Some(status.to_string().into())),
        Outcome::Failed(failure) => ("failed", Some(failure.kind.as_str().into())),
    };
    span.set_attribute(KeyValue::new("kxp.outcome", name));
    if let Some(error) = error {
        span.set_attribute(KeyValue::new("error.type", error.clone()));
        span.set_status(Status::Error { description: error });
    }
    span.end();
}

/// The exporter's HTTP client: reqwest on a small runtime of its own. The SDK's batch processor
/// exports from its own thread, outside any tokio runtime, where reqwest cannot run; borrowing
/// the server's runtime instead would tie the last export to a runtime that may be shutting
/// down (or, on a current-thread runtime, blocked waiting for that very export).
#[derive(Debug)]
struct OwnRuntime {
    client: reqwest::Client,
    runtime: Option<tokio::runtime::Runtime>,
}

impl OwnRuntime {
    fn new() -> Result<OwnRuntime, TracesError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("kxp-otlp")
            .enable_all()
            .build()
            .map_err(|e| TracesError::Exporter(e.to_string()))?;
        // Not the deliveries' client: the collector is the operator's, often on a private
        // address the delivery guard refuses.
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| TracesError::Exporter(e.to_string()))?;
        Ok(OwnRuntime {
            client,
            runtime: Some(runtime),
        })
    }
}

#[async_trait::async_trait]
impl HttpClient for OwnRuntime {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let Some(runtime) = &self.runtime else {
            return Err("the exporter's runtime is gone".into());
        };
        let client = self.client.clone();
        runtime
            .spawn(async move { client.send_bytes(request).await })
            .await?
    }
}

impl Drop for OwnRuntime {
    /// Without waiting: the provider may be dropped on an async thread, where a runtime's
    /// blocking shutdown panics.
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Where an ingestion came from, as its span's `kxp.ingest.source` says.
fn source_name(source: Source) -> &'static str {
    match source {
        Source::Api => "api",
        Source::Broker(broker) => broker,
    }
}

/// `url` as a span may show it (`url.full`), and its host and port: without credentials,
/// query or fragment, which may hold a merchant's secrets.
fn shown_url(url: &str) -> Option<(String, String, u16)> {
    let mut url = reqwest::Url::parse(url).ok()?;
    let _ = url.set_username("");
    let _ = url.set_password(None);
    url.set_query(None);
    url.set_fragment(None);
    let host = url.host_str()?.to_owned();
    let port = url.port_or_known_default()?;
    Some((url.to_string(), host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shown_url_keeps_no_credentials_query_or_fragment() {
        let (full, host, port) =
            shown_url("https://user:pw@merchant.example/hooks?token=s3cret#x").unwrap();
        assert_eq!(full, "https://merchant.example/hooks");
        assert_eq!((host.as_str(), port), ("merchant.example", 443));
        let (_, _, port) = shown_url("http://127.0.0.1:3000/").unwrap();
        assert_eq!(port, 3000);
    }
}
