//! The Markdown report on stdout: the command line, the machine and versions, the table of
//! configurations (medians of their runs), the limits measured in the same run, and each run's
//! one-line [`summary`] (also the progress line on stderr). Formatting only: it measures
//! nothing beyond asking the tools for their versions.

use sqlx::PgPool;

use crate::Limits;
use crate::config::{Args, Config};
use crate::procfs;
use crate::run::Measured;
use crate::systems::System;

pub(crate) fn summary(m: &Measured) -> String {
    let postgres = if m.pg_own_cpu > 0.0 {
        format!(", postgres {:.0} µs/event", m.per_event_us(m.pg_own_cpu))
    } else {
        String::new()
    };
    format!(
        "delivered {:.0}/s, ingest {:.0}/s, p50 {:.1} ms, p99 {:.1} ms, server {:.0} µs/event{}, \
         {}/{} arrived, {} duplicates, load {:.1}–{:.1}",
        m.delivered_per_s,
        m.ingest_per_s,
        m.p50,
        m.p99,
        m.per_event_us(m.server_cpu),
        postgres,
        m.arrived,
        m.expected,
        m.duplicates,
        m.load.0,
        m.load.1
    )
}

fn median(mut v: Vec<f64>) -> f64 {
    v.retain(|x| !x.is_nan());
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// `1234567.8` → `1,234,568`.
fn thousands(x: f64) -> String {
    if !x.is_finite() {
        return "–".into();
    }
    let digits = format!("{:.0}", x.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if x < 0.0 { format!("-{out}") } else { out }
}

fn ratio(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.3}")
    } else {
        "–".into()
    }
}

fn ms(x: f64) -> String {
    if !x.is_finite() {
        "–".into()
    } else if x < 10.0 {
        format!("{x:.1}")
    } else {
        thousands(x)
    }
}

fn shell_quote(arg: &str) -> String {
    if !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@".contains(c))
    {
        arg.to_owned()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

async fn version_of(bin: &std::path::Path, arg: &str) -> String {
    match tokio::process::Command::new(bin).arg(arg).output().await {
        Ok(out) => String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        Err(e) => format!("({}: {e})", bin.display()),
    }
}

pub(crate) async fn print_report(
    args: &Args,
    configs: &[Config],
    results: &[(usize, Measured)],
    limits: &Limits,
    notes: &[String],
    admin: Option<&PgPool>,
) {
    let command: Vec<String> = std::env::args().skip(1).map(|a| shell_quote(&a)).collect();
    println!(
        "```sh\ncd benches && cargo run --release --bin deliver -- {}\n```\n",
        command.join(" ")
    );
    let pg_version = match admin {
        Some(admin) => sqlx::query_scalar::<_, String>("SHOW server_version")
            .fetch_one(admin)
            .await
            .unwrap_or_default(),
        None => "unreachable".into(),
    };
    println!(
        "- Machine: {}; PostgreSQL {pg_version} on 127.0.0.1.",
        procfs::machine()
    );
    if configs.iter().any(|c| c.system.is_kxp()) {
        println!(
            "- kxp: `{}` ({})",
            args.kxp_bin.display(),
            version_of(&args.kxp_bin, "--version").await
        );
        if let Some(baseline) = &args.kxp_baseline {
            println!(
                "- kxp baseline: `{}` ({})",
                baseline.display(),
                version_of(baseline, "--version").await
            );
        }
    }
    if configs.iter().any(|c| !c.system.is_kxp()) {
        println!(
            "- Svix: `{}` ({})",
            args.svix_bin.display(),
            version_of(&args.svix_bin, "--version").await
        );
    }
    let loads: Vec<f64> = results
        .iter()
        .flat_map(|(_, m)| [m.load.0, m.load.1])
        .collect();
    let lo = loads.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = loads.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    println!(
        "- Load: {} events of {} B `data` per run, {} clients{}, {} endpoint(s) in {} account(s){}; \
         1-minute load average {lo:.1}–{hi:.1} during the runs.",
        thousands(args.events as f64),
        args.payload_bytes,
        args.clients,
        if args.rate > 0.0 {
            format!(" paced at {}/s", args.rate)
        } else {
            String::new()
        },
        args.endpoints,
        args.accounts,
        if args.unhealthy > 0.0 {
            format!(
                ", {:.0} % of endpoints slow (10 s) or failing (500): figures are the healthy endpoints'",
                args.unhealthy * 100.0
            )
        } else {
            String::new()
        }
    );
    let runs = args.repeat;
    println!(
        "- {} run(s) of each configuration{}; {}.\n",
        runs,
        if args.alternate {
            ", configurations in turn (forwards, then backwards)"
        } else {
            ""
        },
        if runs > 1 {
            "medians of the runs"
        } else {
            "one run"
        }
    );
    let receiver = median(limits.receiver.clone());
    let pg8 = median(limits.pg8.clone());
    // kxp's SQLite store commits with synchronous=FULL (kxp-sender/src/store/mod.rs).
    let sqlite_full = median(limits.sqlite_full.clone());
    println!(
        "| system | procs | kxp flags | delivered/s | ingest/s | p50 ms | p90 ms | p99 ms | max ms \
         | server CPU µs/event | PostgreSQL CPU µs/event (own backends; all) | commits/event | bench CPU µs/event \
         | peak RSS MiB | dup | missing | ÷ receiver | ÷ bare commits |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for (c, config) in configs.iter().enumerate() {
        let mine: Vec<&Measured> = results
            .iter()
            .filter(|(i, _)| *i == c)
            .map(|(_, m)| m)
            .collect();
        if mine.is_empty() {
            continue;
        }
        let med = |f: &dyn Fn(&Measured) -> f64| median(mine.iter().map(|m| f(m)).collect());
        let delivered = med(&|m| m.delivered_per_s);
        let floor = if config.system == System::KxpSqlite {
            sqlite_full
        } else {
            pg8
        };
        let pg = if config.system.uses_postgres() {
            format!(
                "{} ; {}",
                thousands(med(&|m| m.per_event_us(m.pg_own_cpu))),
                thousands(med(&|m| m.per_event_us(m.pg_all_cpu)))
            )
        } else {
            "– (in-process)".into()
        };
        let commits = med(&|m| {
            m.commits
                .map_or(f64::NAN, |n| n as f64 / m.arrived.max(1) as f64)
        });
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.0} | {} | {} | {} | {} |",
            config.system.name(),
            config.processes,
            config.flags(),
            thousands(delivered),
            thousands(med(&|m| m.ingest_per_s)),
            ms(med(&|m| m.p50)),
            ms(med(&|m| m.p90)),
            ms(med(&|m| m.p99)),
            ms(med(&|m| m.max)),
            thousands(med(&|m| m.per_event_us(m.server_cpu))),
            pg,
            if commits.is_finite() {
                format!("≈{commits:.1}")
            } else {
                "–".into()
            },
            thousands(med(&|m| m.per_event_us(m.bench_cpu))),
            med(&|m| m.peak_rss_mib),
            thousands(mine.iter().map(|m| m.duplicates).sum::<u64>() as f64),
            thousands(
                mine.iter()
                    .map(|m| (m.expected - m.arrived) as f64)
                    .sum::<f64>()
            ),
            ratio(delivered / receiver),
            ratio(delivered / floor),
        );
    }
    citus_nodes(configs, results);
    println!(
        "\n`÷ receiver`: delivered/s over the receiver alone; `÷ bare commits`: over bare \
         single-row commits/s (SQLite WAL FULL, kxp's setting, for kxp-sqlite; PostgreSQL \
         with 8 clients otherwise). CPU per delivered event, from /proc, between the first emit \
         and the last arrival; `own backends` are the PostgreSQL backends connected to the run's \
         database, `all` every postgres process on the machine (other users' included). \
         `commits/event`: pg_stat_database.xact_commit of the run's database (approximate: \
         backends report once a second). `bench CPU`: this process (emitter and receiver), \
         which shares the cores.\n"
    );
    if !limits.receiver.is_empty() {
        let list = |v: &[f64]| {
            v.iter()
                .map(|x| thousands(*x))
                .collect::<Vec<_>>()
                .join(", ")
        };
        println!("| limit (same run) | median /s | each measurement /s |\n|---|---|---|");
        let rows = [
            (
                format!("receiver alone, {} loopback clients", args.clients),
                &limits.receiver,
            ),
            (
                "PostgreSQL single-row commits, 1 client".to_owned(),
                &limits.pg1,
            ),
            (
                "PostgreSQL single-row commits, 8 clients".to_owned(),
                &limits.pg8,
            ),
            (
                "SQLite single-row commits, WAL, synchronous FULL".to_owned(),
                &limits.sqlite_full,
            ),
            (
                "SQLite single-row commits, WAL, synchronous NORMAL".to_owned(),
                &limits.sqlite_normal,
            ),
        ];
        for (label, v) in rows {
            if !v.is_empty() {
                println!(
                    "| {label} | {} | {} |",
                    thousands(median(v.clone())),
                    list(v)
                );
            }
        }
        println!();
    }
    println!("Each run:\n");
    for (i, (c, m)) in results.iter().enumerate() {
        let config = &configs[*c];
        println!(
            "- run {}: {} ×{} {}: {}{}",
            i + 1,
            config.system.name(),
            config.processes,
            config.flags(),
            summary(m),
            if m.unhealthy_hits > 0 || m.unparsed > 0 {
                format!(
                    ", {} requests to unhealthy endpoints, {} unparsed",
                    m.unhealthy_hits, m.unparsed
                )
            } else {
                String::new()
            }
        );
        if !m.waits.is_empty() {
            let top: Vec<String> = m
                .waits
                .iter()
                .take(8)
                .map(|(w, n)| format!("{w} {n:.2}"))
                .collect();
            println!(
                "  - pg_stat_activity (average non-idle backends): {}",
                top.join(", ")
            );
        }
    }
    for note in notes {
        println!("- note: {note}");
    }
}

/// kxp-citus's runs, node by node: CPU, statements and transactions per delivered event
/// (medians of the runs).
fn citus_nodes(configs: &[Config], results: &[(usize, Measured)]) {
    for (c, config) in configs.iter().enumerate() {
        let mine: Vec<&Measured> = results
            .iter()
            .filter(|(i, m)| *i == c && !m.nodes.is_empty())
            .map(|(_, m)| m)
            .collect();
        let Some(first) = mine.first() else {
            continue;
        };
        println!(
            "\n{} ×{} {}, per delivered event, by node:\n\n\
             | node | CPU µs/event | statements/event | transactions/event |\n|---|---|---|---|",
            config.system.name(),
            config.processes,
            config.flags()
        );
        for (n, node) in first.nodes.iter().enumerate() {
            let per_event = |f: &dyn Fn(&crate::citus::NodeCost) -> Option<f64>| {
                let values: Vec<f64> = mine
                    .iter()
                    .filter_map(|m| f(&m.nodes[n]).map(|v| v / m.arrived.max(1) as f64))
                    .collect();
                if values.is_empty() {
                    "–".to_owned()
                } else {
                    format!("{:.1}", median(values))
                }
            };
            println!(
                "| {} | {} | {} | {} |",
                node.name,
                thousands(median(
                    mine.iter()
                        .map(|m| m.per_event_us(m.nodes[n].cpu))
                        .collect()
                )),
                per_event(&|cost| cost.statements.map(|s| s as f64)),
                per_event(&|cost| cost.commits.map(|s| s as f64)),
            );
        }
    }
}
