//! `kxp serve`: the delivery service, until SIGTERM or Ctrl-C.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use kxp_sender::guard::Cidr;
use kxp_sender::schedule::parse_duration;
use kxp_sender::{Config, Schedule};

#[derive(Args)]
pub(crate) struct ServeArgs {
    /// `sqlite://path` (created if missing) or `postgres://user@host/db`.
    #[arg(
        long,
        env = "KXP_DATABASE_URL",
        hide_env_values = true,
        default_value = "sqlite://kxp.db"
    )]
    database_url: String,
    /// Where the API listens.
    #[arg(long, env = "KXP_LISTEN", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Development mode: accept http:// endpoint URLs and let deliveries reach loopback
    /// (127.0.0.0/8, ::1) — loopback only. Never in production.
    #[arg(long)]
    dev: bool,
    /// Let deliveries reach this block although the address guard refuses it (private,
    /// loopback, link-local…), e.g. `10.20.0.0/16` or `fd00:1::/64`. Repeatable.
    #[arg(long = "allow-address", value_name = "CIDR", value_parser = parse_cidr)]
    allow_address: Vec<Cidr>,
    /// Offsets from the first try, comma-separated.
    #[arg(long, value_name = "OFFSETS", default_value = "0s,10s,30s,1m,5m,15m,1h,6h,1d", value_parser = parse_schedule)]
    retry_schedule: Schedule,
    /// How much each gap between tries is randomly stretched or shrunk (0 to 1).
    #[arg(long, default_value_t = kxp_sender::schedule::DEFAULT_JITTER)]
    jitter: f64,
    /// Per-attempt timeout of endpoints that do not set their own.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_timeout)]
    delivery_timeout: Duration,
    /// Attempts in flight at once in this process.
    #[arg(long, default_value_t = 64)]
    workers: usize,
    /// Attempts in flight at once to one endpoint, from this process.
    #[arg(long, default_value_t = 8)]
    per_endpoint_concurrency: usize,
    /// How long a claimed delivery's lease outlives its endpoint's timeout: after a crash, its
    /// deliveries are taken over this long after their attempts could have ended.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_any_duration)]
    lease_extra: Duration,
    /// Deliveries per second to one endpoint, for endpoints without their own
    /// `rate_limit_per_second` (per process; 0: no default limit).
    #[arg(long, value_name = "PER_SECOND", default_value_t = 50)]
    rate_limit: u32,
    /// Consecutive failed attempts that open an endpoint's circuit breaker.
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    breaker_failures: u32,
    /// How long an open circuit holds deliveries before probing with one; doubles after each
    /// failed probe, up to --breaker-cooldown-max.
    #[arg(long, value_name = "DURATION", default_value = "1m", value_parser = parse_positive)]
    breaker_cooldown: Duration,
    /// The longest wait between two probes of an open circuit.
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = parse_positive)]
    breaker_cooldown_max: Duration,
    /// Disable an endpoint that has failed every attempt for this long.
    #[arg(long, value_name = "DURATION", default_value = "3d", value_parser = parse_positive)]
    disable_after: Duration,
    /// SMTP server for e-mail notifications: `smtp://host:25` (plain, e.g. a local relay),
    /// `smtp://user:pass@host:587?tls=required` (STARTTLS) or `smtps://user:pass@host:465`.
    #[arg(long, env = "KXP_SMTP_URL", hide_env_values = true, value_name = "URL")]
    smtp_url: Option<String>,
    /// The From of e-mail notifications.
    #[arg(
        long,
        env = "KXP_SMTP_FROM",
        value_name = "MAILBOX",
        default_value = "kxp-webhooks <kxp@localhost>"
    )]
    smtp_from: String,
    /// How long finished deliveries (delivered, or dead and replayed), their events and
    /// notifications are kept; `0` keeps them forever. Dead deliveries never replayed stay.
    #[arg(long, value_name = "DURATION", default_value = "30d", value_parser = parse_any_duration)]
    retention: Duration,
    /// Log lines as JSON objects instead of text.
    #[arg(long)]
    json_logs: bool,
}

fn parse_positive(text: &str) -> Result<Duration, String> {
    match parse_duration(text).map_err(|e| e.to_string())? {
        Duration::ZERO => Err("the duration must be above zero".to_owned()),
        d => Ok(d),
    }
}

fn parse_schedule(text: &str) -> Result<Schedule, String> {
    text.parse()
        .map_err(|e: kxp_sender::schedule::ScheduleError| e.to_string())
}

fn parse_cidr(text: &str) -> Result<Cidr, String> {
    text.parse()
        .map_err(|e: kxp_sender::guard::CidrError| e.to_string())
}

fn parse_any_duration(text: &str) -> Result<Duration, String> {
    parse_duration(text).map_err(|e| e.to_string())
}

fn parse_timeout(text: &str) -> Result<Duration, String> {
    let d = parse_duration(text).map_err(|e| e.to_string())?;
    if d < Duration::from_millis(100) || d > kxp_sender::api::MAX_TIMEOUT {
        return Err("the timeout must be between 100ms and 30s".to_owned());
    }
    Ok(d)
}

pub(crate) fn serve(args: ServeArgs) -> ExitCode {
    init_logs(args.json_logs);
    let schedule = match args.retry_schedule.with_jitter(args.jitter) {
        Ok(schedule) => schedule,
        Err(e) => {
            eprintln!("error: --jitter: {e}");
            return ExitCode::from(2);
        }
    };
    let config = Config {
        database_url: args.database_url,
        listen: args.listen,
        dev: args.dev,
        allow_addresses: args.allow_address,
        schedule,
        delivery_timeout: args.delivery_timeout,
        workers: args.workers.max(1),
        per_endpoint_concurrency: args.per_endpoint_concurrency.max(1),
        lease_extra: args.lease_extra,
        api_key: std::env::var("KXP_API_KEY").ok().filter(|k| !k.is_empty()),
        protection: kxp_sender::circuit::Protection {
            breaker_failures: args.breaker_failures,
            breaker_cooldown: args.breaker_cooldown,
            breaker_cooldown_max: args.breaker_cooldown_max,
            disable_after: args.disable_after,
            rate_limit: args.rate_limit,
        },
        smtp_url: args.smtp_url.filter(|url| !url.is_empty()),
        smtp_from: args.smtp_from,
        retention: (!args.retention.is_zero()).then_some(args.retention),
        ..Config::default()
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let dev = config.dev;
    let allowed = config
        .allow_addresses
        .iter()
        .map(ToString::to_string)
        .chain(dev.then(|| "loopback (--dev)".to_owned()))
        .collect::<Vec<_>>()
        .join(", ");
    runtime.block_on(async move {
        let server = match kxp_sender::start(config).await {
            Ok(server) => server,
            Err(e) => {
                // sqlx errors can quote the URL; never print the database password.
                eprintln!("error: {}", kxp_sender::db::redact_passwords(&e.to_string()));
                return ExitCode::FAILURE;
            }
        };
        if let Some(key) = server.new_api_key() {
            println!("Created the first account. Its API key, shown only this once:\n\n    {key}\n");
            println!("Use it as `Authorization: Bearer <key>`, or set KXP_API_KEY to choose your own.");
        }
        tracing::info!(target: "kxp_sender", addr = %server.addr(), database = server.db().backend(), "kxp serve is listening");
        if !allowed.is_empty() {
            // Holes in the address guard are worth a line in every log.
            tracing::warn!(target: "kxp_sender", allow_addresses = %allowed, dev, "the address guard lets deliveries reach these non-public addresses");
        }
        println!("kxp serve listening on http://{}", server.addr());
        stop_signal().await;
        tracing::info!(target: "kxp_sender", "shutting down: finishing in-flight attempts");
        server.shutdown().await;
        ExitCode::SUCCESS
    })
}

async fn stop_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

fn init_logs(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,sqlx=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if json {
        builder.json().flatten_event(true).init();
    } else {
        builder.init();
    }
}
