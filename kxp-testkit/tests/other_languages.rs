//! Runs the Node.js, Python and Go snippets of `docs/verify-in-other-languages.md` against every
//! shared signature vector, and grades the Node.js and Python ones with `kxp check`'s checks.
//!
//! The code under test is read from the doc itself (the fenced blocks marked `kxp-verify`), never
//! from a copy, so the doc cannot drift from what passes. Each snippet is written to a temporary
//! directory next to a small harness that prints one `name<TAB>verdict` line per vector; the
//! verdicts are then compared by `kxp_testkit::check_all`. Blocks marked `kxp-example` (the
//! framework glue) are syntax-checked, or for Go compiled and vetted with the snippet.
//!
//! For the grading, the Node.js and Python snippets are wrapped in minimal HTTP servers of the
//! standard library (`node:http`, `http.server`) on 127.0.0.1, which answer as the receiving guide
//! says (401 with the kind, 413 over 1 MiB, 400 for a body that is not an event, 200 otherwise,
//! duplicates included, and the challenge); `kxp_check::run` must pass every check against each,
//! a rotation's two secrets included, and each 200 must name the secret that verified it in
//! `X-Kxp-Verified-Key` (the snippet's `keyId` / `key_id`, compared with kxp-verify's).
//!
//! Node.js and Python are required: a missing interpreter fails the test unless
//! `KXP_SKIP_OTHER_LANGUAGES=1` is set. Go runs where `go` is on the `PATH`, and is skipped
//! (loudly) elsewhere, unless `KXP_REQUIRE_GO=1` says it must run: `.ci/run` installs Go and sets
//! it, so CI never skips the Go snippet.

// Helpers outside #[test] functions expect too: in a test, a panic is the failure report.
#![allow(clippy::expect_used)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

const DOC: &str = "docs/verify-in-other-languages.md";

/// Appended to the Node.js snippet; a block keeps its names out of the snippet's scope.
const NODE_HARNESS: &str = r#"
// ---- test harness appended by kxp-testkit/tests/other_languages.rs ----
{
  for (const path of process.argv.slice(2)) {
    const file = JSON.parse(require('node:fs').readFileSync(path, 'utf8'));
    for (const v of file.vectors) {
      const body = Buffer.from(v.body_b64, 'base64');
      const verdict = verify(v.header, body, v.secrets, v.now, v.tolerance_s);
      process.stdout.write(`${v.name}\t${verdict}\n`);
    }
  }
}
"#;

/// Appended to the Python snippet.
const PYTHON_HARNESS: &str = r#"

# ---- test harness appended by kxp-testkit/tests/other_languages.rs ----
def _kxp_run_vectors():
    import base64
    import json
    import sys

    vectors = []
    for path in sys.argv[1:]:
        with open(path, encoding="utf-8") as f:
            vectors += json.load(f)["vectors"]
    for v in vectors:
        body = base64.b64decode(v["body_b64"], validate=True)
        verdict = verify(v["header"], body, v["secrets"], v["now"], v["tolerance_s"])
        print(f"{v['name']}\t{verdict}")


if __name__ == "__main__":
    _kxp_run_vectors()
"#;

/// Appended to the Node.js snippet: a webhook server on 127.0.0.1 around `verify`, printing its
/// port once it listens.
const NODE_SERVER: &str = r#"
// ---- test server appended by kxp-testkit/tests/other_languages.rs ----
{
  const http = require('node:http');
  const secrets = process.env.KXP_WEBHOOK_SECRET.split(',');
  const LIMIT = 1024 * 1024;
  const answer = (res, status, body, type = 'application/json') => {
    res.writeHead(status, { 'Content-Type': type });
    res.end(body);
  };
  const server = http.createServer((req, res) => {
    const token = new URL(req.url, 'http://127.0.0.1').searchParams.get('challenge');
    if (req.method === 'GET' && token !== null) return answer(res, 200, token, 'text/plain');
    const chunks = [];
    let size = 0;
    // Read to the end even when over the limit, so the client gets the 413, not a reset.
    req.on('data', (chunk) => {
      size += chunk.length;
      if (size <= LIMIT) chunks.push(chunk);
    });
    req.on('end', () => {
      if (size > LIMIT) return answer(res, 413, '{"error":"payload_too_large"}');
      const body = Buffer.concat(chunks);
      const now = Math.floor(Date.now() / 1000);
      const verdict = verify(req.headers['x-kxp-signature'], body, secrets, now);
      if (verdict !== 'ok') return answer(res, 401, JSON.stringify({ error: verdict }));
      let event;
      try {
        event = JSON.parse(body.toString('utf8'));
      } catch {
        return answer(res, 400, '{"error":"invalid_json"}');
      }
      if (typeof event?.id !== 'string') return answer(res, 400, '{"error":"invalid_envelope"}');
      const header = req.headers['x-kxp-signature'];
      const secret = secrets.find((s) => verify(header, body, [s], now) === 'ok');
      res.setHeader('X-Kxp-Verified-Key', keyId(secret));
      return answer(res, 200, '{"outcome":"processed"}');
    });
  });
  server.listen(0, '127.0.0.1', () => console.log(server.address().port));
}
"#;

/// Appended to the Python snippet: the same server on `http.server`.
const PYTHON_SERVER: &str = r#"

# ---- test server appended by kxp-testkit/tests/other_languages.rs ----
def _kxp_serve():
    import http.server
    import json
    import os
    import time
    import urllib.parse

    secrets = os.environ["KXP_WEBHOOK_SECRET"].split(",")
    limit = 1024 * 1024

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def answer(self, status, body, content_type="application/json", headers=()):
            data = body.encode("utf-8")
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
            if "challenge" in query:
                return self.answer(200, query["challenge"][0], "text/plain")
            return self.answer(401, '{"error":"missing_header"}')

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            if length > limit:
                # Read to the end anyway, so the client gets the 413, not a reset.
                while length > 0:
                    chunk = self.rfile.read(min(length, 65536))
                    if not chunk:
                        break
                    length -= len(chunk)
                return self.answer(413, '{"error":"payload_too_large"}')
            body = self.rfile.read(length)
            header = self.headers.get("X-Kxp-Signature")
            verdict = verify(header, body, secrets, int(time.time()))
            if verdict != "ok":
                return self.answer(401, json.dumps({"error": verdict}))
            try:
                event = json.loads(body)
            except ValueError:
                return self.answer(400, '{"error":"invalid_json"}')
            if not isinstance(event, dict) or not isinstance(event.get("id"), str):
                return self.answer(400, '{"error":"invalid_envelope"}')
            now = int(time.time())
            secret = next(s for s in secrets if verify(header, body, [s], now) == "ok")
            verified_key = [("X-Kxp-Verified-Key", key_id(secret))]
            return self.answer(200, '{"outcome":"processed"}', headers=verified_key)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    _kxp_serve()
"#;

/// The secrets the servers are started with (`KXP_WEBHOOK_SECRET=new,old`) and graded with.
const SERVER_SECRETS: [&str; 2] = [
    "41ab92590637ac82026ca65266b2898428ea491b1e6d543d7202cf486ea62965",
    "old-secret",
];

/// The Go harness: `package main` in the module root, importing the snippet's package (whose
/// name replaces `SNIPPET_PACKAGE`), so the snippet stays byte-for-byte the doc's.
const GO_HARNESS: &str = r#"// Test harness written by kxp-testkit/tests/other_languages.rs.
package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"time"

	snippet "kxpharness/SNIPPET_PACKAGE"
)

func main() {
	for _, path := range os.Args[1:] {
		run(path)
	}
}

func run(path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		panic(err)
	}
	var file struct {
		Vectors []struct {
			Name       string   `json:"name"`
			Secrets    []string `json:"secrets"`
			Header     string   `json:"header"`
			BodyB64    string   `json:"body_b64"`
			Now        int64    `json:"now"`
			ToleranceS int64    `json:"tolerance_s"`
		} `json:"vectors"`
	}
	if err := json.Unmarshal(data, &file); err != nil {
		panic(err)
	}
	for _, v := range file.Vectors {
		body, err := base64.StdEncoding.DecodeString(v.BodyB64)
		if err != nil {
			panic(err)
		}
		tolerance := time.Duration(v.ToleranceS) * time.Second
		verdict := snippet.Verify(v.Header, body, v.Secrets, time.Unix(v.Now, 0), tolerance)
		fmt.Printf("%s\t%s\n", v.Name, verdict)
	}
}
"#;

#[test]
fn node_snippet_passes_all_vectors() {
    let dir = scratch_dir("node");
    let snippet = dir.join("kxp-verify.js");
    write(
        &snippet,
        &format!("{}{NODE_HARNESS}", block("js", "kxp-verify")),
    );
    let example = dir.join("example.js");
    write(&example, &block("js", "kxp-example"));

    let Some(check) = run_required("node", Command::new("node").arg("--check").arg(&example))
    else {
        return;
    };
    expect_success("node --check on the Express example", &check);

    let out = run_required(
        "node",
        Command::new("node")
            .arg(&snippet)
            .args(kxp_testkit::vector_paths()),
    )
    .expect("node ran a moment ago");
    check_verdicts("node", &out);
}

#[test]
fn python_snippet_passes_all_vectors() {
    let dir = scratch_dir("python");
    let snippet = dir.join("kxp_verify.py");
    write(
        &snippet,
        &format!("{}{PYTHON_HARNESS}", block("python", "kxp-verify")),
    );
    let example = dir.join("example.py");
    write(&example, &block("python", "kxp-example"));

    // `compile` checks the syntax without importing Flask; -I keeps the user's environment out.
    let Some(check) = run_required(
        "python3",
        Command::new("python3")
            .args([
                "-I",
                "-c",
                "import sys; compile(open(sys.argv[1], 'rb').read(), sys.argv[1], 'exec')",
            ])
            .arg(&example),
    ) else {
        return;
    };
    expect_success("python3 compile of the Flask example", &check);

    let out = run_required(
        "python3",
        Command::new("python3")
            .args(["-I", "-B"])
            .arg(&snippet)
            .args(kxp_testkit::vector_paths()),
    )
    .expect("python3 ran a moment ago");
    check_verdicts("python3", &out);
}

#[tokio::test]
async fn node_snippet_in_an_http_server_passes_every_check() {
    grade_server("node", &[], "js", "server.js", NODE_SERVER).await;
}

#[tokio::test]
async fn python_snippet_in_an_http_server_passes_every_check() {
    let args = ["-I", "-B"];
    grade_server("python3", &args, "python", "server.py", PYTHON_SERVER).await;
}

/// Writes the doc's `lang` snippet with `server` appended to `file`, starts it with `program`
/// (`args` before the file), and grades it.
async fn grade_server(program: &'static str, args: &[&str], lang: &str, file: &str, server: &str) {
    let path = scratch_dir(&format!("{program}-server")).join(file);
    write(&path, &format!("{}{server}", block(lang, "kxp-verify")));
    if let Some(server) = Server::start(program, Command::new(program).args(args).arg(&path)) {
        server.grade().await;
    }
}

/// A snippet's server, running; killed when dropped.
struct Server {
    language: &'static str,
    child: Child,
    port: u16,
}

impl Server {
    /// Starts `cmd` with [`SERVER_SECRETS`] and waits for the port it prints; `None` when the
    /// interpreter is missing and that is allowed (see [`required`]).
    fn start(language: &'static str, cmd: &mut Command) -> Option<Server> {
        let spawned = cmd
            .env("KXP_WEBHOOK_SECRET", SERVER_SECRETS.join(","))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn();
        let mut child = required(language, spawned)?;
        let mut line = String::new();
        let stdout = child.stdout.take().expect("stdout is piped");
        BufReader::new(stdout)
            .read_line(&mut line)
            .unwrap_or_else(|e| panic!("cannot read the {language} server's port: {e}"));
        let port = line.trim().parse().unwrap_or_else(|_| {
            let _ = child.kill();
            panic!("the {language} server did not print its port (see its stderr above): {line:?}")
        });
        Some(Server {
            language,
            child,
            port,
        })
    }

    /// Every check of `kxp check` passes.
    async fn grade(&self) {
        let url = format!("http://127.0.0.1:{}/webhooks/kxp", self.port);
        let target = SERVER_SECRETS
            .iter()
            .fold(kxp_check::Target::builder(&url), |target, secret| {
                target.secret(*secret)
            })
            .challenge(true)
            .build()
            .unwrap_or_else(|e| panic!("kxp-check refuses {url}: {e}"));
        let report = kxp_check::run(&target, &kxp_check::Check::ALL).await;
        let not_passed: Vec<String> = report
            .findings
            .iter()
            .filter(|f| f.verdict != kxp_check::Verdict::Pass)
            .map(|f| format!("{} {}: {}", f.check, f.verdict.as_str(), f.summary))
            .collect();
        assert!(
            not_passed.is_empty(),
            "the {} snippet's server does not pass kxp check:\n{}",
            self.language,
            not_passed.join("\n")
        );
        assert_eq!(report.findings.len(), kxp_check::Check::ALL.len());
        self.names_the_verifying_secret();
        eprintln!(
            "{}: {} of {} checks pass",
            self.language,
            report.counts.passed,
            report.findings.len()
        );
    }
}

impl Server {
    /// A delivery signed with the second secret (a sender not yet rotated) is answered 200 with
    /// that secret's fingerprint; a forged one, 401 without any.
    fn names_the_verifying_secret(&self) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("the clock is after 1970")
            .as_secs();
        let body = r#"{"id":"evt_key","type":"payment.succeeded","api_version":"2026-11-01","created_at":"2026-11-30T01:02:03Z","data":{}}"#;
        let signed = |secret: &str| {
            kxp_verify::Signer::new(kxp_verify::Secret::new(secret).expect("not empty"))
                .sign(now, body.as_bytes())
                .to_string()
        };
        let expected = kxp_verify::key_fingerprint(SERVER_SECRETS[1].as_bytes()).to_string();
        assert_eq!(
            self.post(&signed(SERVER_SECRETS[1]), body),
            (200, Some(expected)),
            "the {} snippet's server must name the second secret in X-Kxp-Verified-Key",
            self.language
        );
        assert_eq!(
            self.post(&signed("not-a-secret"), body),
            (401, None),
            "the {} snippet's server must not send X-Kxp-Verified-Key on a 401",
            self.language
        );
    }

    /// `POST /webhooks/kxp` on a connection of its own: the status and `X-Kxp-Verified-Key`.
    fn post(&self, signature: &str, body: &str) -> (u16, Option<String>) {
        use std::io::Read;

        let mut stream = std::net::TcpStream::connect(("127.0.0.1", self.port))
            .unwrap_or_else(|e| panic!("cannot connect to the {} server: {e}", self.language));
        let request = format!(
            "POST /webhooks/kxp HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\
             Content-Type: application/json\r\nX-Kxp-Signature: {signature}\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        );
        stream
            .write_all(request.as_bytes())
            .unwrap_or_else(|e| panic!("cannot write to the {} server: {e}", self.language));
        let mut response = String::new();
        stream
            .read_to_string(&mut response)
            .unwrap_or_else(|e| panic!("cannot read the {} server's answer: {e}", self.language));
        let head = response.split("\r\n\r\n").next().unwrap_or_default();
        let mut lines = head.lines();
        let status = lines
            .next()
            .and_then(|line| line.split(' ').nth(1))
            .and_then(|code| code.parse().ok())
            .unwrap_or_else(|| panic!("not an HTTP response: {response:?}"));
        let key = lines.find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("x-kxp-verified-key")
                .then(|| value.trim().to_owned())
        });
        (status, key)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn go_snippet_passes_all_vectors_if_go_is_installed() {
    match Command::new("go").arg("version").output() {
        Err(e) if e.kind() == ErrorKind::NotFound => {
            assert!(
                std::env::var("KXP_REQUIRE_GO").as_deref() != Ok("1"),
                "`go` is not installed but KXP_REQUIRE_GO=1: the Go snippet of {DOC} must be \
                 tested here (Debian: apt-get install golang-go)"
            );
            loud("SKIPPED: go not installed; the Go snippet was not run");
            return;
        }
        Err(e) => panic!("cannot run `go version`: {e}"),
        Ok(out) => expect_success("go version", &out),
    }

    let code = block("go", "kxp-verify");
    let package = code
        .lines()
        .find_map(|line| line.strip_prefix("package "))
        .map(str::trim)
        .expect("the Go snippet has a package clause");
    let dir = scratch_dir("go");
    write(&dir.join("go.mod"), "module kxpharness\n\ngo 1.19\n");
    write(&dir.join(package).join("verify.go"), &code);
    write(
        &dir.join(package).join("example.go"),
        &block("go", "kxp-example"),
    );
    write(
        &dir.join("main.go"),
        &GO_HARNESS.replace("SNIPPET_PACKAGE", package),
    );

    let go = |args: &[&str]| {
        let mut cmd = Command::new("go");
        cmd.args(args)
            .current_dir(&dir)
            // Standard library only: never download a module or a toolchain.
            .env("GOPROXY", "off")
            .env("GOTOOLCHAIN", "local");
        cmd.output().expect("go ran a moment ago")
    };
    expect_success(
        "go vet (the snippet and the net/http example)",
        &go(&["vet", "./..."]),
    );
    let paths = kxp_testkit::vector_paths().map(|p| p.to_string_lossy().into_owned());
    let out = go(&["run", ".", &paths[0], &paths[1]]);
    check_verdicts("go", &out);
}

/// The one fenced block of `DOC` whose info string is `<lang> <tag>`, e.g. ```` ```js kxp-verify ````.
fn block(lang: &str, tag: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(DOC);
    let doc = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let mut found = Vec::new();
    let mut current: Option<(bool, String)> = None; // (is the wanted block, its text so far)
    for line in doc.lines() {
        match (&mut current, line.strip_prefix("```")) {
            (None, Some(info)) => {
                let mut words = info.split_whitespace();
                let wanted = words.next() == Some(lang) && words.any(|word| word == tag);
                current = Some((wanted, String::new()));
            }
            (Some(_), Some(rest)) if rest.trim().is_empty() => {
                if let Some((true, text)) = current.take() {
                    found.push(text);
                }
            }
            (Some((_, text)), _) => {
                text.push_str(line);
                text.push('\n');
            }
            (None, None) => {}
        }
    }
    assert!(current.is_none(), "{DOC}: a code block is not closed");
    assert_eq!(
        found.len(),
        1,
        "{DOC} must have exactly one block marked ```{lang} {tag}"
    );
    found.remove(0)
}

/// Runs `cmd` whose program must be installed; `None` means it is not and
/// `KXP_SKIP_OTHER_LANGUAGES=1` allows that (see [`required`]).
fn run_required(program: &str, cmd: &mut Command) -> Option<Output> {
    required(program, cmd.output())
}

/// What running `program` gave, which must be installed; `None` means it is not and
/// `KXP_SKIP_OTHER_LANGUAGES=1` allows that (said loudly).
fn required<T>(program: &str, ran: std::io::Result<T>) -> Option<T> {
    match ran {
        Ok(ran) => Some(ran),
        Err(e) if e.kind() == ErrorKind::NotFound => {
            if std::env::var("KXP_SKIP_OTHER_LANGUAGES").as_deref() == Ok("1") {
                loud(&format!(
                    "SKIPPED: {program} not installed and KXP_SKIP_OTHER_LANGUAGES=1; \
                     the {program} snippet of {DOC} was NOT tested"
                ));
                None
            } else {
                panic!(
                    "`{program}` is not installed, so the {program} snippet of {DOC} cannot be \
                     tested. Install it, or set KXP_SKIP_OTHER_LANGUAGES=1 to skip (loudly)."
                )
            }
        }
        Err(e) => panic!("cannot run `{program}`: {e}"),
    }
}

/// Prints to the real stderr: libtest captures `eprintln!` of passing tests, and a skip must be
/// seen.
fn loud(message: &str) {
    let _ = writeln!(std::io::stderr(), "\n*** {message} ***\n");
}

fn expect_success(what: &str, out: &Output) {
    assert!(
        out.status.success(),
        "{what} failed ({}):\n--- stdout ---\n{}\n--- stderr ---\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
}

/// Parses the harness's `name<TAB>verdict` lines and compares them with every vector.
fn check_verdicts(language: &str, out: &Output) {
    expect_success(&format!("the {language} harness"), out);
    let stdout = std::str::from_utf8(&out.stdout)
        .unwrap_or_else(|e| panic!("{language} printed invalid UTF-8: {e}"));
    let mut verdicts = HashMap::new();
    for line in stdout.lines() {
        let (name, verdict) = line
            .split_once('\t')
            .unwrap_or_else(|| panic!("{language} printed an unexpected line: {line:?}"));
        let previous = verdicts.insert(name.to_owned(), verdict.to_owned());
        assert!(previous.is_none(), "{language} printed {name} twice");
    }
    kxp_testkit::check_all(|v| {
        verdicts
            .get(&v.name)
            .cloned()
            .unwrap_or_else(|| format!("<no verdict printed by {language}>"))
    });
    // Every vector has its verdict; now make sure nothing else was printed.
    let vectors = kxp_testkit::vectors();
    assert_eq!(
        verdicts.len(),
        vectors.len(),
        "{language} printed {} verdicts for {} vectors:\n{stdout}",
        verdicts.len(),
        vectors.len()
    );
    eprintln!(
        "{language}: {} of {} vectors pass",
        vectors.len(),
        vectors.len()
    );
}

/// A fresh directory for one language under Cargo's scratch space for integration tests.
fn scratch_dir(language: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("other-languages")
        .join(language);
    match std::fs::remove_dir_all(&dir) {
        Err(e) if e.kind() != ErrorKind::NotFound => {
            panic!("cannot clear {}: {e}", dir.display())
        }
        _ => {}
    }
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    dir
}

fn write(path: &Path, text: &str) {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", parent.display()));
    }
    std::fs::write(path, text).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
}
