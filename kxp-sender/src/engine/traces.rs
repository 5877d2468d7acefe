//! Traces: one span per ingestion and one per delivery attempt, children of the producer's span
//! when the event came with a W3C `traceparent`, exported over OTLP/HTTP (protobuf, POSTed to
//! `<endpoint>/v1/traces`) when [`Config::otlp_endpoint`](crate::Config::otlp_endpoint) is set.
//!
//! Without an endpoint (or built without the `otel` feature) nothing is made: no span, no
//! exporter, no thread; an attempt then forwards the producer's `traceparent` as it came, so
//! the merchant's handler still joins the producer's trace. The exporter is this server's own
//! (a tracer provider per [`Server`](crate::Server), nothing process-global): service name,
//! resource attributes and sampling come from the standard `OTEL_*` variables, which the SDK
//! reads (`OTEL_SERVICE_NAME`, default `kxp`; `OTEL_RESOURCE_ATTRIBUTES`; `OTEL_TRACES_SAMPLER`
//! and its argument, default parent-based always-on).
//!
//! No database here: the store keeps the producer's context with the event
//! (`kxp_events.traceparent`, `tracestate`), and the claim hands it to the attempt.

use std::time::Duration;

use kxp_api::ErrorCode;
use kxp_verify::TraceParent;

use crate::engine::dispatch::Outcome;
use crate::model::{Job, Trace};

/// Why traces could not be exported as configured.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TracesError {
    /// `traces_unavailable`: an OTLP endpoint is configured, but this build has no `otel`
    /// feature.
    #[error(
        "traces_unavailable: an OTLP endpoint is set, but this kxp was built without the `otel` feature"
    )]
    Unavailable,
    /// `invalid_otlp_endpoint`: the endpoint is not an `http://` or `https://` URL.
    #[error("invalid_otlp_endpoint: {0}")]
    InvalidEndpoint(String),
    /// `exporter`: the OTLP exporter could not be built.
    #[error("exporter: {0}")]
    Exporter(String),
}

impl TracesError {
    /// The error's stable name.
    pub fn as_str(&self) -> &'static str {
        match self {
            TracesError::Unavailable => "traces_unavailable",
            TracesError::InvalidEndpoint(_) => "invalid_otlp_endpoint",
            TracesError::Exporter(_) => "exporter",
        }
    }
}

/// Where ingestion's span comes from, for its `kxp.ingest.source` attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// `POST /v1/events` (an outbox relay's hand-off included).
    Api,
    /// A broker message (`amqp`, `nats`).
    Broker(&'static str),
}

/// How an ingestion ended, for its span.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ingested<'a> {
    /// Stored now, as this event.
    Created { id: &'a str },
    /// An earlier request with the same key or id stored it.
    Replayed { id: &'a str },
    /// Refused, with the API's error code.
    Refused { code: ErrorCode },
}

/// The server's tracer: [`Traces::off`] unless an OTLP endpoint is configured.
#[derive(Debug, Default)]
pub(crate) struct Traces {
    #[cfg(feature = "otel")]
    export: Option<otel::Export>,
}

impl Traces {
    /// No spans.
    pub(crate) fn off() -> Traces {
        Traces::default()
    }

    /// Spans exported to the OTLP/HTTP collector at `endpoint` (`http://host:4318`); off
    /// without one.
    pub(crate) fn start(endpoint: Option<&str>) -> Result<Traces, TracesError> {
        let Some(endpoint) = endpoint else {
            return Ok(Traces::off());
        };
        let url = endpoint.trim_end_matches('/');
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(TracesError::InvalidEndpoint(format!(
                "{endpoint:?} is not an http:// or https:// URL such as http://127.0.0.1:4318"
            )));
        }
        Traces::exporting(&format!("{url}/v1/traces"))
    }

    #[cfg(feature = "otel")]
    fn exporting(traces_url: &str) -> Result<Traces, TracesError> {
        Ok(Traces {
            export: Some(otel::Export::start(traces_url)?),
        })
    }

    #[cfg(not(feature = "otel"))]
    fn exporting(_: &str) -> Result<Traces, TracesError> {
        Err(TracesError::Unavailable)
    }

    /// Starts the span of one ingestion from `source`, a child of `parent` (the producer's
    /// context) when there is one.
    pub(crate) fn ingest(&self, parent: Option<&Trace>, source: Source) -> Span {
        #[cfg(feature = "otel")]
        if let Some(export) = &self.export {
            return Span(Some(export.ingest(parent, source)));
        }
        let _ = (parent, source);
        Span::none()
    }

    /// Starts the span of attempt `number` of `job`, a child of the event's stored context.
    pub(crate) fn attempt(&self, job: &Job, number: i64) -> Span {
        #[cfg(feature = "otel")]
        if let Some(export) = &self.export {
            return Span(Some(export.attempt(job, number)));
        }
        let _ = (job, number);
        Span::none()
    }

    /// Exports what is still buffered and stops the exporter (the server's last step).
    pub(crate) async fn shutdown(&self) {
        #[cfg(feature = "otel")]
        if let Some(export) = &self.export {
            export.shutdown().await;
        }
    }
}

/// A span being recorded; nothing when traces are off.
#[derive(Debug)]
pub(crate) struct Span(#[cfg(feature = "otel")] Option<opentelemetry_sdk::trace::Span>);

impl Span {
    fn none() -> Span {
        #[cfg(feature = "otel")]
        return Span(None);
        #[cfg(not(feature = "otel"))]
        Span()
    }

    /// The `traceparent` naming this span (its trace, its id and whether it is sampled);
    /// `None` when traces are off.
    pub(crate) fn traceparent(&self) -> Option<TraceParent> {
        #[cfg(feature = "otel")]
        if let Some(span) = &self.0 {
            return otel::traceparent(span);
        }
        None
    }

    /// Ends an ingestion's span with how it went.
    pub(crate) fn end_ingest(self, ended: Ingested<'_>, event_type: Option<&str>) {
        #[cfg(feature = "otel")]
        if let Some(span) = self.0 {
            otel::end_ingest(span, ended, event_type);
        }
        #[cfg(not(feature = "otel"))]
        let _ = (ended, event_type);
    }

    /// Ends an attempt's span with its outcome, which took `took`.
    pub(crate) fn end_attempt(self, outcome: &Outcome, took: Duration) {
        #[cfg(feature = "otel")]
        if let Some(span) = self.0 {
            otel::end_attempt(span, outcome, took);
        }
        #[cfg(not(feature = "otel"))]
        let _ = (outcome, took);
    }
}

/// The `traceparent` an attempt of `job` sends, if any: none when its endpoint turned
/// propagation off; else the attempt's own span, or, with traces off, the producer's context
/// as it came (a participant that records nothing passes the header on unchanged). Never the
/// `tracestate`: that is the producer's, not the merchant's.
pub(crate) fn outgoing(job: &Job, span: &Span) -> Option<TraceParent> {
    if !job.trace_propagation {
        return None;
    }
    span.traceparent()
        .or_else(|| job.traceparent.as_deref().and_then(TraceParent::parse))
}

#[cfg(feature = "otel")]
mod otel;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_endpoint_scheme_is_refused() {
        let error = Traces::start(Some("127.0.0.1:4318")).unwrap_err();
        assert_eq!(error.as_str(), "invalid_otlp_endpoint");
        let off = Traces::start(None).unwrap();
        assert_eq!(off.ingest(None, Source::Api).traceparent(), None);
    }
}
