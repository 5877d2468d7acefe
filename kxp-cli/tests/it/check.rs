//! `kxp check` as a real process against receivers on 127.0.0.1 written here: a correct one
//! (kxp-axum's layer with kxp-dedup) passes every check, and each deliberately broken one is
//! caught by the check that names its flaw, with the severity the contract gives it.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{any, get, post};
use kxp_axum::dedup::{self, Handled, Store};
use kxp_axum::{Receiver, VerifiedEvent, VerifyLayer};
use kxp_verify::{Secret, Verifier};
use serde_json::Value;

/// Shaped like a real one: 64 hex digits, used as its own bytes.
const SECRET: &str = "41ab92590637ac82026ca65266b2898428ea491b1e6d543d7202cf486ea62965";
const OLD_SECRET: &str = "0b9c1e2f7d6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b0c";

/// The checks that send something unauthentic: a 2xx to any of them is critical.
const UNAUTHENTIC: [&str; 6] = [
    "forged_signature",
    "wrong_secret",
    "missing_header",
    "malformed_header",
    "timestamp_too_old",
    "timestamp_in_future",
];

/// What a hand-written receiver gets wrong.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Flaw {
    /// Answers 200 to anything, unverified.
    AcceptsEverything,
    /// Verifies, but answers 500 to an event id it has seen.
    FailsDuplicates,
    /// Parses the JSON and verifies the re-serialised value, whose bytes are not the ones signed.
    Reserializes,
    /// Verifies, then takes 2 s over each event.
    Slow,
    /// Verifies the signature but accepts any timestamp.
    IgnoresTimestamp,
    /// Redirects every request to another path of its own, which counts what reaches it.
    Redirects,
}

#[derive(Clone)]
struct Flawed {
    flaw: Flaw,
    seen: Arc<Mutex<HashSet<String>>>,
    redirected: Arc<AtomicUsize>,
}

/// A receiver with `flaw` on `/webhooks`: otherwise it verifies with [`SECRET`] (401 with the
/// kind), limits bodies to 1 MiB (413; no limit at all when it accepts everything), refuses
/// non-JSON (400), and answers the challenge.
async fn flawed(flaw: Flaw) -> (String, Arc<AtomicUsize>) {
    let redirected = Arc::new(AtomicUsize::new(0));
    let state = Flawed {
        flaw,
        seen: Arc::default(),
        redirected: Arc::clone(&redirected),
    };
    let app = Router::new()
        .route("/webhooks", any(receive))
        .route("/elsewhere", any(elsewhere))
        .layer(if flaw == Flaw::AcceptsEverything {
            DefaultBodyLimit::disable()
        } else {
            DefaultBodyLimit::max(1024 * 1024)
        })
        .with_state(state);
    (serve(app).await, redirected)
}

async fn receive(
    State(app): State<Flawed>,
    Query(query): Query<Vec<(String, String)>>,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, [(&'static str, &'static str); 1], String) {
    let answer = |status, text: String| (status, [("content-type", "application/json")], text);
    if let Some((_, token)) = query.iter().find(|(name, _)| name == "challenge") {
        return (
            StatusCode::OK,
            [("content-type", "text/plain")],
            token.clone(),
        );
    }
    match app.flaw {
        Flaw::AcceptsEverything => return answer(StatusCode::OK, "{}".to_owned()),
        Flaw::Redirects => {
            return (
                StatusCode::TEMPORARY_REDIRECT,
                [("location", "/elsewhere")],
                String::new(),
            );
        }
        _ => {}
    }
    let parsed = serde_json::from_slice::<Value>(&body);
    let signed = match (&parsed, app.flaw) {
        (Ok(value), Flaw::Reserializes) => serde_json::to_vec(value).unwrap(),
        (Err(_), Flaw::Reserializes) => return answer(StatusCode::BAD_REQUEST, String::new()),
        _ => body.to_vec(),
    };
    let tolerance = if app.flaw == Flaw::IgnoresTimestamp {
        Duration::from_secs(u64::from(u32::MAX))
    } else {
        kxp_verify::DEFAULT_TOLERANCE
    };
    let verifier = Verifier::new(Secret::new(SECRET).unwrap()).with_tolerance(tolerance);
    let header = headers
        .get("x-kxp-signature")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if let Err(e) = verifier.verify_now(header, &signed) {
        return answer(
            StatusCode::UNAUTHORIZED,
            format!(r#"{{"error":"{}"}}"#, e.kind()),
        );
    }
    let Some(id) = parsed
        .ok()
        .and_then(|v| v["id"].as_str().map(str::to_owned))
    else {
        return answer(StatusCode::BAD_REQUEST, String::new());
    };
    if app.flaw == Flaw::Slow {
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let first = app.seen.lock().unwrap().insert(id);
    if !first && app.flaw == Flaw::FailsDuplicates {
        return answer(StatusCode::INTERNAL_SERVER_ERROR, String::new());
    }
    answer(StatusCode::OK, String::new())
}

async fn elsewhere(State(app): State<Flawed>) -> StatusCode {
    app.redirected.fetch_add(1, Ordering::SeqCst);
    StatusCode::OK
}

/// A correct receiver: kxp-axum's layer with [`SECRET`] and [`OLD_SECRET`] (a rotation), and
/// kxp-dedup on a fresh SQLite file.
async fn correct(dir: &tempfile::TempDir) -> String {
    async fn webhook(State(store): State<Store>, event: VerifiedEvent) -> Handled {
        dedup::process(&store, &event, Duration::from_secs(60), || async {
            Ok::<(), std::io::Error>(())
        })
        .await
    }
    let path = dir.path().join("dedup.db");
    let store = Store::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    let verifier = Verifier::with_secrets([
        Secret::new(SECRET).unwrap(),
        Secret::new(OLD_SECRET).unwrap(),
    ])
    .unwrap();
    let app = Router::new()
        .route(
            "/webhooks",
            post(webhook).layer(VerifyLayer::new(Receiver::new(verifier))),
        )
        .route("/", get(|| async { "not the webhook" }))
        .with_state(store);
    serve(app).await
}

/// Serves `app` on 127.0.0.1 for the rest of the test; the webhook URL.
async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/webhooks", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn report(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not a JSON report ({e}):\n{}", self.stdout))
    }

    /// `check` → (verdict, severity), for every check in the report.
    fn verdicts(&self) -> Vec<(String, String, Option<String>)> {
        self.report()["findings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                (
                    f["check"].as_str().unwrap().to_owned(),
                    f["verdict"].as_str().unwrap().to_owned(),
                    f["severity"].as_str().map(str::to_owned),
                )
            })
            .collect()
    }

    fn verdict(&self, check: &str) -> (String, Option<String>) {
        let (_, verdict, severity) = self
            .verdicts()
            .into_iter()
            .find(|(name, _, _)| name == check)
            .unwrap_or_else(|| panic!("no {check} in the report:\n{}", self.stdout));
        (verdict, severity)
    }

    fn finding(&self, check: &str) -> Value {
        self.report()["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["check"] == check)
            .unwrap()
            .clone()
    }
}

/// Runs `kxp check` with `args`, with no secret from the environment, while the test's receivers
/// keep serving; checks on every run that no secret reaches the output.
///
/// The proxy variables point at a closed loopback port: a run that used them would reach no
/// receiver, and the checks would fail.
async fn kxp_check(args: &[&str]) -> Run {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_kxp"));
    command
        .arg("check")
        .args(args)
        .env_remove("KXP_WEBHOOK_SECRET")
        .env_remove("NO_COLOR");
    for var in ["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"] {
        command.env(var, "http://127.0.0.1:9");
    }
    let out = command.output().await.unwrap();
    let run = Run {
        code: out.status.code().unwrap(),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    };
    for secret in [SECRET, OLD_SECRET] {
        assert!(!run.stdout.contains(secret), "a secret in stdout {args:?}");
        assert!(!run.stderr.contains(secret), "a secret in stderr {args:?}");
    }
    run
}

/// `kxp check --json` with [`SECRET`] and a burst of 2, then `extra`, against a receiver with
/// `flaw`, which fails it (exit 1); and how many requests its redirect target got.
async fn check_flawed(flaw: Flaw, extra: &[&str]) -> (Run, Arc<AtomicUsize>) {
    let (url, redirected) = flawed(flaw).await;
    let args = ["--url", &url, "--secret", SECRET, "--burst", "2", "--json"];
    let run = kxp_check(&[&args[..], extra].concat()).await;
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    (run, redirected)
}

fn pass() -> (String, Option<String>) {
    ("pass".to_owned(), None)
}

fn fail(severity: &str) -> (String, Option<String>) {
    ("fail".to_owned(), Some(severity.to_owned()))
}

#[tokio::test]
async fn a_correct_receiver_passes_every_check() {
    let dir = tempfile::tempdir().unwrap();
    let url = correct(&dir).await;
    let run = kxp_check(&[
        "--url",
        &url,
        "--secret",
        SECRET,
        "--secret",
        OLD_SECRET,
        "--challenge",
        "--burst",
        "8",
        "--json",
    ])
    .await;
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let verdicts = run.verdicts();
    assert_eq!(verdicts.len(), 13, "{verdicts:?}");
    assert!(
        verdicts.iter().all(|(_, verdict, _)| verdict == "pass"),
        "{verdicts:?}"
    );
    let report = run.report();
    assert_eq!(report["passed"], true);
    // 12 single checks, one per secret for the rotation, the burst.
    assert_eq!(report["requests"], 12 + 2 + 8);
    let burst = run.finding("burst");
    assert_eq!(burst["latency"]["count"], 8);
    assert!(burst["latency"]["p95_ms"].as_f64().unwrap() >= 0.0);
    let sent = &run.finding("valid_event")["sent"];
    assert_eq!(sent["headers"]["X-Kxp-Test"], "true");
    assert!(
        sent["body"]
            .as_str()
            .unwrap()
            .contains("kxp.test.payment.succeeded")
    );
}

#[tokio::test]
async fn a_receiver_that_accepts_forgeries_fails_critically_and_the_table_has_no_colours() {
    let (run, _) = check_flawed(Flaw::AcceptsEverything, &[]).await;
    for check in UNAUTHENTIC {
        assert_eq!(run.verdict(check), fail("critical"), "{check}");
    }
    // Authentic, but not to be accepted: errors, not critical.
    assert_eq!(run.verdict("body_over_limit"), fail("error"));
    assert_eq!(run.verdict("not_json"), fail("error"));
    assert_eq!(run.verdict("valid_event"), pass());
    let finding = run.finding("forged_signature");
    assert!(
        finding["docs"]
            .as_str()
            .unwrap()
            .ends_with("docs/receiving-webhooks.md#check-forged_signature")
    );
    assert_eq!(finding["received"]["status"], 200);

    // Standard output is a pipe here: the table must be plain text.
    let (url, _) = flawed(Flaw::AcceptsEverything).await;
    let run = kxp_check(&[
        "--url",
        &url,
        "--secret",
        SECRET,
        "--only",
        "forged_signature,valid_event",
    ])
    .await;
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(!run.stdout.contains('\x1b'), "ANSI codes:\n{}", run.stdout);
    let row = run
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("forged_signature"))
        .unwrap();
    assert!(
        row.contains("FAIL critical") && row.contains("200 OK"),
        "{row}"
    );
    assert!(
        run.stdout.contains("why:   anyone who finds the URL"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("#check-forged_signature"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout
            .contains("1 passed, 0 warned, 1 failed (1 critical), 0 skipped"),
        "{}",
        run.stdout
    );
}

#[tokio::test]
async fn a_receiver_that_fails_duplicates_is_caught_by_the_duplicate_check() {
    let (run, _) = check_flawed(Flaw::FailsDuplicates, &["--challenge"]).await;
    for (check, verdict, severity) in run.verdicts() {
        match check.as_str() {
            "duplicate_event" => assert_eq!(
                (verdict, severity.as_deref()),
                ("fail".to_owned(), Some("error"))
            ),
            // One secret: no rotation to check.
            "rotation" => assert_eq!(verdict, "skip"),
            _ => assert_eq!(verdict, "pass", "{check}"),
        }
    }
    assert_eq!(run.finding("duplicate_event")["received"]["status"], 500);
}

#[tokio::test]
async fn a_receiver_that_reserializes_before_verifying_refuses_valid_events() {
    let (run, _) = check_flawed(Flaw::Reserializes, &[]).await;
    assert_eq!(run.verdict("valid_event"), fail("error"));
    assert_eq!(run.verdict("burst"), fail("error"));
    assert_eq!(run.finding("valid_event")["received"]["status"], 401);
    // It refuses forgeries all the same.
    for check in UNAUTHENTIC {
        assert_eq!(run.verdict(check), pass(), "{check}");
    }
}

#[tokio::test]
async fn a_slow_receiver_fails_the_timeout() {
    let only = [
        "--timeout",
        "1s",
        "--only",
        "valid_event,forged_signature,burst",
    ];
    let (run, _) = check_flawed(Flaw::Slow, &only).await;
    assert_eq!(run.verdict("valid_event"), fail("error"));
    assert_eq!(run.verdict("burst"), fail("error"));
    assert_eq!(run.verdict("forged_signature"), pass());
    let finding = run.finding("valid_event");
    assert_eq!(finding["received"]["status"], Value::Null);
    assert_eq!(finding["summary"], "no answer within 1 s");
}

#[tokio::test]
async fn a_receiver_that_ignores_the_timestamp_fails_critically_on_both_sides() {
    let (run, _) = check_flawed(Flaw::IgnoresTimestamp, &[]).await;
    assert_eq!(run.verdict("timestamp_too_old"), fail("critical"));
    assert_eq!(run.verdict("timestamp_in_future"), fail("critical"));
    for check in [
        "valid_event",
        "forged_signature",
        "wrong_secret",
        "duplicate_event",
    ] {
        assert_eq!(run.verdict(check), pass(), "{check}");
    }
}

#[tokio::test]
async fn redirects_are_reported_and_never_followed() {
    let (run, redirected) = check_flawed(Flaw::Redirects, &[]).await;
    assert_eq!(run.verdict("valid_event"), fail("error"));
    assert_eq!(run.verdict("forged_signature"), fail("error"));
    let finding = run.finding("valid_event");
    assert_eq!(finding["received"]["status"], 307);
    assert_eq!(finding["received"]["location"], "/elsewhere");
    assert!(
        finding["summary"]
            .as_str()
            .unwrap()
            .contains("not followed")
    );
    assert_eq!(
        redirected.load(Ordering::SeqCst),
        0,
        "a redirect was followed"
    );
}

#[tokio::test]
async fn usage_errors_exit_2_before_anything_is_sent() {
    let (url, _) = flawed(Flaw::AcceptsEverything).await;
    let run = kxp_check(&["--url", &url, "--secret", SECRET, "--only", "valid-event"]).await;
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("valid_event"), "{}", run.stderr);

    // `.invalid` never resolves (RFC 6761): even a lookup, were one made, could reach nothing.
    let run = kxp_check(&["--url", "http://shop.invalid/webhooks", "--secret", SECRET]).await;
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("refusing plain http:// to shop.invalid"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("--allow-http"), "{}", run.stderr);

    let run = kxp_check(&["--url", &url]).await;
    assert_eq!(run.code, 2, "no secret: {}", run.stderr);
    for bad in [
        ["--burst", "0"],
        ["--timeout", "soon"],
        ["--body-limit", "12"],
    ] {
        let run =
            kxp_check(&[&["--url", url.as_str(), "--secret", SECRET][..], &bad[..]].concat()).await;
        assert_eq!(run.code, 2, "{bad:?}: {}", run.stderr);
    }
    let run = kxp_check(&[
        "--url", &url, "--secret", SECRET, "--only", "burst", "--skip", "burst",
    ])
    .await;
    assert_eq!(run.code, 2, "{}", run.stderr);
}
