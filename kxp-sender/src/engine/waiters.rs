//! The long polls of pull endpoints' feeds (`GET …/feed?wait=`): who waits on which endpoint,
//! and the wake-ups that end a wait. In memory, per process.
//!
//! A waiting request holds no database connection: it reads, finds nothing, and waits here for
//! a wake-up — the endpoint's new deliveries announced by an ingestion or numbered by a
//! sequencer pass in this process, an announcement from another process, or the process
//! shutting down — then reads again. A wake-up that another process's sequencer would have
//! given is not seen here: the waiter reads again every [`RECHECK`] as well.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;

use crate::model::EndpointId;

/// The most long polls one endpoint's feed may have waiting at once: a receiver needs one, a
/// few more cover a restart that left the old ones waiting.
pub(crate) const PER_ENDPOINT: usize = 4;

/// The most long polls one process keeps waiting at once, unless its connection cap is lower
/// ([`Waiters::fit_connections`]): each costs a socket and a little memory, and a wake-up of
/// all of them (a shutdown, a scan) a read each.
pub(crate) const PER_PROCESS: usize = 1024;

/// How often a waiter reads again without a wake-up: what it may lag behind numbers another
/// process gave.
pub(crate) const RECHECK: Duration = Duration::from_secs(2);

/// Why a long poll may not wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Full {
    /// The endpoint has [`PER_ENDPOINT`] waiting.
    Endpoint,
    /// The process has its cap waiting ([`Waiters::cap`]).
    Process,
}

/// Every long poll waiting in this process, by endpoint.
#[derive(Debug)]
pub(crate) struct Waiters {
    by_endpoint: Mutex<HashMap<EndpointId, Waiting>>,
    /// The most that may wait at once in this process.
    cap: std::sync::atomic::AtomicUsize,
    /// Set at shutdown: waits end at once, and none begins.
    stopped: AtomicBool,
    /// Woken at shutdown.
    stop: Notify,
}

#[derive(Debug)]
struct Waiting {
    count: usize,
    news: Arc<Notify>,
}

impl Default for Waiters {
    fn default() -> Waiters {
        Waiters {
            by_endpoint: Mutex::default(),
            cap: std::sync::atomic::AtomicUsize::new(PER_PROCESS),
            stopped: AtomicBool::default(),
            stop: Notify::default(),
        }
    }
}

impl Waiters {
    /// Keeps the long polls to half of the API's `connections` (when that is below
    /// [`PER_PROCESS`]): waiting readers never take the connections ingestion and the rest of
    /// the API need.
    pub(crate) fn fit_connections(&self, connections: usize) {
        self.cap
            .store((connections / 2).clamp(1, PER_PROCESS), Ordering::SeqCst);
    }

    /// The most that may wait at once in this process.
    pub(crate) fn cap(&self) -> usize {
        self.cap.load(Ordering::SeqCst)
    }

    /// A place among `id`'s waiters, until the returned [`Wait`] is dropped.
    pub(crate) fn join(&self, id: &EndpointId) -> Result<Wait<'_>, Full> {
        let mut map = self.map();
        let total: usize = map.values().map(|w| w.count).sum();
        let waiting = map.entry(id.clone()).or_insert_with(|| Waiting {
            count: 0,
            news: Arc::new(Notify::new()),
        });
        if waiting.count >= PER_ENDPOINT {
            return Err(Full::Endpoint);
        }
        if total >= self.cap() {
            if waiting.count == 0 {
                map.remove(id);
            }
            return Err(Full::Process);
        }
        waiting.count += 1;
        Ok(Wait {
            waiters: self,
            id: id.clone(),
            news: waiting.news.clone(),
        })
    }

    /// Ends the waits of these endpoints' long polls: they read again.
    pub(crate) fn wake<'a>(&self, ids: impl IntoIterator<Item = &'a EndpointId>) {
        let map = self.map();
        if map.is_empty() {
            return;
        }
        for id in ids {
            if let Some(waiting) = map.get(id) {
                waiting.news.notify_waiters();
            }
        }
    }

    /// Ends every wait (a sequencer pass over all endpoints, an announcement without names).
    pub(crate) fn wake_all(&self) {
        for waiting in self.map().values() {
            waiting.news.notify_waiters();
        }
    }

    /// The shutdown: every long poll answers at once, and none waits from now on.
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        self.stop.notify_waiters();
    }

    /// Whether the process is shutting down.
    pub(crate) fn stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }

    /// How many wait now.
    pub(crate) fn count(&self) -> usize {
        self.map().values().map(|w| w.count).sum()
    }

    /// The metrics: how many long polls wait now.
    pub(crate) fn render(&self, out: &mut String) {
        use std::fmt::Write as _;
        let _ = writeln!(
            out,
            "# HELP kxp_feed_waiters Long polls of pull endpoints' feeds waiting in this process (at most {}).\n\
             # TYPE kxp_feed_waiters gauge\nkxp_feed_waiters {}",
            self.cap(),
            self.count()
        );
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<EndpointId, Waiting>> {
        self.by_endpoint
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// One long poll's place among its endpoint's waiters.
#[derive(Debug)]
pub(crate) struct Wait<'a> {
    waiters: &'a Waiters,
    id: EndpointId,
    news: Arc<Notify>,
}

impl Wait<'_> {
    /// Reads with `read` until it finds something, the process stops or `until` passes;
    /// answers the last read. Between reads it waits for a wake-up ([`Waiters::wake`]), at
    /// most [`RECHECK`]. A wake-up that comes while a read is under way is not lost: the wait
    /// is registered before each read.
    pub(crate) async fn until<T, E, F>(
        &self,
        until: tokio::time::Instant,
        mut read: impl FnMut() -> F,
        found: impl Fn(&T) -> bool,
    ) -> Result<T, E>
    where
        F: Future<Output = Result<T, E>>,
    {
        loop {
            let news = self.news.notified();
            let stop = self.waiters.stop.notified();
            tokio::pin!(news, stop);
            news.as_mut().enable();
            stop.as_mut().enable();
            let answer = read().await?;
            let now = crate::model::tokio_instant();
            if found(&answer) || now >= until || self.waiters.stopped() {
                return Ok(answer);
            }
            let recheck = until.min(now + RECHECK);
            tokio::select! {
                _ = news => {}
                _ = stop => {}
                _ = tokio::time::sleep_until(recheck) => {}
            }
        }
    }
}

impl Drop for Wait<'_> {
    fn drop(&mut self) {
        let mut map = self.waiters.map();
        if let Some(waiting) = map.get_mut(&self.id) {
            waiting.count -= 1;
            if waiting.count == 0 {
                map.remove(&self.id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u32) -> EndpointId {
        EndpointId::from(format!("ep_{n:032}"))
    }

    #[test]
    fn an_endpoint_has_at_most_four_waiting_and_a_place_is_given_back_on_drop() {
        let waiters = Waiters::default();
        let held: Vec<_> = (0..PER_ENDPOINT)
            .map(|_| waiters.join(&id(1)).unwrap())
            .collect();
        assert_eq!(waiters.join(&id(1)).unwrap_err(), Full::Endpoint);
        assert!(waiters.join(&id(2)).is_ok(), "another endpoint still waits");
        drop(held);
        assert_eq!(waiters.count(), 0);
        assert!(waiters.join(&id(1)).is_ok());
    }

    #[test]
    fn the_cap_is_half_the_connections_at_most_the_default() {
        let waiters = Waiters::default();
        assert_eq!(waiters.cap(), PER_PROCESS);
        waiters.fit_connections(300);
        assert_eq!(waiters.cap(), 150);
        let held: Vec<_> = (0..150).map(|n| waiters.join(&id(n)).unwrap()).collect();
        assert_eq!(waiters.join(&id(999)).unwrap_err(), Full::Process);
        drop(held);
        waiters.fit_connections(1_000_000);
        assert_eq!(waiters.cap(), PER_PROCESS);
    }

    #[test]
    fn the_process_has_at_most_its_cap_waiting() {
        let waiters = Waiters::default();
        let held: Vec<_> = (0..PER_PROCESS)
            .map(|n| waiters.join(&id(u32::try_from(n).unwrap())).unwrap())
            .collect();
        assert_eq!(waiters.join(&id(999_999)).unwrap_err(), Full::Process);
        assert_eq!(waiters.map().len(), PER_PROCESS, "no entry left behind");
        drop(held);
        assert!(waiters.map().is_empty());
    }

    #[tokio::test]
    async fn a_wake_up_ends_the_wait_and_the_next_read_answers() {
        let waiters = Arc::new(Waiters::default());
        let reads = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let waiting = {
            let (waiters, reads) = (waiters.clone(), reads.clone());
            tokio::spawn(async move {
                let wait = waiters.join(&id(1)).unwrap();
                let far = crate::model::tokio_instant() + Duration::from_secs(3600);
                wait.until(
                    far,
                    || {
                        let n = reads.fetch_add(1, Ordering::SeqCst);
                        async move { Ok::<_, ()>(n) }
                    },
                    |n| *n >= 1,
                )
                .await
            })
        };
        while waiters.count() == 0 || reads.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        waiters.wake([&id(2)]);
        waiters.wake([&id(1)]);
        assert_eq!(waiting.await.unwrap(), Ok(1));
        assert_eq!(waiters.count(), 0);
    }

    #[tokio::test]
    async fn a_stop_ends_every_wait_and_no_new_one_waits() {
        let waiters = Arc::new(Waiters::default());
        let waiting = {
            let waiters = waiters.clone();
            tokio::spawn(async move {
                let wait = waiters.join(&id(1)).unwrap();
                let far = crate::model::tokio_instant() + Duration::from_secs(3600);
                wait.until(far, || async { Ok::<_, ()>(0) }, |_| false)
                    .await
            })
        };
        while waiters.count() == 0 {
            tokio::task::yield_now().await;
        }
        waiters.stop();
        assert_eq!(waiting.await.unwrap(), Ok(0));
        let wait = waiters.join(&id(1)).unwrap();
        let far = crate::model::tokio_instant() + Duration::from_secs(3600);
        let answer = wait
            .until(far, || async { Ok::<_, ()>(7) }, |_| false)
            .await;
        assert_eq!(answer, Ok(7), "answered at once after the stop");
    }
}
