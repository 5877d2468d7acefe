//! `kxp serve`: the delivery service, until SIGTERM or Ctrl-C.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use crate::config::Settings;

#[derive(Args)]
pub(crate) struct ServeArgs {
    /// A TOML file of settings, keyed like the flags with `_` for `-` (`delivery_timeout =
    /// "2s"`). Flags win over the environment (`KXP_…`), which wins over the file, which wins
    /// over the defaults. Unknown keys are refused.
    #[arg(long, env = "KXP_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// Print the effective configuration as a TOML file (secrets redacted) and exit.
    #[arg(long)]
    print_config: bool,
    #[command(flatten)]
    settings: Settings,
}

pub(crate) fn serve(args: ServeArgs) -> ExitCode {
    let file = match &args.config {
        Some(path) => match Settings::from_file(path) {
            Ok(file) => file,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        },
        None => Settings::default(),
    };
    // KXP_API_KEY and KXP_SECRETS_KEY have no flag (a flag would show them to `ps`), so clap
    // does not read them.
    let env = Settings {
        api_key: std::env::var("KXP_API_KEY").ok().filter(|k| !k.is_empty()),
        secrets_key: std::env::var(kxp_sender::SECRETS_KEY_ENV)
            .ok()
            .filter(|k| !k.is_empty()),
        ..Settings::default()
    };
    let settings = args.settings.over(env).over(file);
    let config = match settings.to_config() {
        Ok(config) => config,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if args.print_config {
        print!(
            "{}",
            Settings::effective(&config, settings.json_logs()).to_toml()
        );
        return ExitCode::SUCCESS;
    }
    init_logs(settings.json_logs());
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let dev = config.dev;
    let grace = config.shutdown_grace;
    let allowed = config
        .allow_addresses
        .iter()
        .map(ToString::to_string)
        .chain(dev.then(|| "loopback (--dev)".to_owned()))
        .collect::<Vec<_>>()
        .join(", ");
    let egress = config.egress_proxy.as_ref().map(ToString::to_string);
    runtime.block_on(async move {
        let server = match kxp_sender::start(config).await {
            Ok(server) => server,
            Err(e) => {
                // sqlx errors can quote the URL; never print the database password.
                eprintln!("error: {}", kxp_sender::redact_passwords(&e.to_string()));
                return ExitCode::FAILURE;
            }
        };
        if let Some(key) = server.new_api_key() {
            println!("Created the first account. Its API key, shown only this once:\n\n    {key}\n");
            println!("Use it as `Authorization: Bearer <key>`, or set KXP_API_KEY to choose your own.");
        }
        tracing::info!(target: "kxp_sender", addr = %server.addr(), database = server.backend(), "kxp serve is listening");
        if !allowed.is_empty() {
            // Holes in the address guard are worth a line in every log.
            tracing::warn!(target: "kxp_sender", allow_addresses = %allowed, dev, "the address guard lets deliveries reach these non-public addresses");
        }
        if let Some(proxy) = egress {
            tracing::info!(target: "kxp_sender::egress", proxy = %proxy, "deliveries leave through the egress proxy");
        }
        println!("kxp serve listening on http://{}", server.addr());
        stop_signal().await;
        tracing::info!(target: "kxp_sender", grace = %kxp_sender::format_duration(grace), "shutting down: /readyz answers 503, new work is refused, in-flight attempts finish within the grace");
        server.shutdown().await;
        ExitCode::SUCCESS
    })
}

pub(crate) async fn stop_signal() {
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
