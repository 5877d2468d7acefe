//! `kxp migrate status|plan|apply`: the sender's schema, upgraded as a planned step. On
//! PostgreSQL `kxp serve` refuses to start while a migration of its version is pending (unless
//! `--migrate`), so a fleet is upgraded by looking (`status`, `plan`), applying, then rolling
//! the new binaries out; docs/upgrading.md is the procedure.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use kxp_sender::{Admin, Distribution, PendingMigration, Placement, SchemaStatus};

use crate::config::Dur;
use crate::keyholders::Database;

/// Shown under `kxp migrate --help`.
const USAGE: &str = "\
`status` lists what the database has and what this version would add; `plan` prints the SQL
`apply` would run; `apply` runs it, one transaction per migration (except the few that must
build an index CONCURRENTLY), printing each as it ends. Migrations a newer version applied are
listed as unknown and left alone: an earlier version keeps running on the newer schema during
a rolling upgrade (docs/upgrading.md says which upgrades allow it).

Examples:
  kxp migrate status --database-url postgres://kxp@db/kxp
  kxp migrate plan --database-url postgres://kxp@db/kxp > upgrade.sql
  kxp migrate apply --database-url postgres://kxp@db/kxp --lock-timeout 10s";

#[derive(Args)]
#[command(after_help = USAGE)]
pub(crate) struct MigrateArgs {
    #[command(subcommand)]
    command: MigrateCommand,
}

#[derive(Subcommand)]
enum MigrateCommand {
    /// List the migrations the database has and those of this version it lacks.
    Status(StatusArgs),
    /// Print the SQL `apply` would run, in order, without running it.
    Plan(PlanArgs),
    /// Apply the pending migrations in order, printing each with how long it took.
    Apply(ApplyArgs),
}

#[derive(Args)]
struct StatusArgs {
    #[command(flatten)]
    database: Database,
    /// Print one JSON object: `database`, `applied` (`version`, `name`, `applied_at`, `known`),
    /// `pending` (`version`, `name`, `transaction`) and `modified` (versions).
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct PlanArgs {
    #[command(flatten)]
    database: Database,
}

#[derive(Args)]
struct ApplyArgs {
    #[command(flatten)]
    database: Database,
    /// How long each statement may wait for a lock (PostgreSQL) before its migration is rolled
    /// back and `apply` stops: a migration queued behind a long transaction would otherwise
    /// make every query on that table wait behind it. `0`: no limit.
    #[arg(long, value_name = "DURATION", default_value = "5s")]
    lock_timeout: Dur,
}

pub(crate) fn migrate(args: MigrateArgs) -> ExitCode {
    crate::admin::run(async move {
        match args.command {
            MigrateCommand::Status(args) => status(args).await,
            MigrateCommand::Plan(args) => plan(args).await,
            MigrateCommand::Apply(args) => apply(args).await,
        }
    })
}

async fn open(database: &Database) -> Result<Admin, String> {
    Admin::connect_unmigrated(&database.database_url)
        .await
        .map_err(|e| format!("database: {}", kxp_sender::redact_passwords(&e.to_string())))
}

async fn read(database: &Database) -> Result<SchemaStatus, String> {
    let db = open(database).await?;
    let status = db.schema_status().await;
    db.close().await;
    status.map_err(|e| format!("database: {}", kxp_sender::redact_passwords(&e.to_string())))
}

async fn status(args: StatusArgs) -> Result<(), String> {
    let status = read(&args.database).await?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string(&status).map_err(|e| e.to_string())?
        );
        return Ok(());
    }
    print!("{}", status_text(&status));
    Ok(())
}

/// `status`'s table: one line per migration, then what to do.
fn status_text(status: &SchemaStatus) -> String {
    let mut text = format!("database: {}\n", status.database);
    for applied in &status.applied {
        let state = match (applied.known, status.modified.contains(&applied.version)) {
            (_, true) => "modified",
            (true, false) => "applied",
            (false, false) => "unknown",
        };
        text += &format!(
            "{state:<9} {} {:<32} {}\n",
            applied.version, applied.name, applied.applied_at
        );
    }
    for pending in &status.pending {
        text += &format!(
            "{:<9} {} {:<32} {}\n",
            "pending",
            pending.version,
            pending.name,
            transaction(pending)
        );
    }
    if let Some(distribution) = &status.distribution {
        text += &distribution_text(distribution);
    }
    let unknown = status.applied.iter().filter(|m| !m.known).count();
    if unknown > 0 {
        text += &format!(
            "{unknown} migration(s) were applied by a newer version of kxp: this one runs beside \
             it (docs/upgrading.md)\n"
        );
    }
    text += &match (status.pending.len(), status.modified.is_empty()) {
        (_, false) => "a migration was applied with other SQL than this version's: this version \
                       cannot run on this database\n"
            .to_owned(),
        (0, true) => match status.distribution.as_ref().map(|d| d.local().count()) {
            Some(local @ 1..) => format!(
                "{local} table(s) not distributed over the Citus cluster: `kxp migrate apply` \
                 distributes them\n"
            ),
            _ => "up to date: nothing pending\n".to_owned(),
        },
        (n, true) => format!(
            "{n} pending: `kxp migrate plan` prints their SQL, `kxp migrate apply` runs it\n"
        ),
    };
    text
}

/// The Citus cluster's part of `status`: the workers, then each table's place.
fn distribution_text(distribution: &Distribution) -> String {
    let mut text = format!("citus: {} active worker(s)\n", distribution.workers);
    for table in &distribution.tables {
        let place = match &table.placement {
            Placement::Distributed { column, shards } => {
                format!("distributed by {column}, {shards} shards")
            }
            Placement::Reference => "reference (a copy on every node)".to_owned(),
            Placement::Local => "local: not distributed yet (`kxp migrate apply`)".to_owned(),
        };
        text += &format!("table     {:<26} {place}\n", table.name);
    }
    text
}

fn transaction(pending: &PendingMigration) -> &'static str {
    match pending.transaction {
        true => "in a transaction",
        false => "no transaction",
    }
}

async fn plan(args: PlanArgs) -> Result<(), String> {
    let status = read(&args.database).await?;
    if let Some(refusal) = status.refusal().filter(|_| !status.modified.is_empty()) {
        return Err(refusal.to_string());
    }
    print!("{}", plan_text(&status));
    Ok(())
}

/// `plan`'s SQL: each pending migration's, in order, under a comment naming it.
fn plan_text(status: &SchemaStatus) -> String {
    if status.pending.is_empty() {
        return format!(
            "-- nothing pending: this {} database has every migration of this version\n",
            status.database
        );
    }
    let mut text = format!(
        "-- {} pending migration(s) on {}, in the order `kxp migrate apply` runs them, each {}\n",
        status.pending.len(),
        status.database,
        "in a transaction of its own unless it says otherwise"
    );
    for pending in &status.pending {
        text += &format!(
            "\n-- {} {} ({})\n{}\n",
            pending.version,
            pending.name,
            transaction(pending),
            pending.sql.trim_end()
        );
    }
    text
}

async fn apply(args: ApplyArgs) -> Result<(), String> {
    let db = open(&args.database).await?;
    let applied = db
        .apply_migrations(args.lock_timeout.0, |migration, took: Duration| {
            println!(
                "applied {} {} in {} ms",
                migration.version,
                migration.name,
                took.as_millis()
            );
        })
        .await;
    // On Citus the apply ends by distributing the tables: say where they are now.
    let after = match &applied {
        Ok(_) => Some(db.schema_status().await),
        Err(_) => None,
    };
    db.close().await;
    let applied = applied.map_err(|e| kxp_sender::redact_passwords(&e.to_string()))?;
    if applied.is_empty() {
        println!("up to date: nothing pending");
    }
    if let Some(distribution) = after
        .transpose()
        .map_err(|e| format!("database: {}", kxp_sender::redact_passwords(&e.to_string())))?
        .and_then(|status| status.distribution)
    {
        print!("{}", distribution_text(&distribution));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use kxp_sender::AppliedMigration;

    use super::*;

    fn status(pending: usize, unknown: bool) -> SchemaStatus {
        let mut applied = vec![AppliedMigration {
            version: 1,
            name: "init".to_owned(),
            applied_at: "2026-12-01T00:00:00Z".to_owned(),
            known: true,
        }];
        if unknown {
            applied.push(AppliedMigration {
                version: 9,
                name: "from the future".to_owned(),
                applied_at: "2026-12-02T00:00:00Z".to_owned(),
                known: false,
            });
        }
        SchemaStatus {
            database: "postgres",
            applied,
            pending: (0..pending)
                .map(|i| PendingMigration {
                    version: 2 + i as i64,
                    name: format!("step {i}"),
                    transaction: i == 0,
                    sql: format!("CREATE TABLE t{i} (id int);\n"),
                })
                .collect(),
            modified: Vec::new(),
            distribution: None,
        }
    }

    #[test]
    fn status_says_what_to_run_next() {
        let text = status_text(&status(2, false));
        assert!(text.contains("applied   1 init"), "{text}");
        assert!(text.contains("pending   2 step 0"), "{text}");
        assert!(text.contains("no transaction"), "{text}");
        assert!(
            text.ends_with(
                "2 pending: `kxp migrate plan` prints their SQL, `kxp migrate apply` runs it\n"
            ),
            "{text}"
        );
        let text = status_text(&status(0, true));
        assert!(text.contains("unknown   9 from the future"), "{text}");
        assert!(
            text.contains("1 migration(s) were applied by a newer version"),
            "{text}"
        );
        assert!(text.ends_with("up to date: nothing pending\n"), "{text}");
    }

    #[test]
    fn plan_prints_each_pending_migration_in_order() {
        let text = plan_text(&status(2, false));
        let first = text
            .find("-- 2 step 0 (in a transaction)\nCREATE TABLE t0")
            .unwrap();
        let second = text
            .find("-- 3 step 1 (no transaction)\nCREATE TABLE t1")
            .unwrap();
        assert!(first < second, "{text}");
        assert!(plan_text(&status(0, false)).starts_with("-- nothing pending"));
    }
}
