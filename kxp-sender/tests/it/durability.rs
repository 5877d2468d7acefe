//! What an answer promises survives a power loss, not only a crash of the process.

use kxp_sender::Db;

/// SQLite in WAL mode with `synchronous=NORMAL` can lose the last commits on power failure: a
/// 202 for an event that is then gone. Every connection of the sender's pool is `FULL`.
#[tokio::test]
async fn every_sqlite_connection_commits_to_disk_before_answering() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("kxp.db").display());
    let Db::Sqlite(pool) = Db::connect(&url).await.unwrap() else {
        panic!("a sqlite:// URL opens SQLite");
    };
    // Hold several connections at once, so the check is not of one lucky connection.
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(pool.acquire().await.unwrap());
    }
    for conn in &mut held {
        let synchronous: i64 = sqlx::query_scalar("PRAGMA synchronous")
            .fetch_one(&mut **conn)
            .await
            .unwrap();
        assert_eq!(synchronous, 2, "PRAGMA synchronous: 2 is FULL");
        let journal: String = sqlx::query_scalar("PRAGMA journal_mode")
            .fetch_one(&mut **conn)
            .await
            .unwrap();
        assert_eq!(journal, "wal");
    }
}
