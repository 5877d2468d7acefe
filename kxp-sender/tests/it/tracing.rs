//! Traces end to end (issue 32), all real and on loopback: a producer's span in a W3C
//! `traceparent`, the sender exporting over OTLP/HTTP to a real receiver of OTLP
//! ([`OtlpSink`], which decodes the protobuf), and a kxp-axum receiver whose handler's span
//! joins the trace through `tracing-opentelemetry`. Nothing here times anything: spans are
//! waited for, and the sender is shut down (which flushes its exporter) before they are read.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::post;
use kxp_api::{EndpointPatch, NewEvent, TraceContext};
use kxp_axum::{Receiver as KxpReceiver, VerifiedEvent, VerifyLayer};
use kxp_testkit::otlp::{OtlpSink, Span};
use kxp_verify::Verifier;
use serde_json::json;
use tower::ServiceBuilder;
use tracing::instrument::WithSubscriber;

use crate::support::{Receiver, Reply, Sender, sender_with};

const SECS_20: Duration = Duration::from_secs(20);

/// The producer's span, as its own tracer would have named it.
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PRODUCER_SPAN: &str = "00f067aa0ba902b7";

fn producer() -> TraceContext {
    TraceContext {
        traceparent: format!("00-{TRACE_ID}-{PRODUCER_SPAN}-01"),
        tracestate: Some("producer=secret-vendor-data".to_owned()),
    }
}

/// A merchant's kxp-axum receiver with `otel`, verifying with `secret` and exporting its
/// handler spans to `sink` as service `merchant`; it answers 503 to the first `failures`
/// deliveries, then 200. Its URL, and what flushes its spans.
async fn merchant(
    sink: &OtlpSink,
    secret: &str,
    failures: usize,
) -> (String, kxp_testkit::otlp::Exporting) {
    let exporting = sink.exporting("merchant");
    let dispatch = exporting.dispatch.clone();
    let seen = Arc::new(AtomicUsize::new(0));
    let handler = post(move |_: VerifiedEvent| {
        let seen = seen.clone();
        async move {
            tracing::info!("the merchant's handler ran");
            if seen.fetch_add(1, Ordering::SeqCst) < failures {
                StatusCode::SERVICE_UNAVAILABLE
            } else {
                StatusCode::OK
            }
        }
    });
    let verifier = Verifier::from_secret_list(secret).unwrap();
    let app =
        Router::new()
            .route(
                "/hook",
                handler.layer(VerifyLayer::new(KxpReceiver::new(verifier))),
            )
            // Every request runs under the merchant's subscriber, as in its own process.
            .layer(ServiceBuilder::new().map_future(move |future| {
                WithSubscriber::with_subscriber(future, dispatch.clone())
            }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, exporting)
}

/// Emits a `payment.succeeded` event in the trace `trace` and waits until it is delivered; its
/// id.
async fn delivered_in(s: &Sender, trace: &TraceContext) -> String {
    let event = NewEvent::new("payment.succeeded", &json!({"amount": 4200})).unwrap();
    let event = s
        .api
        .client
        .create_event_in_trace(&event, None, trace)
        .await
        .expect("an event in a trace, its traceparent valid or not, is taken");
    let id = event.id.into_string();
    s.api.wait_for(&id, "delivered", SECS_20).await;
    id
}

fn named<'a>(spans: &'a [Span], name: &str) -> Vec<&'a Span> {
    spans.iter().filter(|s| s.name == name).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_runs_from_the_producer_through_every_attempt_to_the_merchants_handler() {
    let sink = OtlpSink::start().await;
    let endpoint = sink.endpoint();
    let s = sender_with("0s,0s", |c| c.otlp_endpoint = Some(endpoint)).await;
    // The secret is known once the endpoint exists: register, start the merchant, point the
    // endpoint at it.
    let (endpoint_id, key) = s.api.endpoint("http://127.0.0.1:9/hook", json!({})).await;
    let (url, merchant_spans) = merchant(&sink, &key, 1).await;
    let mut patch = EndpointPatch::default();
    patch.url = Some(url.clone());
    patch.skip_challenge = true;
    s.api
        .client
        .update_endpoint(&endpoint_id.as_str().into(), &patch)
        .await
        .unwrap();

    let event_id = delivered_in(&s, &producer()).await;
    // The handler's spans first (the sender's flush comes with its shutdown).
    sink.wait_for(SECS_20, |spans| named(spans, "kxp.webhook").len() == 2)
        .await;
    s.server.shutdown().await;
    merchant_spans.shutdown().await;
    let spans = sink
        .wait_for(SECS_20, |spans| named(spans, "POST").len() == 2)
        .await;

    // One trace: the producer's.
    assert!(
        spans.iter().all(|s| s.trace_id == TRACE_ID),
        "a span outside the producer's trace: {spans:#?}"
    );
    let ingest = named(&spans, "kxp.ingest");
    assert_eq!(ingest.len(), 1, "{spans:#?}");
    assert_eq!(ingest[0].parent_span_id, PRODUCER_SPAN);
    assert_eq!(ingest[0].service, "kxp");
    assert_eq!(ingest[0].kind, 2, "server");
    assert_eq!(ingest[0].attribute("kxp.event.id"), Some(event_id.as_str()));
    assert_eq!(
        ingest[0].attribute("kxp.event.type"),
        Some("payment.succeeded")
    );
    assert_eq!(ingest[0].attribute("kxp.outcome"), Some("created"));

    // Each attempt its own span, a child of the producer's, with what happened.
    let mut attempts = named(&spans, "POST");
    attempts.sort_by_key(|s| s.attribute("kxp.attempt").map(str::to_owned));
    let port = url.split(':').nth(2).unwrap().split('/').next().unwrap();
    for (attempt, (status, outcome)) in attempts
        .iter()
        .zip([("503", "rejected"), ("200", "delivered")])
    {
        assert_eq!(attempt.parent_span_id, PRODUCER_SPAN);
        assert_eq!(attempt.kind, 3, "client");
        assert_eq!(attempt.attribute("kxp.event.id"), Some(event_id.as_str()));
        assert_eq!(
            attempt.attribute("kxp.event.type"),
            Some("payment.succeeded")
        );
        assert_eq!(
            attempt.attribute("kxp.endpoint.id"),
            Some(endpoint_id.as_str())
        );
        assert_eq!(attempt.attribute("http.request.method"), Some("POST"));
        assert_eq!(attempt.attribute("url.full"), Some(url.as_str()));
        assert_eq!(attempt.attribute("server.address"), Some("127.0.0.1"));
        assert_eq!(attempt.attribute("server.port"), Some(port));
        assert_eq!(attempt.attribute("http.response.status_code"), Some(status));
        assert_eq!(attempt.attribute("kxp.outcome"), Some(outcome));
        assert!(attempt.attribute("kxp.duration_ms").is_some());
    }
    assert_eq!(attempts[0].attribute("kxp.attempt"), Some("1"));
    assert_eq!(attempts[0].attribute("error.type"), Some("503"));
    assert_eq!(attempts[0].status, 2, "error");
    assert_eq!(attempts[1].attribute("kxp.attempt"), Some("2"));
    assert_eq!(attempts[1].attribute("error.type"), None);

    // The merchant's handler ran in a span that is a child of each attempt's.
    let handlers = named(&spans, "kxp.webhook");
    assert_eq!(handlers.len(), 2, "{spans:#?}");
    let mut parents: Vec<&str> = handlers.iter().map(|h| h.parent_span_id.as_str()).collect();
    let mut attempt_ids: Vec<&str> = attempts.iter().map(|a| a.span_id.as_str()).collect();
    parents.sort();
    attempt_ids.sort();
    assert_eq!(parents, attempt_ids);
    assert!(handlers.iter().all(|h| h.service == "merchant"));
    assert!(
        handlers
            .iter()
            .all(|h| h.attribute("kxp.event.id") == Some(event_id.as_str()))
    );
    assert!(
        sink.requests()
            .iter()
            .all(|t| t == "application/x-protobuf")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_names_its_attempt_and_never_forwards_the_producers_tracestate() {
    let sink = OtlpSink::start().await;
    let receiver = Receiver::start(vec![Reply::Status(500)]).await;
    let endpoint = sink.endpoint();
    let s = sender_with("0s,0s", |c| c.otlp_endpoint = Some(endpoint)).await;
    s.api.endpoint(&receiver.url, json!({})).await;
    delivered_in(&s, &producer()).await;
    s.server.shutdown().await;
    let spans = sink
        .wait_for(SECS_20, |spans| named(spans, "POST").len() == 2)
        .await;

    let seen = receiver.seen();
    assert_eq!(seen.len(), 2);
    for request in &seen {
        assert_eq!(
            request.header("tracestate"),
            "",
            "tracestate reached the merchant"
        );
        let traceparent = request.header("traceparent");
        let attempt = named(&spans, "POST")
            .into_iter()
            .find(|a| traceparent == format!("00-{}-{}-01", a.trace_id, a.span_id));
        assert!(
            attempt.is_some(),
            "{traceparent} names no attempt: {spans:#?}"
        );
    }
    assert_ne!(seen[0].header("traceparent"), seen[1].header("traceparent"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_propagation_false_sends_no_traceparent_and_can_be_turned_back_on() {
    let receiver = Receiver::start(vec![]).await;
    // Export off: the producer's context is passed on as it came.
    let s = sender_with("0s", |_| {}).await;
    let (endpoint_id, _) = s
        .api
        .endpoint(&receiver.url, json!({"trace_propagation": false}))
        .await;
    let endpoint = s
        .api
        .client
        .endpoint(&endpoint_id.as_str().into())
        .await
        .unwrap();
    assert!(!endpoint.endpoint.trace_propagation);
    delivered_in(&s, &producer()).await;
    assert_eq!(receiver.seen()[0].header("traceparent"), "");

    let mut patch = EndpointPatch::default();
    patch.trace_propagation = Some(true);
    let updated = s
        .api
        .client
        .update_endpoint(&endpoint_id.as_str().into(), &patch)
        .await
        .unwrap();
    assert!(updated.endpoint.trace_propagation);
    delivered_in(&s, &producer()).await;
    // No span of its own to name: the producer's, unchanged (its tracestate still not).
    assert_eq!(
        receiver.seen()[1].header("traceparent"),
        producer().traceparent
    );
    assert_eq!(receiver.seen()[1].header("tracestate"), "");
    s.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_otlp_endpoint_nothing_is_exported() {
    let sink = OtlpSink::start().await;
    let receiver = Receiver::start(vec![]).await;
    // Only `Config::otlp_endpoint` turns export on (`kxp serve` fills it from its flag or the
    // standard `OTEL_EXPORTER_OTLP_ENDPOINT`): without it no span is made or sent.
    let s = sender_with("0s", |_| {}).await;
    s.api.endpoint(&receiver.url, json!({})).await;
    let id = s.api.emit("payment.succeeded", json!({})).await;
    s.api.wait_for(&id, "delivered", SECS_20).await;
    s.server.shutdown().await;
    assert!(sink.spans().is_empty());
    assert!(sink.requests().is_empty());
    // And a request without a traceparent gets none downstream either.
    assert_eq!(receiver.seen()[0].header("traceparent"), "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_traceparent_is_ignored_and_the_event_starts_its_own_trace() {
    let sink = OtlpSink::start().await;
    let receiver = Receiver::start(vec![]).await;
    let endpoint = sink.endpoint();
    let s = sender_with("0s", |c| c.otlp_endpoint = Some(endpoint)).await;
    s.api.endpoint(&receiver.url, json!({})).await;
    let invalid = TraceContext::new(format!("00-{}-{PRODUCER_SPAN}-01", TRACE_ID.to_uppercase()));
    delivered_in(&s, &invalid).await;
    s.server.shutdown().await;
    let spans = sink
        .wait_for(SECS_20, |spans| named(spans, "POST").len() == 1)
        .await;
    let ingest = named(&spans, "kxp.ingest");
    let attempt = named(&spans, "POST");
    assert_eq!(ingest.len(), 1, "{spans:#?}");
    assert_eq!(ingest[0].parent_span_id, "", "a root span: no producer");
    assert_ne!(ingest[0].trace_id, TRACE_ID.to_lowercase());
    // The attempt joins the ingestion's trace, as a child of its span.
    assert_eq!(attempt[0].trace_id, ingest[0].trace_id);
    assert_eq!(attempt[0].parent_span_id, ingest[0].span_id);
    assert_eq!(
        receiver.seen()[0].header("traceparent"),
        format!("00-{}-{}-01", attempt[0].trace_id, attempt[0].span_id)
    );
}
