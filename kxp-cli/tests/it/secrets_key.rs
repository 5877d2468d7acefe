//! `kxp secrets-key generate`, `status` and `reseal`, run as real processes against the
//! database of a sender that stored its secrets in the clear: the generated line is a ring,
//! `status` counts what is sealed how, `reseal` seals everything under the newest key, and
//! none of them prints key material.

use std::process::Command;

use crate::support::{Receiver, sender_with};

/// Runs `kxp` with `args` and, when given, `KXP_SECRETS_KEY`: (exit code, stdout, stderr).
async fn kxp(args: &[&str], ring: Option<&str>) -> (i32, String, String) {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    let ring = ring.map(str::to_owned);
    tokio::task::spawn_blocking(move || {
        let mut command = Command::new(env!("CARGO_BIN_EXE_kxp"));
        command
            .args(&args)
            .env_remove("KXP_DATABASE_URL")
            .env_remove("KXP_SECRETS_KEY");
        if let Some(ring) = ring {
            command.env("KXP_SECRETS_KEY", ring);
        }
        let out = command.output().unwrap();
        (
            out.status.code().unwrap(),
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generated_key_seals_what_was_stored_in_the_clear() {
    let (code, line, err) = kxp(&["secrets-key", "generate"], None).await;
    assert_eq!(code, 0, "{err}");
    let line = line.trim().to_owned();
    let ring: kxp_sender::KeyRing = line.parse().unwrap();
    let (code, other, _) = kxp(&["secrets-key", "generate"], None).await;
    assert_eq!(code, 0);
    assert_ne!(other.trim(), line, "every key is new");

    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("kxp.db").display());
    let s = sender_with("0s", {
        let url = url.clone();
        move |c| c.database_url = url
    })
    .await;
    let receiver = Receiver::start(vec![]).await;
    s.api.endpoint(&receiver.url, serde_json::json!({})).await;
    s.api.endpoint(&receiver.url, serde_json::json!({})).await;
    s.server.shutdown().await;

    let key_id = ring.sealing_key_id().to_owned();
    let material = line.split_once(':').unwrap().1.to_owned();
    let status = ["secrets-key", "status", "--database-url", &url];
    let (code, out, err) = kxp(&status, Some(&line)).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("2  plaintext"), "{out}");
    assert!(out.contains("Run `kxp secrets-key reseal`"), "{out}");
    let reseal = ["secrets-key", "reseal", "--database-url", &url];
    let (code, out, err) = kxp(&reseal, Some(&line)).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out.trim(),
        format!("Sealed 2 stored secrets under key {key_id}.")
    );
    let (code, out, err) = kxp(&status, Some(&line)).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&format!("2  key {key_id} (newest)")), "{out}");
    assert!(
        out.contains("Every stored secret is sealed under the newest key."),
        "{out}"
    );
    for printed in [&out, &err] {
        assert!(!printed.contains(&material), "{printed}");
    }

    // Without the ring, or with a broken one, nothing is touched and the error says why.
    let (code, _, err) = kxp(&reseal, None).await;
    assert_eq!(code, 1);
    assert!(err.contains("set KXP_SECRETS_KEY"), "{err}");
    let (code, _, err) = kxp(&reseal, Some("k1:c2hvcnQ=")).await;
    assert_eq!(code, 1);
    assert!(err.contains("KXP_SECRETS_KEY"), "{err}");
    // A server without the ring no longer starts on this database: it names the key.
    let config = kxp_sender::Config {
        database_url: url.clone(),
        listen: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
        api_key: Some("kxp_test_key".to_owned()),
        ..kxp_sender::Config::default()
    };
    let error = kxp_sender::start(config).await.err().unwrap().to_string();
    assert!(error.contains(&format!("`{key_id}`")), "{error}");
}
