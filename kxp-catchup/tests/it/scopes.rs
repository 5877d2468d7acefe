//! One receiver, two accounts of one sender: event ids are unique per account, so both accounts
//! may send the same id, and a receiver that gives each account's route its own dedup scope
//! processes both (security round 2, item 1).

use axum::Router;
use axum::routing::post;
use kxp_axum::dedup::{self, Handled, Store};
use kxp_axum::{Receiver, VerifiedEvent, VerifyLayer};
use kxp_dedup::sqlx;
use serde_json::json;

use crate::{SECS_20, register, sender};

/// Records the event (its id, its scope and its `data.account`) with its dedup mark.
async fn handle(
    axum::extract::State(store): axum::extract::State<Store>,
    event: VerifiedEvent,
) -> Handled {
    let (id, scope) = (event.id().to_owned(), store.scope().to_owned());
    let account = event.data()["account"].as_str().unwrap_or("?").to_owned();
    dedup::process_in_transaction(&store, &event, |mut tx| async move {
        sqlx::query("INSERT INTO handled (event_id, scope, account) VALUES (?1, ?2, ?3)")
            .bind(&id)
            .bind(&scope)
            .bind(&account)
            .execute(tx.sqlite().unwrap())
            .await?;
        Ok::<_, sqlx::Error>(tx)
    })
    .await
}

fn route(store: &Store, scope: &str, secret: &str) -> axum::routing::MethodRouter {
    post(handle)
        .layer(VerifyLayer::new(Receiver::new(
            kxp_verify::Verifier::from_secret_list(secret).unwrap(),
        )))
        .with_state(store.scoped(scope))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_accounts_one_event_id_two_scoped_routes_both_processed() {
    let dir = tempfile::tempdir().unwrap();
    let (server, a) = sender(dir.path()).await;
    let (_, b_key) = server.db().create_account("b", None).await.unwrap();
    let b = kxp_api::Client::new(&format!("http://{}", server.addr()), &b_key).unwrap();

    let store = Store::connect(&format!(
        "sqlite://{}",
        dir.path().join("receiver.db").display()
    ))
    .await
    .unwrap();
    sqlx::query("CREATE TABLE handled (event_id TEXT, scope TEXT, account TEXT)")
        .execute(store.sqlite_pool().unwrap())
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (a_endpoint, a_secret) = register(&a, &format!("{base}/a")).await;
    let (b_endpoint, b_secret) = register(&b, &format!("{base}/b")).await;
    assert_ne!(a_endpoint, b_endpoint);
    let app = Router::new()
        .route("/a", route(&store, "account-a", &a_secret))
        .route("/b", route(&store, "account-b", &b_secret));
    let serving = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    // The same producer-chosen id, from both accounts: two events, each delivered to its own
    // account's endpoint, each processed once.
    let id = "0193a5f0-7c2e-7d4b-9a51-2f6c1e8d4b10";
    for (client, account) in [(&a, "a"), (&b, "b")] {
        let event: kxp_api::NewEvent = serde_json::from_value(json!({
            "id": id, "type": "payment.succeeded", "data": {"account": account}
        }))
        .unwrap();
        let created = client.create_event(&event, None).await.unwrap();
        assert_eq!(created.id.as_str(), id);
    }
    let start = std::time::Instant::now();
    let handled = loop {
        let rows: Vec<(String, String, String)> =
            sqlx::query_as("SELECT event_id, scope, account FROM handled ORDER BY scope")
                .fetch_all(store.sqlite_pool().unwrap())
                .await
                .unwrap();
        if rows.len() >= 2 {
            break rows;
        }
        assert!(start.elapsed() < SECS_20, "handled so far: {rows:?}");
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    };
    assert_eq!(
        handled,
        [
            (id.to_owned(), "account-a".to_owned(), "a".to_owned()),
            (id.to_owned(), "account-b".to_owned(), "b".to_owned()),
        ]
    );
    serving.abort();
    store.close().await;
    server.shutdown().await;
}
