//! `kxp-citus`: a local Citus cluster (`../shared/citus/cluster.sh start <dir> <port>`: a
//! coordinator on `<port>` and workers on the next ports). Each run's database is created on
//! every node with the extension, the workers registered with the coordinator, and dropped
//! after; `kxp migrate apply` then distributes kxp's tables. What a run costs is measured per
//! node: the CPU of each node's processes (its postmaster's tree, found through
//! `<dir>/nodeN/postmaster.pid`), and its statements (`pg_stat_statements`, when the nodes
//! preload it) and transactions in the run's database.

use std::path::{Path, PathBuf};
use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

use crate::Result;
use crate::procfs;

/// One server of the cluster.
#[derive(Clone, Debug)]
pub struct Node {
    /// `coordinator`, `worker 1`, …
    pub name: String,
    pub port: u16,
    /// Its data directory (holding `postmaster.pid`).
    dir: PathBuf,
}

/// The cluster: the coordinator first.
#[derive(Clone, Debug)]
pub struct Cluster {
    pub nodes: Vec<Node>,
}

/// What a node did over a run.
#[derive(Clone, Debug, Default)]
pub struct NodeCost {
    pub name: String,
    /// CPU seconds of the node's processes.
    pub cpu: f64,
    /// Statements in the run's database (`None` without `pg_stat_statements`).
    pub statements: Option<i64>,
    /// Transactions committed in the run's database.
    pub commits: Option<i64>,
}

/// A node's counters at one moment.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    cpu: Vec<f64>,
    statements: Vec<Option<i64>>,
    commits: Vec<Option<i64>>,
}

impl Cluster {
    /// The cluster of `cluster.sh start <dir> <port>` with `workers` workers.
    pub fn new(dir: &Path, port: u16, workers: u16) -> Cluster {
        let nodes = (0..=workers)
            .map(|n| Node {
                name: if n == 0 {
                    "coordinator".to_owned()
                } else {
                    format!("worker {n}")
                },
                port: port + n,
                dir: dir.join(format!("node{n}")),
            })
            .collect();
        Cluster { nodes }
    }

    /// The coordinator's URL of database `db`.
    pub fn url(&self, db: &str) -> String {
        url(self.nodes[0].port, db)
    }

    /// Creates `db` on every node with the citus extension and registers the workers.
    pub async fn create_database(&self, db: &str) -> Result<()> {
        for node in &self.nodes {
            let admin = pool(node.port, "postgres").await?;
            sqlx::query(&format!("CREATE DATABASE \"{db}\""))
                .execute(&admin)
                .await
                .map_err(|e| format!("{}: CREATE DATABASE {db}: {e}", node.name))?;
            admin.close().await;
            let pool = pool(node.port, db).await?;
            for sql in [
                "CREATE EXTENSION citus",
                "CREATE EXTENSION IF NOT EXISTS pg_stat_statements",
            ] {
                let done = sqlx::query(sql).execute(&pool).await;
                if let Err(e) = done
                    && sql.contains("citus")
                {
                    return Err(format!("{}: {sql}: {e}", node.name));
                }
            }
            pool.close().await;
        }
        let coordinator = pool(self.nodes[0].port, db).await?;
        sqlx::query("SELECT citus_set_coordinator_host('127.0.0.1', $1)")
            .bind(i32::from(self.nodes[0].port))
            .execute(&coordinator)
            .await
            .map_err(|e| format!("citus_set_coordinator_host: {e}"))?;
        for worker in &self.nodes[1..] {
            sqlx::query("SELECT citus_add_node('127.0.0.1', $1)")
                .bind(i32::from(worker.port))
                .execute(&coordinator)
                .await
                .map_err(|e| format!("citus_add_node {}: {e}", worker.name))?;
        }
        coordinator.close().await;
        Ok(())
    }

    /// Drops `db` on every node.
    pub async fn drop_database(&self, db: &str) {
        for node in &self.nodes {
            let dropped = match pool(node.port, "postgres").await {
                Ok(admin) => sqlx::query(&format!("DROP DATABASE IF EXISTS \"{db}\" WITH (FORCE)"))
                    .execute(&admin)
                    .await
                    .map(drop)
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e),
            };
            if let Err(e) = dropped {
                eprintln!("warning: {}: DROP DATABASE {db}: {e}", node.name);
            }
        }
    }

    /// Every node's counters now, for database `db`.
    pub async fn snapshot(&self, db: &str) -> Snapshot {
        let mut snapshot = Snapshot::default();
        for node in &self.nodes {
            snapshot
                .cpu
                .push(postmaster(&node.dir).map_or(0.0, procfs::tree_cpu_seconds));
            let (statements, commits) = match pool(node.port, db).await {
                Ok(pool) => {
                    let statements = sqlx::query_scalar::<_, i64>(
                        "SELECT sum(calls)::bigint FROM pg_stat_statements s \
                         JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = $1",
                    )
                    .bind(db)
                    .fetch_one(&pool)
                    .await
                    .ok();
                    let commits = sqlx::query_scalar::<_, i64>(
                        "SELECT xact_commit FROM pg_stat_database WHERE datname = $1",
                    )
                    .bind(db)
                    .fetch_one(&pool)
                    .await
                    .ok();
                    pool.close().await;
                    (statements, commits)
                }
                Err(_) => (None, None),
            };
            snapshot.statements.push(statements);
            snapshot.commits.push(commits);
        }
        snapshot
    }

    /// What each node did between `before` and `after`.
    pub fn costs(&self, before: &Snapshot, after: &Snapshot) -> Vec<NodeCost> {
        let delta = |a: Option<i64>, b: Option<i64>| Some(a? - b?);
        self.nodes
            .iter()
            .enumerate()
            .map(|(i, node)| NodeCost {
                name: node.name.clone(),
                cpu: after.cpu[i] - before.cpu[i],
                statements: delta(after.statements[i], before.statements[i]),
                commits: delta(after.commits[i], before.commits[i]),
            })
            .collect()
    }
}

fn url(port: u16, db: &str) -> String {
    format!("postgres://postgres@127.0.0.1:{port}/{db}")
}

async fn pool(port: u16, db: &str) -> Result<PgPool> {
    PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(10))
        .connect(&url(port, db))
        .await
        .map_err(|e| format!("127.0.0.1:{port}/{db}: {e}"))
}

/// The postmaster's pid, from the first line of `<dir>/postmaster.pid`.
fn postmaster(dir: &Path) -> Option<u32> {
    std::fs::read_to_string(dir.join("postmaster.pid"))
        .ok()?
        .lines()
        .next()?
        .trim()
        .parse()
        .ok()
}
