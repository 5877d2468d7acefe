//! `kxp encryption-key generate` and `public`: the merchant's side of payload encryption.
//! `generate` prints a new private JWK (P-256 or X25519) for the receiver to keep with its
//! secrets; `public` reads a private JWK on standard input and prints its public half, the
//! `encryption_jwk` to register. Standard streams only, so no key is ever a command-line
//! argument that `ps` would show.

use std::io::Read;
use std::process::ExitCode;

use clap::{Args, Subcommand, ValueEnum};
use kxp_jwe::{Curve, DecryptionKey};

/// Shown under `kxp encryption-key --help`.
const USAGE: &str = "\
An endpoint registered with an `encryption_jwk` (a public JWK) receives each event's `data`
encrypted to it, as `data_jwe` (JWE: ECDH-ES+A256KW, A256GCM); only the holder of the private
JWK can read it. The receiver decrypts with it after verifying the signature
(kxp_axum::Receiver::decrypt_with).

Examples:
  kxp encryption-key generate --kid 2026-12 > merchant.jwk     # keep it like a secret
  kxp encryption-key public < merchant.jwk                     # register this one";

#[derive(Args)]
#[command(after_help = USAGE)]
pub(crate) struct EncryptionKeyArgs {
    #[command(subcommand)]
    command: EncryptionKeyCommand,
}

#[derive(Subcommand)]
enum EncryptionKeyCommand {
    /// Print a new private JWK, from the OS's random number generator.
    Generate {
        /// The curve: X25519 (smaller, faster) or P-256 (where only NIST curves are allowed).
        #[arg(long, value_enum, default_value = "x25519")]
        curve: CurveArg,
        /// The key id the JWK and every JWE made to it carry, to tell keys apart when rotating.
        #[arg(long)]
        kid: Option<String>,
    },
    /// Read a private JWK on standard input and print its public JWK.
    Public,
}

#[derive(Clone, Copy, ValueEnum)]
enum CurveArg {
    X25519,
    #[value(name = "p-256")]
    P256,
}

pub(crate) fn encryption_key(args: EncryptionKeyArgs) -> ExitCode {
    match args.command {
        EncryptionKeyCommand::Generate { curve, kid } => {
            let curve = match curve {
                CurveArg::X25519 => Curve::X25519,
                CurveArg::P256 => Curve::P256,
            };
            println!(
                "{}",
                DecryptionKey::generate(curve, kid.as_deref())
                    .to_jwk()
                    .as_str()
            );
            ExitCode::SUCCESS
        }
        EncryptionKeyCommand::Public => match public() {
            Ok(jwk) => {
                println!("{jwk}");
                ExitCode::SUCCESS
            }
            Err(message) => {
                eprintln!("error: {message}");
                ExitCode::FAILURE
            }
        },
    }
}

fn public() -> Result<String, String> {
    let mut text = zeroize::Zeroizing::new(String::new());
    std::io::stdin()
        .read_to_string(&mut text)
        .map_err(|e| format!("standard input: {e}"))?;
    let key = DecryptionKey::from_jwk(text.trim())
        .map_err(|e| format!("standard input is not a private JWK ({}): {e}", e.code()))?;
    Ok(key.public().to_jwk().to_string())
}
