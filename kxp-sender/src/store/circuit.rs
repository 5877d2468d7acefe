//! The circuit breaker in the store: the statements that carry out each [`Transition`], a
//! finished attempt's step of its endpoint's breaker ([`breaker_step`]) and the release of
//! probes. What to do is decided by [`crate::policy::circuit`]; this module only writes it
//! down, through [`Backend`]'s statements (holding and releasing deliveries among them).

use sqlx::Pool;

use crate::model::{
    AccountId, CircuitState, DeliveryId, EndpointId, EndpointKey, EndpointStatus, Transition,
    now_ms,
};
use crate::policy::circuit::{self as policy, FollowUp, Protection};
use crate::policy::health::RunningStats;
use crate::store::backend::Backend;
use crate::store::shards::every_shard;
use crate::store::{Db, StoreError, on_db};

/// The endpoint columns the breaker reads, by the endpoint (`$1`, of the account `$2`): once
/// per endpoint and batch of finished attempts, and again after a change.
pub(crate) const BREAKER_ROW: &str = "SELECT id, account_id, status, circuit_state, circuit_failed_probes, \
       circuit_probe_id, rate_limit_per_second FROM kxp_endpoints WHERE account_id = $2 AND id = $1";

impl BreakerRow {
    /// Its endpoint's key.
    pub(crate) fn key(&self) -> EndpointKey {
        EndpointKey::new(&self.account_id, &self.id)
    }
}

/// A row of [`BREAKER_ROW`].
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct BreakerRow {
    pub id: EndpointId,
    pub account_id: AccountId,
    #[sqlx(try_from = "String")]
    pub status: EndpointStatus,
    #[sqlx(try_from = "String")]
    pub circuit_state: CircuitState,
    pub circuit_failed_probes: i64,
    pub circuit_probe_id: Option<DeliveryId>,
    pub rate_limit_per_second: Option<i64>,
}

/// The statements that carry out each [`Transition`]; `$1` the endpoint, `$2` now, `$3` its
/// account, and for the two that open the circuit `$4` the next probe time. Each is conditional on the state it leaves, so two processes finishing
/// attempts at once cannot both make the same change.
pub(crate) const OPEN: &str = "UPDATE kxp_endpoints SET circuit_state = 'open', circuit_opened_at = $2, \
       circuit_probe_at = $4, circuit_probe_id = NULL, circuit_failed_probes = 0, updated_at = $2 \
     WHERE account_id = $3 AND id = $1 AND circuit_state = 'closed' AND status = 'active'";
pub(crate) const REOPEN: &str = "UPDATE kxp_endpoints SET circuit_state = 'open', circuit_probe_at = $4, \
       circuit_probe_id = NULL, circuit_failed_probes = circuit_failed_probes + 1, updated_at = $2 \
     WHERE account_id = $3 AND id = $1 AND circuit_state = 'half_open' AND status = 'active'";
pub(crate) const CLOSE: &str = "UPDATE kxp_endpoints SET circuit_state = 'closed', circuit_opened_at = NULL, \
       circuit_probe_at = NULL, circuit_probe_id = NULL, circuit_failed_probes = 0, updated_at = $2 \
     WHERE account_id = $3 AND id = $1 AND circuit_state <> 'closed' AND status = 'active'";
pub(crate) const DISABLE: &str = "UPDATE kxp_endpoints SET status = 'disabled', circuit_state = 'closed', \
       circuit_opened_at = NULL, circuit_probe_at = NULL, circuit_probe_id = NULL, \
       circuit_failed_probes = 0, updated_at = $2 \
     WHERE account_id = $3 AND id = $1 AND status = 'active'";

/// Applies one finished attempt to its endpoint's breaker, on the transaction `conn`: `row`
/// is the endpoint as the batch has left it so far (read again after a change), `stats` its
/// running statistics with this attempt folded in. Asks the circuit policy what to do
/// ([`decide`](policy::decide), [`follow_up`](policy::follow_up)) and writes it. Answers the
/// change made, if one was.
pub(crate) async fn breaker_step<DB: Backend>(
    conn: &mut DB::Connection,
    row: &mut BreakerRow,
    delivery_id: &DeliveryId,
    success: bool,
    stats: &RunningStats,
    now: i64,
    protection: &Protection,
) -> Result<Option<Transition>, sqlx::Error> {
    let before = row.circuit_state;
    let after = policy::AfterAttempt {
        state: before,
        probe: row.circuit_probe_id.as_ref() == Some(delivery_id),
        active: row.status == EndpointStatus::Active,
        success,
        consecutive_failures: stats.consecutive_failures,
        failing_since: stats.failing_since,
    };
    let transition = policy::decide(protection, &after, now);
    let probe_at = policy::next_probe_at(protection, transition, row.circuit_failed_probes, now);
    let endpoint = row.key();
    let changed = DB::transition(conn, transition, &endpoint, now, probe_at).await?;
    match policy::follow_up(
        protection,
        transition,
        changed,
        before,
        row.rate_limit_per_second,
    ) {
        FollowUp::Nothing => {}
        FollowUp::ReleaseHeld { spacing_ms } => {
            DB::spread_held(conn, &endpoint, now, spacing_ms).await?;
        }
        FollowUp::HoldEndpoint => {
            DB::hold_pending(conn, &endpoint, now).await?;
        }
        FollowUp::HoldDelivery => {
            DB::hold_delivery(conn, &endpoint.account_id, delivery_id).await?;
        }
    }
    if changed {
        *row = DB::breaker_row(conn, &endpoint).await?;
    }
    Ok(changed.then_some(transition))
}

impl Db {
    /// Moves every open circuit whose cool-down has passed to `half_open`, releasing one held
    /// delivery as the probe: the one with the most tries left (the oldest of those), so a long
    /// outage wears the backlog down evenly instead of sending its oldest delivery to the
    /// dead-letter queue. Pending deliveries that escaped holding (put back by a worker, or
    /// reclaimed after a crash, while the circuit was open) are held first. An open circuit
    /// with nothing pending stays open until there is something to probe with. Returns how many
    /// probes were released.
    pub(crate) async fn release_probes(&self) -> Result<u64, StoreError> {
        let now = now_ms();
        let due: Vec<(AccountId, EndpointId)> = match self {
            // Shard by shard: a worker down leaves the other shards' probes released.
            Db::Citus(pool) => {
                every_shard(
                    pool,
                    "kxp_endpoints",
                    "SELECT jsonb_build_array(account_id, id) AS r FROM %%s \
                     WHERE circuit_state = 'open' AND circuit_probe_at <= %L AND status = 'active'",
                    &[now.to_string()],
                )
                .await?
            }
            _ => on_db!(self, |pool| {
                sqlx::query_as::<_, (AccountId, EndpointId)>(
                    "SELECT account_id, id FROM kxp_endpoints WHERE circuit_state = 'open' AND circuit_probe_at <= $1 \
                     AND status = 'active'",
                )
                .bind(now)
                .fetch_all(pool)
                .await?
            }),
        };
        let mut released = 0;
        for (account_id, endpoint_id) in due {
            let endpoint = EndpointKey::new(&account_id, &endpoint_id);
            let probe = on_db!(self, |pool| release_probe(pool, &endpoint, now).await?);
            if let Some(probe) = probe {
                tracing::info!(target: "kxp_sender::circuit", endpoint_id = %endpoint_id, delivery_id = %probe, "circuit half-open: probing");
                released += 1;
            }
        }
        Ok(released)
    }
}

/// Moves one endpoint's open circuit to `half_open` and releases its probe, in one write
/// transaction; answers the probe (none: another process did it first, or nothing is held).
async fn release_probe<DB: Backend>(
    pool: &Pool<DB>,
    endpoint: &EndpointKey,
    now: i64,
) -> Result<Option<DeliveryId>, sqlx::Error> {
    let mut tx = pool.begin_with(DB::BEGIN).await?;
    // The state change comes first: on PostgreSQL it locks the row, so a second process doing
    // the same finds the circuit half-open and changes nothing.
    let probe = if DB::half_open(&mut *tx, endpoint, now).await? == 1 {
        DB::hold_pending(&mut *tx, endpoint, now).await?;
        DB::release_probe(&mut *tx, endpoint, now).await?
    } else {
        None
    };
    match &probe {
        Some(probe) => {
            DB::set_probe(&mut *tx, probe.as_str(), endpoint).await?;
            tx.commit().await?;
        }
        None => tx.rollback().await?,
    }
    Ok(probe)
}
