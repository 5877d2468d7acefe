//! Replays: one delivery again, or an endpoint's deliveries in bulk. The API and the console's
//! buttons both come through here; a replay to a deleted endpoint is a
//! [`Conflict`](Error::Conflict), and the workers are woken for what was queued.

use super::{AppState, Error};
use crate::model::{Account, Delivery, DeliveryFilter, DeliveryId, EndpointId};

/// Replays one of `account`'s deliveries: a new delivery of the same event (same id, same bytes)
/// to the same endpoint, due now.
pub(crate) async fn replay(
    state: &AppState,
    account: &Account,
    delivery_id: &DeliveryId,
) -> Result<Delivery, Error> {
    let delivery = state.db.replay(&account.id, delivery_id).await?;
    state.shared.wake_workers();
    Ok(delivery)
}

/// Replays every delivery of one of `account`'s endpoints that `filter` matches and that was
/// not replayed yet, each once; returns how many were queued.
pub(crate) async fn replay_endpoint(
    state: &AppState,
    account: &Account,
    endpoint_id: &EndpointId,
    filter: &DeliveryFilter,
) -> Result<u64, Error> {
    let queued = state
        .db
        .replay_endpoint(&account.id, endpoint_id, filter)
        .await?;
    if queued > 0 {
        state.shared.wake_workers();
    }
    Ok(queued)
}
