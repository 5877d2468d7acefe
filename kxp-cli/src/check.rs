//! `kxp check`: grades a merchant's webhook endpoint, in any language, against the receiver
//! contract and prints the report card. The checks themselves are `kxp-check`'s (the same code
//! the conformance suite runs against this repository's receivers); this module only reads the
//! arguments and prints: an aligned table for people (coloured on a terminal), JSON for CI.
//!
//! Exit codes: 0 when no check failed (warnings and skips are not failures), 1 when one did, 2
//! for a usage error (an unknown check name, a refused URL). Secrets are never printed.

use std::fmt::Write as _;
use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use clap::builder::{PossibleValuesParser, TypedValueParser};
use kxp_check::{Check, Finding, Report, Sent, Severity, Target, TargetError, Verdict};

use crate::debug::usage_error;

/// kxp-check's defaults as `--help` shows them (a test keeps them equal).
const DEFAULT_TIMEOUT: &str = "5s";
const DEFAULT_BODY_LIMIT: &str = "1MiB";

#[derive(Args)]
pub(crate) struct CheckArgs {
    /// The endpoint to check: https, or http on 127.0.0.0/8, ::1 and localhost.
    #[arg(long, value_name = "URL")]
    url: String,
    /// A secret the endpoint is configured with; repeat during a rotation, newest first (two
    /// secrets add the rotation check). Defaults to the comma-separated list in
    /// KXP_WEBHOOK_SECRET.
    #[arg(
        long = "secret",
        value_name = "S",
        env = "KXP_WEBHOOK_SECRET",
        hide_env_values = true,
        value_delimiter = ',',
        required = true
    )]
    secrets: Vec<String>,
    /// How long each request may take, answer included: `5s`, `500ms`, or seconds (`1.5`).
    #[arg(long, value_name = "TIME", default_value = DEFAULT_TIMEOUT, value_parser = parse_duration)]
    timeout: Duration,
    /// The body limit the endpoint should enforce: bytes, or with a `KiB` or `MiB` suffix.
    #[arg(long, value_name = "SIZE", default_value = DEFAULT_BODY_LIMIT, value_parser = parse_size)]
    body_limit: usize,
    /// Also check the endpoint challenge (`GET ?challenge=<token>` echoes the token).
    #[arg(long)]
    challenge: bool,
    /// How many distinct events the burst check sends, a few at a time.
    #[arg(long, value_name = "N", default_value_t = kxp_check::DEFAULT_BURST)]
    burst: usize,
    /// The `type` of every event sent; keep a `kxp.test.` prefix to tell test events apart.
    #[arg(long = "type", value_name = "T", default_value = kxp_check::DEFAULT_EVENT_TYPE)]
    event_type: String,
    /// Run only these checks (comma-separated, or repeat the flag).
    #[arg(long, value_name = "CHECK", value_delimiter = ',', value_parser = check_name())]
    only: Vec<Check>,
    /// Leave these checks out (comma-separated, or repeat the flag).
    #[arg(long, value_name = "CHECK", value_delimiter = ',', value_parser = check_name())]
    skip: Vec<Check>,
    /// Allow plain http:// to a host that is not loopback (signed requests in clear text).
    #[arg(long)]
    allow_http: bool,
    /// Print the report as one JSON object instead of the table.
    #[arg(long)]
    json: bool,
}

pub(crate) fn check(args: CheckArgs) -> ExitCode {
    let target = args
        .secrets
        .iter()
        .fold(Target::builder(&args.url), |target, secret| {
            target.secret(secret.trim())
        })
        .timeout(args.timeout)
        .body_limit(args.body_limit)
        .challenge(args.challenge)
        .burst(args.burst)
        .event_type(args.event_type)
        .allow_http(args.allow_http)
        .build()
        .unwrap_or_else(|e| match e {
            TargetError::PlainHttpOffLoopback { .. } => {
                usage_error(format!("{e}; --allow-http sends it anyway"))
            }
            e => usage_error(e),
        });
    let checks: Vec<Check> = Check::ALL
        .into_iter()
        .filter(|c| args.only.is_empty() || args.only.contains(c))
        .filter(|c| !args.skip.contains(c))
        .collect();
    if checks.is_empty() {
        usage_error("--only and --skip leave no check to run");
    }

    let runtime = match crate::debug::small_runtime() {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    let report = runtime.block_on(kxp_check::run(&target, &checks));

    if args.json {
        match serde_json::to_string_pretty(&report) {
            Ok(json) => println!("{json}"),
            Err(e) => {
                eprintln!("error: cannot write the report as JSON: {e}");
                return ExitCode::from(1);
            }
        }
    } else {
        let paint = Paint {
            on: std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
        };
        print!("{}", card(&report, paint));
    }
    if report.passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// The RESULT column's width: `FAIL critical`.
const RESULT_WIDTH: usize = 13;

/// ANSI colours, or none (not a terminal, or `NO_COLOR` set).
#[derive(Clone, Copy)]
struct Paint {
    on: bool,
}

impl Paint {
    /// `text` in the colour of `verdict`, padded to `width` first so columns stay aligned.
    fn verdict(self, verdict: Verdict, width: usize) -> String {
        let text = format!("{:width$}", verdict_text(verdict));
        let code = match verdict {
            Verdict::Pass => "32",
            Verdict::Warn => "33",
            Verdict::Fail(Severity::Critical) => "1;31",
            Verdict::Fail(_) => "31",
            Verdict::Skip => "2",
        };
        if self.on {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text
        }
    }
}

/// `pass`, `warn`, `FAIL critical`, `FAIL error`, `skip`.
fn verdict_text(verdict: Verdict) -> String {
    match verdict {
        Verdict::Fail(Severity::Critical) => "FAIL critical".to_owned(),
        Verdict::Fail(_) => "FAIL error".to_owned(),
        other => other.as_str().to_owned(),
    }
}

/// The report for people: a header line, the table, a paragraph per warning and failure, the
/// counts.
fn card(report: &Report, paint: Paint) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "kxp check {}: {} checks, {} requests in {:.1} s\n",
        report.url,
        report.findings.len(),
        report.requests,
        report.duration.as_secs_f64()
    );
    let rows: Vec<[String; 3]> = report
        .findings
        .iter()
        .map(|f| [f.check.to_string(), answer(f), time(f)])
        .collect();
    let check_width = rows.iter().map(|r| r[0].len()).max().unwrap_or(0).max(5);
    // A skipped check's reason runs on past the columns rather than widening them.
    let answer_width = report
        .findings
        .iter()
        .zip(&rows)
        .filter(|(f, _)| f.received.is_some())
        .map(|(_, r)| r[1].chars().count())
        .max()
        .unwrap_or(0)
        .max(6);
    let _ = writeln!(
        out,
        "  {:check_width$}  {:RESULT_WIDTH$}  {:answer_width$}  TIME",
        "CHECK", "RESULT", "ANSWER"
    );
    for (finding, [name, answer, time]) in report.findings.iter().zip(&rows) {
        let line = format!(
            "  {name:check_width$}  {}  {answer:answer_width$}  {time}",
            paint.verdict(finding.verdict, RESULT_WIDTH)
        );
        let _ = writeln!(out, "{}", line.trim_end());
    }

    for finding in &report.findings {
        if matches!(finding.verdict, Verdict::Warn | Verdict::Fail(_)) {
            out.push('\n');
            out.push_str(&details(finding, paint));
        }
    }

    let counts = &report.counts;
    let _ = writeln!(
        out,
        "\n{} passed, {} warned, {} failed ({} critical), {} skipped",
        counts.passed, counts.warned, counts.failed, counts.critical, counts.skipped
    );
    out
}

/// The ANSWER column: the status, why nothing came, or why the check did not run.
fn answer(finding: &Finding) -> String {
    let Some(received) = &finding.received else {
        return finding.summary.clone();
    };
    if finding.check == Check::Burst && finding.verdict == Verdict::Pass {
        return finding
            .latency
            .map_or_else(String::new, |l| format!("{} × 2xx", l.count));
    }
    match (received.status, &received.error) {
        (Some(status), _) => status_text(status),
        (None, Some(error)) => cut(error, 48),
        (None, None) => "no answer".to_owned(),
    }
}

/// The TIME column: the latency, or the burst's percentiles.
fn time(finding: &Finding) -> String {
    if let Some(l) = finding.latency {
        return format!("p50 {}, p95 {}, max {}", ms(l.p50), ms(l.p95), ms(l.max));
    }
    finding
        .received
        .as_ref()
        .map_or_else(String::new, |r| ms(r.latency))
}

/// What was sent, what came back, why it matters and where the fix is, for one finding.
fn details(finding: &Finding, paint: Paint) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} {}: {}",
        finding.check,
        paint.verdict(finding.verdict, 0),
        finding.summary
    );
    if let Some(sent) = &finding.sent {
        let _ = writeln!(out, "  sent:  {}", sent_line(sent));
    }
    if let Some(received) = &finding.received {
        let mut line = match (received.status, &received.error) {
            (Some(status), _) => format!("{} in {}", status_text(status), ms(received.latency)),
            (None, error) => format!(
                "{} after {}",
                error.as_deref().unwrap_or("no answer"),
                ms(received.latency)
            ),
        };
        if let Some(location) = &received.location {
            let _ = write!(line, ", Location: {location}");
        }
        if !received.body.is_empty() {
            let _ = write!(line, ": {}", cut(&received.body, 120));
        }
        let _ = writeln!(out, "  got:   {line}");
    }
    let _ = writeln!(out, "  why:   {}", finding.why);
    let _ = writeln!(out, "  fix:   {}", finding.docs);
    out
}

/// `POST event <id> (256 bytes), X-Kxp-Signature: t=…,v1=41ee528e…`, or the body's start when
/// it is not an event, or the challenge's query.
fn sent_line(sent: &Sent) -> String {
    let mut line = sent.method.to_owned();
    if let Some(query) = &sent.query {
        let _ = write!(line, " ?{query}");
    }
    match sent.headers.get("X-Kxp-Event-Id") {
        Some(id) => {
            let _ = write!(line, " event {id} ({} bytes)", sent.body_bytes);
        }
        None if sent.body_bytes > 0 => {
            let _ = write!(line, " {} bytes: {}", sent.body_bytes, cut(&sent.body, 60));
        }
        None => {}
    }
    match sent.headers.get("X-Kxp-Signature") {
        Some(signature) => {
            let _ = write!(line, ", X-Kxp-Signature: {signature}");
        }
        None if sent.method == "POST" => line.push_str(", no X-Kxp-Signature"),
        None => {}
    }
    line
}

/// `200 OK`, or just the number for a code without a standard reason.
fn status_text(status: u16) -> String {
    match http::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
    {
        Some(reason) => format!("{status} {reason}"),
        None => status.to_string(),
    }
}

/// `3.2 ms`.
fn ms(duration: Duration) -> String {
    format!("{:.1} ms", duration.as_secs_f64() * 1000.0)
}

/// At most `chars` characters of `text`, `…` when cut.
fn cut(text: &str, chars: usize) -> String {
    match text.char_indices().nth(chars) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

/// A check by its name; `--help` lists them, and a typo gets a suggestion.
fn check_name() -> impl TypedValueParser<Value = Check> {
    PossibleValuesParser::new(Check::ALL.map(Check::name)).try_map(|name| name.parse::<Check>())
}

/// `5s`, `500ms`, or plain seconds with fractions (`1.5`), as `kxp send --timeout` takes them.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let (number, scale) = if let Some(ms) = text.strip_suffix("ms") {
        (ms, 0.001)
    } else {
        (text.strip_suffix('s').unwrap_or(text), 1.0)
    };
    number
        .parse::<f64>()
        .ok()
        .filter(|n| *n > 0.0)
        .and_then(|n| Duration::try_from_secs_f64(n * scale).ok())
        .ok_or_else(|| "expected a positive time such as 5s, 500ms or 1.5".to_owned())
}

/// `1048576`, `512KiB`, `1MiB`.
fn parse_size(text: &str) -> Result<usize, String> {
    let (number, unit) = if let Some(n) = text.strip_suffix("MiB") {
        (n, 1024 * 1024)
    } else if let Some(n) = text.strip_suffix("KiB") {
        (n, 1024)
    } else {
        (text, 1)
    };
    number
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(unit))
        .ok_or_else(|| "expected a size in bytes, or with KiB or MiB, such as 1MiB".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_shown_are_kxp_checks() {
        assert_eq!(
            parse_duration(DEFAULT_TIMEOUT),
            Ok(kxp_check::DEFAULT_TIMEOUT)
        );
        assert_eq!(
            parse_size(DEFAULT_BODY_LIMIT),
            Ok(kxp_check::DEFAULT_BODY_LIMIT)
        );
    }

    #[test]
    fn times_take_a_unit_or_plain_seconds() {
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        for bad in ["0", "-1s", "5m", "", "ms", "NaN"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sizes_take_binary_units() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("512KiB"), Ok(512 * 1024));
        assert_eq!(parse_size("1MiB"), Ok(1024 * 1024));
        for bad in ["1MB", "-1", "", "1.5MiB"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn long_texts_are_cut_on_a_character() {
        assert_eq!(cut("héllo", 2), "hé…");
        assert_eq!(cut("hé", 2), "hé");
    }
}
