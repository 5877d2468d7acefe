//! A real OTLP/HTTP trace receiver on 127.0.0.1 for tests (feature `otlp`): it takes what an
//! exporter POSTs to `/v1/traces` (`application/x-protobuf`, an `ExportTraceServiceRequest`),
//! decodes it with `opentelemetry-proto`'s messages, keeps every span, and answers as a
//! collector does (200 with an empty `ExportTraceServiceResponse`).
//!
//! ```no_run
//! # async fn test() {
//! use std::time::Duration;
//! use kxp_testkit::otlp::OtlpSink;
//!
//! let sink = OtlpSink::start().await;
//! // … point the code under test at `sink.endpoint()` (`http://127.0.0.1:<port>`) …
//! let spans = sink
//!     .wait_for(Duration::from_secs(10), |spans| spans.iter().any(|s| s.name == "POST"))
//!     .await;
//! assert!(spans.iter().all(|s| s.service == "kxp"));
//! # }
//! ```

// A test fixture: a sink that cannot bind fails the test that uses it.
#![expect(clippy::expect_used)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::runtime::Tokio;
use opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor;
use opentelemetry_sdk::trace::{BatchConfigBuilder, SdkTracerProvider};
use prost::Message;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tracing_subscriber::layer::SubscriberExt as _;

/// One span the sink received, with its ids in lowercase hex (as a `traceparent` shows them).
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    /// The `service.name` of the resource that exported it.
    pub service: String,
    /// The instrumentation scope's name (`kxp-sender`, `tracing-opentelemetry`, …).
    pub scope: String,
    /// 32 hex digits.
    pub trace_id: String,
    /// 16 hex digits.
    pub span_id: String,
    /// 16 hex digits; empty for a root span.
    pub parent_span_id: String,
    /// Its name.
    pub name: String,
    /// OTLP's span kind: 1 internal, 2 server, 3 client, 4 producer, 5 consumer.
    pub kind: i32,
    /// Its attributes, each value as text (`42`, `true`, `payment.succeeded`).
    pub attributes: BTreeMap<String, String>,
    /// Its status code: 0 unset, 1 ok, 2 error.
    pub status: i32,
}

impl Span {
    /// The attribute `key`, as text.
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

#[derive(Default)]
struct Received {
    spans: Mutex<Vec<Span>>,
    requests: Mutex<Vec<String>>,
    arrived: Notify,
}

/// The receiver; it stops when dropped.
pub struct OtlpSink {
    addr: SocketAddr,
    received: Arc<Received>,
    task: JoinHandle<()>,
}

impl OtlpSink {
    /// Starts a receiver on a free port of 127.0.0.1.
    pub async fn start() -> OtlpSink {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the OTLP sink");
        let addr = listener.local_addr().expect("the OTLP sink's address");
        let received = Arc::new(Received::default());
        let app = Router::new()
            .route("/v1/traces", post(export))
            .with_state(received.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        OtlpSink {
            addr,
            received,
            task,
        }
    }

    /// The base URL an exporter is given (`http://127.0.0.1:<port>`): it POSTs to
    /// `<this>/v1/traces`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every span received so far, in arrival order.
    pub fn spans(&self) -> Vec<Span> {
        lock(&self.received.spans).clone()
    }

    /// The `Content-Type` of every export request received so far.
    pub fn requests(&self) -> Vec<String> {
        lock(&self.received.requests).clone()
    }

    /// Waits until the spans received satisfy `done`, up to `timeout`, and returns them (what
    /// came, done or not: the test's assertions say what was missing).
    pub async fn wait_for(&self, timeout: Duration, done: impl Fn(&[Span]) -> bool) -> Vec<Span> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let arrived = self.received.arrived.notified();
            let spans = self.spans();
            if done(&spans) {
                return spans;
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                return self.spans();
            }
        }
    }
}

impl OtlpSink {
    /// A `tracing` dispatcher whose spans reach this sink as a merchant's app would export
    /// them: `tracing-opentelemetry`'s layer over the SDK, the OTLP/HTTP protobuf exporter on
    /// reqwest and the batch processor on tokio (a short delay, so tests wait little), under
    /// `service.name` `service`. Run the code under test with it
    /// (`WithSubscriber::with_subscriber`), then [`Exporting::shutdown`] to flush.
    pub fn exporting(&self, service: &'static str) -> Exporting {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(format!("{}/v1/traces", self.endpoint()))
            .with_http_client(reqwest::Client::new())
            .build()
            .expect("the OTLP exporter");
        let config = BatchConfigBuilder::default()
            .with_scheduled_delay(Duration::from_millis(50))
            .build();
        let processor = BatchSpanProcessor::builder(exporter, Tokio)
            .with_batch_config(config)
            .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_resource(Resource::builder_empty().with_service_name(service).build())
            .build();
        let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("kxp-testkit"));
        Exporting {
            dispatch: tracing::Dispatch::new(tracing_subscriber::registry().with(layer)),
            provider,
        }
    }
}

/// What [`OtlpSink::exporting`] returns: the dispatcher, and the provider to flush.
pub struct Exporting {
    /// Spans created under it are exported to the sink.
    pub dispatch: tracing::Dispatch,
    provider: SdkTracerProvider,
}

impl Exporting {
    /// Exports what is still buffered, then stops (off the async threads: the SDK waits).
    pub async fn shutdown(self) {
        let provider = self.provider;
        let _ = tokio::task::spawn_blocking(move || provider.shutdown()).await;
    }
}

impl Drop for OtlpSink {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `POST /v1/traces`: decodes the export and keeps its spans.
async fn export(
    State(received): State<Arc<Received>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    lock(&received.requests).push(content_type);
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        return (StatusCode::BAD_REQUEST, "not an ExportTraceServiceRequest").into_response();
    };
    let mut spans = Vec::new();
    for resource in request.resource_spans {
        let service = resource
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|kv| kv.key == "service.name")
            .map(text_of)
            .unwrap_or_default();
        for scope in resource.scope_spans {
            let scope_name = scope.scope.map(|s| s.name).unwrap_or_default();
            for span in scope.spans {
                spans.push(Span {
                    service: service.clone(),
                    scope: scope_name.clone(),
                    trace_id: hex::encode(&span.trace_id),
                    span_id: hex::encode(&span.span_id),
                    parent_span_id: hex::encode(&span.parent_span_id),
                    name: span.name,
                    kind: span.kind,
                    attributes: span
                        .attributes
                        .iter()
                        .map(|kv| (kv.key.clone(), text_of(kv)))
                        .collect(),
                    status: span.status.map(|s| s.code).unwrap_or_default(),
                });
            }
        }
    }
    lock(&received.spans).extend(spans);
    received.arrived.notify_waiters();
    (
        [(header::CONTENT_TYPE, "application/x-protobuf")],
        ExportTraceServiceResponse::default().encode_to_vec(),
    )
        .into_response()
}

/// An attribute's value as text.
fn text_of(kv: &KeyValue) -> String {
    match kv.value.as_ref().and_then(|v: &AnyValue| v.value.as_ref()) {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::BoolValue(b)) => b.to_string(),
        Some(Value::IntValue(i)) => i.to_string(),
        Some(Value::DoubleValue(d)) => d.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

/// The handler-span checks every receiver adapter with `otel` passes (feature `conformance`
/// too), written once. `serve` starts the adapter: a route behind its verification with the
/// secret it is given, whose handler answers 2xx, each request run under the `tracing`
/// dispatcher it is given (whose spans reach a sink of these checks); it returns the route's
/// URL and whatever keeps the server up. A signed delivery's handler runs in a span that is a
/// child of its `traceparent`; a delivery whose signature does not verify leaves no span in
/// that trace; an invalid `traceparent` is ignored (the span is the root of a trace of its own).
#[cfg(feature = "conformance")]
pub async fn check_handler_spans<T, Served>(
    serve: impl FnOnce(tracing::Dispatch, &'static str) -> Served,
) where
    Served: std::future::Future<Output = (String, T)>,
{
    use crate::conformance::{event_body, sign};
    const SECRET: &str = "4f2c1e0a9b8d7c6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e";
    let sink = OtlpSink::start().await;
    let exporting = sink.exporting("merchant");
    let (url, _server) = serve(exporting.dispatch.clone(), SECRET).await;
    let (url, secret) = (url.as_str(), SECRET);
    let client = reqwest::Client::new();
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let send = |id: &str, signature: String, traceparent: String| {
        let body = event_body(id, 100, "EUR");
        client
            .post(url)
            .header("x-kxp-signature", signature)
            .header("traceparent", traceparent)
            .header("content-type", "application/json")
            .body(body)
    };
    let (trace, parent) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let forged_trace = "5bf92f3577b34da6a3ce929d0e0e4736";
    let invalid_trace = "6BF92F3577B34DA6A3CE929D0E0E4736";
    let ids = [
        "6f1c2b0e-8d4a-4c1e-9f3b-7a1d2c4e5f61",
        "6f1c2b0e-8d4a-4c1e-9f3b-7a1d2c4e5f62",
        "6f1c2b0e-8d4a-4c1e-9f3b-7a1d2c4e5f63",
    ];
    let signed = |id: &str| sign(&[secret], t, event_body(id, 100, "EUR").as_bytes());
    let answers = [
        send(ids[0], signed(ids[0]), format!("00-{trace}-{parent}-01")),
        send(
            ids[1],
            sign(&["not the secret"], t, b"x"),
            format!("00-{forged_trace}-{parent}-01"),
        ),
        send(
            ids[2],
            signed(ids[2]),
            format!("00-{invalid_trace}-{parent}-01"),
        ),
    ];
    let mut statuses = Vec::new();
    for request in answers {
        statuses.push(
            request
                .send()
                .await
                .expect("the receiver answers")
                .status()
                .as_u16(),
        );
    }
    assert!((200..300).contains(&statuses[0]), "signed: {statuses:?}");
    assert_eq!(statuses[1], 401, "forged: {statuses:?}");
    assert!(
        (200..300).contains(&statuses[2]),
        "invalid traceparent: {statuses:?}"
    );
    exporting.shutdown().await;
    let spans = sink
        .wait_for(Duration::from_secs(20), |spans| {
            spans.iter().filter(|s| s.name == "kxp.webhook").count() >= 2
        })
        .await;
    let handler = |id: &str| {
        spans
            .iter()
            .find(|s| s.name == "kxp.webhook" && s.attribute("kxp.event.id") == Some(id))
            .unwrap_or_else(|| panic!("no handler span for {id}: {spans:#?}"))
    };
    let joined = handler(ids[0]);
    assert_eq!(
        (joined.trace_id.as_str(), joined.parent_span_id.as_str()),
        (trace, parent)
    );
    assert_eq!(joined.kind, 2, "server");
    assert!(
        spans.iter().all(|s| s.trace_id != forged_trace),
        "an unverified request's trace got a span: {spans:#?}"
    );
    let own = handler(ids[2]);
    assert_eq!(
        own.parent_span_id, "",
        "an invalid traceparent is no parent"
    );
    assert_ne!(own.trace_id, invalid_trace.to_lowercase());
}
