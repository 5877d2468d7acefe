//! `kxp sign` and `kxp verify`: the signature scheme at the command line, for debugging a
//! receiver ("what header should this body carry?") or a captured request ("why was it refused?").

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, CommandFactory, error::ErrorKind};
use kxp_verify::{Secret, Signer, Verifier};

/// Where the secrets come from when no `--secret` is given: keeping them out of the command line
/// keeps them out of shell history and `ps`.
const SECRET_ENV: &str = "KXP_WEBHOOK_SECRET";

#[derive(Args)]
pub(crate) struct Secrets {
    /// A signing secret (repeat for several, newest first). Defaults to the comma-separated list
    /// in KXP_WEBHOOK_SECRET.
    #[arg(long = "secret", value_name = "S")]
    secrets: Vec<String>,
}

#[derive(Args)]
pub(crate) struct SignArgs {
    #[command(flatten)]
    secrets: Secrets,
    /// The `t` value: Unix seconds.
    #[arg(long, value_name = "T")]
    timestamp: u64,
    /// The raw body; `-` reads standard input.
    #[arg(long, value_name = "F")]
    body_file: PathBuf,
}

#[derive(Args)]
pub(crate) struct VerifyArgs {
    #[command(flatten)]
    secrets: Secrets,
    /// The X-Kxp-Signature value.
    #[arg(long, value_name = "H", allow_hyphen_values = true)]
    header: String,
    /// The raw body; `-` reads standard input.
    #[arg(long, value_name = "F")]
    body_file: PathBuf,
    /// The receiver's clock, Unix seconds [default: now].
    #[arg(long, value_name = "T")]
    now: Option<u64>,
    /// How far, in seconds, the timestamp may be from `--now`.
    #[arg(long, value_name = "SECS", default_value_t = kxp_verify::DEFAULT_TOLERANCE.as_secs())]
    tolerance: u64,
}

pub(crate) fn sign(args: SignArgs) -> ExitCode {
    let signer = Signer::with_secrets(args.secrets.load()).unwrap_or_else(|e| usage_error(e));
    let body = read_body(&args.body_file);
    println!("{}", signer.sign(args.timestamp, &body));
    ExitCode::SUCCESS
}

pub(crate) fn verify(args: VerifyArgs) -> ExitCode {
    let verifier = Verifier::with_secrets(args.secrets.load())
        .unwrap_or_else(|e| usage_error(e))
        .with_tolerance(Duration::from_secs(args.tolerance));
    let body = read_body(&args.body_file);
    let result = match args.now {
        Some(now) => verifier.verify(&args.header, &body, now),
        None => verifier.verify_now(&args.header, &body),
    };
    match result {
        Ok(_) => {
            println!("ok");
            ExitCode::SUCCESS
        }
        Err(error) => {
            // Display starts with the kind: "signature_mismatch: no signature matches …".
            eprintln!("{error}");
            ExitCode::from(1)
        }
    }
}

impl Secrets {
    pub(crate) fn load(self) -> Vec<Secret> {
        let texts = if self.secrets.is_empty() {
            match std::env::var(SECRET_ENV) {
                Ok(list) => list.split(',').map(|s| s.trim().to_owned()).collect(),
                Err(_) => usage_error(format!("give --secret, or set {SECRET_ENV}")),
            }
        } else {
            self.secrets
        };
        texts
            .iter()
            .map(|s| Secret::new(s).unwrap_or_else(|e| usage_error(e)))
            .collect()
    }
}

fn read_body(path: &PathBuf) -> Vec<u8> {
    let read = if path.as_os_str() == "-" {
        let mut body = Vec::new();
        std::io::stdin().read_to_end(&mut body).map(|_| body)
    } else {
        std::fs::read(path)
    };
    read.unwrap_or_else(|e| usage_error(format!("cannot read body file {}: {e}", path.display())))
}

/// The one-thread runtime of the commands that make a few HTTP requests (`send`, `check`); an
/// error is printed, and is the command's exit code 1.
pub(crate) fn small_runtime() -> Result<tokio::runtime::Runtime, std::process::ExitCode> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("error: cannot start the async runtime: {e}");
            std::process::ExitCode::from(1)
        })
}

/// Exits 2 with clap's formatting, like any other argument error. The message never contains a
/// secret: `ConfigError` only names what is wrong.
pub(crate) fn usage_error(message: impl std::fmt::Display) -> ! {
    crate::Cli::command()
        .error(ErrorKind::ValueValidation, message)
        .exit()
}
