//! Feature `otel`: the handler's span joins the delivery's trace only once the signature
//! verified (kxp-testkit's shared checks, against a real OTLP receiver).

use axum::Router;
use axum::routing::post;
use kxp_axum::{Receiver, VerifiedEvent, VerifyLayer};
use kxp_testkit::otlp::check_handler_spans;
use kxp_verify::Verifier;
use tower::ServiceBuilder;
use tracing::instrument::WithSubscriber;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handler_span_joins_the_trace_of_a_verified_delivery_only() {
    check_handler_spans(|dispatch, secret| async move {
        let verifier = Verifier::from_secret_list(secret).unwrap();
        let verify = VerifyLayer::new(Receiver::new(verifier));
        let app = Router::new()
            .route(
                "/hook",
                post(|_: VerifiedEvent| async { "ok" }).layer(verify),
            )
            // Each request runs under the merchant's subscriber, as in its own process.
            .layer(ServiceBuilder::new().map_future(move |future| {
                WithSubscriber::with_subscriber(future, dispatch.clone())
            }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (url, server)
    })
    .await;
}
