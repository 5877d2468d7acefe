//! A producer's W3C trace context, as `POST /v1/events` takes it (headers, not the body).

/// The header that carries the producer's trace context (`00-<trace id>-<parent id>-<flags>`).
pub const TRACEPARENT: &str = "traceparent";

/// The header of the producer's vendor-specific trace data: stored with the event, never
/// forwarded to merchants.
pub const TRACESTATE: &str = "tracestate";

/// A producer's trace context, sent with an event in the `traceparent` and `tracestate`
/// headers ([`Client::create_event_in_trace`](crate::Client::create_event_in_trace), an outbox
/// row's). Sent as it is: the sender parses `traceparent` strictly (W3C version `00`,
/// lowercase) and ignores one that does not parse, as if there were none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    /// The producer's span, `00-<32 hex>-<16 hex>-<2 hex>`.
    pub traceparent: String,
    /// Its vendor data, if any.
    pub tracestate: Option<String>,
}

impl TraceContext {
    /// The context naming the span `traceparent`, without vendor data.
    pub fn new(traceparent: impl Into<String>) -> TraceContext {
        TraceContext {
            traceparent: traceparent.into(),
            tracestate: None,
        }
    }
}
