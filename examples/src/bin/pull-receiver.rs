//! A complete receiver of a **pull endpoint**: it takes no inbound traffic at all. It
//! long-polls the endpoint's feed on the sender, verifies each event as a delivery, records each
//! payment exactly once (in the dedup transaction), and commits the cursor. Killed at any
//! point, it resumes at the committed cursor, and nothing is recorded twice.
//!
//! ```sh
//! KXP_WEBHOOK_SECRET=… KXP_SENDER_URL=https://webhooks.platform.example \
//!   KXP_ENDPOINT_ID=ep_… cargo run -p kxp-examples --bin pull-receiver
//! ```
//!
//! Settings (see `kxp_examples::Config`): `KXP_WEBHOOK_SECRET`, `KXP_SENDER_URL` and
//! `KXP_ENDPOINT_ID` (required), `DATABASE_URL` (default `sqlite://kxp-receiver.db`;
//! `postgres://…` works the same).

use std::process::ExitCode;

use kxp_catchup::PullConsumer;
use kxp_examples::{Config, Ordered, Payment};

#[tokio::main]
async fn main() -> ExitCode {
    let settings = Config::from_env().and_then(|config| {
        let feed = Ordered::from_env("pull-receiver")?;
        Ok((config, feed))
    });
    let (config, feed) = match settings {
        Ok(settings) => settings,
        Err(error) => {
            eprintln!("pull-receiver: {error}");
            return ExitCode::from(2);
        }
    };
    kxp_examples::init_logging();
    match run(config, feed).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("pull-receiver: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run(config: Config, feed: Ordered) -> Result<(), Box<dyn std::error::Error>> {
    let store = kxp_examples::open_database(&config.database_url).await?;
    // Items are verified with the same receiver a push endpoint's middleware uses.
    let consumer = PullConsumer::new(
        &feed.sender_url,
        &feed.endpoint_id,
        feed.secret,
        store.clone(),
    )?
    .with_receiver(config.receiver.clone());
    tracing::info!(
        endpoint_id = %feed.endpoint_id,
        database = store.backend().as_str(),
        "pulling the feed of {}",
        feed.endpoint_id
    );
    // Until SIGTERM or Ctrl-C. Each payment is recorded in the transaction that marks its event
    // processed: a kill midway rolls both back, and the next poll brings the event again.
    consumer
        .run_in_transaction_until(
            |pulled: kxp_catchup::Pulled<Payment>, tx| {
                let (slow, refuse) = (config.slow, config.refuse.clone());
                async move {
                    kxp_examples::record_payment(tx, &pulled.event, slow, refuse.as_deref()).await
                }
            },
            kxp_examples::stop_requested(),
        )
        .await;
    store.close().await;
    Ok(())
}
