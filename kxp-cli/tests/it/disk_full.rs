//! A full disk under `kxp serve`'s SQLite store, then space again: while it is full the API
//! answers 503 and nothing acknowledged is lost; once space is back it recovers within seconds,
//! without a restart, and every acknowledged event is delivered.
//!
//! The store sits on a small tmpfs mounted in a mount namespace of the server's own
//! (`unshare -m`), so nothing outside the test sees it; the test fills and frees it through
//! `nsenter`. Where that is not permitted (not root, no `unshare`) the test says so and passes.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::crash::{KEY, create_endpoint, receiver, wait_until_all_arrive};

/// `kxp serve` in a mount namespace of its own whose `dir` is a 6 MiB tmpfs.
struct Confined {
    child: Child,
    dir: PathBuf,
    base: String,
}

impl Confined {
    /// `None` (after saying why) where mount namespaces are not available.
    fn start() -> Option<(Confined, tempfile::TempDir)> {
        let permitted = Command::new("unshare")
            .args(["-m", "--propagation", "private", "true"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !permitted {
            eprintln!("SKIPPED (disk full): `unshare -m` is not permitted here (it needs root)");
            return None;
        }
        let holder = tempfile::tempdir().unwrap();
        let dir = holder.path().to_path_buf();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let database_url = format!("sqlite://{}/kxp.db", dir.display());
        let child = Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c"])
            .arg(r#"mount -t tmpfs -o size=6m tmpfs "$1" || exit 97; shift; exec "$@""#)
            .arg("sh")
            .arg(&dir)
            .arg(env!("CARGO_BIN_EXE_kxp"))
            .args(["serve", "--dev", "--listen", &format!("127.0.0.1:{port}")])
            .args(["--database-url", &database_url])
            .args(["--retry-schedule", "0s,100ms,200ms,400ms,1s,2s,5s"])
            .args(["--delivery-timeout", "1s", "--lease-extra", "500ms"])
            .env("KXP_API_KEY", KEY)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let confined = Confined {
            child,
            dir,
            base: format!("http://127.0.0.1:{port}"),
        };
        confined.wait_until_listening();
        Some((confined, holder))
    }

    fn wait_until_listening(&self) {
        let started = Instant::now();
        let addr = self.base.trim_start_matches("http://").to_owned();
        while std::net::TcpStream::connect(&addr).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "kxp serve did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Runs `script` in the server's mount namespace, with `$1` its store's directory.
    fn inside(&self, script: &str) {
        let status = Command::new("nsenter")
            .args([
                "-t",
                &self.child.id().to_string(),
                "-m",
                "--",
                "sh",
                "-c",
                script,
                "sh",
            ])
            .arg(&self.dir)
            .stderr(Stdio::null())
            .status()
            .unwrap();
        // Filling ends with "no space left", which is the point; only a missing nsenter fails.
        assert!(status.code().is_some(), "nsenter did not run");
    }

    fn fill(&self) {
        self.inside(r#"cat /dev/zero > "$1/filler" 2>/dev/null; sync"#);
    }

    fn free(&self) {
        self.inside(r#"rm -f "$1/filler"; sync"#);
    }
}

impl Drop for Confined {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Emits one event: `Some(id)` when acknowledged (202), `None` when refused (any error).
async fn emit_one(client: &kxp_api::Client, n: usize) -> Option<String> {
    let event = kxp_api::NewEvent::new("payment.succeeded", &serde_json::json!({"n": n})).ok()?;
    client
        .create_event(&event, None)
        .await
        .ok()
        .map(|e| e.id.into_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_gets_503s_then_recovers_without_a_restart_and_loses_nothing() {
    let Some((server, _holder)) = Confined::start() else {
        return;
    };
    assert!(Path::new(&server.dir).exists());
    let (url, seen) = receiver().await;
    create_endpoint(&server.base, &url).await;
    let client = kxp_api::Client::new(&server.base, KEY).unwrap();

    let mut acknowledged = Vec::new();
    for n in 0..20 {
        acknowledged.push(
            emit_one(&client, n)
                .await
                .expect("accepted before the disk filled"),
        );
    }
    wait_until_all_arrive(&seen, &acknowledged, Duration::from_secs(60)).await;

    server.fill();
    let mut refused = 0;
    for n in 20..80 {
        match emit_one(&client, n).await {
            Some(id) => acknowledged.push(id),
            None => refused += 1,
        }
    }
    assert!(
        refused > 0,
        "a full disk refused nothing: the test did not fill it"
    );

    server.free();
    // Recovered within seconds: the first acknowledged event after the space came back...
    let started = Instant::now();
    let mut n = 80;
    loop {
        if let Some(id) = emit_one(&client, n).await {
            acknowledged.push(id);
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "still refusing events 30 s after the disk was freed"
        );
        n += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // ...and from then on every one: no connection left poisoned by the full disk.
    let mut failed_after = 0;
    for k in 0..60 {
        match emit_one(&client, 1000 + k).await {
            Some(id) => acknowledged.push(id),
            None => failed_after += 1,
        }
    }
    assert_eq!(
        failed_after, 0,
        "refusals after recovery: some connection stayed broken"
    );
    wait_until_all_arrive(&seen, &acknowledged, Duration::from_secs(60)).await;
}
