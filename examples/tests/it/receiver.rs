//! The contract over HTTP: challenge, signature, exactly once, the log lines, the settings.

use crate::process::{
    Bin, Running, SECRET, TempDir, deliver, payment_event, run_to_exit, sqlite_payments,
};

both_binaries!(
    the_challenge_echoes_the_token,
    a_signed_event_is_recorded_once_however_often_it_arrives,
    a_forged_signature_is_refused_and_records_nothing,
    one_json_log_line_per_request_and_never_the_secret,
    without_a_secret_it_exits_with_a_clear_message,
);

async fn the_challenge_echoes_the_token(bin: Bin) {
    let dir = TempDir::new();
    let receiver = Running::start(bin, dir.path(), &[("KXP_WEBHOOK_SECRET", SECRET)]).await;
    let response = reqwest::Client::new()
        .get(format!("{}/webhooks?challenge=ch_4f9a-Zx_01", receiver.url))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    assert_eq!(response.text().await.unwrap(), "ch_4f9a-Zx_01");
}

async fn a_signed_event_is_recorded_once_however_often_it_arrives(bin: Bin) {
    let dir = TempDir::new();
    let receiver = Running::start(bin, dir.path(), &[("KXP_WEBHOOK_SECRET", SECRET)]).await;
    let (id, body) = payment_event(1999, "eur");

    let (status, answer) = deliver(&receiver.url, SECRET, &body).await;
    assert_eq!(
        (status, answer.as_str()),
        (200, r#"{"outcome":"processed"}"#)
    );
    let expected = vec![(id.clone(), Some(1999), Some("eur".to_owned()))];
    // The default database: a SQLite file the receiver created in its working directory.
    assert_eq!(sqlite_payments(&dir.default_database()).await, expected);

    // What a sender does when it never saw the 200: the same event again, freshly signed.
    for _ in 0..5 {
        let (status, answer) = deliver(&receiver.url, SECRET, &body).await;
        assert_eq!(
            (status, answer.as_str()),
            (200, r#"{"outcome":"duplicate"}"#)
        );
    }
    assert_eq!(sqlite_payments(&dir.default_database()).await, expected);

    // Another event is another payment.
    let (other, body) = payment_event(500, "usd");
    assert_eq!(deliver(&receiver.url, SECRET, &body).await.0, 200);
    let ids: Vec<String> = sqlite_payments(&dir.default_database())
        .await
        .into_iter()
        .map(|row| row.0)
        .collect();
    assert_eq!(ids, [id, other]);
}

async fn a_forged_signature_is_refused_and_records_nothing(bin: Bin) {
    let dir = TempDir::new();
    let receiver = Running::start(bin, dir.path(), &[("KXP_WEBHOOK_SECRET", SECRET)]).await;
    let (_, body) = payment_event(1999, "eur");
    let forger = "0000000000000000000000000000000000000000000000000000000000000000";

    let (status, answer) = deliver(&receiver.url, forger, &body).await;
    assert_eq!(
        (status, answer.as_str()),
        (401, r#"{"error":"signature_mismatch"}"#)
    );
    let unsigned = reqwest::Client::new()
        .post(format!("{}/webhooks", receiver.url))
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(unsigned.status(), 401);
    assert_eq!(
        unsigned.text().await.unwrap(),
        r#"{"error":"missing_header"}"#
    );
    assert!(sqlite_payments(&dir.default_database()).await.is_empty());
}

async fn one_json_log_line_per_request_and_never_the_secret(bin: Bin) {
    let dir = TempDir::new();
    let receiver = Running::start(bin, dir.path(), &[("KXP_WEBHOOK_SECRET", SECRET)]).await;
    let (id, body) = payment_event(1999, "eur");
    reqwest::Client::new()
        .get(format!("{}/webhooks?challenge=token1", receiver.url))
        .send()
        .await
        .unwrap();
    deliver(&receiver.url, SECRET, &body).await;
    deliver(&receiver.url, SECRET, &body).await;
    deliver(&receiver.url, "not-the-secret", &body).await;

    let lines = receiver.request_lines(4).await;
    let fields: Vec<(&str, &str, &str, u64)> = lines
        .iter()
        .map(|l| {
            assert!(l["duration_ms"].is_u64(), "{l}");
            (
                l["event_id"].as_str().unwrap(),
                l["verification"].as_str().unwrap(),
                l["outcome"].as_str().unwrap(),
                l["status"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        fields,
        [
            ("", "not_attempted", "challenge", 200),
            (id.as_str(), "ok", "processed", 200),
            (id.as_str(), "ok", "duplicate", 200),
            ("", "signature_mismatch", "rejected", 401),
        ]
    );
    // Every stdout line is one JSON object (json_lines checks), and none holds the secret.
    let stdout = receiver.stdout().join("\n");
    assert!(!receiver.json_lines().is_empty());
    assert!(!stdout.contains(SECRET), "the secret reached the logs");
}

async fn without_a_secret_it_exits_with_a_clear_message(bin: Bin) {
    let dir = TempDir::new();
    let (status, stderr) = run_to_exit(bin, dir.path(), &[]);
    assert!(!status.success(), "{status}");
    assert!(
        stderr.contains("KXP_WEBHOOK_SECRET is not set"),
        "stderr: {stderr}"
    );
    // It stopped before touching anything: no database file was created.
    assert!(!dir.path().join("kxp-receiver.db").exists());

    let (status, stderr) = run_to_exit(
        bin,
        dir.path(),
        &[("KXP_WEBHOOK_SECRET", SECRET), ("KXP_LISTEN", "port 3000")],
    );
    assert!(!status.success(), "{status}");
    assert!(stderr.contains("KXP_LISTEN"), "stderr: {stderr}");
    assert!(!stderr.contains(SECRET));
}
