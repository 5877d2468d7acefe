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

/// A 2xx names the secret that verified the request, here the second of two (a sender still on
/// the old secret during a rotation); no other answer names any.
#[tokio::test]
async fn a_verified_2xx_names_the_secret_that_verified_it_and_nothing_else_does() {
    use actix_web::HttpResponse;
    use kxp_verify::{Secret, Verifier};

    // SHA-256("kxp-key-id\0" + SECRET), first 8 bytes: computed with Python's hashlib.
    const SECRET_FINGERPRINT: &str = "af17edef1cfa9c63";
    let secrets = ["new-secret", SECRET].map(|s| Secret::new(s).unwrap());
    let verify = VerifyMiddleware::new(
        kxp_actix::Receiver::new(Verifier::with_secrets(secrets).unwrap()).clock(|| NOW),
    );
    let server = serve(move |cfg: &mut web::ServiceConfig| {
        cfg.service(
            web::resource("/webhooks")
                .wrap(verify.clone())
                .route(web::post().to(|event: VerifiedEvent| async move {
                    if event.id() == "evt_fail" {
                        // A handler's own header is taken off a non-2xx too.
                        HttpResponse::InternalServerError()
                            .insert_header(("x-kxp-verified-key", "0000000000000000"))
                            .body("failed")
                    } else {
                        HttpResponse::Ok().body("ok")
                    }
                })),
        );
    });
    let url = format!("{}/webhooks", server.base);

    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let send = |secrets: &'static [&'static str], body: String| {
        let request = client
            .post(&url)
            .header("X-Kxp-Signature", sign(secrets, NOW, body.as_bytes()))
            .body(body);
        async move {
            let response = request.send().await.unwrap();
            let key = response
                .headers()
                .get("x-kxp-verified-key")
                .map(|v| v.to_str().unwrap().to_owned());
            (response.status().as_u16(), key)
        }
    };
    let accepted = send(&[SECRET], event_body("evt_1", 1, "eur")).await;
    assert_eq!(accepted, (200, Some(SECRET_FINGERPRINT.to_owned())));
    // Signed with both, newest first: the first signature is the new secret's.
    let both = send(&["new-secret", SECRET], event_body("evt_2", 1, "eur")).await;
    let new = kxp_verify::key_fingerprint(b"new-secret").to_string();
    assert_eq!(both, (200, Some(new)));

    assert_eq!(
        send(&["retired"], event_body("evt_3", 1, "eur")).await,
        (401, None)
    );
    assert_eq!(send(&[SECRET], "not json".to_owned()).await, (400, None));
    assert_eq!(
        send(&[SECRET], event_body("evt_fail", 1, "eur")).await,
        (500, None)
    );
    let challenge = client
        .get(format!("{url}?challenge=tok"))
        .send()
        .await
        .unwrap();
    assert_eq!(challenge.status(), 200);
    assert!(challenge.headers().get("x-kxp-verified-key").is_none());
}

#[tokio::test]
async fn a_middleware_in_the_standard_webhooks_format_verifies_its_headers() {
    use kxp_actix::{Format, Receiver};
    use kxp_testkit::conformance::standard_webhooks;
    use kxp_verify::{Secret, Verifier};

    let secret = Secret::from_whsec(&standard_webhooks::whsec()).unwrap();
    let receiver = Receiver::new(Verifier::new(secret)).format(Format::StandardWebhooks);
    let verify = VerifyMiddleware::new(receiver);
    let server =
        serve(move |cfg: &mut web::ServiceConfig| {
            cfg.service(web::resource("/webhooks").wrap(verify.clone()).route(
                web::post().to(|event: VerifiedEvent| async move { event.id().to_owned() }),
            ));
        });
    standard_webhooks::check_receiver(&format!("{}/webhooks", server.base)).await;
}
