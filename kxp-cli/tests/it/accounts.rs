//! `kxp accounts create` and `kxp accounts list`, run as real processes against the database of
//! a running sender.

use std::process::Command;

use serde_json::{Value, json};
use sha2_std::Digest;

use crate::support::sender_with;

fn kxp(args: &[&str], database_url: Option<&str>) -> (i32, String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_kxp"));
    command
        .args(args)
        .env_remove("KXP_API_KEY")
        .env_remove("KXP_DATABASE_URL");
    if let Some(url) = database_url {
        command.env("KXP_DATABASE_URL", url);
    }
    let out = command.output().unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

pub(crate) async fn kxp_async(args: &[&str], database_url: Option<&str>) -> (i32, String, String) {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    let url = database_url.map(str::to_owned);
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        kxp(&args, url.as_deref())
    })
    .await
    .unwrap()
}

/// Creates an account on the sender's database with `kxp accounts create`: its id and key.
pub(crate) async fn create_account(database_url: &str, name: &str) -> (String, String) {
    let (code, out, err) = kxp_async(
        &[
            "accounts",
            "create",
            "--database-url",
            database_url,
            "--name",
            name,
            "--json",
        ],
        None,
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let created: serde_json::Value = serde_json::from_str(&out).unwrap();
    (
        created["id"].as_str().unwrap().to_owned(),
        created["api_key"].as_str().unwrap().to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_created_account_gets_a_key_shown_once_and_stored_only_as_its_hash() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("kxp.db").display());
    let s = sender_with("0s", {
        let url = url.clone();
        move |c| c.database_url = url
    })
    .await;

    // Created while the server runs, on its database.
    let (code, out, err) = kxp_async(
        &[
            "accounts",
            "create",
            "--database-url",
            &url,
            "--name",
            "Shop B",
        ],
        None,
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let key = out
        .lines()
        .find_map(|l| l.strip_prefix("API key: "))
        .unwrap_or_else(|| panic!("no key line: {out}"))
        .to_owned();
    assert!(key.starts_with("kxp_") && key.len() == 4 + 64, "{key}");
    assert_eq!(
        out.matches(&key).count(),
        1,
        "the key is printed once: {out}"
    );
    assert!(out.contains("not shown again"), "{out}");
    let account_id = out
        .split_whitespace()
        .find(|w| w.starts_with("acc_"))
        .unwrap()
        .to_owned();

    // The key works against the server, as its own account.
    let b = s.api.with_key(&key);
    assert_eq!(b.client.all_endpoints().await.unwrap(), []);
    b.endpoint("http://127.0.0.1:9/hook", json!({})).await;
    assert_eq!(
        s.api.client.all_endpoints().await.unwrap(),
        [],
        "A does not see B's endpoint"
    );
    let wrong = s.api.with_key(&format!("{key}x"));
    assert_eq!(wrong.call("GET", "/v1/endpoints", None).await.0, 401);

    // A second create: another account, another key. KXP_DATABASE_URL works as a fallback.
    let (code, out, err) = kxp_async(
        &["accounts", "create", "--name", "Shop C", "--json"],
        Some(&url),
    )
    .await;
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("not shown again"), "{err}");
    let c: Value = serde_json::from_str(out.trim()).unwrap();
    let c_key = c["api_key"].as_str().unwrap().to_owned();
    assert_ne!(c_key, key);

    // The database holds the SHA-256 hex of each key, and no key anywhere.
    let kxp_sender::Db::Sqlite(pool) = s.server.db() else {
        panic!("the test sender runs on SQLite")
    };
    let hash = hex::encode(sha2_std::Sha256::digest(key.as_bytes()));
    let stored: String =
        sqlx::query_scalar("SELECT key_hash FROM kxp_api_keys WHERE account_id = $1")
            .bind(&account_id)
            .fetch_one(pool)
            .await
            .unwrap();
    assert_eq!(stored, hash);
    let rows: Vec<String> = sqlx::query_scalar(
        "SELECT a.id || ' ' || a.name || ' ' || k.key_hash || ' ' || a.default_api_version || ' ' || a.created_at \
         FROM kxp_accounts a JOIN kxp_api_keys k ON k.account_id = a.id",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    assert_eq!(rows.len(), 3, "{rows:?}");
    for secret in [&key, &c_key, &"kxp_test_key".to_owned()] {
        assert!(
            rows.iter().all(|r| !r.contains(secret.as_str())),
            "{rows:?}"
        );
    }

    // The list: every account, never a key or a hash.
    let hashes: Vec<String> = sqlx::query_scalar("SELECT key_hash FROM kxp_api_keys")
        .fetch_all(pool)
        .await
        .unwrap();
    for args in [&["accounts", "list"][..], &["accounts", "list", "--json"]] {
        let mut args = args.to_vec();
        args.extend(["--database-url", &url]);
        let (code, out, err) = kxp_async(&args, None).await;
        assert_eq!(code, 0, "{err}");
        for name in ["default", "Shop B", "Shop C", account_id.as_str()] {
            assert!(out.contains(name), "{name} missing: {out}");
        }
        for secret in [&key, &c_key, &"kxp_test_key".to_owned()]
            .into_iter()
            .chain(&hashes)
        {
            assert!(!out.contains(secret.as_str()), "{out}");
            assert!(!err.contains(secret.as_str()), "{err}");
        }
        assert!(!out.contains("kxp_"), "no key-looking text: {out}");
    }
    let (_, out, _) = kxp_async(&["accounts", "list", "--json"], Some(&url)).await;
    let listed: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(listed.len(), 3);
    for account in &listed {
        let mut fields: Vec<&str> = account
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        fields.sort_unstable();
        assert_eq!(fields, ["created_at", "id", "name"]);
    }
    s.server.shutdown().await;
}

#[test]
fn create_needs_a_database_and_a_sensible_name() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("kxp.db").display());
    let (code, _, err) = kxp(&["accounts", "create", "--name", "x"], None);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--database-url"), "{err}");
    for name in ["", "   ", "tab\there", &"n".repeat(129)] {
        let (code, out, err) = kxp(
            &["accounts", "create", "--database-url", &url, "--name", name],
            None,
        );
        assert_eq!(code, 1, "{name:?}: {out}{err}");
        assert!(err.contains("--name"), "{err}");
        assert!(!out.contains("API key"), "{out}");
    }
    let (code, out, err) = kxp(&["accounts", "list", "--database-url", &url], None);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("No accounts yet"), "{out}");
}
