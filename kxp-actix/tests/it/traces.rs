//! Feature `otel`: the handler's span joins the delivery's trace only once the signature
//! verified (kxp-testkit's shared checks, against a real OTLP receiver).

use actix_web::dev::Service as _;
use actix_web::{HttpResponse, web};
use kxp_actix::{Receiver, VerifiedEvent, VerifyMiddleware};
use kxp_testkit::otlp::check_handler_spans;
use kxp_verify::Verifier;
use tracing::instrument::WithSubscriber;

use crate::receiver::serve;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handler_span_joins_the_trace_of_a_verified_delivery_only() {
    check_handler_spans(|dispatch, secret| async move {
        let server = serve(move |config| {
            let verifier = Verifier::from_secret_list(secret).unwrap();
            let dispatch = dispatch.clone();
            config.service(
                web::resource("/hook")
                    .wrap(VerifyMiddleware::new(Receiver::new(verifier)))
                    // Outermost: each request runs under the merchant's subscriber.
                    .wrap_fn(move |request, service| {
                        WithSubscriber::with_subscriber(service.call(request), dispatch.clone())
                    })
                    .route(
                        web::post().to(|_: VerifiedEvent| async { HttpResponse::Ok().finish() }),
                    ),
            );
        });
        (format!("{}/hook", server.base), server)
    })
    .await;
}
