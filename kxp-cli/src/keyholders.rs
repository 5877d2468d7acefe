//! What `kxp accounts` and `kxp operators` share: both make key holders straight on the
//! database, print the new key once (only its SHA-256 hash is stored), and list the holders
//! without their keys.

use std::fmt::Display;

use clap::Args;
use kxp_sender::{Account, Operator, rfc3339};
use serde_json::json;

/// The longest name of an account or an operator.
const MAX_NAME: usize = 128;

/// The database the command acts on.
#[derive(Args)]
pub(crate) struct Database {
    /// The sender's database, as given to `kxp serve` (`sqlite://…` or `postgres://…`).
    #[arg(long, env = "KXP_DATABASE_URL", hide_env_values = true)]
    pub(crate) database_url: String,
}

/// `create`'s arguments.
#[derive(Args)]
pub(crate) struct CreateArgs {
    #[command(flatten)]
    pub(crate) database: Database,
    /// A name of 1 to 128 characters: the merchant's for an account, the person's or team's
    /// holding an operator key.
    #[arg(long)]
    pub(crate) name: String,
    /// Print one JSON object (`id`, `name`, `created_at`, and the key as `api_key` or
    /// `operator_key`) instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `list`'s arguments.
#[derive(Args)]
pub(crate) struct ListArgs {
    #[command(flatten)]
    pub(crate) database: Database,
    /// One JSON object per line (`id`, `name`, `created_at`) instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `--name`, trimmed: 1 to 128 characters, without control characters.
pub(crate) fn checked_name(name: &str) -> Result<&str, String> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > MAX_NAME || name.chars().any(char::is_control) {
        return Err(format!(
            "--name must be 1 to {MAX_NAME} characters, without control characters"
        ));
    }
    Ok(name)
}

/// A key holder, as the commands print it.
pub(crate) trait Holder {
    fn id(&self) -> &dyn Display;
    fn name(&self) -> &str;
    /// Unix ms.
    fn created_at(&self) -> i64;
}

impl Holder for Account {
    fn id(&self) -> &dyn Display {
        &self.id
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn created_at(&self) -> i64 {
        self.created_at
    }
}

impl Holder for Operator {
    fn id(&self) -> &dyn Display {
        &self.id
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn created_at(&self) -> i64 {
        self.created_at
    }
}

/// How a kind of holder is printed.
pub(crate) struct Kind {
    /// `account`, `operator`.
    pub(crate) noun: &'static str,
    /// The label of the key in text (`API key`) and its field in JSON (`api_key`).
    pub(crate) key_label: &'static str,
    pub(crate) key_field: &'static str,
    /// The warning that goes with a new key (stderr with `--json`).
    pub(crate) warning: &'static str,
    /// How to use the key, the last line of the text.
    pub(crate) usage: &'static str,
    /// The id column's width in the list.
    pub(crate) id_width: usize,
}

impl Kind {
    /// Prints a new holder and its key, once.
    pub(crate) fn print_created(&self, holder: &impl Holder, key: &str, json: bool) {
        if json {
            let mut line = json!({
                "id": holder.id().to_string(), "name": holder.name(),
                "created_at": rfc3339(holder.created_at()),
            });
            line[self.key_field] = json!(key);
            println!("{line}");
            eprintln!("{}", self.warning);
        } else {
            let noun = self.noun;
            println!("Created {noun} {} ({}).", holder.id(), holder.name());
            println!("{}: {key}", self.key_label);
            println!("{}", self.warning);
            println!("{}", self.usage);
        }
    }

    /// Prints the holders: one JSON object per line, or a table.
    pub(crate) fn print_list(&self, holders: &[impl Holder], json: bool) {
        let noun = self.noun;
        if json {
            for holder in holders {
                let line = json!({
                    "id": holder.id().to_string(), "name": holder.name(),
                    "created_at": rfc3339(holder.created_at()),
                });
                println!("{line}");
            }
        } else if holders.is_empty() {
            println!("No {noun}s yet. Create one with `kxp {noun}s create --name NAME`.");
        } else {
            let width = self.id_width;
            let heading = noun.to_uppercase();
            println!("{heading:<width$}  {:<20}  NAME", "CREATED");
            for holder in holders {
                println!(
                    "{:<width$}  {:<20}  {}",
                    holder.id().to_string(),
                    rfc3339(holder.created_at()),
                    holder.name()
                );
            }
        }
    }
}
