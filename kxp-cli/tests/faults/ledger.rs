//! The receiver's `payments` table, read by the suite: the evidence of what was processed. It
//! has no unique constraint on `event_id`, so an event processed twice shows as two rows.
//!
//! A SQLite ledger on a tmpfs of the receiver's own is read by this same test binary, started in
//! that tmpfs's namespace with [`READ_LEDGER`] (see `main`): only processes there see the file.

use std::collections::HashMap;
use std::path::PathBuf;
use std::str::FromStr;

use std::process::{Command, Stdio};

use kxp_testkit::confine::Tmpfs;
use sqlx::Connection;

/// The argument that makes the test binary print a SQLite ledger (its path follows) and exit.
pub(crate) const READ_LEDGER: &str = "--read-ledger";

/// Where the receiver's database is.
pub(crate) enum Ledger {
    Sqlite(PathBuf),
    Postgres(String),
}

/// One event's rows.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Processed {
    pub times: i64,
    /// Wall-clock milliseconds of its first row.
    pub first_ms: i64,
}

impl Ledger {
    /// Every event processed so far, read from inside `disk` when the database is on it; or
    /// why the table could not be read (the database may be down: a fault the suite causes).
    pub(crate) async fn read(
        &self,
        disk: Option<&Tmpfs>,
    ) -> Result<HashMap<String, Processed>, String> {
        match (self, disk) {
            (Ledger::Sqlite(path), Some(disk)) => {
                let mut reader = Command::new(std::env::current_exe().map_err(|e| e.to_string())?);
                reader.arg(READ_LEDGER).arg(path);
                let mut reader = tokio::process::Command::from(disk.command(&reader));
                let out = reader
                    .stderr(Stdio::piped())
                    .output()
                    .await
                    .map_err(|e| e.to_string())?;
                if !out.status.success() {
                    return Err(String::from_utf8_lossy(&out.stderr).into_owned());
                }
                let text = String::from_utf8(out.stdout).map_err(|e| e.to_string())?;
                text.lines().map(parse_line).collect()
            }
            _ => self.read_here().await.map_err(|e| e.to_string()),
        }
    }

    /// [`Ledger::read`] in this process: the rows, one `id times first_ms` line each.
    pub(crate) async fn print(&self) -> Result<(), sqlx::Error> {
        for (id, p) in self.read_here().await? {
            println!("{id} {} {}", p.times, p.first_ms);
        }
        Ok(())
    }

    async fn read_here(&self) -> Result<HashMap<String, Processed>, sqlx::Error> {
        let rows = match self {
            Ledger::Sqlite(path) => {
                let options = sqlx::sqlite::SqliteConnectOptions::new().filename(path);
                let mut conn = sqlx::SqliteConnection::connect_with(&options).await?;
                let rows = sqlx::query_as::<_, (String, i64, i64)>(
                    "SELECT event_id, COUNT(*), \
                     CAST(MIN((julianday(recorded_at) - 2440587.5) * 86400000.0) AS INTEGER) \
                     FROM payments GROUP BY event_id",
                )
                .fetch_all(&mut conn)
                .await?;
                conn.close().await?;
                rows
            }
            Ledger::Postgres(url) => {
                let options = sqlx::postgres::PgConnectOptions::from_str(url)?;
                let mut conn = sqlx::PgConnection::connect_with(&options).await?;
                let rows = sqlx::query_as::<_, (String, i64, i64)>(
                    "SELECT event_id, COUNT(*)::bigint, \
                     (EXTRACT(EPOCH FROM MIN(recorded_at)) * 1000)::bigint \
                     FROM payments GROUP BY event_id",
                )
                .fetch_all(&mut conn)
                .await?;
                conn.close().await?;
                rows
            }
        };
        Ok(rows
            .into_iter()
            .map(|(id, times, first_ms)| (id, Processed { times, first_ms }))
            .collect())
    }
}

fn parse_line(line: &str) -> Result<(String, Processed), String> {
    let mut fields = line.split(' ');
    let mut next = || {
        fields
            .next()
            .ok_or_else(|| format!("short ledger line {line:?}"))
    };
    let id = next()?.to_owned();
    let times = next()?
        .parse()
        .map_err(|_| format!("bad ledger line {line:?}"))?;
    let first_ms = next()?
        .parse()
        .map_err(|_| format!("bad ledger line {line:?}"))?;
    Ok((id, Processed { times, first_ms }))
}
