//! The same catch-up behind kxp-actix: its middleware watches the hints, and recovered events
//! are posted to the receiver's own URL over loopback; in ordered mode it holds deliveries and
//! the handler gets each key's events in order.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use actix_web::{App, HttpServer, web};
use kxp_actix::catch_up::{CatchUp, CatchUpConfig, CatchUpMiddleware, Credential};
use kxp_actix::dedup::{self, Handled, Outcome, Store};
use kxp_actix::{Receiver, VerifiedEvent, VerifyMiddleware};
use kxp_dedup::sqlx;

use crate::ordered::emit as emit_keyed;
use crate::ordered::{assert_in_order_per_key, key};
use crate::{emit, point, register, sender, wait_status};

/// Refuses event 1 while `stuck` is set; records the rest in `handled`, in the order handled.
async fn webhook(
    store: web::Data<Store>,
    stuck: web::Data<Arc<AtomicBool>>,
    event: VerifiedEvent,
) -> Handled {
    let n = event.data()["n"].as_i64().unwrap();
    if n == 1 && stuck.load(Ordering::SeqCst) {
        return Handled(Outcome::Failed);
    }
    let id = event.id().to_owned();
    dedup::process_in_transaction(&store, &event, |mut tx| async move {
        sqlx::query("INSERT INTO handled (event_id, n) VALUES (?1, ?2)")
            .bind(&id)
            .bind(n)
            .execute(tx.sqlite().unwrap())
            .await?;
        Ok::<_, sqlx::Error>(tx)
    })
    .await
}

/// An actix receiver on its own thread, with `catch_up`'s middleware outermost: its URL, its
/// store and the switch that makes the handler refuse event 1.
struct Actix {
    url: String,
    store: Store,
    stuck: Arc<AtomicBool>,
    server: actix_web::dev::ServerHandle,
}

async fn serve(db: &std::path::Path, secret: &str, config: CatchUpConfig) -> (Actix, CatchUp) {
    let store = Store::connect(&format!("sqlite://{}", db.display()))
        .await
        .unwrap();
    sqlx::query(
        "CREATE TABLE handled \
         (turn INTEGER PRIMARY KEY AUTOINCREMENT, event_id TEXT NOT NULL, n INTEGER NOT NULL)",
    )
    .execute(store.sqlite_pool().unwrap())
    .await
    .unwrap();
    let catch_up = CatchUp::new(config, store.clone()).unwrap();
    let stuck = Arc::new(AtomicBool::new(false));
    // The receiver's port first, so the middleware knows its own URL.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    let url = format!("http://{addr}/hook");
    let (started, handle) = std::sync::mpsc::channel();
    {
        let (store, catch_up, url, secret, stuck) = (
            store.clone(),
            catch_up.clone(),
            url.clone(),
            secret.to_owned(),
            stuck.clone(),
        );
        std::thread::spawn(move || {
            actix_web::rt::System::new().block_on(async move {
                let verify = VerifyMiddleware::new(Receiver::new(
                    kxp_verify::Verifier::from_secret_list(&secret).unwrap(),
                ));
                let server = HttpServer::new(move || {
                    App::new()
                        .app_data(web::Data::new(store.clone()))
                        .app_data(web::Data::new(stuck.clone()))
                        .service(
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
    let actix = Actix {
        url,
        store,
        stuck,
        server,
    };
    (actix, catch_up)
}

impl Actix {
    /// The numbers handled, in the order the handler got them.
    async fn handled(&self) -> Vec<u32> {
        sqlx::query_scalar("SELECT n FROM handled ORDER BY turn")
            .fetch_all(self.store.sqlite_pool().unwrap())
            .await
            .unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_actix_receiver_closes_a_gap_through_its_own_url() {
    let dir = tempfile::tempdir().unwrap();
    let (sender_server, client) = sender(dir.path()).await;
    let base = format!("http://{}", sender_server.addr());
    let (endpoint, secret) = register(&client, "http://127.0.0.1:9/hook").await;
    let config = CatchUpConfig::new(
        &base,
        Credential::Secret(kxp_verify::Secret::new(&secret).unwrap()),
    )
    .with_delay(Duration::from_millis(200))
    .with_interval(Duration::from_secs(3600));
    let (actix, catch_up) = serve(&dir.path().join("receiver.db"), &secret, config).await;
    let url = actix.url.clone();
    point(&client, &endpoint, &url).await;

    // 1 delivered; 2 dead (the receiver refuses it: its URL points elsewhere meanwhile); 3
    // delivered with 2 missing, and the catch-up brings 2 through the receiver's own URL.
    emit(&client, 1).await;
    wait_for(|| async { actix.handled().await.len() == 1 }).await;
    point(&client, &endpoint, "http://127.0.0.1:9/hook").await;
    let dead = emit(&client, 2).await;
    wait_status(&client, &dead, "dead").await;
    point(&client, &endpoint, &url).await;
    emit(&client, 3).await;
    wait_for(|| async { actix.handled().await.len() == 3 }).await;
    let rows: Vec<String> = sqlx::query_scalar("SELECT event_id FROM handled")
        .fetch_all(actix.store.sqlite_pool().unwrap())
        .await
        .unwrap();
    assert!(rows.contains(&dead), "{rows:?}");
    let mut distinct = rows.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), rows.len(), "each once");
    catch_up.stop();
    actix.server.stop(false).await;
    sender_server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_actix_receiver_in_ordered_mode_hands_each_key_its_events_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let (sender_server, client) = sender(dir.path()).await;
    let base = format!("http://{}", sender_server.addr());
    let (endpoint, secret) = register(&client, "http://127.0.0.1:9/hook").await;
    let receiver = Receiver::new(kxp_verify::Verifier::from_secret_list(&secret).unwrap());
    let config = CatchUpConfig::new(
        &base,
        Credential::Secret(kxp_verify::Secret::new(&secret).unwrap()),
    )
    .with_delay(Duration::from_millis(200))
    .with_interval(Duration::from_secs(3600))
    .ordered(receiver);
    let (actix, catch_up) = serve(&dir.path().join("receiver.db"), &secret, config).await;
    actix.stuck.store(true, Ordering::SeqCst);
    point(&client, &endpoint, &actix.url).await;

    // Every delivery is answered 200 at once (held); A's first is refused, so A's others wait
    // and the rest go on.
    let mut events = Vec::new();
    for n in 1..=8 {
        events.push(emit_keyed(&client, n).await);
    }
    for event in &events {
        wait_status(&client, event, "delivered").await;
    }
    let others = (1..=8).filter(|&n| key(n) != Some("pay_A")).count();
    wait_for(|| async { actix.handled().await.len() == others }).await;
    assert!(
        !actix.handled().await.contains(&5),
        "A's second before its first"
    );
    actix.stuck.store(false, Ordering::SeqCst);
    wait_for(|| async { actix.handled().await.len() == 8 }).await;
    assert_in_order_per_key(&actix.handled().await);
    catch_up.stop();
    actix.server.stop(false).await;
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
