//! Erasure by tag: `POST /v1/erasures` and the console's "Erase" form. The request is
//! recorded (who, which tag, when) and answered at once; the engine's erasure loop then erases
//! the tag's events batch by batch ([`crate::engine::erasure`]), while the workers already
//! refuse to start their deliveries.

use kxp_api::is_tag;

use super::events::TAG_RULE;
use super::{AppState, Error, views};
use crate::model::{Account, Actor, ErasureId};

/// Erases the payloads of `account`'s events carrying `tag` (accepted until now), asked by
/// `actor` `via` the API or the console; answers the erasure, `running`. Erasing a tag again
/// is harmless: the tag is taken off the events it erases, so a second erasure finds none.
pub(crate) async fn erase(
    state: &AppState,
    account: &Account,
    tag: &str,
    actor: &Actor,
    via: &str,
) -> Result<kxp_api::Erasure, Error> {
    if !is_tag(tag) {
        return Err(Error::invalid(format!("tag {TAG_RULE}")));
    }
    let row = state
        .db
        .create_erasure(&account.id, tag, actor, via)
        .await?;
    tracing::info!(
        target: "kxp_sender", account_id = %account.id, erasure_id = %row.id,
        actor_kind = row.actor_kind, actor_id = row.actor_id, via, "erasure accepted"
    );
    state.shared.erasures.notify_one();
    Ok(views::erasure(row))
}

/// One of `account`'s erasures.
pub(crate) async fn erasure(
    state: &AppState,
    account: &Account,
    id: &ErasureId,
) -> Result<kxp_api::Erasure, Error> {
    Ok(views::erasure(state.db.erasure(&account.id, id).await?))
}
