//! The command line and what it asks for: [`Args`] (clap), checked and expanded into the
//! [`Config`]urations to run (system × processes × kxp flags). Nothing here starts or measures
//! anything; the runs are in [`crate::run`], the report in [`crate::report`].

use std::path::PathBuf;

use clap::Parser;

use crate::Result;
use crate::systems::System;

#[derive(Parser, Debug)]
#[command(
    name = "deliver",
    about = "End-to-end webhook delivery benchmark: kxp serve (SQLite, PostgreSQL) and Svix, \
             against a loopback receiver, beside the receiver-alone and bare-commit limits."
)]
pub(crate) struct Args {
    /// Systems under test, comma-separated: kxp-sqlite, kxp-postgres, kxp-citus, svix-memory,
    /// svix-redis.
    #[arg(long, default_value = "kxp-sqlite", value_delimiter = ',')]
    pub(crate) system: Vec<String>,
    /// Server processes, comma-separated (2 only where they share the work: kxp-postgres,
    /// kxp-citus, svix-redis).
    #[arg(long, default_value = "1", value_delimiter = ',')]
    pub(crate) processes: Vec<usize>,
    /// Extra flags for `kxp serve`, split on spaces; repeat for variants (`''`: the defaults).
    #[arg(long = "kxp-args", allow_hyphen_values = true)]
    pub(crate) kxp_args: Vec<String>,
    /// The `kxp` binary (`cargo build --release -p kxp-cli` in the main workspace).
    #[arg(long, default_value = "../target/release/kxp")]
    pub(crate) kxp_bin: PathBuf,
    /// A second `kxp` binary (a build of the previous commit, say) run beside `--kxp` in the
    /// same session, configuration for configuration: an A/B of a change, with the same noise.
    #[arg(long, value_name = "PATH")]
    pub(crate) kxp_baseline: Option<PathBuf>,
    /// The `svix-server` binary.
    #[arg(long, default_value = "/tmp/svix-target/release/svix-server")]
    pub(crate) svix_bin: PathBuf,
    /// Events per run.
    #[arg(long, default_value_t = 5000)]
    pub(crate) events: usize,
    /// Concurrent emitting clients.
    #[arg(long, default_value_t = 32)]
    pub(crate) clients: usize,
    /// Events per second in all (0: as fast as the clients go).
    #[arg(long, default_value_t = 0.0)]
    pub(crate) rate: f64,
    /// Size of each event's `data`, in bytes (about).
    #[arg(long, default_value_t = 1024)]
    pub(crate) payload_bytes: usize,
    /// Endpoints; event i goes to endpoint i mod endpoints (each endpoint subscribes to its own
    /// event type, so every event has one delivery).
    #[arg(long, default_value_t = 1)]
    pub(crate) endpoints: usize,
    /// How kxp's endpoints take their events, comma-separated to run both: `type` (endpoint
    /// j subscribes to its own event type) or `content` (every endpoint subscribes to `*` with
    /// a content filter on the event's `data.bench_route`, so each event is still delivered
    /// once, after every endpoint's filter ran on it). Svix runs `type` only.
    #[arg(long, default_value = "type", value_delimiter = ',')]
    pub(crate) routing: Vec<String>,
    /// kxp accounts the endpoints are spread over (endpoint j belongs to account j mod accounts).
    #[arg(long, default_value_t = 1)]
    pub(crate) accounts: usize,
    /// Fraction of endpoints that are unhealthy, alternately slow (200 after 10 s) and failing
    /// (500); rate and latency are then those of the healthy endpoints.
    #[arg(long, default_value_t = 0.0)]
    pub(crate) unhealthy: f64,
    /// Runs of each configuration.
    #[arg(long, default_value_t = 1)]
    pub(crate) repeat: usize,
    /// Take the configurations in turn (forwards, then backwards) in each of the rounds,
    /// instead of each configuration's runs back to back.
    #[arg(long)]
    pub(crate) alternate: bool,
    /// Longest wait, per run, for every event to arrive (seconds).
    #[arg(long, default_value_t = 300)]
    pub(crate) timeout: u64,
    /// PostgreSQL server (loopback), without a database.
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432")]
    pub(crate) pg_server: String,
    /// kxp-citus: the local Citus cluster's directory and coordinator port (`cluster.sh start
    /// <dir> <port>`), and how many of its workers a run's database uses.
    #[arg(long, default_value = "/tmp/kxp-citus2")]
    pub(crate) citus_dir: PathBuf,
    #[arg(long, default_value_t = 9710)]
    pub(crate) citus_port: u16,
    #[arg(long, default_value_t = 2)]
    pub(crate) citus_workers: u16,
    /// Redis for svix-redis (loopback; the database is flushed).
    #[arg(long, default_value = "redis://127.0.0.1:6379/13")]
    pub(crate) redis_url: String,
    /// Seconds for each limit measurement.
    #[arg(long, default_value_t = 3.0)]
    pub(crate) limit_secs: f64,
    /// Skip the limit measurements.
    #[arg(long)]
    pub(crate) no_limits: bool,
    /// Sample pg_stat_activity's wait events every this many ms during PostgreSQL runs (0: off).
    #[arg(long, default_value_t = 100)]
    pub(crate) sample_ms: u64,
    /// Keep each run's temporary directory (server logs, SQLite file).
    #[arg(long)]
    pub(crate) keep_logs: bool,
}

/// How endpoints take their events (`--routing`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Routing {
    /// One event type per endpoint.
    Type,
    /// Every type, and a content filter per endpoint.
    Content,
}

impl Routing {
    fn parse(name: &str) -> Result<Routing> {
        match name.trim() {
            "type" => Ok(Routing::Type),
            "content" => Ok(Routing::Content),
            other => Err(format!("--routing: `type` or `content`, not {other:?}").into()),
        }
    }
}

pub(crate) struct Config {
    pub(crate) system: System,
    pub(crate) processes: usize,
    pub(crate) routing: Routing,
    pub(crate) kxp_args: Vec<String>,
    /// The `kxp` binary, and whether it is the `--kxp-baseline` one.
    pub(crate) kxp_bin: PathBuf,
    pub(crate) baseline: bool,
}

impl Config {
    pub(crate) fn flags(&self) -> String {
        let flags = if self.kxp_args.is_empty() {
            if self.system.is_kxp() {
                "defaults"
            } else {
                "—"
            }
            .to_owned()
        } else {
            format!("`{}`", self.kxp_args.join(" "))
        };
        let flags = match self.routing {
            Routing::Type => flags,
            Routing::Content => format!("{flags}, routed by content filters"),
        };
        if self.baseline {
            format!("{flags}, baseline binary")
        } else {
            flags
        }
    }
}

pub(crate) fn loopback(url: &str) -> bool {
    let host = url
        .split("://")
        .nth(1)
        .unwrap_or("")
        .rsplit('@')
        .next()
        .unwrap_or("");
    host.starts_with("127.0.0.1") || host.starts_with("localhost") || host.starts_with("[::1]")
}

pub(crate) fn configs(args: &Args) -> Result<Vec<Config>> {
    let variants: Vec<Vec<String>> = if args.kxp_args.is_empty() {
        vec![Vec::new()]
    } else {
        args.kxp_args
            .iter()
            .map(|v| v.split_whitespace().map(str::to_owned).collect())
            .collect()
    };
    let routings = args
        .routing
        .iter()
        .map(|r| Routing::parse(r))
        .collect::<Result<Vec<_>>>()?;
    let mut configs = Vec::new();
    for name in &args.system {
        let system = System::parse(name.trim())?;
        for &processes in &args.processes {
            if processes == 0 || processes > 8 {
                return Err("--processes: 1 to 8".into());
            }
            if processes > 1 && !system.scales_out() {
                eprintln!(
                    "note: {} runs as one process only; skipping {processes}",
                    system.name()
                );
                continue;
            }
            if system.is_kxp() {
                let bins = std::iter::once((&args.kxp_bin, false))
                    .chain(args.kxp_baseline.iter().map(|b| (b, true)));
                for (bin, baseline) in bins {
                    for v in &variants {
                        for &routing in &routings {
                            configs.push(Config {
                                system,
                                processes,
                                routing,
                                kxp_args: v.clone(),
                                kxp_bin: bin.clone(),
                                baseline,
                            });
                        }
                    }
                }
            } else {
                configs.push(Config {
                    system,
                    processes,
                    routing: Routing::Type,
                    kxp_args: Vec::new(),
                    kxp_bin: args.kxp_bin.clone(),
                    baseline: false,
                });
            }
        }
    }
    if configs.is_empty() {
        return Err("nothing to run".into());
    }
    Ok(configs)
}
