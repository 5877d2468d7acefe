//! `kxp sign` and `kxp verify` against every shared vector, with the exact exit codes and
//! outputs the CLI promises.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use kxp_testkit::{Vector, check_all, vectors};

fn kxp(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kxp"))
        .args(args)
        .env_remove("KXP_WEBHOOK_SECRET")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

fn secret_args(vector: &Vector) -> Vec<String> {
    vector
        .secrets
        .iter()
        .flat_map(|s| ["--secret".to_owned(), s.clone()])
        .collect()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[test]
fn verify_reaches_every_vectors_verdict_with_the_promised_exit_codes() {
    let mut skipped = Vec::new();
    check_all(|vector| {
        if vector.header.contains('\0') {
            // An argv string cannot hold a NUL byte, so no caller can hand this header to the
            // CLI; the library tests cover the vector.
            skipped.push(vector.name.clone());
            return vector.expect.clone();
        }
        let mut args = vec!["verify".to_owned()];
        args.extend(secret_args(vector));
        let now = vector.now.to_string();
        let tolerance = vector.tolerance_s.to_string();
        args.extend(
            [
                "--header",
                &vector.header,
                "--body-file",
                "-",
                "--now",
                &now,
                "--tolerance",
                &tolerance,
            ]
            .map(String::from),
        );
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = kxp(&args, &vector.body);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        match out.status.code() {
            Some(0) => {
                assert_eq!(stdout, "ok\n", "{}", vector.name);
                assert!(stderr.is_empty(), "{}: {stderr}", vector.name);
                "ok".to_owned()
            }
            Some(1) => {
                assert!(stdout.is_empty(), "{}: {stdout}", vector.name);
                assert_eq!(
                    stderr.lines().count(),
                    1,
                    "{}: one line, got {stderr:?}",
                    vector.name
                );
                for secret in &vector.secrets {
                    assert!(
                        !stderr.contains(secret.as_str()),
                        "{}: secret in stderr",
                        vector.name
                    );
                }
                stderr.split(':').next().unwrap().to_owned()
            }
            other => panic!("{}: exit {other:?}, stderr {stderr}", vector.name),
        }
    });
    assert_eq!(skipped, ["malformed_nul_byte"]);
}

#[test]
fn sign_prints_the_header_every_valid_vector_carries() {
    let dir = std::env::temp_dir().join(format!("kxp-sign-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let signable = vectors()
        .into_iter()
        .filter(|v| v.is_ok() && v.has_canonical_timestamp());
    for vector in signable {
        let body_file = dir.join(&vector.name);
        std::fs::write(&body_file, &vector.body).unwrap();
        let t = vector.timestamp().unwrap().to_string();
        // Whichever secret the sender used, signing with it must give one of the header's `v1`s.
        let reproduced = vector.secrets.iter().any(|secret| {
            let args = [
                "sign",
                "--secret",
                secret,
                "--timestamp",
                &t,
                "--body-file",
                body_file.to_str().unwrap(),
            ];
            let out = kxp(&args, b"");
            assert_eq!(out.status.code(), Some(0), "{}", vector.name);
            let header = text(&out.stdout);
            assert!(header.ends_with('\n') && header.matches('\n').count() == 1);
            let v1 = header.trim_end().rsplit("v1=").next().unwrap().to_owned();
            vector
                .v1_values()
                .iter()
                .any(|h| h.eq_ignore_ascii_case(&v1))
        });
        assert!(
            reproduced,
            "{}: no secret reproduces a v1 of {:?}",
            vector.name, vector.header
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn sign_with_several_secrets_lists_them_in_order_and_verify_accepts_it() {
    let out = kxp(
        &[
            "sign",
            "--secret",
            "new",
            "--secret",
            "old",
            "--timestamp",
            "1764464523",
            "--body-file",
            "-",
        ],
        b"{}",
    );
    let header = text(&out.stdout).trim_end().to_owned();
    assert_eq!(header.matches(",v1=").count(), 2);
    for secret in ["new", "old"] {
        let out = kxp(
            &[
                "verify",
                "--secret",
                secret,
                "--header",
                &header,
                "--body-file",
                "-",
                "--now",
                "1764464523",
            ],
            b"{}",
        );
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }
}

#[test]
fn secrets_can_come_from_the_environment() {
    let out = Command::new(env!("CARGO_BIN_EXE_kxp"))
        .args(["sign", "--timestamp", "1", "--body-file", "-"])
        .env("KXP_WEBHOOK_SECRET", "a, b")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let from_flags = kxp(
        &[
            "sign",
            "--secret",
            "a",
            "--secret",
            "b",
            "--timestamp",
            "1",
            "--body-file",
            "-",
        ],
        b"",
    );
    assert_eq!(out.stdout, from_flags.stdout);
}

#[test]
fn argument_errors_exit_2_without_echoing_secrets() {
    for args in [
        vec!["sign", "--timestamp", "1", "--body-file", "-"],
        vec![
            "sign",
            "--secret",
            "hush-hush",
            "--timestamp",
            "soon",
            "--body-file",
            "-",
        ],
        vec![
            "sign",
            "--secret",
            "hush-hush",
            "--secret",
            "",
            "--timestamp",
            "1",
            "--body-file",
            "-",
        ],
        vec![
            "sign",
            "--secret",
            "hush-hush",
            "--timestamp",
            "1",
            "--body-file",
            "/nonexistent/body",
        ],
        vec!["verify", "--secret", "hush-hush", "--body-file", "-"],
        vec![
            "verify",
            "--secret",
            "hush-hush",
            "--header",
            "t=1",
            "--body-file",
            "-",
            "--tolerance",
            "-5",
        ],
    ] {
        let out = kxp(&args, b"");
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.starts_with("error:"), "{args:?}: {stderr}");
        assert!(!stderr.contains("hush-hush"), "{args:?}: {stderr}");
    }
}

#[test]
fn verify_defaults_to_the_clock() {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let signed = kxp(
        &[
            "sign",
            "--secret",
            "s",
            "--timestamp",
            &now.to_string(),
            "--body-file",
            "-",
        ],
        b"x",
    );
    let header = text(&signed.stdout).trim_end().to_owned();
    let out = kxp(
        &[
            "verify",
            "--secret",
            "s",
            "--header",
            &header,
            "--body-file",
            "-",
        ],
        b"x",
    );
    assert_eq!(text(&out.stdout), "ok\n");
    let old = kxp(
        &[
            "sign",
            "--secret",
            "s",
            "--timestamp",
            "1000",
            "--body-file",
            "-",
        ],
        b"x",
    );
    let header = text(&old.stdout).trim_end().to_owned();
    let out = kxp(
        &[
            "verify",
            "--secret",
            "s",
            "--header",
            &header,
            "--body-file",
            "-",
        ],
        b"x",
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).starts_with("timestamp_too_old: "));
}
