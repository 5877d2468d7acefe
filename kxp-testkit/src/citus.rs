//! Databases on a Citus cluster for tests (feature `db`): one test's own database on the
//! coordinator and on every worker, with the citus extension and the workers registered, as
//! `../shared/citus/cluster.sh createdb` makes one — or a loud `SKIPPED` line when
//! [`CITUS_ENV`] is not set (a failure instead where [`REQUIRE_CITUS_ENV`] is `1`, as in
//! `.ci/run`).
//!
//! A database per test, not one shared: creating one takes about two seconds on the local
//! cluster (three `CREATE DATABASE`s and extensions), and tests that share nothing cannot
//! disturb each other. Each database makes 4 shards per distributed table instead of Citus's
//! 32: a test's schema is distributed in a second, and 4 still spread every table over both
//! workers.
//!
//! ```no_run
//! # async fn test() {
//! use kxp_testkit::citus::CitusDatabase;
//!
//! let Some(database) = CitusDatabase::create("kxp_example").await else {
//!     return; // `SKIPPED (Citus): KXP_TEST_CITUS_URL is not set` is on stderr.
//! };
//! // … connect to `database.url()` (the coordinator) and test …
//! database.drop().await;
//! # }
//! ```

use std::io::Write;

use sqlx::{Connection, PgConnection};

use crate::db::{PgDatabase, with_database};

/// The environment variable naming a database on a Citus coordinator whose workers are
/// registered (`cluster.sh createdb kxp 9700` prints one): the tests read the cluster's nodes
/// there and make their own databases beside it.
pub const CITUS_ENV: &str = "KXP_TEST_CITUS_URL";

/// `1` where the Citus tests must run: a missing [`CITUS_ENV`] is then a failure, not a skip.
pub const REQUIRE_CITUS_ENV: &str = "KXP_REQUIRE_CITUS";

/// The advisory lock that makes the tests' setups take turns.
const SETUP_LOCK: i64 = 0x6b78_7063_6974_7573;

/// Shards per distributed table in a test database.
const TEST_SHARDS: u32 = 4;

/// The URL of [`CITUS_ENV`]; `None` when it is unset or empty, after writing `SKIPPED (Citus):
/// KXP_TEST_CITUS_URL is not set` to stderr. Panics instead when [`REQUIRE_CITUS_ENV`] is `1`.
pub fn citus_admin_url() -> Option<String> {
    match std::env::var(CITUS_ENV) {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var(REQUIRE_CITUS_ENV).is_ok_and(|v| v == "1") => {
            panic!("{REQUIRE_CITUS_ENV}=1 but {CITUS_ENV} is not set: the Citus tests must run")
        }
        _ => {
            let _ = writeln!(std::io::stderr(), "SKIPPED (Citus): {CITUS_ENV} is not set");
            None
        }
    }
}

/// A database of one test's own on every node of the Citus cluster of [`CITUS_ENV`], named
/// `<prefix>_<uuid>`: the coordinator's is the one to connect to. Dropped from every node by
/// [`CitusDatabase::drop`], or on the way out as [`PgDatabase`] does.
#[derive(Debug)]
#[must_use = "the database is deleted as soon as this value is dropped"]
pub struct CitusDatabase {
    /// The coordinator's first, then each worker's.
    nodes: Vec<PgDatabase>,
}

impl CitusDatabase {
    /// Creates the database on the coordinator and every worker of the cluster of
    /// [`CITUS_ENV`], with the citus extension on each and the workers registered on the
    /// coordinator; `None` when that is not set (see [`citus_admin_url`]). Panics if the
    /// cluster refuses.
    pub async fn create(prefix: &str) -> Option<CitusDatabase> {
        let admin_url = citus_admin_url()?;
        let mut admin = PgConnection::connect(&admin_url)
            .await
            .unwrap_or_else(|e| panic!("cannot connect to the coordinator of {CITUS_ENV}: {e}"));
        let coordinator: (String, i32) =
            sqlx::query_as("SELECT nodename::text, nodeport FROM pg_dist_node WHERE groupid = 0")
                .fetch_one(&mut admin)
                .await
                .unwrap_or_else(|e| {
                    panic!("{CITUS_ENV} names no coordinator (`citus_set_coordinator_host`): {e}")
                });
        let workers: Vec<(String, i32)> = sqlx::query_as(
            "SELECT nodename::text, nodeport FROM pg_dist_node \
             WHERE groupid <> 0 AND noderole = 'primary' ORDER BY nodeport",
        )
        .fetch_all(&mut admin)
        .await
        .unwrap_or_else(|e| panic!("cannot read the workers of {CITUS_ENV}: {e}"));
        assert!(
            !workers.is_empty(),
            "{CITUS_ENV}'s coordinator has no worker"
        );
        // One test at a time, cluster-wide: `citus_add_node` updates the workers' shared
        // catalogs (roles), and two at once fail with "tuple concurrently updated".
        sqlx::query("SELECT pg_advisory_lock($1)")
            .bind(SETUP_LOCK)
            .execute(&mut admin)
            .await
            .unwrap_or_else(|e| panic!("cannot lock the cluster for setup: {e}"));

        let name = format!("{prefix}_{}", uuid::Uuid::new_v4().simple());
        let mut nodes = Vec::new();
        for (host, port) in std::iter::once(&coordinator).chain(&workers) {
            let node_admin = with_node(&admin_url, host, *port);
            let database = PgDatabase::create_named(&node_admin, name.clone()).await;
            run(database.url(), &["CREATE EXTENSION citus".to_owned()]).await;
            nodes.push(database);
        }
        let mut setup = vec![
            format!("ALTER DATABASE \"{name}\" SET citus.shard_count = {TEST_SHARDS}"),
            format!(
                "SELECT citus_set_coordinator_host('{}', {})",
                coordinator.0, coordinator.1
            ),
        ];
        setup.extend(
            workers
                .iter()
                .map(|(host, port)| format!("SELECT citus_add_node('{host}', {port})")),
        );
        run(nodes[0].url(), &setup).await;
        // Closing the session releases the lock.
        let _ = admin.close().await;
        Some(CitusDatabase { nodes })
    }

    /// The coordinator's URL: the one the application connects to.
    pub fn url(&self) -> &str {
        self.nodes[0].url()
    }

    /// The database's name, the same on every node.
    pub fn name(&self) -> &str {
        self.nodes[0].name()
    }

    /// Each worker's URL of this database, in port order: for tests that look at the shards.
    pub fn worker_urls(&self) -> impl Iterator<Item = &str> {
        self.nodes[1..].iter().map(PgDatabase::url)
    }

    /// Deletes the database from every node. Panics if that fails.
    pub async fn drop(self) {
        for node in self.nodes.into_iter().rev() {
            node.drop().await;
        }
    }
}

/// The environment variable naming the local cluster's directory (`cluster.sh start DIR`):
/// set, the tests that crash and restart its nodes run; they share the cluster with nothing
/// else, so `.ci/run` runs them on their own, one at a time.
pub const FAULTS_ENV: &str = "KXP_TEST_CITUS_DIR";

/// `1` where the fault tests must run (`.ci/run`'s step of their own): a missing
/// [`FAULTS_ENV`] is then a failure. Not [`REQUIRE_CITUS_ENV`]: the other Citus tests run
/// beside everything else, and these must not.
pub const REQUIRE_FAULTS_ENV: &str = "KXP_REQUIRE_CITUS_FAULTS";

/// The nodes of the local cluster of `../shared/citus/cluster.sh`, to crash and restart.
#[derive(Debug)]
pub struct Cluster {
    dir: String,
    script: std::path::PathBuf,
}

impl Cluster {
    /// The cluster of [`FAULTS_ENV`]; `None` when it is not set, after a `SKIPPED (Citus
    /// faults)` line on stderr (a failure where [`REQUIRE_FAULTS_ENV`] is `1`).
    pub fn from_env() -> Option<Cluster> {
        match std::env::var(FAULTS_ENV) {
            Ok(dir) if !dir.is_empty() => Some(Cluster {
                dir,
                script: std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../../shared/citus/cluster.sh"),
            }),
            _ if std::env::var(REQUIRE_FAULTS_ENV).is_ok_and(|v| v == "1") => {
                panic!(
                    "{REQUIRE_FAULTS_ENV}=1 but {FAULTS_ENV} is not set: the Citus fault tests must run"
                )
            }
            _ => {
                let _ = writeln!(
                    std::io::stderr(),
                    "SKIPPED (Citus faults): {FAULTS_ENV} is not set"
                );
                None
            }
        }
    }

    /// Stops node `n` (0 is the coordinator, `n` the worker on the coordinator's port + `n`)
    /// as if its machine died: no shutdown, no checkpoint.
    pub fn crash(&self, n: u16) {
        self.node(n, "crash");
    }

    /// Starts node `n` again, returning once it accepts connections.
    pub fn start(&self, n: u16) {
        self.node(n, "start");
    }

    fn node(&self, n: u16, what: &str) {
        let status = std::process::Command::new("bash")
            .arg(&self.script)
            .args(["node", &n.to_string(), what, &self.dir])
            .status()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", self.script.display()));
        assert!(status.success(), "cluster.sh node {n} {what}: {status}");
    }
}

impl CitusDatabase {
    /// The port of the worker holding `account`'s shard of every account table (they are
    /// co-located).
    pub async fn worker_port_of(&self, account: &str) -> u16 {
        let mut conn = PgConnection::connect(self.url())
            .await
            .unwrap_or_else(|e| panic!("cannot connect to the coordinator: {e}"));
        let port: i32 = sqlx::query_scalar(
            "SELECT n.nodeport FROM pg_dist_placement p JOIN pg_dist_node n USING (groupid) \
             WHERE p.shardid = get_shard_id_for_distribution_column('kxp_accounts', $1)",
        )
        .bind(account)
        .fetch_one(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("cannot find the shard of {account}: {e}"));
        let _ = conn.close().await;
        u16::try_from(port).unwrap_or_else(|_| panic!("port {port}"))
    }

    /// The coordinator's port.
    pub fn coordinator_port(&self) -> u16 {
        let url = self.url();
        let authority = url.split("://").nth(1).unwrap_or_default();
        let authority = authority.split(['/', '?']).next().unwrap_or_default();
        let port = authority.rsplit_once(':').map(|(_, p)| p).unwrap_or("5432");
        port.parse().unwrap_or_else(|_| panic!("no port in {url}"))
    }
}

/// Runs `statements` in order on `url`, panicking with the statement that failed.
async fn run(url: &str, statements: &[String]) {
    let mut conn = PgConnection::connect(url)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to the test database {url}: {e}"));
    for statement in statements {
        sqlx::query(statement)
            .execute(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
    }
    let _ = conn.close().await;
}

/// `url` with its host and port replaced (user, database and query kept): a worker's address
/// as the coordinator's metadata gives it.
fn with_node(url: &str, host: &str, port: i32) -> String {
    let start = url
        .find("://")
        .unwrap_or_else(|| panic!("{CITUS_ENV} is not a URL"))
        + 3;
    let end = url[start..]
        .find(['/', '?'])
        .map_or(url.len(), |i| start + i);
    let authority = &url[start..end];
    let userinfo = authority.rfind('@').map_or("", |at| &authority[..=at]);
    with_database(
        &format!("{}{userinfo}{host}:{port}{}", &url[..start], &url[end..]),
        "postgres",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_node_replaces_the_host_and_port_and_names_the_admin_database() {
        let cases = [
            (
                "postgres://postgres@127.0.0.1:9700/kxp",
                "postgres://postgres@127.0.0.1:9702/postgres",
            ),
            (
                "postgres://u:p@h/kxp?sslmode=disable",
                "postgres://u:p@127.0.0.1:9702/postgres?sslmode=disable",
            ),
            ("postgres://h:1", "postgres://127.0.0.1:9702/postgres"),
        ];
        for (url, expected) in cases {
            assert_eq!(with_node(url, "127.0.0.1", 9702), expected, "{url}");
        }
    }
}
