//! `kxp demo`, run as a new user runs it: the real binary, end to end, judged by its exit code
//! and its summary table.

use std::collections::HashMap;
use std::process::Command;
use std::time::{Duration, Instant};

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
