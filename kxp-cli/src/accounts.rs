//! `kxp accounts create` and `kxp accounts list`: accounts straight on the database, with or
//! without a running server. A new account's API key is printed once; only its SHA-256 hash is
//! stored.

use std::process::ExitCode;

use clap::{Args, Subcommand};

use crate::keyholders::{CreateArgs, Kind, ListArgs, checked_name};

/// Shown under `kxp accounts --help`.
const USAGE: &str = "\
Accounts are the unit of isolation: every /v1 route sees only the caller's own endpoints,
events and deliveries. Another account's ids answer 404, exactly like ids that do not exist;
a missing or bad API key answers 401.

`kxp accounts create --name NAME` creates an account and prints its API key once. Store it
then: the database keeps only the key's SHA-256 hash, so the key cannot be shown again.
`kxp accounts list` shows ids, names and creation times, never keys or hashes. Both act on
the database directly (--database-url, or KXP_DATABASE_URL), with or without a running
`kxp serve`.

Examples:
  kxp accounts create --database-url sqlite://kxp.db --name acme
  kxp accounts list --database-url sqlite://kxp.db";

#[derive(Args)]
#[command(after_help = USAGE)]
pub(crate) struct AccountsArgs {
    #[command(subcommand)]
    command: AccountsCommand,
}

#[derive(Subcommand)]
enum AccountsCommand {
    /// Create an account and print its API key, once: store it now, it is not shown again.
    Create(CreateArgs),
    /// List the accounts: id, name and creation time (never keys or their hashes).
    List(ListArgs),
}

pub(crate) fn accounts(args: AccountsArgs) -> ExitCode {
    crate::admin::run(async move {
        match args.command {
            AccountsCommand::Create(args) => create(args).await,
            AccountsCommand::List(args) => list(args).await,
        }
    })
}

/// How accounts are printed.
const KIND: Kind = Kind {
    noun: "account",
    key_label: "API key",
    key_field: "api_key",
    warning: "Store this API key now: it is not shown again \
              (the database keeps only its SHA-256 hash).",
    usage: "Use it as `Authorization: Bearer <key>`, or as --api-key / KXP_API_KEY.",
    id_width: 36,
};

async fn create(args: CreateArgs) -> Result<(), String> {
    let name = checked_name(&args.name)?;
    let db = crate::admin::connect(&args.database.database_url).await?;
    let created = db.create_account(name).await;
    db.close().await;
    let (account, key) = created.map_err(|e| e.to_string())?;
    KIND.print_created(&account, &key, args.json);
    Ok(())
}

async fn list(args: ListArgs) -> Result<(), String> {
    let db = crate::admin::connect(&args.database.database_url).await?;
    let listed = db.accounts().await;
    db.close().await;
    let listed = listed.map_err(|e| e.to_string())?;
    KIND.print_list(&listed, args.json);
    Ok(())
}
