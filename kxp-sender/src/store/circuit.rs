//! The circuit breaker's SQL: holding and releasing an endpoint's deliveries, the statements
//! that carry out each [`Transition`], and the release of probes. What to do is decided by
//! [`crate::policy::circuit`]; this module only writes it down.

use crate::model::{
    CircuitState, DeliveryId, EndpointId, EndpointStatus, HELD, Transition, now_ms,
};

use crate::store::{Db, StoreError, on_db};

/// Releases an endpoint's held deliveries on the transaction `$tx`: the oldest due at `$now`,
/// each next one `$spacing` ms later, so a backlog drains at the endpoint's rate limit. One
/// statement; `UPDATE … FROM` with a window function works on both backends.
macro_rules! spread_held {
    ($tx:expr, $endpoint_id:expr, $now:expr, $spacing:expr) => {
        sqlx::query(
            "UPDATE kxp_deliveries SET next_attempt_at = $1 + s.rn * $2, updated_at = $1 \
             FROM (SELECT id, ROW_NUMBER() OVER (ORDER BY id) - 1 AS rn FROM kxp_deliveries \
                   WHERE endpoint_id = $3 AND status = 'pending' AND next_attempt_at = $4) AS s \
             WHERE kxp_deliveries.id = s.id",
        )
        .bind($now)
        .bind($spacing)
        .bind($endpoint_id)
        .bind($crate::model::HELD)
        .execute(&mut *$tx)
        .await
    };
}
pub(crate) use spread_held;

/// Holds every pending delivery of an endpoint on the transaction `$tx` (they keep their
/// attempt counts; `spread_held!` releases them).
macro_rules! hold_pending {
    ($tx:expr, $endpoint_id:expr, $now:expr) => {
        sqlx::query(
            "UPDATE kxp_deliveries SET next_attempt_at = $1, updated_at = $2 \
             WHERE endpoint_id = $3 AND status = 'pending' AND next_attempt_at <> $1",
        )
        .bind($crate::model::HELD)
        .bind($now)
        .bind($endpoint_id)
        .execute(&mut *$tx)
        .await
    };
}
pub(crate) use hold_pending;

/// The endpoint columns the breaker reads, by the endpoint's id: once per endpoint and batch
/// of finished attempts, and again after a change.
pub(crate) const BREAKER_ROW: &str = "SELECT id, status, circuit_state, circuit_failed_probes, \
       circuit_probe_id, rate_limit_per_second FROM kxp_endpoints WHERE id = $1";

/// A row of [`BREAKER_ROW`].
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct BreakerRow {
    pub id: EndpointId,
    #[sqlx(try_from = "String")]
    pub status: EndpointStatus,
    #[sqlx(try_from = "String")]
    pub circuit_state: CircuitState,
    pub circuit_failed_probes: i64,
    pub circuit_probe_id: Option<DeliveryId>,
    pub rate_limit_per_second: Option<i64>,
}

/// [`BREAKER_ROW`] for every endpoint of `$1`, a JSON array of ids: SQLite's form and
/// PostgreSQL's.
pub(crate) const BREAKER_ROWS_SQLITE: &str = "SELECT id, status, circuit_state, circuit_failed_probes, \
       circuit_probe_id, rate_limit_per_second FROM kxp_endpoints WHERE id IN (SELECT value FROM json_each($1))";
pub(crate) const BREAKER_ROWS_POSTGRES: &str = "SELECT id, status, circuit_state, circuit_failed_probes, \
       circuit_probe_id, rate_limit_per_second FROM kxp_endpoints \
     WHERE id IN (SELECT jsonb_array_elements_text($1::jsonb))";

/// Reads the [`BreakerRow`] of `$endpoint_id` on the transaction `$tx`.
macro_rules! breaker_row {
    ($tx:expr, $endpoint_id:expr) => {
        sqlx::query_as::<_, $crate::store::circuit::BreakerRow>($crate::store::circuit::BREAKER_ROW)
            .bind($endpoint_id)
            .fetch_one(&mut *$tx)
            .await
    };
}
pub(crate) use breaker_row;

/// The statements that carry out each [`Transition`]; `$1` the endpoint, `$2` now, and for the
/// two that open the circuit `$3` the next probe time. Each is conditional on the state it leaves, so two processes finishing
/// attempts at once cannot both make the same change.
pub(crate) const OPEN: &str = "UPDATE kxp_endpoints SET circuit_state = 'open', circuit_opened_at = $2, \
       circuit_probe_at = $3, circuit_probe_id = NULL, circuit_failed_probes = 0, updated_at = $2 \
     WHERE id = $1 AND circuit_state = 'closed' AND status = 'active'";
pub(crate) const REOPEN: &str = "UPDATE kxp_endpoints SET circuit_state = 'open', circuit_probe_at = $3, \
       circuit_probe_id = NULL, circuit_failed_probes = circuit_failed_probes + 1, updated_at = $2 \
     WHERE id = $1 AND circuit_state = 'half_open' AND status = 'active'";
pub(crate) const CLOSE: &str = "UPDATE kxp_endpoints SET circuit_state = 'closed', circuit_opened_at = NULL, \
       circuit_probe_at = NULL, circuit_probe_id = NULL, circuit_failed_probes = 0, updated_at = $2 \
     WHERE id = $1 AND circuit_state <> 'closed' AND status = 'active'";
pub(crate) const DISABLE: &str = "UPDATE kxp_endpoints SET status = 'disabled', circuit_state = 'closed', \
       circuit_opened_at = NULL, circuit_probe_at = NULL, circuit_probe_id = NULL, \
       circuit_failed_probes = 0, updated_at = $2 \
     WHERE id = $1 AND status = 'active'";

/// The statement that makes `transition`, if it makes one: `$1` the endpoint, `$2` now, and
/// for the two that open the circuit `$3` the next probe time.
pub(crate) fn transition_sql(transition: Transition) -> Option<&'static str> {
    match transition {
        Transition::Stay => None,
        Transition::Open => Some(OPEN),
        Transition::Reopen => Some(REOPEN),
        Transition::Close => Some(CLOSE),
        Transition::Disable => Some(DISABLE),
    }
}

/// Applies one finished attempt to its endpoint's breaker, on the transaction `$tx`: `$row`
/// is the endpoint as the batch has left it so far (a `&mut BreakerRow`, read again after a
/// change), `$stats` its running statistics with this attempt folded in. Asks the circuit
/// policy what to do ([`decide`](crate::policy::circuit::decide),
/// [`follow_up`](crate::policy::circuit::follow_up)) and writes it. Evaluates to
/// `Result<Option<Transition>, sqlx::Error>`: the change made, if one was. A macro only because
/// the statements must compile for each backend's transaction type.
macro_rules! breaker_step {
    ($tx:expr, $row:expr, $delivery_id:expr, $success:expr, $stats:expr, $now:expr, $protection:expr) => {{
        async {
            use $crate::policy::circuit::{self as policy, FollowUp};
            let row: &mut $crate::store::circuit::BreakerRow = $row;
            let before = row.circuit_state;
            let after = policy::AfterAttempt {
                state: before,
                probe: row.circuit_probe_id.as_ref().map(|id| id.as_str()) == Some($delivery_id),
                active: row.status == $crate::model::EndpointStatus::Active,
                success: $success,
                consecutive_failures: $stats.consecutive_failures,
                failing_since: $stats.failing_since,
            };
            let transition = policy::decide($protection, &after, $now);
            let changed = match $crate::store::circuit::transition_sql(transition) {
                None => false,
                Some(sql) => {
                    let query = sqlx::query(sql).bind(&row.id).bind($now);
                    let probe_at = policy::next_probe_at(
                        $protection,
                        transition,
                        row.circuit_failed_probes,
                        $now,
                    );
                    let query = match probe_at {
                        Some(at) => query.bind(at),
                        None => query,
                    };
                    query.execute(&mut *$tx).await?.rows_affected() == 1
                }
            };
            let follow_up = policy::follow_up(
                $protection,
                transition,
                changed,
                before,
                row.rate_limit_per_second,
            );
            match follow_up {
                FollowUp::Nothing => {}
                FollowUp::ReleaseHeld { spacing_ms } => {
                    $crate::store::circuit::spread_held!($tx, &row.id, $now, spacing_ms)?;
                }
                FollowUp::HoldEndpoint => {
                    $crate::store::circuit::hold_pending!($tx, &row.id, $now)?;
                }
                FollowUp::HoldDelivery => {
                    sqlx::query(
                        "UPDATE kxp_deliveries SET next_attempt_at = $1 \
                         WHERE id = $2 AND status = 'pending'",
                    )
                    .bind($crate::model::HELD)
                    .bind($delivery_id)
                    .execute(&mut *$tx)
                    .await?;
                }
            }
            if changed {
                *row = $crate::store::circuit::breaker_row!($tx, &row.id)?;
            }
            Ok::<_, sqlx::Error>(changed.then_some(transition))
        }
        .await
    }};
}
pub(crate) use breaker_step;

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
        let due: Vec<EndpointId> = on_db!(self, |pool, _begin| {
            sqlx::query_scalar::<_, EndpointId>(
                "SELECT id FROM kxp_endpoints WHERE circuit_state = 'open' AND circuit_probe_at <= $1 \
                 AND status = 'active'",
            )
            .bind(now)
            .fetch_all(pool)
            .await?
        });
        let mut released = 0;
        for endpoint_id in due {
            let probe: Option<DeliveryId> = on_db!(self, |pool, begin| {
                let mut tx = pool.begin_with(begin).await?;
                // The state change comes first: on PostgreSQL it locks the row, so a second
                // process doing the same finds the circuit half-open and changes nothing.
                let moved = sqlx::query(
                    "UPDATE kxp_endpoints SET circuit_state = 'half_open', updated_at = $2 \
                     WHERE id = $1 AND circuit_state = 'open' AND circuit_probe_at <= $2 AND status = 'active'",
                )
                .bind(&endpoint_id)
                .bind(now)
                .execute(&mut *tx)
                .await?
                .rows_affected();
                let probe = if moved == 1 {
                    hold_pending!(tx, &endpoint_id, now)?;
                    sqlx::query_scalar::<_, DeliveryId>(
                        "UPDATE kxp_deliveries SET next_attempt_at = $1, updated_at = $1 WHERE id = \
                         (SELECT id FROM kxp_deliveries WHERE endpoint_id = $2 AND status = 'pending' \
                          AND next_attempt_at = $3 ORDER BY attempts, id LIMIT 1) RETURNING id",
                    )
                    .bind(now)
                    .bind(&endpoint_id)
                    .bind(HELD)
                    .fetch_optional(&mut *tx)
                    .await?
                } else {
                    None
                };
                match &probe {
                    Some(probe) => {
                        sqlx::query("UPDATE kxp_endpoints SET circuit_probe_id = $1 WHERE id = $2")
                            .bind(probe)
                            .bind(&endpoint_id)
                            .execute(&mut *tx)
                            .await?;
                        tx.commit().await?;
                    }
                    None => tx.rollback().await?,
                }
                probe
            });
            if let Some(probe) = probe {
                tracing::info!(target: "kxp_sender::circuit", endpoint_id = %endpoint_id, delivery_id = %probe, "circuit half-open: probing");
                released += 1;
            }
        }
        Ok(released)
    }
}
