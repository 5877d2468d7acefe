//! `kxp demo`, run as a new user runs it: the real binary, end to end, judged by its exit code
//! and its summary table; and `kxp demo --keep-running`, whose portal link a newcomer opens to
//! replay the dead letters it leaves in the console.

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use reqwest::header::{CONTENT_TYPE, COOKIE, LOCATION, SET_COOKIE};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

/// The `label  value` lines under the table's title.
fn summary(stdout: &str) -> HashMap<String, String> {
    stdout
        .lines()
        .skip_while(|line| *line != "kxp demo summary")
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        .map(|line| {
            let (label, value) = line.trim().rsplit_once(' ').unwrap();
            (label.trim().to_owned(), value.to_owned())
        })
        .collect()
}

/// The longest run of hexadecimal digits: secrets and API keys are 64 of them, while event ids
/// (UUIDs with dashes) and endpoint ids (32) are shorter.
fn longest_hex_run(text: &str) -> usize {
    text.split(|c: char| !c.is_ascii_hexdigit())
        .map(str::len)
        .max()
        .unwrap_or(0)
}

#[test]
fn the_demo_processes_every_event_exactly_once_through_a_flaky_receiver() {
    let started = Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_kxp"))
        .args(["demo", "--events", "40", "--no-progress"])
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let elapsed = started.elapsed();
    let stdout = String::from_utf8(output.stdout).unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    let context = format!("stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(output.status.success(), "{:?}\n{context}", output.status);
    assert!(
        elapsed < Duration::from_secs(60),
        "took {elapsed:?}\n{context}"
    );

    let table = summary(&stdout);
    let count = |label: &str| -> u64 {
        table
            .get(label)
            .unwrap_or_else(|| panic!("no `{label}` row\n{context}"))
            .parse()
            .unwrap()
    };
    assert_eq!(count("emitted"), 40, "{context}");
    assert_eq!(count("delivered"), 40, "{context}");
    assert_eq!(count("processed exactly once"), 40, "{context}");
    assert_eq!(count("lost"), 0, "{context}");
    assert_eq!(count("processed more than once"), 0, "{context}");
    // The receiver's outage and the broken refunds route open circuits: deliveries are held
    // (not retried into the dead-letter queue), and drain once a probe succeeds.
    assert!(stdout.contains("payments: circuit open"), "{context}");
    assert!(stdout.contains("refunds: circuit open"), "{context}");
    assert!(
        stdout.contains("circuit closed; held deliveries drain"),
        "{context}"
    );
    assert!(
        stdout.contains("ops webhook received: endpoint.circuit_opened for refunds"),
        "{context}"
    );
    // A few payments are rejected on every try: too sparse to open the circuit, they use up
    // their schedule, go dead, and are replayed once the shop is fixed.
    assert!(count("answered 500 (rejected payment)") > 0, "{context}");
    assert!(count("dead then replayed") > 0, "{context}");
    assert!(stdout.contains("payments: 1 dead so far"), "{context}");
    assert!(
        stdout.contains("the shop's bug is fixed; replaying the payments' dead letters"),
        "{context}"
    );
    assert!(count("duplicates absorbed by dedup") > 0, "{context}");
    assert!(count("retried") > 0, "{context}");
    assert!(count("connection refused") > 0, "{context}");
    assert!(stdout.contains("OK: 40/40 events"), "{context}");

    assert!(
        longest_hex_run(&stdout) < 40 && longest_hex_run(&stderr) < 40,
        "something secret-shaped was printed\n{context}"
    );
    assert!(
        !stderr.contains("INFO") && !stderr.contains("endpoint state changed"),
        "the progress display is the interface: no routine logs\n{context}"
    );
}

#[test]
fn the_demo_refuses_zero_events() {
    let output = Command::new(env!("CARGO_BIN_EXE_kxp"))
        .args(["demo", "--events", "0"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{output:?}");
}

/// Every line `from` writes, as it comes, into `lines`.
fn collect(from: impl AsyncRead + Unpin + Send + 'static, lines: Arc<Mutex<Vec<String>>>) {
    tokio::spawn(async move {
        let mut from = BufReader::new(from).lines();
        while let Ok(Some(line)) = from.next_line().await {
            lines.lock().unwrap().push(line);
        }
    });
}

/// `name=value` of a cookie the response sets.
fn cookie_pair(response: &reqwest::Response, name: &str) -> String {
    response
        .headers()
        .get_all(SET_COOKIE)
        .iter()
        .map(|v| v.to_str().unwrap().split(';').next().unwrap().to_owned())
        .find(|pair| pair.starts_with(&format!("{name}=")) && pair.len() > name.len() + 1)
        .unwrap_or_else(|| panic!("no {name} cookie: {response:?}"))
}

/// The value of the hidden input `name` of a page.
fn hidden(html: &str, name: &str) -> String {
    let marker = format!("name=\"{name}\" value=\"");
    let at = html
        .find(&marker)
        .unwrap_or_else(|| panic!("no {name} in {html}"))
        + marker.len();
    html[at..].split('"').next().unwrap().to_owned()
}

/// A browser without a cookie jar that does not follow redirects, on the demo's console.
struct Browser {
    base: String,
    http: reqwest::Client,
}

impl Browser {
    async fn get(&self, path: &str, cookie: Option<&str>) -> reqwest::Response {
        let mut request = self.http.get(format!("{}{path}", self.base));
        if let Some(cookie) = cookie {
            request = request.header(COOKIE, cookie);
        }
        request.send().await.unwrap()
    }

    /// A form post; the values are hex or ids, which need no percent-encoding.
    async fn post(&self, path: &str, cookie: &str, form: &[(&str, &str)]) -> reqwest::Response {
        let body = form
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("&");
        self.http
            .post(format!("{}{path}", self.base))
            .header(COOKIE, cookie)
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .unwrap()
    }

    /// A page that must answer 200: its text.
    async fn page(&self, path: &str, cookie: &str) -> String {
        let response = self.get(path, Some(cookie)).await;
        let status = response.status();
        let html = response.text().await.unwrap();
        assert_eq!(status, StatusCode::OK, "{path}: {html}");
        html
    }
}

/// The `action` paths of a page's forms that replay one delivery.
fn replay_forms(html: &str) -> Vec<String> {
    html.split("action=\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .filter(|action| action.contains("/deliveries/") && action.ends_with("/replay"))
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_running_prints_a_portal_link_to_the_console_where_its_dead_letters_are_replayed() {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_kxp"))
        .args(["demo", "--events", "40", "--no-progress", "--keep-running"])
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let (stdout, stderr) = (
        Arc::new(Mutex::new(Vec::new())),
        Arc::new(Mutex::new(Vec::new())),
    );
    collect(child.stdout.take().unwrap(), stdout.clone());
    collect(child.stderr.take().unwrap(), stderr.clone());
    let context = || {
        format!(
            "stdout:\n{}\nstderr:\n{}",
            stdout.lock().unwrap().join("\n"),
            stderr.lock().unwrap().join("\n")
        )
    };

    // The verdict, then the link: read stdout as it comes, for at most two minutes.
    let deadline = Instant::now() + Duration::from_secs(120);
    let link = loop {
        let found = stdout
            .lock()
            .unwrap()
            .iter()
            .map(|line| line.trim())
            .find(|line| line.starts_with("http://") && line.contains("/console/sign-in/"))
            .map(str::to_owned);
        if let Some(link) = found {
            break link;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "the demo ended without a link\n{}",
            context()
        );
        assert!(Instant::now() < deadline, "no link yet\n{}", context());
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let printed = stdout.lock().unwrap().join("\n");
    assert!(printed.contains("OK: 40/40 events"), "{}", context());
    assert!(
        printed.contains(
            "open this link: the console shows the demo's endpoints, events and attempts; 3 dead deliveries wait in Dead letters: replay them there"
        ),
        "{}",
        context()
    );
    let folder = printed
        .split("SQLite in ")
        .nth(1)
        .and_then(|rest| rest.split(" · ").next())
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| panic!("no folder\n{}", context()));
    assert!(folder.exists(), "{}", context());

    // The link's page: one form, whose button signs in.
    let (base, path) = link.split_at(link.find("/console/").unwrap());
    let b = Browser {
        base: base.to_owned(),
        http: reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap(),
    };
    let page = b.get(path, None).await;
    assert_eq!(page.status(), StatusCode::OK);
    let sign_in = cookie_pair(&page, "kxp_sign_in");
    let html = page.text().await.unwrap();
    assert_eq!(html.matches("<form method=\"post\"").count(), 1, "{html}");
    let signed = b
        .post(
            "/console/sign-in",
            &sign_in,
            &[
                ("csrf_token", &hidden(&html, "csrf_token")),
                ("token", &hidden(&html, "token")),
            ],
        )
        .await;
    assert_eq!(signed.status(), StatusCode::SEE_OTHER, "{signed:?}");
    assert_eq!(signed.headers()[LOCATION], "/console");
    let session = cookie_pair(&signed, "kxp_session");
    let console = b.get("/console", Some(&session)).await;
    assert_eq!(console.status(), StatusCode::SEE_OTHER);
    let home = console.headers()[LOCATION].to_str().unwrap().to_owned();
    assert!(home.starts_with("/console/a/acc_"), "{home}");

    // The dead-letter page: the three dead payments, each with its replay button.
    let dead = b.page(&format!("{home}/dead-letters"), &session).await;
    let forms = replay_forms(&dead);
    assert_eq!(forms.len(), 3, "{dead}");
    assert!(dead.contains("Replay all 3"), "{dead}");
    assert!(dead.contains("500"), "the last answer is shown: {dead}");

    // Replay one: the receiver accepts it now, and its event's page shows it delivered.
    let replayed = b
        .post(
            &forms[0],
            &session,
            &[("csrf_token", &hidden(&dead, "csrf_token"))],
        )
        .await;
    assert_eq!(replayed.status(), StatusCode::SEE_OTHER, "{replayed:?}");
    let to = replayed.headers()[LOCATION].to_str().unwrap().to_owned();
    let event_page = to.split('#').next().unwrap().to_owned();
    assert!(
        event_page.starts_with(&format!("{home}/events/")),
        "{event_page}"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let html = b.page(&event_page, &session).await;
        if html.contains("state delivered") {
            assert!(html.contains("state dead"), "the dead one stays: {html}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the replay was not delivered: {html}\n{}",
            context()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let dead = b.page(&format!("{home}/dead-letters"), &session).await;
    assert_eq!(replay_forms(&dead).len(), 2, "{dead}");

    // Ctrl-C: exit 0, the folder removed.
    let pid = child.id().unwrap().to_string();
    let signalled = Command::new("kill").args(["-INT", &pid]).status().unwrap();
    assert!(signalled.success());
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .unwrap_or_else(|_| panic!("still running after Ctrl-C\n{}", context()))
        .unwrap();
    assert!(status.success(), "{status:?}\n{}", context());
    assert!(!folder.exists(), "{}", context());
}
