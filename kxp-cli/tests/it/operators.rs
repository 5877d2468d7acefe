//! `kxp operators create`, `list` and `delete`, run as real processes against the database
//! of a running sender: the key is printed once, stored only as its hash, and works; a deleted
//! operator's key and console sessions stop working at once.

use serde_json::Value;
use sha2_std::Digest;

use crate::accounts::kxp_async;
use crate::support::sender_with;

/// Runs `kxp` with `args`, without a key or a database in the environment.
async fn kxp(args: &[&str]) -> (i32, String, String) {
    kxp_async(args, None).await
}

/// `kxp operators create` on the database at `url`, with `extra` arguments.
async fn create(url: &str, name: &str, extra: &[&str]) -> (i32, String, String) {
    let mut args = vec!["operators", "create", "--database-url", url, "--name", name];
    args.extend(extra);
    kxp(&args).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_created_operator_gets_a_key_shown_once_stored_only_as_its_hash_that_works() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("kxp.db").display());
    let s = sender_with("0s", {
        let url = url.clone();
        move |c| c.database_url = url
    })
    .await;

    // Created while the server runs, on its database: the key once, with the warning.
    let (code, out, err) = create(&url, "Alice", &[]).await;
    assert_eq!(code, 0, "{err}");
    let key = out
        .lines()
        .find_map(|l| l.strip_prefix("Operator key: "))
        .unwrap_or_else(|| panic!("no key line: {out}"))
        .to_owned();
    assert!(key.starts_with("kxp_op_") && key.len() == 7 + 64, "{key}");
    assert_eq!(out.matches(&key).count(), 1, "printed once: {out}");
    assert!(out.contains("not shown again"), "{out}");
    let (code, out, err) = create(&url, "Bob", &["--json"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("not shown again"), "{err}");
    let bob: Value = serde_json::from_str(out.trim()).unwrap();
    let bob_key = bob["operator_key"].as_str().unwrap().to_owned();
    assert!(
        bob_key.starts_with("kxp_op_") && bob_key != key,
        "{bob_key}"
    );

    // The key works: it creates an account (whose key works in turn) and lists accounts.
    let op = s.api.with_key(&key);
    let created = op
        .client
        .create_account(&kxp_api::NewAccount::new("Shop B"))
        .await
        .unwrap();
    let b = s.api.with_key(created.api_key.expose());
    assert_eq!(b.client.account().await.unwrap().id, created.account.id);
    let listed = op
        .client
        .accounts(&kxp_api::PageQuery::default())
        .await
        .unwrap();
    assert_eq!(listed.data.len(), 2, "{listed:?}");

    // The database holds the SHA-256 hex of each key, and no key anywhere.
    let kxp_sender::Db::Sqlite(pool) = s.server.db() else {
        panic!("the test sender runs on SQLite")
    };
    let mut hashes: Vec<String> =
        sqlx::query_scalar("SELECT key_hash FROM kxp_operators ORDER BY id")
            .fetch_all(pool)
            .await
            .unwrap();
    hashes.sort_unstable();
    let mut expected: Vec<String> = [&key, &bob_key]
        .iter()
        .map(|k| hex::encode(sha2_std::Sha256::digest(k.as_bytes())))
        .collect();
    expected.sort_unstable();
    assert_eq!(hashes, expected);
    let rows: Vec<String> = sqlx::query_scalar(
        "SELECT id || ' ' || name || ' ' || key_hash || ' ' || created_at FROM kxp_operators",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    assert!(
        rows.iter()
            .all(|r| !r.contains(&key) && !r.contains(&bob_key)),
        "{rows:?}"
    );

    // The list: every operator, never a key or a hash.
    for json in [false, true] {
        let mut args = vec!["operators", "list", "--database-url", &url];
        if json {
            args.push("--json");
        }
        let (code, out, err) = kxp(&args).await;
        assert_eq!(code, 0, "{err}");
        for name in ["Alice", "Bob", bob["id"].as_str().unwrap()] {
            assert!(out.contains(name), "{name} missing: {out}");
        }
        assert!(!out.contains("kxp_"), "no key-looking text: {out}");
        assert!(hashes.iter().all(|h| !out.contains(h.as_str())), "{out}");
    }
    s.server.shutdown().await;
}

#[tokio::test]
async fn create_needs_a_sensible_name() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("kxp.db").display());
    for name in ["", "  ", "tab\there", &"n".repeat(129)] {
        let (code, out, err) = create(&url, name, &[]).await;
        assert_eq!(code, 1, "{name:?}: {out}{err}");
        assert!(
            err.contains("--name") && !out.contains("kxp_op_"),
            "{out}{err}"
        );
    }
    let (code, out, err) = kxp(&["operators", "list", "--database-url", &url]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("No operators yet"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_operators_key_and_console_sessions_stop_working_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("kxp.db").display());
    let s = sender_with("0s", {
        let url = url.clone();
        move |c| c.database_url = url
    })
    .await;
    let (_, out, _) = create(&url, "Carol", &["--json"]).await;
    let carol: Value = serde_json::from_str(out.trim()).unwrap();
    let (id, key) = (
        carol["id"].as_str().unwrap(),
        carol["operator_key"].as_str().unwrap(),
    );

    // Signed in to the console with the key, as a browser does.
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let form = http
        .get(format!("{}/console/sign-in", s.api.base))
        .send()
        .await
        .unwrap();
    let sign_in = form.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let html = form.text().await.unwrap();
    let csrf = html
        .split("name=\"csrf_token\" value=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap();
    let signed = http
        .post(format!("{}/console/sign-in", s.api.base))
        .header("cookie", &sign_in)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("csrf_token={csrf}&key={key}"))
        .send()
        .await
        .unwrap();
    let session = signed.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let home = |session: String| {
        let http = http.clone();
        let base = s.api.base.clone();
        async move {
            http.get(format!("{base}/console"))
                .header("cookie", session)
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    assert_eq!(home(session.clone()).await, 200);

    let (code, out, err) = kxp(&["operators", "delete", "--database-url", &url, "--id", id]).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("Carol") && out.contains("1 console session ended"),
        "{out}"
    );
    // The session is gone (sent to sign in), and the key is refused.
    assert_eq!(home(session).await, 303);
    let op = s.api.with_key(key);
    let refused = op
        .client
        .accounts(&kxp_api::PageQuery::default())
        .await
        .unwrap_err();
    assert_eq!(refused.status(), Some(401), "{refused}");
    let (_, listed, _) = kxp(&["operators", "list", "--database-url", &url]).await;
    assert!(!listed.contains("Carol"), "{listed}");
    // Deleting it again says there is no such operator.
    let (code, _, err) = kxp(&["operators", "delete", "--database-url", &url, "--id", id]).await;
    assert_ne!(code, 0);
    assert!(err.contains("no operator"), "{err}");
    s.server.shutdown().await;
}
