//! What only this adapter's API can get wrong (everything a receiver answers is in the
//! conformance suite): the middleware's placement, and errors of the wrapped service.

use actix_web::web;
use kxp_actix::{VerifiedEvent, VerifyMiddleware};
use kxp_testkit::conformance::{SECRET, event_body, request_lines, sign};

use crate::receiver::{receiver_for, serve};

/// POSTs `body` to `url`, signed with [`SECRET`] at the receivers' pinned time: status, body.
async fn post(url: &str, signed: bool, body: String) -> (u16, String) {
    let mut request = reqwest::Client::new().post(url);
    if signed {
        request = request.header("X-Kxp-Signature", sign(&[SECRET], NOW, body.as_bytes()));
    }
    let response = request.body(body).send().await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

const NOW: u64 = 1_764_464_523;

fn verify() -> VerifyMiddleware {
    let mut config = kxp_testkit::conformance::Config::new("");
    config.now = Some(NOW);
    VerifyMiddleware::new(receiver_for(&config))
}

#[tokio::test]
async fn the_middleware_can_wrap_one_resource_only() {
    let verify = verify();
    let server =
        serve(move |cfg: &mut web::ServiceConfig| {
            cfg.service(web::resource("/webhooks").wrap(verify.clone()).route(
                web::post().to(|event: VerifiedEvent| async move { event.id().to_owned() }),
            ))
            .route("/health", web::get().to(|| async { "up" }));
        });
    let url = format!("{}/webhooks", server.base);
    let body = event_body("evt_res", 1, "eur");
    assert_eq!(
        post(&url, true, body.clone()).await,
        (200, "evt_res".to_owned())
    );
    assert_eq!(post(&url, false, body).await.0, 401);
    // Routes outside the wrapped resource are not the middleware's business.
    let health = reqwest::get(format!("{}/health", server.base))
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    assert_eq!(request_lines(&server.logs.wait_for(2).await).len(), 2);
}

#[tokio::test]
async fn a_handler_without_the_middleware_refuses_rather_than_trusts() {
    let server = serve(|cfg: &mut web::ServiceConfig| {
        cfg.route(
            "/webhooks",
            web::post().to(|event: VerifiedEvent| async move { event.id().to_owned() }),
        );
    });
    let url = format!("{}/webhooks", server.base);
    assert_eq!(
        post(&url, true, event_body("e1", 1, "eur")).await,
        (500, r#"{"error":"not_verified"}"#.to_owned())
    );
}

#[tokio::test]
async fn an_error_from_the_wrapped_service_is_logged_once_with_its_status() {
    // A service that fails with `Err` instead of answering: actix-web turns the error into the
    // response after the middleware has seen it.
    let verify = verify();
    let server = serve(move |cfg: &mut web::ServiceConfig| {
        cfg.service(web::scope("").wrap(verify.clone()).default_service(
            actix_web::dev::fn_service(|_: actix_web::dev::ServiceRequest| async {
                Err::<actix_web::dev::ServiceResponse, _>(
                    actix_web::error::ErrorServiceUnavailable("maintenance"),
                )
            }),
        ));
    });
    let url = format!("{}/webhooks", server.base);
    assert_eq!(
        post(&url, true, event_body("evt_err", 1, "eur")).await.0,
        503
    );
    let lines = request_lines(&server.logs.wait_for(1).await);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["event_id"], "evt_err");
    assert_eq!(lines[0]["verification"], "ok");
    assert_eq!(lines[0]["outcome"], "failed");
    assert_eq!(lines[0]["status"], 503);
}
