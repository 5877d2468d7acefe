//! What this process announces to the others next: the endpoints queued up since the last
//! `NOTIFY`, and the poke that sends them. In memory only; [`announce`](crate::engine::announce)
//! sends and listens on PostgreSQL. A module of its own so that the shared state
//! ([`Shared`](crate::engine::config::Shared)) holds it without importing the tasks that read
//! the shared state.

use std::collections::HashSet;
use std::sync::Mutex;

use tokio::sync::Notify;

use crate::model::EndpointKey;

/// The endpoints announced next, and the poke that sends them; in
/// [`Shared`](crate::engine::config::Shared).
#[derive(Debug, Default)]
pub(crate) struct Announcements {
    pending: Mutex<HashSet<EndpointKey>>,
    poke: Notify,
}

impl Announcements {
    /// Queues `endpoints` for the next notification.
    pub(crate) fn add(&self, endpoints: impl IntoIterator<Item = EndpointKey>) {
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend(endpoints);
        self.poke.notify_one();
    }

    /// Waits until endpoints are queued (at once if some were queued since the last wait).
    pub(crate) async fn poked(&self) {
        self.poke.notified().await;
    }

    /// Takes the endpoints queued since the last call.
    pub(crate) fn take(&self) -> Vec<EndpointKey> {
        std::mem::take(
            &mut *self
                .pending
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
        .into_iter()
        .collect()
    }
}
