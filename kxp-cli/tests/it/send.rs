//! `kxp send` against a real receiver on 127.0.0.1: the envelope, every header, the signature,
//! `--repeat`, the exit codes, and that the secret never reaches the output.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use kxp_verify::{Secret, Verifier};
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// Shaped like a real one: 64 hex digits, used as its own bytes.
const SECRET: &str = "41ab92590637ac82026ca65266b2898428ea491b1e6d543d7202cf486ea62965";
const OLD_SECRET: &str = "0b9c1e2f7d6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b0c";

/// One request as the receiver saw it.
#[derive(Clone, Debug)]
struct Received {
    method: String,
    path: String,
    /// Lowercase names, in the order sent.
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    /// Which configured secret verified the signature (0 = [`SECRET`], 1 = [`OLD_SECRET`]).
    verified_with: Result<usize, String>,
}

impl Received {
    fn header(&self, name: &str) -> &str {
        let mut values = self.headers.iter().filter(|(n, _)| n == name);
        let (_, value) = values.next().unwrap_or_else(|| panic!("no {name} header"));
        assert!(values.next().is_none(), "{name} sent twice");
        value
    }

    fn envelope(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

/// A minimal HTTP/1.1 endpoint: one request per connection, answered by `answer(n)` for the
/// n-th request (0-based) after checking its signature as a kxp receiver would.
struct Receiver {
    url: String,
    received: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    fn start(answer: impl Fn(usize) -> (u16, String) + Send + 'static) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/webhooks/kxp", listener.local_addr().unwrap());
        let received = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&received);
        std::thread::spawn(move || {
            let verifier = Verifier::with_secrets([
                Secret::new(SECRET).unwrap(),
                Secret::new(OLD_SECRET).unwrap(),
            ])
            .unwrap();
            for stream in listener.incoming() {
                let mut stream = stream.unwrap();
                let Some(request) = read_request(&mut stream, &verifier) else {
                    continue;
                };
                let n = {
                    let mut log = log.lock().unwrap();
                    log.push(request);
                    log.len() - 1
                };
                let (status, body) = answer(n);
                let location = if (300..400).contains(&status) {
                    "Location: https://example.test/moved\r\n"
                } else {
                    ""
                };
                let response = format!(
                    "HTTP/1.1 {status} Whatever\r\nContent-Type: application/json\r\n\
                     {location}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes());
            }
        });
        Receiver { url, received }
    }

    /// Answers 200 `{"outcome":"processed"}`, as a receiver that accepted the event.
    fn ok() -> Receiver {
        Receiver::start(|_| (200, r#"{"outcome":"processed"}"#.to_owned()))
    }

    fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

fn read_request(stream: &mut TcpStream, verifier: &Verifier) -> Option<Received> {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next()?.to_owned(), parts.next()?.to_owned());
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let line = line.trim_end_matches(['\r', '\n']);
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':').unwrap();
        headers.push((name.to_ascii_lowercase(), value.trim().to_owned()));
    }
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .map_or(0, |(_, v)| v.parse().unwrap());
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    let signature = headers
        .iter()
        .find(|(n, _)| n == "x-kxp-signature")
        .map_or("", |(_, v)| v.as_str());
    let verified_with = verifier
        .verify_now(signature, &body)
        .map(|v| v.secret_index())
        .map_err(|e| e.to_string());
    Some(Received {
        method,
        path,
        headers,
        body,
        verified_with,
    })
}

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    /// The `--json` lines.
    fn sends(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }
}

/// Runs `kxp send` with `args`, without inheriting secrets or proxies from the environment, and
/// checks on every run that no secret reaches the output.
fn kxp_send(args: &[&str], env_secret: Option<&str>, stdin: &[u8]) -> Run {
    let mut command = Command::new(env!("CARGO_BIN_EXE_kxp"));
    command.arg("send").args(args);
    for var in [
        "KXP_WEBHOOK_SECRET",
        "HTTP_PROXY",
        "http_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
    ] {
        command.env_remove(var);
    }
    if let Some(secret) = env_secret {
        command.env("KXP_WEBHOOK_SECRET", secret);
    }
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A run that fails on its arguments may exit before reading its input: a broken pipe here
    // is that, not a failure.
    let _ = child.stdin.take().unwrap().write_all(stdin);
    let out = child.wait_with_output().unwrap();
    let run = Run {
        code: out.status.code(),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    };
    for secret in [SECRET, OLD_SECRET] {
        assert!(!run.stdout.contains(secret), "secret in stdout {args:?}");
        assert!(!run.stderr.contains(secret), "secret in stderr {args:?}");
    }
    run
}

fn is_uuid_v4(text: &str) -> bool {
    uuid::Uuid::parse_str(text).is_ok_and(|id| id.get_version_num() == 4)
        && text.len() == 36
        && text == text.to_ascii_lowercase()
}

#[test]
fn sends_a_signed_envelope_with_every_documented_header() {
    let receiver = Receiver::ok();
    let before = OffsetDateTime::now_utc().unix_timestamp();
    let run = kxp_send(
        &[
            "--url",
            &receiver.url,
            "--secret",
            SECRET,
            "--type",
            "refund.created",
            "--data",
            r#"{"amount":1999,"currency":"eur","big":12345678901234567890,"nested":{"z":1,"a":[true,null]}}"#,
        ],
        None,
        b"",
    );
    let after = OffsetDateTime::now_utc().unix_timestamp();
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(run.stderr.is_empty(), "{}", run.stderr);

    let [request] = receiver.received().try_into().unwrap();
    assert_eq!(
        (request.method.as_str(), request.path.as_str()),
        ("POST", "/webhooks/kxp")
    );
    assert_eq!(request.verified_with, Ok(0));

    let envelope = request.envelope();
    let id = envelope["id"].as_str().unwrap();
    assert!(is_uuid_v4(id), "{id}");
    assert_eq!(envelope["type"], "refund.created");
    assert_eq!(envelope["api_version"], "2026-11-01");
    let created_at = envelope["created_at"].as_str().unwrap();
    assert!(created_at.ends_with('Z'), "UTC: {created_at}");
    let created_at = OffsetDateTime::parse(created_at, &Rfc3339).unwrap();
    assert!((before..=after).contains(&created_at.unix_timestamp()));
    let mut fields: Vec<&String> = envelope.as_object().unwrap().keys().collect();
    fields.sort_unstable();
    assert_eq!(fields, ["api_version", "created_at", "data", "id", "type"]);
    // `data` goes out byte for byte: key order and big numbers survive.
    let body = String::from_utf8(request.body.clone()).unwrap();
    assert!(
        body.contains(r#""data":{"amount":1999,"currency":"eur","big":12345678901234567890,"nested":{"z":1,"a":[true,null]}}"#),
        "{body}"
    );

    assert_eq!(request.header("x-kxp-event-id"), id);
    assert_eq!(request.header("x-kxp-event-type"), "refund.created");
    assert!(is_uuid_v4(request.header("x-kxp-delivery-id")));
    assert_ne!(request.header("x-kxp-delivery-id"), id);
    assert_eq!(request.header("x-kxp-attempt"), "1");
    assert_eq!(request.header("content-type"), "application/json");
    assert_eq!(
        request.header("user-agent"),
        concat!("kxp-webhooks/", env!("CARGO_PKG_VERSION"))
    );
    let signature = request.header("x-kxp-signature");
    assert_eq!(signature.matches("v1=").count(), 1, "{signature}");

    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{}", run.stdout);
    assert!(lines[0].starts_with("#1 200 OK in "), "{}", lines[0]);
    assert!(
        lines[0].ends_with(r#" ms: {"outcome":"processed"}"#),
        "{}",
        lines[0]
    );
    assert!(lines[1].contains(id), "{}", lines[1]);
    assert!(lines[1].contains("1 of 1"), "{}", lines[1]);
    // The signature is for --verbose only.
    assert!(!run.stdout.contains("v1="));
}

#[test]
fn defaults_are_an_empty_payment_succeeded_event() {
    let receiver = Receiver::ok();
    let run = kxp_send(&["--url", &receiver.url, "--secret", SECRET], None, b"");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let [request] = receiver.received().try_into().unwrap();
    let envelope = request.envelope();
    assert_eq!(envelope["type"], "payment.succeeded");
    assert_eq!(request.header("x-kxp-event-type"), "payment.succeeded");
    assert_eq!(envelope["api_version"], "2026-11-01");
    assert_eq!(envelope["data"], json!({}));
}

#[test]
fn repeat_resends_the_same_bytes_and_event_id_with_rising_attempts() {
    let receiver = Receiver::start(|n| {
        let outcome = if n == 0 { "processed" } else { "duplicate" };
        (200, format!(r#"{{"outcome":"{outcome}"}}"#))
    });
    let run = kxp_send(
        &[
            "--url",
            &receiver.url,
            "--secret",
            SECRET,
            "--repeat",
            "3",
            "--json",
        ],
        None,
        b"",
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(run.stderr.is_empty(), "{}", run.stderr);

    let received = receiver.received();
    assert_eq!(received.len(), 3);
    let id = received[0].envelope()["id"].as_str().unwrap().to_owned();
    for (i, request) in received.iter().enumerate() {
        assert_eq!(request.body, received[0].body, "same bytes every time");
        assert_eq!(request.header("x-kxp-event-id"), id);
        assert_eq!(request.header("x-kxp-attempt"), (i + 1).to_string());
        assert_eq!(request.verified_with, Ok(0));
    }
    let mut delivery_ids: Vec<&str> = received
        .iter()
        .map(|r| r.header("x-kxp-delivery-id"))
        .collect();
    delivery_ids.sort_unstable();
    delivery_ids.dedup();
    assert_eq!(delivery_ids.len(), 3, "a fresh delivery id per send");

    let sends = run.sends();
    assert_eq!(sends.len(), 3, "one JSON object per send, nothing else");
    for (i, send) in sends.iter().enumerate() {
        assert_eq!(send["attempt"], i + 1);
        assert_eq!(send["event_id"], id.as_str());
        assert_eq!(send["delivery_id"], received[i].header("x-kxp-delivery-id"));
        assert_eq!(send["status"], 200);
        assert!(send["duration_ms"].is_u64());
        assert_eq!(send["body_cut_bytes"], 0);
        assert_eq!(send["error"], Value::Null);
    }
    assert_eq!(sends[0]["body"], r#"{"outcome":"processed"}"#);
    assert_eq!(sends[2]["body"], r#"{"outcome":"duplicate"}"#);
}

#[test]
fn data_comes_from_a_file_or_stdin_and_api_version_can_be_pinned() {
    let data = "{\n  \"amount\": 500,\n  \"customer\": \"cus_1\"\n}\n";
    let path = std::env::temp_dir().join(format!("kxp-send-data-{}.json", std::process::id()));
    std::fs::write(&path, data).unwrap();
    for (source, stdin) in [(path.to_str().unwrap(), &b""[..]), ("-", data.as_bytes())] {
        let receiver = Receiver::ok();
        let run = kxp_send(
            &[
                "--url",
                &receiver.url,
                "--secret",
                SECRET,
                "--api-version",
                "2025-06-01",
                "--data-file",
                source,
            ],
            None,
            stdin,
        );
        assert_eq!(run.code, Some(0), "{source}: {}", run.stderr);
        let [request] = receiver.received().try_into().unwrap();
        let envelope = request.envelope();
        assert_eq!(envelope["api_version"], "2025-06-01");
        assert_eq!(
            envelope["data"],
            json!({"amount": 500, "customer": "cus_1"})
        );
        assert_eq!(request.verified_with, Ok(0));
    }
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn secrets_from_the_environment_sign_once_each_in_order() {
    let receiver = Receiver::ok();
    let list = format!("{SECRET}, {OLD_SECRET}");
    let run = kxp_send(&["--url", &receiver.url], Some(&list), b"");
    assert_eq!(run.code, Some(0), "{}", run.stderr);

    // --secret wins over the environment, one v1 per flag, in order.
    let run = kxp_send(
        &[
            "--url",
            &receiver.url,
            "--secret",
            OLD_SECRET,
            "--secret",
            SECRET,
        ],
        Some("ignored"),
        b"",
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);

    let received = receiver.received();
    for (request, first) in received.iter().zip([SECRET, OLD_SECRET]) {
        let signature = request.header("x-kxp-signature");
        let v1s: Vec<&str> = signature
            .split(',')
            .filter(|i| i.starts_with("v1="))
            .collect();
        assert_eq!(v1s.len(), 2, "{signature}");
        // Each secret alone verifies it, and the first v1 is the first secret's.
        for secret in [SECRET, OLD_SECRET] {
            let verifier = Verifier::new(Secret::new(secret).unwrap());
            assert!(verifier.verify_now(signature, &request.body).is_ok());
        }
        let t = signature.split(',').next().unwrap().to_owned();
        let first_only = Verifier::new(Secret::new(first).unwrap());
        assert!(
            first_only
                .verify_now(&format!("{t},{}", v1s[0]), &request.body)
                .is_ok()
        );
    }
}

#[test]
fn a_non_2xx_answer_exits_1_after_every_send() {
    let receiver = Receiver::start(|n| match n {
        1 => (500, r#"{"error":"handler failed"}"#.to_owned()),
        _ => (200, r#"{"outcome":"processed"}"#.to_owned()),
    });
    let run = kxp_send(
        &["--url", &receiver.url, "--secret", SECRET, "--repeat", "3"],
        None,
        b"",
    );
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert_eq!(
        receiver.received().len(),
        3,
        "a failure does not stop the repeats"
    );
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert!(lines[0].starts_with("#1 200 OK in "), "{}", run.stdout);
    assert!(
        lines[1].starts_with("#2 500 Internal Server Error in "),
        "{}",
        run.stdout
    );
    assert!(
        lines[1].ends_with(r#": {"error":"handler failed"}"#),
        "{}",
        run.stdout
    );
    assert!(lines[2].starts_with("#3 200 OK in "), "{}", run.stdout);
    assert!(lines[3].contains("2 of 3"), "{}", run.stdout);

    let receiver = Receiver::start(|_| (401, r#"{"error":"signature_mismatch"}"#.to_owned()));
    let run = kxp_send(
        &["--url", &receiver.url, "--secret", SECRET, "--json"],
        None,
        b"",
    );
    assert_eq!(run.code, Some(1));
    let [send] = run.sends().try_into().unwrap();
    assert_eq!(send["status"], 401);
    assert_eq!(send["body"], r#"{"error":"signature_mismatch"}"#);
}

#[test]
fn redirects_are_reported_not_followed() {
    let receiver = Receiver::start(|_| (308, String::new()));
    let run = kxp_send(&["--url", &receiver.url, "--secret", SECRET], None, b"");
    assert_eq!(run.code, Some(1), "a 3xx is not a 2xx");
    assert_eq!(receiver.received().len(), 1);
    let line = run.stdout.lines().next().unwrap();
    assert!(line.starts_with("#1 308 Permanent Redirect in "), "{line}");
    assert!(
        line.ends_with(" ms (redirect to https://example.test/moved: not followed)"),
        "{line}"
    );
}

#[test]
fn connection_refused_exits_1_with_a_clear_message() {
    let port = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}/hook");
    let run = kxp_send(
        &["--url", &url, "--secret", SECRET, "--repeat", "2"],
        None,
        b"",
    );
    assert_eq!(run.code, Some(1));
    let failures: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(failures.len(), 2, "{}", run.stderr);
    for (i, line) in failures.iter().enumerate() {
        assert!(
            line.starts_with(&format!("#{} failed after ", i + 1)),
            "{line}"
        );
        assert!(
            line.contains(&format!("cannot connect to 127.0.0.1:{port}: ")),
            "{line}"
        );
        assert!(line.to_lowercase().contains("connection refused"), "{line}");
    }
    assert!(run.stdout.contains("0 of 2"), "{}", run.stdout);

    let run = kxp_send(&["--url", &url, "--secret", SECRET, "--json"], None, b"");
    assert_eq!(run.code, Some(1));
    let [send] = run.sends().try_into().unwrap();
    assert_eq!(send["status"], Value::Null);
    assert!(send["error"].as_str().unwrap().contains("cannot connect"));
}

#[test]
fn a_silent_endpoint_times_out_and_exits_1() {
    // Connections complete in the kernel's backlog, but nothing ever answers.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let run = kxp_send(
        &["--url", &url, "--secret", SECRET, "--timeout", "0.3"],
        None,
        b"",
    );
    assert_eq!(run.code, Some(1));
    assert!(
        run.stderr.starts_with("#1 failed after ") && run.stderr.contains("no answer within 0.3 s"),
        "{}",
        run.stderr
    );
    drop(listener);
}

#[test]
fn long_bodies_are_cut_and_the_cut_is_counted() {
    let receiver = Receiver::start(|_| (200, "x".repeat(5000)));
    let run = kxp_send(&["--url", &receiver.url, "--secret", SECRET], None, b"");
    assert_eq!(run.code, Some(0));
    let line = run.stdout.lines().next().unwrap();
    assert!(
        line.ends_with(&format!(": {} … [3000 more bytes]", "x".repeat(2000))),
        "{line}"
    );

    let run = kxp_send(
        &["--url", &receiver.url, "--secret", SECRET, "--json"],
        None,
        b"",
    );
    let [send] = run.sends().try_into().unwrap();
    assert_eq!(send["body"].as_str().unwrap().len(), 2000);
    assert_eq!(send["body_cut_bytes"], 3000);
}

#[test]
fn verbose_shows_the_request_headers_but_never_the_secret() {
    let receiver = Receiver::ok();
    let run = kxp_send(
        &["--url", &receiver.url, "--secret", SECRET, "--verbose"],
        None,
        b"",
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let [request] = receiver.received().try_into().unwrap();
    for name in [
        "x-kxp-signature",
        "x-kxp-event-id",
        "x-kxp-event-type",
        "x-kxp-delivery-id",
        "x-kxp-attempt",
        "content-type",
        "user-agent",
    ] {
        let line = format!("> {name}: {}", request.header(name));
        assert!(run.stderr.contains(&line), "{line} in {}", run.stderr);
    }
    assert!(run.stderr.contains("< 200 OK"), "{}", run.stderr);
}

#[test]
fn argument_errors_exit_2_and_name_the_problem() {
    let url = "http://127.0.0.1:9/never-reached";
    let cases: [(&[&str], Option<&str>, &str); 10] = [
        (
            &["--url", url, "--secret", SECRET, "--data", r#"{"amount":"#],
            None,
            "--data",
        ),
        (
            &["--url", url, "--secret", SECRET, "--data", "amount=5"],
            None,
            "not valid JSON",
        ),
        (
            &["--url", url, "--secret", SECRET, "--data-file", "-"],
            None,
            "not valid JSON",
        ),
        (
            &[
                "--url",
                url,
                "--secret",
                SECRET,
                "--data-file",
                "/nonexistent/data.json",
            ],
            None,
            "cannot read --data-file",
        ),
        (
            &[
                "--url",
                url,
                "--secret",
                SECRET,
                "--data",
                "{}",
                "--data-file",
                "-",
            ],
            None,
            "cannot be used with",
        ),
        (&["--url", url], None, "KXP_WEBHOOK_SECRET"),
        (&["--url", url], Some(""), "secret"),
        (
            &["--url", "ftp://example.test/", "--secret", SECRET],
            None,
            "http or https",
        ),
        (
            &["--url", url, "--secret", SECRET, "--repeat", "0"],
            None,
            "--repeat",
        ),
        (
            &[
                "--url",
                url,
                "--secret",
                SECRET,
                "--type",
                "payment succeeded",
            ],
            None,
            "--type",
        ),
    ];
    for (args, env_secret, expected) in cases {
        let run = kxp_send(args, env_secret, b"{not json");
        assert_eq!(run.code, Some(2), "{args:?}: {}", run.stderr);
        assert!(run.stderr.starts_with("error:"), "{args:?}: {}", run.stderr);
        assert!(run.stderr.contains(expected), "{args:?}: {}", run.stderr);
        assert!(run.stdout.is_empty(), "{args:?}: {}", run.stdout);
    }
    let run = kxp_send(
        &["--url", url, "--secret", SECRET, "--timeout", "0"],
        None,
        b"",
    );
    assert_eq!(run.code, Some(2), "{}", run.stderr);
}
