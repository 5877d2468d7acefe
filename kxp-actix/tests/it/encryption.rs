//! A receiver with a decryption key (`Receiver::decrypt_with`) behind kxp-actix: the handler's
//! `VerifiedEvent` holds `data` as the producer sent it, an event without `data_jwe` is
//! answered 400 `not_encrypted`, and one sealed to another key 400 `decryption_failed`,
//! the signature checked first in every case. With two keys (a change of key under way), each
//! event opens with the one it was made to.

use actix_web::{HttpResponse, web};
use kxp_actix::{DecryptionKey, Receiver, VerifiedEvent, VerifyMiddleware};
use kxp_jwe::{Curve, seal_envelope};
use kxp_verify::{Secret, Signer, Verifier};

use crate::receiver::serve;

const SECRET: &str = "whsec_actix_encryption_test";
const ENVELOPE: &str = r#"{"id":"evt_enc_1","type":"payment.succeeded","api_version":"2026-11-01","created_at":"2026-12-01T10:00:00Z","data":{"card":"4242"}}"#;

async fn post(url: &str, body: String) -> (u16, String) {
    let signer = Signer::new(Secret::new(SECRET).unwrap());
    let header = signer.sign_now(body.as_bytes()).to_string();
    let response = reqwest::Client::new()
        .post(url)
        .header("x-kxp-signature", header)
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

#[tokio::test]
async fn the_handler_gets_the_decrypted_event() {
    let key = DecryptionKey::generate(Curve::P256, None);
    let old = DecryptionKey::generate(Curve::X25519, None);
    let receiver = Receiver::new(Verifier::new(Secret::new(SECRET).unwrap()))
        .decrypt_with(key.clone())
        .decrypt_with(old.clone());
    let server = serve(move |cfg| {
        cfg.service(
            web::resource("/hook")
                .wrap(VerifyMiddleware::new(receiver.clone()))
                .route(web::post().to(|event: VerifiedEvent| async move {
                    HttpResponse::Ok().body(event.data().to_string())
                })),
        );
    });
    let url = format!("{}/hook", server.base);

    let sealed = seal_envelope(&key.public(), ENVELOPE).unwrap();
    assert!(!sealed.contains("4242"));
    assert_eq!(
        post(&url, sealed).await,
        (200, r#"{"card":"4242"}"#.to_owned())
    );

    let sealed = seal_envelope(&old.public(), ENVELOPE).unwrap();
    assert_eq!(
        post(&url, sealed).await,
        (200, r#"{"card":"4242"}"#.to_owned()),
        "the old key"
    );

    let (status, body) = post(&url, ENVELOPE.to_owned()).await;
    assert_eq!(
        (status, body.as_str()),
        (400, r#"{"error":"not_encrypted"}"#)
    );

    let stranger = DecryptionKey::generate(Curve::P256, None).public();
    let (status, body) = post(&url, seal_envelope(&stranger, ENVELOPE).unwrap()).await;
    assert_eq!(
        (status, body.as_str()),
        (400, r#"{"error":"decryption_failed"}"#)
    );

    // Signature first: a tampered sealed body is a signature failure, never decrypted.
    let signer = Signer::new(Secret::new(SECRET).unwrap());
    let sealed = seal_envelope(&key.public(), ENVELOPE).unwrap();
    let header = signer.sign_now(sealed.as_bytes()).to_string();
    let tampered = sealed.replacen("evt_enc_1", "evt_enc_2", 1);
    let response = reqwest::Client::new()
        .post(&url)
        .header("x-kxp-signature", header)
        .body(tampered)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 401);
}
