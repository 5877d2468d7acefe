//! `kxp send`: one event, built and signed the way `kxp serve` delivers it, POSTed to an endpoint
//! so a merchant can point it at their dev receiver and see what it answers. `--repeat N` sends
//! the same event (same id, same bytes) N times, to exercise the receiver's dedup.
//!
//! It is a test tool, not the delivery service: it never retries on its own, has no address guard
//! (reaching `localhost` is its purpose), and reports a redirect instead of following it, since a
//! webhook endpoint that redirects is usually misconfigured.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use kxp_verify::{Event, Signer};
use reqwest::header::{CONTENT_TYPE, LOCATION, USER_AGENT};
use reqwest::{Client, StatusCode, Url};
use serde_json::value::RawValue;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use uuid::Uuid;

use crate::debug::{Secrets, usage_error};

/// `User-Agent` of every request: receivers may log it to tell test sends from their own traffic.
const USER_AGENT_VALUE: &str = concat!("kxp-webhooks/", env!("CARGO_PKG_VERSION"));

/// How much of a response body is shown. It is also all that is kept in memory, however much the
/// endpoint sends.
const SHOWN_BODY_BYTES: usize = 2000;

#[derive(Args)]
pub(crate) struct SendArgs {
    /// The endpoint to POST to (http or https).
    #[arg(long, value_name = "URL", value_parser = parse_url)]
    url: Url,
    #[command(flatten)]
    secrets: Secrets,
    /// The event type.
    #[arg(
        long = "type",
        value_name = "T",
        default_value = "payment.succeeded",
        value_parser = parse_token
    )]
    event_type: String,
    /// The schema version `data` follows.
    #[arg(long, value_name = "V", default_value = "2026-11-01", value_parser = parse_token)]
    api_version: String,
    /// The event's `data`: any JSON value, sent byte for byte.
    #[arg(
        long,
        value_name = "JSON",
        default_value = "{}",
        value_parser = parse_json,
        conflicts_with = "data_file"
    )]
    data: Box<RawValue>,
    /// Read the event's `data` from a JSON file instead; `-` reads standard input.
    #[arg(long, value_name = "F")]
    data_file: Option<PathBuf>,
    /// How many times to send the event in all: the same id and bytes each time (the signature
    /// timestamp is fresh), with X-Kxp-Attempt 1..N, to test the receiver's dedup.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    repeat: u32,
    /// Seconds to wait for each send (connecting, answer and body); fractions allowed.
    #[arg(long, value_name = "SECS", default_value = "10", value_parser = parse_timeout)]
    timeout: Duration,
    /// Print one JSON object per send instead of the human lines: attempt, delivery_id,
    /// event_id, status, duration_ms, body, body_cut_bytes, location, error.
    #[arg(long)]
    json: bool,
    /// Print the headers of each request (signature included; never the secret) and of each
    /// response to standard error.
    #[arg(long, short)]
    verbose: bool,
}

/// The event, serialized once: every send carries exactly these bytes.
struct Prepared {
    id: String,
    event_type: String,
    body: Vec<u8>,
}

/// What one POST came to.
enum Outcome {
    /// The endpoint answered, with any status.
    Answered {
        status: StatusCode,
        /// The `Location` of a 3xx, which is reported, not followed.
        location: Option<String>,
        body: Snippet,
    },
    /// No answer: refused connection, DNS or TLS failure, timeout, broken body.
    Failed { error: String },
}

/// One send and its outcome.
struct Sent {
    attempt: u32,
    delivery_id: Uuid,
    duration: Duration,
    outcome: Outcome,
}

/// The start of a response body, and how many bytes were left out.
struct Snippet {
    text: String,
    cut_bytes: u64,
}

pub(crate) fn send(args: SendArgs) -> ExitCode {
    let signer = Signer::with_secrets(args.secrets.load()).unwrap_or_else(|e| usage_error(e));
    let data = match &args.data_file {
        Some(path) => read_data(path),
        None => args.data,
    };
    let event = match prepare(args.event_type, args.api_version, data) {
        Ok(event) => event,
        Err(e) => {
            eprintln!("error: cannot build the event: {e}");
            return ExitCode::from(1);
        }
    };
    let client = match client(args.timeout) {
        Ok(client) => client,
        Err(e) => {
            eprintln!("error: cannot set up the HTTP client: {}", root_cause(&e));
            return ExitCode::from(1);
        }
    };
    let runtime = match crate::debug::small_runtime() {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    if args.verbose {
        eprintln!("* event {}: {} bytes", event.id, event.body.len());
        eprintln!("* {}", String::from_utf8_lossy(&event.body));
    }

    let mut succeeded = 0u32;
    for attempt in 1..=args.repeat {
        let sent = runtime.block_on(send_once(
            &client,
            &signer,
            &event,
            &args.url,
            attempt,
            args.timeout,
            args.verbose,
        ));
        if sent.succeeded() {
            succeeded = succeeded.saturating_add(1);
        }
        if args.json {
            println!("{}", sent.to_json(&event.id));
        } else {
            sent.print();
        }
    }

    if !args.json {
        println!(
            "event {} ({}): {succeeded} of {} sends got a 2xx answer",
            event.id, event.event_type, args.repeat
        );
    }
    if succeeded == args.repeat {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Builds and serializes the envelope: a fresh UUIDv4, created now.
fn prepare(
    event_type: String,
    api_version: String,
    data: Box<RawValue>,
) -> Result<Prepared, String> {
    let now = OffsetDateTime::now_utc();
    // Whole seconds, as in the documented envelope: `2026-11-30T01:02:03Z`.
    let now = now.replace_nanosecond(0).unwrap_or(now);
    let created_at = now.format(&Rfc3339).map_err(|e| e.to_string())?;
    let id = Uuid::new_v4().to_string();
    let event = Event::new(
        id.clone(),
        event_type.clone(),
        api_version,
        created_at,
        data,
    );
    let body = serde_json::to_vec(&event).map_err(|e| e.to_string())?;
    Ok(Prepared {
        id,
        event_type,
        body,
    })
}

fn client(timeout: Duration) -> reqwest::Result<Client> {
    Client::builder()
        .timeout(timeout)
        .redirect(reqwest::redirect::Policy::none())
        .build()
}

async fn send_once(
    client: &Client,
    signer: &Signer,
    event: &Prepared,
    url: &Url,
    attempt: u32,
    timeout: Duration,
    verbose: bool,
) -> Sent {
    let delivery_id = Uuid::new_v4();
    let signature = signer.sign_now(&event.body).to_string();
    let request = client
        .post(url.clone())
        .header(CONTENT_TYPE, "application/json")
        .header(USER_AGENT, USER_AGENT_VALUE)
        .header("X-Kxp-Signature", signature)
        .header("X-Kxp-Event-Id", &event.id)
        .header("X-Kxp-Event-Type", &event.event_type)
        .header("X-Kxp-Delivery-Id", delivery_id.to_string())
        .header("X-Kxp-Attempt", attempt.to_string())
        .body(event.body.clone())
        .build();

    let started = Instant::now();
    let outcome = match request {
        Ok(request) => {
            if verbose {
                eprintln!("> POST {url} (attempt {attempt})");
                for (name, value) in request.headers() {
                    eprintln!("> {name}: {}", String::from_utf8_lossy(value.as_bytes()));
                }
            }
            match exchange(client, request, verbose).await {
                Ok(outcome) => outcome,
                Err(e) => Outcome::Failed {
                    error: describe(e, url, timeout),
                },
            }
        }
        Err(e) => Outcome::Failed {
            error: describe(e, url, timeout),
        },
    };
    Sent {
        attempt,
        delivery_id,
        duration: started.elapsed(),
        outcome,
    }
}

/// Sends the request and reads the answer, keeping only the first [`SHOWN_BODY_BYTES`] of it.
async fn exchange(
    client: &Client,
    request: reqwest::Request,
    verbose: bool,
) -> reqwest::Result<Outcome> {
    let mut response = client.execute(request).await?;
    let status = response.status();
    if verbose {
        eprintln!("< {}", status_text(status));
        for (name, value) in response.headers() {
            eprintln!("< {name}: {}", String::from_utf8_lossy(value.as_bytes()));
        }
    }
    let location = if status.is_redirection() {
        response
            .headers()
            .get(LOCATION)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
    } else {
        None
    };
    let mut kept = Vec::new();
    let mut total = 0u64;
    while let Some(chunk) = response.chunk().await? {
        total = total.saturating_add(chunk.len() as u64);
        let room = SHOWN_BODY_BYTES.saturating_sub(kept.len());
        kept.extend(chunk.iter().take(room));
    }
    Ok(Outcome::Answered {
        status,
        location,
        body: Snippet::new(kept, total),
    })
}

impl Sent {
    fn succeeded(&self) -> bool {
        matches!(&self.outcome, Outcome::Answered { status, .. } if status.is_success())
    }

    /// The human line: answers on standard output, failures on standard error.
    fn print(&self) {
        let ms = self.duration.as_millis();
        match &self.outcome {
            Outcome::Answered {
                status,
                location,
                body,
            } => {
                let mut line = format!("#{} {} in {ms} ms", self.attempt, status_text(*status));
                if let Some(location) = location {
                    line.push_str(&format!(" (redirect to {location}: not followed)"));
                }
                let text = one_line(body.text.trim_end());
                if !text.is_empty() {
                    line.push_str(": ");
                    line.push_str(&text);
                }
                if body.cut_bytes > 0 {
                    line.push_str(&format!(" … [{} more bytes]", body.cut_bytes));
                }
                println!("{line}");
            }
            Outcome::Failed { error } => {
                eprintln!("#{} failed after {ms} ms: {error}", self.attempt);
            }
        }
    }

    fn to_json(&self, event_id: &str) -> serde_json::Value {
        let (status, location, body, cut_bytes, error) = match &self.outcome {
            Outcome::Answered {
                status,
                location,
                body,
            } => (
                Some(status.as_u16()),
                location.as_deref(),
                Some(body.text.as_str()),
                body.cut_bytes,
                None,
            ),
            Outcome::Failed { error } => (None, None, None, 0, Some(error.as_str())),
        };
        serde_json::json!({
            "attempt": self.attempt,
            "delivery_id": self.delivery_id.to_string(),
            "event_id": event_id,
            "status": status,
            "duration_ms": u64::try_from(self.duration.as_millis()).unwrap_or(u64::MAX),
            "body": body,
            "body_cut_bytes": cut_bytes,
            "location": location,
            "error": error,
        })
    }
}

impl Snippet {
    /// `kept` is the start of a `total`-byte body, at most [`SHOWN_BODY_BYTES`] long.
    fn new(mut kept: Vec<u8>, total: u64) -> Snippet {
        // Don't show half a character where the cut falls inside one.
        if let Err(e) = std::str::from_utf8(&kept)
            && e.error_len().is_none()
            && (kept.len() as u64) < total
        {
            kept.truncate(e.valid_up_to());
        }
        Snippet {
            cut_bytes: total.saturating_sub(kept.len() as u64),
            text: String::from_utf8_lossy(&kept).into_owned(),
        }
    }
}

/// `200 OK`, or just the number for a code without a standard reason.
fn status_text(status: StatusCode) -> String {
    match status.canonical_reason() {
        Some(reason) => format!("{} {reason}", status.as_u16()),
        None => status.as_u16().to_string(),
    }
}

/// Escapes line breaks and other control characters, so that a body stays on its line.
fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// Says what went wrong without quoting the URL, which may carry credentials of its own.
fn describe(error: reqwest::Error, url: &Url, timeout: Duration) -> String {
    let error = error.without_url();
    if error.is_timeout() {
        format!("no answer within {} s (--timeout)", timeout.as_secs_f64())
    } else if error.is_connect() {
        let host = url.host_str().unwrap_or("?");
        let port = url
            .port_or_known_default()
            .map_or_else(String::new, |p| format!(":{p}"));
        format!("cannot connect to {host}{port}: {}", root_cause(&error))
    } else if error.is_body() || error.is_decode() {
        format!("reading the answer failed: {}", root_cause(&error))
    } else {
        format!("request failed: {}", root_cause(&error))
    }
}

/// The innermost error, which names the actual problem ("Connection refused (os error 111)");
/// the outer layers only say which library noticed it.
fn root_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut error = error;
    while let Some(source) = error.source() {
        error = source;
    }
    error.to_string()
}

fn read_data(path: &Path) -> Box<RawValue> {
    let read = if path.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text).map(|_| text)
    } else {
        std::fs::read_to_string(path)
    };
    let text = read.unwrap_or_else(|e| {
        usage_error(format!("cannot read --data-file {}: {e}", path.display()))
    });
    serde_json::from_str(&text).unwrap_or_else(|e| {
        usage_error(format!(
            "--data-file {} is not valid JSON: {e}",
            path.display()
        ))
    })
}

fn parse_json(text: &str) -> Result<Box<RawValue>, String> {
    serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))
}

pub(crate) fn parse_url(text: &str) -> Result<Url, String> {
    let url = Url::parse(text).map_err(|e| e.to_string())?;
    match url.scheme() {
        "http" | "https" => Ok(url),
        other => Err(format!("the scheme must be http or https, not {other}")),
    }
}

/// Event types and versions travel in headers too, so they are kept to printable ASCII.
fn parse_token(text: &str) -> Result<String, String> {
    if !text.is_empty() && text.len() <= 255 && text.bytes().all(|b| b.is_ascii_graphic()) {
        Ok(text.to_owned())
    } else {
        Err("expected 1 to 255 printable ASCII characters, no spaces".to_owned())
    }
}

pub(crate) fn parse_timeout(text: &str) -> Result<Duration, String> {
    text.parse::<f64>()
        .ok()
        .filter(|secs| *secs > 0.0)
        .and_then(|secs| Duration::try_from_secs_f64(secs).ok())
        .ok_or_else(|| "expected a positive number of seconds, such as 10 or 0.5".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snippets_count_what_they_cut_and_never_split_a_character() {
        let short = Snippet::new(b"{}".to_vec(), 2);
        assert_eq!((short.text.as_str(), short.cut_bytes), ("{}", 0));

        // "é" is 2 bytes; keeping 3 of "éé…" would end inside the second one.
        let cut = Snippet::new("é".as_bytes().iter().chain(&[0xC3]).copied().collect(), 10);
        assert_eq!((cut.text.as_str(), cut.cut_bytes), ("é", 8));

        // Invalid bytes that are not a cut character are shown, replaced.
        let binary = Snippet::new(vec![0xFF, b'a'], 2);
        assert_eq!((binary.text.as_str(), binary.cut_bytes), ("\u{FFFD}a", 0));
    }

    #[test]
    fn bodies_stay_on_one_line() {
        assert_eq!(one_line("{\n  \"a\": 1\r\n}\t"), "{\\n  \"a\": 1\\r\\n}\\t");
    }

    #[test]
    fn timeouts_are_positive_seconds() {
        assert_eq!(parse_timeout("10"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_timeout("0.25"), Ok(Duration::from_millis(250)));
        for bad in ["0", "-1", "NaN", "inf", "1e30", "ten", ""] {
            assert!(parse_timeout(bad).is_err(), "{bad}");
        }
    }
}
