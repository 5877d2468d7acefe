//! What only a process has: its settings in the environment, and its working directory.

use kxp_testkit::conformance::{SECRET, event_body, sign};

use crate::binaries::{Bin, Running, TempDir, run_to_exit, sqlite_payments};

both_binaries!(
    without_a_secret_it_exits_with_a_clear_message,
    the_default_database_is_a_file_in_the_working_directory,
);

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

    for (var, value) in [("KXP_LISTEN", "port 3000"), ("KXP_EXAMPLE_NOW", "soon")] {
        let (status, stderr) = run_to_exit(
            bin,
            dir.path(),
            &[("KXP_WEBHOOK_SECRET", SECRET), (var, value)],
        );
        assert!(!status.success(), "{status}");
        assert!(stderr.contains(var), "stderr: {stderr}");
        assert!(!stderr.contains(SECRET));
    }
}

async fn the_default_database_is_a_file_in_the_working_directory(bin: Bin) {
    let dir = TempDir::new();
    let receiver = Running::start(bin, dir.path(), &[("KXP_WEBHOOK_SECRET", SECRET)]).await;
    let body = event_body("evt_default_db", 1999, "eur");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let response = reqwest::Client::new()
        .post(format!("{}/webhooks", receiver.base))
        .header("X-Kxp-Signature", sign(&[SECRET], now, body.as_bytes()))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        sqlite_payments(&dir.default_database()).await,
        [(
            "evt_default_db".to_owned(),
            Some(1999),
            Some("eur".to_owned())
        )]
    );
}
