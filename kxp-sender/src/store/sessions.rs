//! `kxp_portal_links` and `kxp_sessions`: the console's sign-ins. Link tokens and session ids
//! are looked up by their SHA-256 hash, like API keys; the values themselves are returned once,
//! to be put in a URL or a cookie, and never stored.

use crate::model::{
    AccountId, OperatorId, PortalScope, Session, SignedIn, now_ms, random_hex_32, sha256_hex,
};
use crate::policy::session::{Freshness, freshness};
use crate::store::{Db, StoreError, on_db};

/// How a session is being opened.
pub(crate) enum Opening<'a> {
    /// With a portal link's token: the link is consumed in the same transaction, so of two
    /// POSTs of one link, one opens a session and the other finds nothing.
    Link(&'a str),
    /// With an operator key, already checked.
    Operator(OperatorId),
}

/// What [`Db::create_portal_link`] did.
pub(crate) enum NewLink {
    /// The link is stored: its token (to put in the URL, shown once) and when it expires (Unix
    /// ms).
    Created {
        /// The token; only its hash is stored.
        token: String,
        /// Unix ms.
        expires_at: i64,
    },
    /// Nothing was stored: the account has as many unused links as it may.
    TooMany {
        /// When the first of them expires (Unix ms), freeing a place.
        first_expiry: i64,
    },
}

/// A session row: account or operator, scope, CSRF token, created, last seen.
type SessionRow = (
    Option<AccountId>,
    Option<OperatorId>,
    String,
    String,
    i64,
    i64,
);

impl Db {
    /// Stores a portal link for `account`, usable for `ttl_ms`, unless the account already has
    /// `max_unused` links that are neither used nor expired: a link is a credential until then,
    /// and one key must not be able to pile them up without bound. The count and the insert
    /// are one transaction, the account's row locked on PostgreSQL (SQLite's write lock is
    /// taken up front), so requests racing on several connections cannot pass the bound.
    pub(crate) async fn create_portal_link(
        &self,
        account: &AccountId,
        scope: &PortalScope,
        ttl_ms: i64,
        max_unused: i64,
    ) -> Result<NewLink, StoreError> {
        let token = random_hex_32();
        let now = now_ms();
        // On a whole second: the API shows the expiry to the second, and a link must not work
        // past the time it says it stops.
        let expires_at = (now + ttl_ms).div_euclid(1000) * 1000;
        Ok(on_db!(self, |pool, DB| {
            let mut tx = pool.begin_with(DB::BEGIN).await?;
            if DB::LOCKS_ROWS {
                // NO KEY UPDATE: ingestion's foreign-key checks on the account go on.
                sqlx::query("SELECT id FROM kxp_accounts WHERE id = $1 FOR NO KEY UPDATE")
                    .bind(account)
                    .execute(&mut *tx)
                    .await?;
            }
            let (unused, first_expiry): (i64, Option<i64>) = sqlx::query_as(
                "SELECT COUNT(*), MIN(expires_at) FROM kxp_portal_links \
                 WHERE account_id = $1 AND used_at IS NULL AND expires_at > $2",
            )
            .bind(account)
            .bind(now)
            .fetch_one(&mut *tx)
            .await?;
            if unused >= max_unused {
                NewLink::TooMany {
                    first_expiry: first_expiry.unwrap_or(now),
                }
            } else {
                sqlx::query(
                    "INSERT INTO kxp_portal_links (token_hash, account_id, scope, created_at, expires_at) \
                     VALUES ($1, $2, $3, $4, $5)",
                )
                .bind(sha256_hex(token.as_bytes()))
                .bind(account)
                .bind(scope.as_str())
                .bind(now)
                .bind(expires_at)
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                NewLink::Created { token, expires_at }
            }
        }))
    }

    /// Opens a fresh session, holding `flash` as its one-time message (see
    /// [`Db::set_flash`]); returns it with the cookie value that names it (shown to the browser
    /// once). `None`: the link is unknown, used or expired, and nothing was written.
    pub(crate) async fn open_session(
        &self,
        opening: Opening<'_>,
        flash: Option<&str>,
    ) -> Result<Option<(Session, String)>, StoreError> {
        let now = now_ms();
        let id = random_hex_32();
        let csrf_token = random_hex_32();
        let who = on_db!(self, |pool, DB| {
            let mut tx = pool.begin_with(DB::BEGIN).await?;
            let who = match opening {
                Opening::Link(token) => {
                    let taken: Option<(AccountId, String)> = sqlx::query_as(
                        "UPDATE kxp_portal_links SET used_at = $1 \
                         WHERE token_hash = $2 AND used_at IS NULL AND expires_at > $1 \
                         RETURNING account_id, scope",
                    )
                    .bind(now)
                    .bind(sha256_hex(token.as_bytes()))
                    .fetch_optional(&mut *tx)
                    .await?;
                    let Some((account, scope)) = taken else {
                        return Ok(None);
                    };
                    SignedIn::Account {
                        account,
                        scope: PortalScope::parse(&scope),
                    }
                }
                Opening::Operator(operator) => SignedIn::Operator(operator),
            };
            let (account, operator, scope) = columns(&who);
            sqlx::query(
                "INSERT INTO kxp_sessions \
                 (id_hash, account_id, operator_id, scope, csrf_token, created_at, last_seen_at, flash) \
                 VALUES ($1, $2, $3, $4, $5, $6, $6, $7)",
            )
            .bind(sha256_hex(id.as_bytes()))
            .bind(account)
            .bind(operator)
            .bind(scope)
            .bind(&csrf_token)
            .bind(now)
            .bind(flash)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            who
        });
        let session = Session { who, csrf_token };
        Ok(Some((session, id)))
    }

    /// The live session a cookie names. An expired one is deleted and answers `None`; a live
    /// one has its `last_seen` moved to now when it is more than a minute old.
    pub(crate) async fn session(&self, cookie: &str) -> Result<Option<Session>, StoreError> {
        let hash = sha256_hex(cookie.as_bytes());
        let now = now_ms();
        let row: Option<SessionRow> = on_db!(self, |pool| {
            sqlx::query_as(
                "SELECT account_id, operator_id, scope, csrf_token, created_at, last_seen_at \
                 FROM kxp_sessions WHERE id_hash = $1",
            )
            .bind(&hash)
            .fetch_optional(pool)
            .await?
        });
        let Some((account, operator, scope, csrf_token, created_at, last_seen)) = row else {
            return Ok(None);
        };
        match freshness(created_at, last_seen, now) {
            Freshness::Fresh => {}
            Freshness::Touch => on_db!(self, |pool| {
                sqlx::query("UPDATE kxp_sessions SET last_seen_at = $1 WHERE id_hash = $2")
                    .bind(now)
                    .bind(&hash)
                    .execute(pool)
                    .await?;
            }),
            Freshness::Expired => {
                self.end_session(cookie).await?;
                return Ok(None);
            }
        }
        let who = match (account, operator) {
            (Some(account), _) => SignedIn::Account {
                account,
                scope: PortalScope::parse(&scope),
            },
            (None, Some(operator)) => SignedIn::Operator(operator),
            // The table's CHECK rules this out.
            (None, None) => return Ok(None),
        };
        Ok(Some(Session { who, csrf_token }))
    }

    /// Keeps `text` for the session `cookie` names until [`Db::take_flash`] (replacing any
    /// message not taken yet).
    pub(crate) async fn set_flash(&self, cookie: &str, text: &str) -> Result<(), StoreError> {
        let hash = sha256_hex(cookie.as_bytes());
        on_db!(self, |pool| {
            sqlx::query("UPDATE kxp_sessions SET flash = $1 WHERE id_hash = $2")
                .bind(text)
                .bind(&hash)
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    /// The message [`Db::set_flash`] kept for the session, if it is about `about` (it starts
    /// with `about` and a space), cleared in the same transaction: of two reads, one gets it,
    /// and a page about something else leaves it for its own page.
    pub(crate) async fn take_flash(
        &self,
        cookie: &str,
        about: &str,
    ) -> Result<Option<String>, StoreError> {
        let hash = sha256_hex(cookie.as_bytes());
        let ours = |flash: Option<&str>| flash.is_some_and(|f| f.starts_with(&format!("{about} ")));
        // Most pages have no message to take (the account's home asks on every view): a plain
        // read says so without taking SQLite's write lock.
        let pending: Option<String> = on_db!(self, |pool| {
            sqlx::query_scalar(
                "SELECT flash FROM kxp_sessions WHERE id_hash = $1 AND flash IS NOT NULL",
            )
            .bind(&hash)
            .fetch_optional(pool)
            .await?
        });
        if !ours(pending.as_deref()) {
            return Ok(None);
        }
        let taken: Option<(Option<String>,)> = on_db!(self, |pool, DB| {
            let mut tx = pool.begin_with(DB::BEGIN).await?;
            let taken: Option<(Option<String>,)> = sqlx::query_as(&format!(
                "SELECT flash FROM kxp_sessions WHERE id_hash = $1 AND flash IS NOT NULL{}",
                DB::row_lock(" FOR UPDATE")
            ))
            .bind(&hash)
            .fetch_optional(&mut *tx)
            .await?;
            let ours = ours(taken.as_ref().and_then(|(flash,)| flash.as_deref()));
            if ours {
                sqlx::query("UPDATE kxp_sessions SET flash = NULL WHERE id_hash = $1")
                    .bind(&hash)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            taken.filter(|_| ours)
        });
        Ok(taken.and_then(|(flash,)| flash))
    }

    /// Ends the session a cookie names (signing out); nothing if there is none.
    pub(crate) async fn end_session(&self, cookie: &str) -> Result<(), StoreError> {
        on_db!(self, |pool| {
            sqlx::query("DELETE FROM kxp_sessions WHERE id_hash = $1")
                .bind(sha256_hex(cookie.as_bytes()))
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    /// Ends every session of the same account, or of the same operator ("sign out
    /// everywhere"); returns how many.
    pub(crate) async fn end_sessions_of(&self, who: &SignedIn) -> Result<u64, StoreError> {
        let (sql, id) = match who {
            SignedIn::Account { account, .. } => (
                "DELETE FROM kxp_sessions WHERE account_id = $1",
                account.as_str(),
            ),
            SignedIn::Operator(operator) => (
                "DELETE FROM kxp_sessions WHERE operator_id = $1",
                operator.as_str(),
            ),
        };
        Ok(on_db!(self, |pool| {
            sqlx::query(sql)
                .bind(id)
                .execute(pool)
                .await?
                .rows_affected()
        }))
    }
}

/// The account, operator and scope columns of a session of `who`.
fn columns(who: &SignedIn) -> (Option<&AccountId>, Option<&OperatorId>, &str) {
    match who {
        SignedIn::Account { account, scope } => (Some(account), None, scope.as_str()),
        // An operator's session may change what it sees.
        SignedIn::Operator(operator) => (None, Some(operator), PortalScope::Manage.as_str()),
    }
}
