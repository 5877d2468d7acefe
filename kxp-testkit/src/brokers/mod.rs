//! Message brokers for tests (feature `brokers`): a RabbitMQ queue with a dead-letter queue, a
//! NATS JetStream stream, and a private `nats-server` to stop and start again.
//!
//! [`Rabbit::connect`] and [`Nats::connect`] use the brokers on their standard loopback ports
//! ([`RABBIT_URL`], [`NATS_URL`]). When one is not reachable they return `None` after a loud
//! `SKIPPED (RabbitMQ): …` or `SKIPPED (NATS): …` line on stderr, unless [`REQUIRE_ENV`] is `1`
//! (as in CI), where they panic instead: a required broker that is missing is a failure, not a
//! skip. Every queue, exchange and stream a test gets has a unique name (a prefix and a UUID) and
//! is deleted when the value is dropped, also when the test panics (a best effort, like
//! [`PgDatabase`](crate::db::PgDatabase)).
//!
//! One module per broker (`rabbit`, `nats`, and `nats_server` for a server of one test's own);
//! this one holds what they share: the skip-or-fail rule, unique names, cleanup on drop.
//!
//! ```no_run
//! # async fn test() {
//! use kxp_testkit::brokers::Rabbit;
//!
//! let Some(rabbit) = Rabbit::connect().await else {
//!     return; // `SKIPPED (RabbitMQ): …` is on stderr.
//! };
//! rabbit.publish(br#"{"type":"a.b","data":{}}"#, Some("msg-1")).await;
//! let url = rabbit.ingest_url("acc_0193a0c4c1e07c2e9f3b7a1d2c4e5f60");
//! // … run `kxp serve --ingest <url>`, then look at rabbit.dead_letters() …
//! rabbit.delete().await;
//! # }
//! ```

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

mod nats;
mod nats_server;
mod rabbit;

pub use nats::{ConsumerState, NATS_URL, Nats, NatsMessage, Subscription};
pub use nats_server::NatsServer;
pub use rabbit::{AmqpHeader, AmqpMessage, RABBIT_URL, Rabbit};

/// When this environment variable is `1`, a broker that cannot be reached fails the test
/// instead of skipping it.
pub const REQUIRE_ENV: &str = "KXP_REQUIRE_BROKERS";

/// How long a broker operation of the helpers may take before the test fails.
const PATIENCE: Duration = Duration::from_secs(20);

/// Whether [`REQUIRE_ENV`] is `1`.
pub fn brokers_required() -> bool {
    std::env::var(REQUIRE_ENV).is_ok_and(|v| v == "1")
}

/// `None` after the `SKIPPED (<what>): <why>` line, or a panic when brokers are required.
///
/// The line goes to the stderr handle itself: libtest captures `eprintln!` of passing tests.
fn unavailable<T>(what: &str, why: &str) -> Option<T> {
    if brokers_required() {
        panic!("{what} is required ({REQUIRE_ENV}=1) but unavailable: {why}");
    }
    let _ = writeln!(std::io::stderr(), "SKIPPED ({what}): {why}");
    None
}

/// Whether something accepts TCP connections at `addr` (within a second).
fn reachable(addr: &str) -> bool {
    addr.parse::<SocketAddr>()
        .is_ok_and(|addr| TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok())
}

/// A unique name: `<prefix>-<uuid>` (hex digits and `-` only after the prefix).
fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4().simple())
}

/// Runs `future` on a runtime of its own on a thread of its own: for `Drop`, which cannot await
/// and may run on the single thread of the test's runtime, or while it unwinds.
fn on_own_runtime<F, T>(future: impl FnOnce() -> F + Send) -> Result<T, String>
where
    F: std::future::Future<Output = Result<T, String>>,
    T: Send,
{
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| e.to_string())?;
                runtime.block_on(async {
                    tokio::time::timeout(PATIENCE, future())
                        .await
                        .map_err(|_| "timed out".to_owned())?
                })
            })
            .join()
            .unwrap_or_else(|_| Err("the cleanup thread panicked".to_owned()))
    })
}
