//! The same catch-up behind kxp-actix: its middleware watches the hints, and recovered events
//! are posted to the receiver's own URL over loopback.

use std::net::SocketAddr;
use std::time::Duration;

use actix_web::{App, HttpServer, web};
use kxp_actix::catch_up::{CatchUp, CatchUpConfig, CatchUpMiddleware, Credential};
use kxp_actix::dedup::{self, Handled, Store};
use kxp_actix::{Receiver, VerifiedEvent, VerifyMiddleware};
use kxp_dedup::sqlx;

use crate::{emit, point, register, sender, wait_status};

async fn webhook(store: web::Data<Store>, event: VerifiedEvent) -> Handled {
    let id = event.id().to_owned();
    dedup::process_in_transaction(&store, &event, |mut tx| async move {
        sqlx::query("INSERT INTO handled (event_id) VALUES (?1)")
            .bind(&id)
            .execute(tx.sqlite().unwrap())
            .await?;
        Ok::<_, sqlx::Error>(tx)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_actix_receiver_closes_a_gap_through_its_own_url() {
    let dir = tempfile::tempdir().unwrap();
    let (sender_server, client) = sender(dir.path()).await;
    let base = format!("http://{}", sender_server.addr());
    let (endpoint, secret) = register(&client, "http://127.0.0.1:9/hook").await;
    let db = dir.path().join("receiver.db");
    let store = Store::connect(&format!("sqlite://{}", db.display()))
        .await
        .unwrap();
    sqlx::query("CREATE TABLE handled (event_id TEXT NOT NULL)")
        .execute(store.sqlite_pool().unwrap())
        .await
        .unwrap();
    let config = CatchUpConfig::new(
        &base,
        Credential::Secret(kxp_verify::Secret::new(&secret).unwrap()),
    )
    .with_delay(Duration::from_millis(200))
    .with_interval(Duration::from_secs(3600));
    let catch_up = CatchUp::new(config, store.clone()).unwrap();

    // The receiver's port first, so the middleware knows its own URL.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    let url = format!("http://{addr}/hook");
    let (started, handle) = std::sync::mpsc::channel();
    {
        let (store, catch_up, url, secret) =
            (store.clone(), catch_up.clone(), url.clone(), secret.clone());
        std::thread::spawn(move || {
            actix_web::rt::System::new().block_on(async move {
                let verify = VerifyMiddleware::new(Receiver::new(
                    kxp_verify::Verifier::from_secret_list(&secret).unwrap(),
                ));
                let server = HttpServer::new(move || {
                    App::new().app_data(web::Data::new(store.clone())).service(
                        web::resource("/hook")
                            .route(web::post().to(webhook))
                            .wrap(verify.clone())
                            .wrap(CatchUpMiddleware::new(&catch_up, &url)),
                    )
                })
                .workers(1)
                .disable_signals()
                .listen(listener)
                .unwrap()
                .run();
                started.send(server.handle()).unwrap();
                server.await.unwrap();
            });
        });
    }
    let server = handle.recv().unwrap();
    point(&client, &endpoint, &url).await;

    // 1 delivered; 2 dead (the receiver refuses it: its URL points elsewhere meanwhile); 3
    // delivered with 2 missing, and the catch-up brings 2 through the receiver's own URL.
    emit(&client, 1).await;
    let handled = || async {
        sqlx::query_scalar::<_, String>("SELECT event_id FROM handled")
            .fetch_all(store.sqlite_pool().unwrap())
            .await
            .unwrap()
    };
    wait_for(|| async { handled().await.len() == 1 }).await;
    point(&client, &endpoint, "http://127.0.0.1:9/hook").await;
    let dead = emit(&client, 2).await;
    wait_status(&client, &dead, "dead").await;
    point(&client, &endpoint, &url).await;
    emit(&client, 3).await;
    wait_for(|| async { handled().await.len() == 3 }).await;
    let rows = handled().await;
    assert!(rows.contains(&dead), "{rows:?}");
    let mut distinct = rows.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), rows.len(), "each once");
    catch_up.stop();
    server.stop(false).await;
    sender_server.shutdown().await;
}

async fn wait_for<F, Fut>(done: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = std::time::Instant::now();
    while !done().await {
        assert!(start.elapsed() < crate::SECS_20, "not within 20 s");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
