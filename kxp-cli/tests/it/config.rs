//! `kxp serve`'s settings: flags > environment > file > defaults, seen through
//! `--print-config`, which runs nothing else.

use std::process::{Command, Output};

fn print_config(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_kxp"));
    command.arg("serve").arg("--print-config").args(args);
    // The test's own environment must not leak a setting in.
    for (key, _) in std::env::vars() {
        if key.starts_with("KXP_") {
            command.env_remove(key);
        }
    }
    command.envs(env.iter().copied()).output().unwrap()
}

fn effective(args: &[&str], env: &[(&str, &str)]) -> toml::Table {
    let out = print_config(args, env);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    toml::from_str(&String::from_utf8(out.stdout).unwrap()).unwrap()
}

fn file(text: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kxp.toml");
    std::fs::write(&path, text).unwrap();
    (dir, path.display().to_string())
}

#[test]
fn each_layer_wins_over_the_ones_below_it() {
    let (_dir, path) = file(
        "workers = 3\nrate_limit = 7\ndelivery_timeout = \"2s\"\nlisten = \"127.0.0.1:9001\"\n",
    );
    let env = [
        ("KXP_CONFIG", path.as_str()),
        ("KXP_RATE_LIMIT", "11"),
        ("KXP_DELIVERY_TIMEOUT", "3s"),
    ];
    let config = effective(&["--delivery-timeout", "4s"], &env);
    assert_eq!(config["workers"].as_integer(), Some(3), "file over default");
    assert_eq!(config["rate_limit"].as_integer(), Some(11), "env over file");
    assert_eq!(
        config["delivery_timeout"].as_str(),
        Some("4s"),
        "flag over env"
    );
    assert_eq!(
        config["listen"].as_str(),
        Some("127.0.0.1:9001"),
        "file over default"
    );
    assert_eq!(config["lease_extra"].as_str(), Some("10s"), "default");
    assert_eq!(
        config["per_endpoint_concurrency"].as_integer(),
        Some(64),
        "default"
    );
}

#[test]
fn booleans_and_lists_come_from_every_source() {
    let (_dir, path) = file("dev = true\nallow_address = [\"10.0.0.0/8\"]\n");
    let config = effective(&["--config", &path], &[]);
    assert_eq!(config["dev"].as_bool(), Some(true));
    assert_eq!(config["allow_address"].as_array().unwrap().len(), 1);

    let config = effective(
        &["--config", &path, "--dev=false"],
        &[("KXP_ALLOW_ADDRESS", "10.1.0.0/16,fd00::/8")],
    );
    assert_eq!(config["dev"].as_bool(), Some(false), "flag over file");
    let allowed: Vec<_> = config["allow_address"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(allowed, ["10.1.0.0/16", "fd00::/8"], "env over file");

    let config = effective(&["--dev"], &[("KXP_JSON_LOGS", "1")]);
    assert_eq!(config["dev"].as_bool(), Some(true));
    assert_eq!(config["json_logs"].as_bool(), Some(true));
}

#[test]
fn the_printed_configuration_is_a_valid_file_with_secrets_redacted() {
    let env = [
        ("KXP_DATABASE_URL", "postgres://kxp:hunter2@127.0.0.1/kxp"),
        ("KXP_SMTP_URL", "smtps://ops:s3cret@127.0.0.1:465"),
        ("KXP_API_KEY", "kxp_live_secret_key"),
    ];
    let out = print_config(&[], &env);
    let printed = String::from_utf8(out.stdout).unwrap();
    for secret in ["hunter2", "s3cret", "kxp_live_secret_key"] {
        assert!(!printed.contains(secret), "{printed}");
    }
    assert!(
        printed.contains("postgres://kxp:[redacted]@127.0.0.1/kxp"),
        "{printed}"
    );
    // What it prints is itself a settings file.
    let (_dir, path) = file(&printed);
    let again = effective(&["--config", &path], &[]);
    assert_eq!(
        again["retry_schedule"].as_str(),
        Some("0s,10s,30s,1m,5m,15m,1h,6h,1d")
    );
}

#[test]
fn an_unknown_key_in_the_file_is_refused_by_name() {
    let (_dir, path) = file("workers = 3\nretry_shedule = \"0s,1s\"\n");
    let out = print_config(&["--config", &path], &[]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("retry_shedule"), "{stderr}");
}

#[test]
fn out_of_range_values_are_refused_whatever_their_source() {
    let (_dir, path) = file("delivery_timeout = \"1m\"\n");
    for (args, env) in [
        (vec!["--config", path.as_str()], vec![]),
        (vec![], vec![("KXP_DELIVERY_TIMEOUT", "1m")]),
        (vec!["--delivery-timeout", "1m"], vec![]),
    ] {
        let out = print_config(&args, &env);
        assert_eq!(out.status.code(), Some(2), "{args:?} {env:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("delivery_timeout"));
    }
    let out = print_config(&["--workers", "many"], &[]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn help_shows_the_defaults_in_force() {
    let out = Command::new(env!("CARGO_BIN_EXE_kxp"))
        .args(["serve", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    let defaults = kxp_sender::Config::default();
    for shown in [
        format!("[default: {}]", defaults.workers),
        format!("[default: {}]", defaults.database_url),
        format!("[default: {}]", defaults.schedule),
        "[default: 5s]".to_owned(),
        "[default: 30d]".to_owned(),
    ] {
        assert!(help.contains(&shown), "{shown} missing from:\n{help}");
    }
}

#[test]
fn the_api_servers_bounds_come_from_every_source() {
    let config = effective(&[], &[]);
    assert_eq!(config["header_timeout"].as_str(), Some("10s"), "default");
    assert_eq!(
        config["max_connections"].as_integer(),
        Some(1024),
        "default"
    );
    let (_dir, path) = file("header_timeout = \"2s\"\nmax_connections = 64\n");
    let config = effective(&["--config", &path], &[("KXP_MAX_CONNECTIONS", "32")]);
    assert_eq!(config["header_timeout"].as_str(), Some("2s"), "file");
    assert_eq!(
        config["max_connections"].as_integer(),
        Some(32),
        "env over file"
    );
    let config = effective(&["--config", &path, "--header-timeout", "500ms"], &[]);
    assert_eq!(
        config["header_timeout"].as_str(),
        Some("500ms"),
        "flag over file"
    );
    let config = effective(&["--max-event-bytes", "2048", "--api-rate-limit", "0"], &[]);
    assert_eq!(config["max_event_bytes"].as_integer(), Some(2048));
    assert_eq!(config["api_rate_limit"].as_integer(), Some(0));
    assert_eq!(
        effective(&[], &[])["max_event_bytes"].as_integer(),
        Some(512 * 1024),
        "default"
    );
}

#[test]
fn the_backlog_limit_comes_from_every_source() {
    assert_eq!(
        effective(&[], &[])["backlog_limit"].as_integer(),
        Some(10_000),
        "default"
    );
    let (_dir, path) = file("backlog_limit = 500\n");
    let config = effective(&["--config", &path], &[]);
    assert_eq!(config["backlog_limit"].as_integer(), Some(500), "file");
    let config = effective(&["--config", &path], &[("KXP_BACKLOG_LIMIT", "0")]);
    assert_eq!(
        config["backlog_limit"].as_integer(),
        Some(0),
        "env over file"
    );
    let config = effective(
        &["--config", &path, "--backlog-limit", "42"],
        &[("KXP_BACKLOG_LIMIT", "0")],
    );
    assert_eq!(
        config["backlog_limit"].as_integer(),
        Some(42),
        "flag over env"
    );
}

/// A mistake on a line that holds a secret is reported by line number, never by quoting it.
#[test]
fn errors_in_the_file_never_quote_its_lines() {
    for (text, what) in [
        ("apikey = \"kxp_live_0123456789abcdef\"\n", "apikey"),
        (
            "workers = 3\nsmtp_ur1 = \"smtps://ops:s3cret@127.0.0.1:465\"\n",
            "smtp_ur1",
        ),
        (
            "database_url = postgres://kxp:hunter2@127.0.0.1/kxp\n",
            "line 1",
        ),
    ] {
        let (_dir, path) = file(text);
        let out = print_config(&["--config", &path], &[]);
        assert_eq!(out.status.code(), Some(2), "{text}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(what), "{what} missing: {stderr}");
        for secret in ["kxp_live_0123456789abcdef", "s3cret", "hunter2"] {
            assert!(!stderr.contains(secret), "{stderr}");
        }
    }
}

#[test]
fn a_password_in_the_database_url_query_is_redacted_too() {
    let out = print_config(
        &[],
        &[(
            "KXP_DATABASE_URL",
            "postgres://kxp@127.0.0.1:5432/kxp?password=hunter2&sslmode=disable",
        )],
    );
    let printed = String::from_utf8(out.stdout).unwrap();
    assert!(!printed.contains("hunter2"), "{printed}");
    assert!(
        printed.contains("?password=[redacted]&sslmode=disable"),
        "{printed}"
    );
}

/// A lone user part is a token to NATS (`nats://TOKEN@host`) and may be one elsewhere: no
/// output of the binary shows it, not an error about its URL, not the printed configuration,
/// not a failed start.
#[test]
fn a_token_in_a_url_never_reaches_the_output() {
    const TOKEN: &str = "S3cr3tT0ken";
    let source =
        format!("nats://{TOKEN}@127.0.0.1:4222?stream=S&subject=s&durable=d&account=acc_1");
    let bad = format!("{source}&bogus=1");
    let (_dir, path) = file(&format!("ingest = [{bad:?}]\n"));
    for (args, env) in [
        (vec!["--ingest", bad.as_str()], vec![]),
        (vec![], vec![("KXP_INGEST", bad.as_str())]),
        (vec!["--config", path.as_str()], vec![]),
    ] {
        let out = print_config(&args, &env);
        assert_eq!(out.status.code(), Some(2), "{args:?} {env:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains(TOKEN), "{stderr}");
        assert!(
            stderr.contains("nats://[redacted]@127.0.0.1:4222") && stderr.contains("bogus"),
            "{stderr}"
        );
    }

    let database = format!("postgres://{TOKEN}@127.0.0.1:1/kxp");
    let smtp = format!("smtp://{TOKEN}@127.0.0.1:25");
    let env = [
        ("KXP_DATABASE_URL", database.as_str()),
        ("KXP_SMTP_URL", smtp.as_str()),
    ];
    let out = print_config(&["--ingest", &source], &env);
    let printed = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success() && !printed.contains(TOKEN),
        "{printed}"
    );
    for shown in [
        "nats://[redacted]@127.0.0.1:4222?stream=S",
        "postgres://[redacted]@127.0.0.1:1/kxp",
        "smtp://[redacted]@127.0.0.1:25",
    ] {
        assert!(printed.contains(shown), "{shown} missing from {printed}");
    }

    // Started for real: nothing listens on port 1, and the error says so without the token.
    let mut command = Command::new(env!("CARGO_BIN_EXE_kxp"));
    command.args(["serve", "--listen", "127.0.0.1:0", "--ingest", &source]);
    for (key, _) in std::env::vars() {
        if key.starts_with("KXP_") {
            command.env_remove(key);
        }
    }
    let out = command.envs(env).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        !stderr.contains(TOKEN) && !String::from_utf8_lossy(&out.stdout).contains(TOKEN),
        "{stderr}"
    );
}

#[test]
fn the_public_url_comes_from_every_source_and_a_non_loopback_listener_needs_one() {
    let (_dir, path) = file("public_url = \"https://file.example\"\n");
    let from_file = effective(&["--config", &path], &[]);
    assert_eq!(
        from_file["public_url"].as_str(),
        Some("https://file.example")
    );
    let from_env = effective(
        &["--config", &path],
        &[("KXP_PUBLIC_URL", "https://env.example")],
    );
    assert_eq!(from_env["public_url"].as_str(), Some("https://env.example"));
    let from_flag = effective(
        &["--config", &path, "--public-url", "https://flag.example"],
        &[("KXP_PUBLIC_URL", "https://env.example")],
    );
    assert_eq!(
        from_flag["public_url"].as_str(),
        Some("https://flag.example")
    );

    // Serving on every interface without one: refused before anything is opened.
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kxp"))
        .args(["serve", "--listen", "0.0.0.0:0", "--database-url"])
        .arg(format!("sqlite://{}", dir.path().join("kxp.db").display()))
        .env_remove("KXP_PUBLIC_URL")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("--public-url"), "{stderr}");
    assert!(
        !dir.path().join("kxp.db").exists(),
        "the database was opened"
    );
}

#[test]
fn the_otlp_endpoint_comes_from_its_flag_the_standard_variable_or_the_file() {
    let otel = "OTEL_EXPORTER_OTLP_ENDPOINT";
    assert_eq!(
        effective(&[], &[(otel, "")]).get("otlp_endpoint"),
        None,
        "default: none"
    );
    let (_dir, path) = file("otlp_endpoint = \"http://file:4318\"\n");
    let config = effective(&["--config", &path], &[]);
    assert_eq!(
        config["otlp_endpoint"].as_str(),
        Some("http://file:4318"),
        "file"
    );
    let config = effective(&["--config", &path], &[(otel, "http://env:4318")]);
    assert_eq!(
        config["otlp_endpoint"].as_str(),
        Some("http://env:4318"),
        "env over file"
    );
    let config = effective(
        &["--otlp-endpoint", "http://flag:4318"],
        &[(otel, "http://env:4318")],
    );
    assert_eq!(
        config["otlp_endpoint"].as_str(),
        Some("http://flag:4318"),
        "flag over env"
    );
}

#[test]
fn an_otlp_endpoint_that_is_not_an_http_url_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", dir.path().join("kxp.db").display());
    let out = Command::new(env!("CARGO_BIN_EXE_kxp"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--database-url",
            &database,
        ])
        .args(["--otlp-endpoint", "collector:4318"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("invalid_otlp_endpoint"), "{stderr}");
}
