//! `kxp secrets-key generate`, `reseal` and `status`: the key ring endpoint secrets are sealed
//! under at rest (`KXP_SECRETS_KEY`). `generate` prints a new key line; `reseal` rewrites every
//! stored secret under the ring's newest key (plaintext ones included), which is how secrets
//! written before a ring existed get sealed and how the ring's key is rotated; `status` counts
//! the stored secrets by the key that sealed them.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use kxp_sender::{KeyRing, SECRETS_KEY_ENV, generate_key_line};

use crate::keyholders::Database;

/// Shown under `kxp secrets-key --help`.
const USAGE: &str = "\
With KXP_SECRETS_KEY set, `kxp serve` stores every endpoint secret sealed under it
(XChaCha20-Poly1305, bound to its endpoint), so a database dump or a backup alone reveals
none. The value is a key ring: `<id>:<base64 of 32 bytes>`, comma-separated, newest first;
the newest seals, every listed key opens.

To start: KXP_SECRETS_KEY=$(kxp secrets-key generate), restart every `kxp serve`, then run
`kxp secrets-key reseal` to seal the secrets stored before. To rotate the key: put a new key
in front (`new,old`) on every process, restart, `reseal`, then drop the old key. `status`
shows what is left to move. A server refuses to start if a stored secret needs a key its
ring does not hold, and says which.

Examples:
  kxp secrets-key generate
  KXP_SECRETS_KEY=… kxp secrets-key reseal --database-url sqlite://kxp.db
  KXP_SECRETS_KEY=… kxp secrets-key status --database-url sqlite://kxp.db";

#[derive(Args)]
#[command(after_help = USAGE)]
pub(crate) struct SecretsKeyArgs {
    #[command(subcommand)]
    command: SecretsKeyCommand,
}

#[derive(Subcommand)]
enum SecretsKeyCommand {
    /// Print a new key line (`<id>:<base64>`) from the OS's random number generator.
    Generate,
    /// Seal every stored endpoint secret under the ring's newest key (plaintext ones too).
    Reseal(RingArgs),
    /// Count the stored endpoint secrets: plaintext, and sealed under each key id.
    Status(RingArgs),
}

/// The database and the ring (environment only: a flag would show it to `ps`).
#[derive(Args)]
struct RingArgs {
    #[command(flatten)]
    database: Database,
}

pub(crate) fn secrets_key(args: SecretsKeyArgs) -> ExitCode {
    match args.command {
        SecretsKeyCommand::Generate => {
            println!("{}", generate_key_line().as_str());
            ExitCode::SUCCESS
        }
        SecretsKeyCommand::Reseal(args) => crate::admin::run(reseal(args)),
        SecretsKeyCommand::Status(args) => crate::admin::run(status(args)),
    }
}

/// The ring `KXP_SECRETS_KEY` holds.
fn ring() -> Result<KeyRing, String> {
    let value = std::env::var(SECRETS_KEY_ENV)
        .ok()
        .filter(|v| !v.trim().is_empty())
        .ok_or_else(|| {
            format!("set {SECRETS_KEY_ENV} to the key ring (kxp secrets-key generate)")
        })?;
    value.parse().map_err(|e| format!("{SECRETS_KEY_ENV}: {e}"))
}

async fn reseal(args: RingArgs) -> Result<(), String> {
    let ring = ring()?;
    let db = crate::admin::connect(&args.database.database_url).await?;
    let resealed = db.reseal(&ring).await;
    db.close().await;
    let resealed = resealed.map_err(|e| e.to_string())?;
    println!(
        "Sealed {resealed} stored secret{} under key {}.",
        if resealed == 1 { "" } else { "s" },
        ring.sealing_key_id()
    );
    Ok(())
}

async fn status(args: RingArgs) -> Result<(), String> {
    let ring = ring()?;
    let db = crate::admin::connect(&args.database.database_url).await?;
    let census = db.sealing_census().await;
    db.close().await;
    let census = census.map_err(|e| e.to_string())?;
    for (key, count) in &census {
        let holder = match key {
            None => "plaintext".to_owned(),
            Some(id) if id == ring.sealing_key_id() => format!("key {id} (newest)"),
            Some(id) if ring.key_ids().any(|known| known == id) => format!("key {id} (older)"),
            Some(id) => format!("key {id} (NOT in {SECRETS_KEY_ENV})"),
        };
        println!("{count:>8}  {holder}");
    }
    let moved = census
        .iter()
        .all(|(key, _)| key.as_deref() == Some(ring.sealing_key_id()));
    if moved {
        println!("Every stored secret is sealed under the newest key.");
    } else {
        println!(
            "Run `kxp secrets-key reseal` to seal the rest under {}.",
            ring.sealing_key_id()
        );
    }
    Ok(())
}
