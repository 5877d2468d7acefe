//! `receive`: what verifying costs a receiver's HTTP server, in CPU per request (issue 10).
//!
//! Each system under test is a child process of this binary (`receive serve <system>`) serving
//! on one thread (axum on a current-thread tokio runtime, actix-web with one worker), so its
//! CPU time per request is the cost per core. The parent sends the same signed ~1 KiB kxp
//! event `--requests` times over `--connections` keep-alive loopback connections with a raw
//! HTTP/1.1 client (cheap, so it leaves the core to the server), checks every answer is a 200,
//! and reads the server's CPU time from `/proc/<pid>/task/*/schedstat` (nanoseconds, every
//! thread) before and after. Systems take turns, `--repeat` rounds, and the report gives the
//! median of each with its ratio to the bare app of the same framework. Markdown on stdout.
//!
//! ```sh
//! cd benches && cargo run --release --bin receive -- --requests 100000 --repeat 5
//! ```
//!
//! The systems: `axum-bare` (a handler taking the body as `Bytes`), `axum-check` (the same
//! handler calling `Receiver::check` itself: verification and the envelope, without the
//! layer), `axum-layer` (`VerifyLayer` and a handler taking `VerifiedBody`), and the same three
//! for actix-web. No tracing subscriber is installed in any of them, as in an app that logs
//! nothing: the layer's log line then costs its level check only.
//!
//! Loopback only; every loop is bounded by the request count and a time limit, and the child
//! processes are killed at the end, also on error.

use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use clap::Parser;
use kxp_receiver::Receiver;
use kxp_verify::{Secret, Signer, Verifier};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

const SECRET: &str = "whsec_receive_benchmark_secret_0123456789";
const SYSTEMS: [&str; 7] = [
    "axum-bare",
    "axum-verify",
    "axum-check",
    "axum-layer",
    "actix-bare",
    "actix-check",
    "actix-layer",
];
/// No single round may take longer than this, whatever the load.
const ROUND_LIMIT: Duration = Duration::from_secs(120);

#[derive(Parser)]
#[command(about = "CPU per request of a receiver with and without kxp's verification")]
struct Args {
    /// Comma-separated systems (default: all six).
    #[arg(long, value_delimiter = ',')]
    system: Vec<String>,
    /// Requests per system per round.
    #[arg(long, default_value_t = 50_000)]
    requests: u64,
    /// Concurrent keep-alive connections.
    #[arg(long, default_value_t = 16)]
    connections: usize,
    /// Body size in bytes.
    #[arg(long, default_value_t = 1024)]
    size: usize,
    /// Rounds; systems take turns within each, forwards and backwards in turn.
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// A command to run each server under, split on spaces: `valgrind --tool=cachegrind …`
    /// counts its instructions, which the machine's load does not move (see BENCHMARKS.md).
    #[arg(long)]
    wrap: Option<String>,
    /// Child mode: serve one system and print its port.
    #[arg(long, hide = true)]
    serve: Option<String>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(system) = &args.serve {
        return match serve(system) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("serve {system}: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match runtime.block_on(measure(&args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A kxp event of exactly `size` bytes (at least ~200): the envelope, and `data` padded with a
/// description.
fn event_body(size: usize) -> Vec<u8> {
    let head = r#"{"id":"evt_7d1f3c2a9b8e4f60a1c2d3e4f5a6b7c8","type":"payment.succeeded","api_version":"2026-11-01","created_at":"2026-12-01T10:00:00Z","data":{"amount":1999,"currency":"eur","customer":"cus_0123456789","metadata":{"order":"ord_42"},"description":""#;
    let tail = r#""}}"#;
    let fill = size.saturating_sub(head.len() + tail.len());
    let mut body = String::with_capacity(size);
    body.push_str(head);
    body.extend(std::iter::repeat_n('x', fill));
    body.push_str(tail);
    body.into_bytes()
}

fn receiver() -> Receiver {
    Receiver::new(Verifier::new(
        Secret::new(SECRET).expect("non-empty secret"),
    ))
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

// ---- the servers (child processes) ----

fn signature(headers: &axum::http::HeaderMap) -> &[u8] {
    headers
        .get(kxp_verify::SIGNATURE_HEADER)
        .map_or(&b""[..], |v| v.as_bytes())
}

fn serve(system: &str) -> Result<(), String> {
    let std_listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let port = std_listener.local_addr().map_err(|e| e.to_string())?.port();
    std_listener
        .set_nonblocking(true)
        .map_err(|e| e.to_string())?;
    println!("{port}");
    match system.split_once('-') {
        Some(("axum", kind)) => serve_axum(kind, std_listener),
        Some(("actix", kind)) => serve_actix(kind, std_listener),
        _ => Err(format!("unknown system {system:?}")),
    }
}

fn serve_axum(kind: &str, listener: std::net::TcpListener) -> Result<(), String> {
    use axum::Router;
    use axum::extract::Request;
    use axum::http::StatusCode;
    use axum::routing::post;
    use kxp_axum::{VerifiedBody, VerifyLayer};

    let app = match kind {
        "bare" => Router::new().route(
            "/webhooks",
            post(|body: Bytes| async move {
                std::hint::black_box(&body);
                "ok"
            }),
        ),
        "verify" => {
            let verifier = Verifier::new(Secret::new(SECRET).expect("non-empty secret"));
            Router::new().route(
                "/webhooks",
                post(move |request: Request| async move {
                    let (parts, body) = request.into_parts();
                    let Ok(body) = axum::body::to_bytes(body, usize::MAX).await else {
                        return (StatusCode::BAD_REQUEST, "no");
                    };
                    let header = signature(&parts.headers);
                    match verifier.verify(header, &body[..], unix_now()) {
                        Ok(verified) => {
                            std::hint::black_box(verified);
                            (StatusCode::OK, "ok")
                        }
                        Err(_) => (StatusCode::UNAUTHORIZED, "no"),
                    }
                }),
            )
        }
        "check" => {
            let receiver = receiver();
            Router::new().route(
                "/webhooks",
                post(move |request: Request| async move {
                    let (parts, body) = request.into_parts();
                    let Ok(body) = axum::body::to_bytes(body, usize::MAX).await else {
                        return (StatusCode::BAD_REQUEST, "no");
                    };
                    match receiver.check(signature(&parts.headers), body) {
                        Ok(accepted) => {
                            std::hint::black_box(accepted.event_id());
                            (StatusCode::OK, "ok")
                        }
                        Err(_) => (StatusCode::UNAUTHORIZED, "no"),
                    }
                }),
            )
        }
        "layer" => Router::new().route(
            "/webhooks",
            post(|body: VerifiedBody| async move {
                std::hint::black_box(body.event_id());
                "ok"
            })
            .layer(VerifyLayer::new(receiver())),
        ),
        other => return Err(format!("unknown axum system {other:?}")),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async move {
        let listener = TcpListener::from_std(listener).map_err(|e| e.to_string())?;
        axum::serve(listener, app).await.map_err(|e| e.to_string())
    })
}

fn serve_actix(kind: &str, listener: std::net::TcpListener) -> Result<(), String> {
    use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
    use kxp_actix::{VerifiedBody, VerifyMiddleware};

    let kind = kind.to_owned();
    if !matches!(kind.as_str(), "bare" | "check" | "layer") {
        return Err(format!("unknown actix system {kind:?}"));
    }
    let receiver = receiver();
    actix_web::rt::System::new().block_on(async move {
        HttpServer::new(move || {
            let receiver = receiver.clone();
            let app = App::new();
            match kind.as_str() {
                "bare" => app.route(
                    "/webhooks",
                    web::post().to(|body: web::Bytes| async move {
                        std::hint::black_box(&body);
                        HttpResponse::Ok().body("ok")
                    }),
                ),
                "check" => {
                    app.app_data(web::Data::new(receiver)).route(
                        "/webhooks",
                        web::post().to(
                            |request: HttpRequest,
                             body: web::Bytes,
                             receiver: web::Data<Receiver>| async move {
                                let header = request
                                    .headers()
                                    .get(kxp_verify::SIGNATURE_HEADER)
                                    .map_or(&b""[..], |v| v.as_bytes());
                                match receiver.check(header, body) {
                                    Ok(accepted) => {
                                        std::hint::black_box(accepted.event_id());
                                        HttpResponse::Ok().body("ok")
                                    }
                                    Err(_) => HttpResponse::Unauthorized().body("no"),
                                }
                            },
                        ),
                    )
                }
                _ => app.service(
                    web::resource("/webhooks")
                        .wrap(VerifyMiddleware::new(receiver))
                        .route(web::post().to(|body: VerifiedBody| async move {
                            std::hint::black_box(body.event_id());
                            HttpResponse::Ok().body("ok")
                        })),
                ),
            }
        })
        .workers(1)
        .listen(listener)
        .map_err(|e| e.to_string())?
        .run()
        .await
        .map_err(|e| e.to_string())
    })
}

// ---- the load and the measurement (parent) ----

/// A running child server, killed when dropped.
struct Server {
    child: Child,
    port: u16,
}

impl Server {
    fn start(system: &str, wrap: Option<&str>) -> Result<Server, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut words: Vec<String> = wrap
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        words.push(exe.to_string_lossy().into_owned());
        let mut child = Command::new(&words[0])
            .args(&words[1..])
            .args(["--serve", system])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("starting {system}: {e}"))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line)
            .map_err(|e| e.to_string())?;
        let port = line
            .trim()
            .parse()
            .map_err(|_| format!("{system} printed {line:?}, not a port"))?;
        Ok(Server { child, port })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Server {
    /// SIGTERM first, so a wrapping tool writes its report, then SIGKILL after 10 s.
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            // SAFETY: kill has no memory preconditions; the pid is our own child's.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// CPU nanoseconds every thread of `pid` has run (the first field of each task's schedstat).
fn cpu_ns(pid: u32) -> Result<u64, String> {
    let dir = std::fs::read_dir(format!("/proc/{pid}/task")).map_err(|e| e.to_string())?;
    let mut total = 0u64;
    for task in dir.flatten() {
        let Ok(text) = std::fs::read_to_string(task.path().join("schedstat")) else {
            continue;
        };
        total += text
            .split_whitespace()
            .next()
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0);
    }
    Ok(total)
}

fn request_bytes(port: u16, size: usize) -> Vec<u8> {
    let body = event_body(size);
    let signer = Signer::new(Secret::new(SECRET).expect("non-empty secret"));
    let signature = signer.sign(unix_now(), &body).to_string();
    let mut request = format!(
        "POST /webhooks HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n\
         user-agent: kxp-webhooks/0.1\r\n{}: {signature}\r\ncontent-length: {}\r\n\r\n",
        kxp_verify::SIGNATURE_HEADER,
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(&body);
    request
}

/// Sends `count` requests on one keep-alive connection; every answer must be a 200.
async fn connection(
    port: u16,
    request: &[u8],
    count: u64,
    deadline: Instant,
) -> Result<(), String> {
    let stream = TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| e.to_string())?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let mut stream = BufReader::new(stream);
    let mut line = String::new();
    let mut body = Vec::new();
    for _ in 0..count {
        if Instant::now() > deadline {
            return Err("the round's time limit passed".into());
        }
        stream
            .get_mut()
            .write_all(request)
            .await
            .map_err(|e| e.to_string())?;
        line.clear();
        stream
            .read_line(&mut line)
            .await
            .map_err(|e| e.to_string())?;
        if !line.starts_with("HTTP/1.1 200") {
            return Err(format!("answer {:?}", line.trim_end()));
        }
        let mut length = None;
        for _ in 0..64 {
            line.clear();
            stream
                .read_line(&mut line)
                .await
                .map_err(|e| e.to_string())?;
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse::<usize>().ok();
            }
        }
        let length = length.ok_or("an answer without content-length")?;
        body.resize(length, 0);
        stream
            .read_exact(&mut body)
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// One round of one system: `requests` requests, the server's CPU per request and the rate.
async fn round(server: &Server, args: &Args, requests: u64) -> Result<(f64, f64), String> {
    let request = request_bytes(server.port, args.size);
    let connections = args.connections.max(1) as u64;
    let per_connection = requests.div_ceil(connections);
    let deadline = Instant::now() + ROUND_LIMIT;
    let before = cpu_ns(server.pid())?;
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..connections {
        let request = request.clone();
        let port = server.port;
        tasks.spawn(async move { connection(port, &request, per_connection, deadline).await });
    }
    while let Some(result) = tasks.join_next().await {
        result.map_err(|e| e.to_string())??;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = cpu_ns(server.pid())?.saturating_sub(before);
    let total = (per_connection * connections) as f64;
    Ok((cpu as f64 / total / 1000.0, total / elapsed))
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_default()
}

async fn measure(args: &Args) -> Result<(), String> {
    let systems: Vec<String> = if args.system.is_empty() {
        SYSTEMS.iter().map(|s| (*s).to_owned()).collect()
    } else {
        args.system.clone()
    };
    let servers = systems
        .iter()
        .map(|s| Server::start(s, args.wrap.as_deref()))
        .collect::<Result<Vec<_>, _>>()?;
    for server in &servers {
        round(server, args, (args.requests / 10).max(1000)).await?;
    }
    let mut cpu = vec![Vec::new(); servers.len()];
    let mut rate = vec![Vec::new(); servers.len()];
    let mut loads = Vec::new();
    for r in 0..args.repeat.max(1) {
        let mut order: Vec<usize> = (0..servers.len()).collect();
        if r % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let (per_request, per_second) = round(&servers[i], args, args.requests).await?;
            eprintln!(
                "round {r}: {} {per_request:.2} µs CPU/request, {per_second:.0}/s",
                systems[i]
            );
            cpu[i].push(per_request);
            rate[i].push(per_second);
        }
        loads.push(load_average());
    }

    println!(
        "{} requests of {} B per system per round, {} connections, {} rounds; 1-minute load: {}",
        args.requests,
        args.size,
        args.connections,
        args.repeat,
        loads.join(", ")
    );
    println!();
    println!(
        "| system | server CPU per request (median) | vs bare | requests/s (median) | rounds (µs) |"
    );
    println!("|---|---:|---:|---:|---|");
    for (i, system) in systems.iter().enumerate() {
        let all = cpu[i]
            .iter()
            .map(|c| format!("{c:.2}"))
            .collect::<Vec<_>>()
            .join(", ");
        let own = median(&mut cpu[i].clone());
        let framework = system.split('-').next().unwrap_or_default();
        let bare = systems
            .iter()
            .position(|s| s == &format!("{framework}-bare"))
            .map(|b| median(&mut cpu[b].clone()));
        let ratio = bare.map_or_else(|| "—".to_owned(), |b| format!("{:.2}x", own / b));
        println!(
            "| `{system}` | {own:.2} µs | {ratio} | {:.0} | {all} |",
            median(&mut rate[i].clone())
        );
    }
    Ok(())
}
