//! The handler's span (feature `otel`): the merchant's handler joins the trace of the event's
//! producer, through `tracing` and the `tracing-opentelemetry` bridge.
//!
//! The sender passes a W3C `traceparent` with each delivery (naming its attempt's span, unless
//! the endpoint turned `trace_propagation` off). The adapters (kxp-axum, kxp-actix) make the
//! handler's span a child of it **only once the signature verified**: an unsigned or forged
//! request gets no span of the sender's trace.
//!
//! **The header is outside the signature.** Verification proves who sent the body, not the
//! `traceparent`: anyone on the path who can alter headers (a proxy, or whoever replays a
//! captured delivery within the timestamp tolerance) chooses the trace the handler's span
//! joins. Use it to correlate spans, never to decide anything, and keep in mind that a trace
//! id seen here may be one somebody else also uses. The header is parsed strictly
//! ([`kxp_verify::TraceParent`]); an invalid one is ignored and the span starts a trace of
//! its own.

use kxp_verify::TraceParent;
use opentelemetry::Context;
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The span a verified delivery's handler runs in (`kxp.webhook`, target `kxp_webhooks`, kind
/// server, with `kxp.event.id`): a child of the request's `traceparent` when it has a valid
/// one. Call it after verification only; the adapters do.
///
/// Without a `tracing-opentelemetry` layer in the subscriber it is an ordinary `tracing` span.
pub fn handler_span(traceparent: Option<&str>, event_id: &str) -> tracing::Span {
    let span = tracing::info_span!(
        target: "kxp_webhooks",
        "kxp.webhook",
        otel.kind = "server",
        kxp.event.id = %event_id,
    );
    if let Some(parent) = traceparent.and_then(TraceParent::parse) {
        let remote = SpanContext::new(
            TraceId::from_bytes(parent.trace_id()),
            SpanId::from_bytes(parent.parent_id()),
            TraceFlags::new(parent.flags()) & TraceFlags::SAMPLED,
            true,
            TraceState::default(),
        );
        // Without the bridge's layer there is no OpenTelemetry context to set: nothing to do.
        let _ = span.set_parent(Context::new().with_remote_span_context(remote));
    }
    span
}
