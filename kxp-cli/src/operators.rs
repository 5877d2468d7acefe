//! `kxp operators create`, `list` and `delete`: operators straight on the database, with or
//! without a running server. A new operator's key is printed once; only its SHA-256 hash is
//! stored. There is deliberately no API route that makes operators: whoever can reach the
//! database already holds every account, and no key can mint a key more powerful than itself.

use std::process::ExitCode;

use clap::{Args, Subcommand};

use kxp_api::OperatorId;

use crate::keyholders::{CreateArgs, Database, Kind, ListArgs, checked_name};

/// Shown under `kxp operators --help`.
const USAGE: &str = "\
Operators are the platform's own people. An operator key (kxp_op_…) creates and lists
accounts (POST/GET /v1/accounts; the answer to a creation holds the new account's API key,
once) and acts for any one account on every other /v1 route when the request names it with
the `X-Kxp-Account: acc_…` header (without it: 400 account_required; an unknown id: 404).
Account keys cannot reach /v1/accounts (401), and cannot act for another account (404).

`kxp operators create --name NAME` prints a new operator key once. Store it then: the
database keeps only the key's SHA-256 hash, so the key cannot be shown again. `kxp operators
list` shows ids, names and creation times, never keys or hashes. `kxp operators delete --id
op_…` deletes one: its key stops working and its console sessions end at once. All three act
on the database directly (--database-url, or KXP_DATABASE_URL), with or without a running
`kxp serve`.

Examples:
  kxp operators create --database-url sqlite://kxp.db --name alice
  kxp operators list --database-url sqlite://kxp.db
  kxp operators delete --database-url sqlite://kxp.db --id op_0193…";

#[derive(Args)]
#[command(after_help = USAGE)]
pub(crate) struct OperatorsArgs {
    #[command(subcommand)]
    command: OperatorsCommand,
}

#[derive(Subcommand)]
enum OperatorsCommand {
    /// Create an operator and print its key, once: store it now, it is not shown again.
    Create(CreateArgs),
    /// List the operators: id, name and creation time (never keys or their hashes).
    List(ListArgs),
    /// Delete an operator: its key stops working and its console sessions end.
    Delete(DeleteArgs),
}

/// `delete`'s arguments.
#[derive(Args)]
struct DeleteArgs {
    #[command(flatten)]
    database: Database,
    /// The operator's id (`op_…`, from `kxp operators list`).
    #[arg(long)]
    id: String,
}

pub(crate) fn operators(args: OperatorsArgs) -> ExitCode {
    crate::admin::run(async move {
        match args.command {
            OperatorsCommand::Create(args) => create(args).await,
            OperatorsCommand::List(args) => list(args).await,
            OperatorsCommand::Delete(args) => delete(args).await,
        }
    })
}

/// How operators are printed.
const KIND: Kind = Kind {
    noun: "operator",
    key_label: "Operator key",
    key_field: "operator_key",
    warning: "Store this operator key now: it is not shown again \
              (the database keeps only its SHA-256 hash). It acts for every account.",
    usage: "Use it as `Authorization: Bearer <key>`, with `X-Kxp-Account: acc_…` to act for \
            one account.",
    id_width: 35,
};

async fn create(args: CreateArgs) -> Result<(), String> {
    let name = checked_name(&args.name)?;
    let db = crate::admin::connect(&args.database.database_url).await?;
    let created = db.create_operator(name).await;
    db.close().await;
    let (operator, key) = created.map_err(|e| e.to_string())?;
    KIND.print_created(&operator, &key, args.json);
    Ok(())
}

async fn list(args: ListArgs) -> Result<(), String> {
    let db = crate::admin::connect(&args.database.database_url).await?;
    let listed = db.operators().await;
    db.close().await;
    let listed = listed.map_err(|e| e.to_string())?;
    KIND.print_list(&listed, args.json);
    Ok(())
}

async fn delete(args: DeleteArgs) -> Result<(), String> {
    let db = crate::admin::connect(&args.database.database_url).await?;
    let deleted = db.delete_operator(&OperatorId::from(args.id.trim())).await;
    db.close().await;
    match deleted.map_err(|e| e.to_string())? {
        Some((operator, sessions)) => {
            println!(
                "Deleted operator {} ({}); its key no longer works, and {sessions} console \
                 session{} ended.",
                operator.id,
                operator.name,
                if sessions == 1 { "" } else { "s" }
            );
            Ok(())
        }
        None => Err(format!("no operator {}", args.id.trim())),
    }
}
