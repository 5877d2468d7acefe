//! Why the dedup store refused, under stable kind names. Messages never carry a database
//! password: connection errors are scrubbed of every password the URL holds before they are
//! stored, and the URL itself is never echoed.
//!
//! Each error exposes what caused it through [`std::error::Error::source`]: the sqlx error of a
//! statement or of the migrator. The one exception is a failure to connect, whose sqlx error may
//! quote connection settings: only its scrubbed text is kept, in the message.

use std::borrow::Cow;

/// A dedup store operation that did not happen.
///
/// [`kind`](StoreError::kind) is a stable name for logs and metrics; the receiver adapters answer
/// `503` + `Retry-After` when [`is_unavailable`](StoreError::is_unavailable) is true, because the
/// event was not recorded and a later delivery will succeed once the database is back.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// `invalid_url`: the database URL is not a `sqlite:` or `postgres://` URL sqlx can parse.
    #[error("invalid_url: {reason}")]
    InvalidUrl {
        /// What is wrong with it; never quotes the URL.
        reason: String,
    },
    /// `unavailable`: the database cannot be reached or used right now (connection refused,
    /// pool timed out or closed, I/O error, server shutting down, SQLite busy for longer than
    /// its busy timeout). Retrying later may succeed.
    #[error("unavailable: {reason}")]
    Unavailable {
        /// The underlying cause, scrubbed of passwords.
        reason: String,
        /// The sqlx error of the statement that failed (also the error's
        /// [`source`](std::error::Error::source)); `None` for a failure to connect, whose
        /// error may quote connection settings.
        #[source]
        cause: Option<sqlx::Error>,
    },
    /// `migration`: the crate's schema migrations could not be applied.
    #[error("migration: {cause}")]
    Migration {
        /// The error sqlx's migrator reported (also the error's
        /// [`source`](std::error::Error::source)).
        #[source]
        cause: sqlx::migrate::MigrateError,
    },
    /// `query`: the database answered a statement with an error that waiting will not fix.
    #[error("query: {cause}")]
    Query {
        /// The error sqlx reported (also the error's [`source`](std::error::Error::source)).
        #[source]
        cause: sqlx::Error,
    },
    /// `not_claimed`: `complete` or `fail` for an event id that has no row: it was never claimed
    /// (a bug in the caller) or it was purged meanwhile.
    #[error("not_claimed: event {event_id:?} has no claim to complete or fail")]
    NotClaimed {
        /// The event id that was passed.
        event_id: String,
    },
    /// `claim_lost`: renewing, completing or failing a [`Lease`](crate::Lease) whose event
    /// carries a newer claim: the lease ran out (the handler outlived it and could not renew
    /// it) and another delivery claimed the event, or marked it processed in a transaction.
    /// Nothing was changed: the event is the newer holder's.
    #[error("claim_lost: event {event_id:?} was claimed again after this lease ran out")]
    ClaimLost {
        /// The event id of the lease.
        event_id: String,
    },
}

impl StoreError {
    /// The stable snake_case name: `invalid_url`, `unavailable`, `migration`, `query`,
    /// `not_claimed` or `claim_lost`.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::InvalidUrl { .. } => "invalid_url",
            StoreError::Unavailable { .. } => "unavailable",
            StoreError::Migration { .. } => "migration",
            StoreError::Query { .. } => "query",
            StoreError::NotClaimed { .. } => "not_claimed",
            StoreError::ClaimLost { .. } => "claim_lost",
        }
    }

    /// True for `unavailable`: answer `503` and let the sender retry later.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, StoreError::Unavailable { .. })
    }

    pub(crate) fn invalid_url(reason: impl Into<String>) -> StoreError {
        StoreError::InvalidUrl {
            reason: reason.into(),
        }
    }

    /// `unavailable` with only a (scrubbed) text: nothing typed to keep, or nothing safe.
    pub(crate) fn unavailable(reason: impl Into<String>) -> StoreError {
        StoreError::Unavailable {
            reason: reason.into(),
            cause: None,
        }
    }
}

/// Sorts an sqlx error of a statement into a kind.
impl From<sqlx::Error> for StoreError {
    // Only errors that carry no URL come through here: errors of the connect phase go through
    // `Redactor::connect_error` instead.
    fn from(error: sqlx::Error) -> StoreError {
        if is_unavailable(&error) {
            return StoreError::Unavailable {
                reason: error.to_string(),
                cause: Some(error),
            };
        }
        match error {
            sqlx::Error::Migrate(cause) => StoreError::Migration { cause: *cause },
            cause => StoreError::Query { cause },
        }
    }
}

impl From<sqlx::migrate::MigrateError> for StoreError {
    fn from(cause: sqlx::migrate::MigrateError) -> StoreError {
        match cause {
            sqlx::migrate::MigrateError::Execute(error) if is_unavailable(&error) => {
                StoreError::Unavailable {
                    reason: error.to_string(),
                    cause: Some(error),
                }
            }
            cause => StoreError::Migration { cause },
        }
    }
}

/// Whether waiting (for the server, a pool slot or a lock) could make the same call succeed.
fn is_unavailable(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => {
            #[cfg(feature = "sqlite")]
            if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
                // Extended result codes carry the primary code in their low byte.
                let primary = db
                    .code()
                    .and_then(|code| code.parse::<i32>().ok())
                    .map(|code| code & 0xff);
                return matches!(
                    primary,
                    // BUSY, LOCKED, NOMEM, IOERR, FULL, CANTOPEN, PROTOCOL
                    Some(5 | 6 | 7 | 10 | 13 | 14 | 15)
                );
            }
            let code = db.code().unwrap_or(Cow::Borrowed(""));
            // PostgreSQL: 08: connection exception; 53: insufficient resources (too many
            // connections, disk full, out of memory); 57P01-57P03: the server is shutting down
            // or starting up.
            code.starts_with("08")
                || code.starts_with("53")
                || matches!(&*code, "57P01" | "57P02" | "57P03")
        }
        _ => false,
    }
}

/// Removes every password a database URL carries from text derived from it.
///
/// sqlx's connect errors may quote connection settings; rather than trust each message, every
/// message of the connect phase is scrubbed of the URL's passwords, raw and percent-decoded,
/// from the user-info part (`postgres://user:PASSWORD@host`) and from a `password=` query
/// parameter.
pub(crate) struct Redactor {
    secrets: Vec<String>,
}

impl Redactor {
    pub(crate) fn for_url(url: &str) -> Redactor {
        let mut raw = Vec::new();
        let before_fragment = url.split('#').next().unwrap_or(url);
        let (before_query, query) = match before_fragment.split_once('?') {
            Some((before, query)) => (before, Some(query)),
            None => (before_fragment, None),
        };
        if let Some((_, after_scheme)) = before_query.split_once("://") {
            // The last `@` ends the user info even when the password holds an unencoded `@`
            // or `/`: taking it on the whole rest errs towards redacting too much.
            if let Some((userinfo, _)) = after_scheme.rsplit_once('@')
                && let Some((_, password)) = userinfo.split_once(':')
            {
                raw.push(password.to_owned());
            }
        }
        if let Some(query) = query {
            for pair in query.split('&') {
                if let Some((key, value)) = pair.split_once('=')
                    && key.eq_ignore_ascii_case("password")
                {
                    raw.push(value.to_owned());
                }
            }
        }
        let mut secrets = Vec::new();
        for secret in raw {
            // Lossy on invalid UTF-8: good enough to find a password in a message.
            let decoded = percent_encoding::percent_decode_str(&secret)
                .decode_utf8_lossy()
                .into_owned();
            if decoded != secret && !decoded.is_empty() {
                secrets.push(decoded);
            }
            if !secret.is_empty() {
                secrets.push(secret);
            }
        }
        // Longest first, so a password that contains another is replaced whole.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        Redactor { secrets }
    }

    /// `text` with every password replaced by `[redacted]`.
    pub(crate) fn scrub(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for secret in &self.secrets {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), "[redacted]");
            }
        }
        out
    }

    /// An error of the connect phase: everything that is not a bad URL means the store cannot be
    /// used now (refused, timed out, wrong password, missing database), which callers answer
    /// with 503.
    pub(crate) fn connect_error(&self, backend: &str, error: sqlx::Error) -> StoreError {
        match error {
            sqlx::Error::Configuration(_) => {
                StoreError::invalid_url(self.scrub(&error.to_string()))
            }
            sqlx::Error::Migrate(cause) => {
                let error = StoreError::from(*cause);
                self.scrub_error(error)
            }
            error => StoreError::unavailable(format!(
                "cannot connect to {backend}: {}",
                self.scrub(&error.to_string())
            )),
        }
    }

    /// A migration error is typed; its text comes from the server, which does not know the
    /// URL, so only the `unavailable` form (a plain string) needs scrubbing.
    pub(crate) fn scrub_error(&self, error: StoreError) -> StoreError {
        match error {
            StoreError::Unavailable { reason, cause } => StoreError::Unavailable {
                reason: self.scrub(&reason),
                cause,
            },
            StoreError::InvalidUrl { reason } => StoreError::invalid_url(self.scrub(&reason)),
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrubs_userinfo_password_raw_and_decoded() {
        let r = Redactor::for_url("postgres://app:p%40ss%2Fw0rd@127.0.0.1:5432/db");
        assert_eq!(
            r.scrub("auth failed for p%40ss%2Fw0rd / p@ss/w0rd"),
            "auth failed for [redacted] / [redacted]"
        );
    }

    #[test]
    fn scrubs_unencoded_at_and_slash_in_password() {
        let r = Redactor::for_url("postgres://app:a/b@c@127.0.0.1/db");
        assert!(!r.scrub("x a/b@c y").contains("a/b@c"));
    }

    #[test]
    fn scrubs_password_query_parameter() {
        let r = Redactor::for_url("postgres://127.0.0.1/db?sslmode=disable&password=hunter2");
        assert_eq!(r.scrub("hunter2!"), "[redacted]!");
    }

    #[test]
    fn leaves_text_alone_without_password() {
        let r = Redactor::for_url("postgres://postgres@127.0.0.1:5432/test");
        assert_eq!(r.scrub("postgres@127.0.0.1"), "postgres@127.0.0.1");
        let r = Redactor::for_url("sqlite://kxp.db");
        assert_eq!(r.scrub("sqlite://kxp.db"), "sqlite://kxp.db");
    }

    /// sqlx 0.8.6 does not quote passwords in the connect errors tried in tests/it; this pins
    /// the scrubbing for the day one does (a configuration value echoed back, an I/O message).
    #[test]
    fn connect_errors_are_scrubbed_in_display_and_debug() {
        let r = Redactor::for_url("postgres://postgres:hunter2@127.0.0.1:1/x");
        let echoed = sqlx::Error::Configuration("unknown value \"hunter2\" for `x`".into());
        let err = r.connect_error("PostgreSQL", echoed);
        assert_eq!(err.kind(), "invalid_url");
        let io = sqlx::Error::Io(std::io::Error::other(
            "refused for postgres:hunter2@127.0.0.1",
        ));
        let err2 = r.connect_error("PostgreSQL", io);
        assert_eq!(err2.kind(), "unavailable");
        for text in [
            err.to_string(),
            format!("{err:?}"),
            err2.to_string(),
            format!("{err2:?}"),
        ] {
            assert!(!text.contains("hunter2"), "{text}");
            assert!(text.contains("[redacted]"), "{text}");
        }
    }

    #[test]
    fn errors_expose_their_cause_as_source() {
        use std::error::Error as _;

        let query = StoreError::from(sqlx::Error::RowNotFound);
        let source = query.source().expect("a query error has a source");
        assert!(matches!(
            source.downcast_ref::<sqlx::Error>(),
            Some(sqlx::Error::RowNotFound)
        ));

        let busy = StoreError::from(sqlx::Error::PoolTimedOut);
        assert_eq!(busy.kind(), "unavailable");
        let source = busy
            .source()
            .expect("an unavailable statement has a source");
        assert!(matches!(
            source.downcast_ref::<sqlx::Error>(),
            Some(sqlx::Error::PoolTimedOut)
        ));

        let migration = StoreError::from(sqlx::migrate::MigrateError::VersionMissing(7));
        assert_eq!(migration.kind(), "migration");
        let source = migration.source().expect("a migration error has a source");
        assert!(matches!(
            source.downcast_ref::<sqlx::migrate::MigrateError>(),
            Some(sqlx::migrate::MigrateError::VersionMissing(7))
        ));

        // Through the migrator, an unreachable database is `unavailable`, with its cause.
        let io = sqlx::Error::Io(std::io::Error::other("connection reset"));
        let unavailable = StoreError::from(sqlx::migrate::MigrateError::Execute(io));
        assert_eq!(unavailable.kind(), "unavailable");
        let source = unavailable.source().expect("the migrator's cause is kept");
        assert!(source.to_string().contains("connection reset"), "{source}");
    }

    #[test]
    fn connect_errors_keep_no_source_that_could_quote_the_url() {
        use std::error::Error as _;

        let r = Redactor::for_url("postgres://postgres:hunter2@127.0.0.1:1/x");
        let io = sqlx::Error::Io(std::io::Error::other("refused for hunter2"));
        let err = r.connect_error("PostgreSQL", io);
        assert_eq!(err.kind(), "unavailable");
        assert!(err.source().is_none());
        let err = r.connect_error("PostgreSQL", sqlx::Error::Configuration("bad".into()));
        assert_eq!(err.kind(), "invalid_url");
        assert!(err.source().is_none());
        // A migration run while connecting keeps its typed cause (its text comes from the
        // server, which does not know the URL).
        let migrate =
            sqlx::Error::Migrate(Box::new(sqlx::migrate::MigrateError::VersionMissing(3)));
        assert!(r.connect_error("PostgreSQL", migrate).source().is_some());
    }

    #[test]
    fn kinds_are_stable() {
        assert_eq!(StoreError::invalid_url("x").kind(), "invalid_url");
        assert_eq!(StoreError::unavailable("x").kind(), "unavailable");
        assert_eq!(
            StoreError::from(sqlx::Error::PoolTimedOut).kind(),
            "unavailable"
        );
        assert_eq!(
            StoreError::from(sqlx::Error::PoolClosed).kind(),
            "unavailable"
        );
        assert_eq!(StoreError::from(sqlx::Error::RowNotFound).kind(), "query");
        let not_claimed = StoreError::NotClaimed {
            event_id: "evt".into(),
        };
        assert_eq!(not_claimed.kind(), "not_claimed");
        assert!(not_claimed.to_string().starts_with("not_claimed: "));
        let lost = StoreError::ClaimLost {
            event_id: "evt".into(),
        };
        assert_eq!(lost.kind(), "claim_lost");
        assert!(lost.to_string().starts_with("claim_lost: "));
        assert!(!lost.is_unavailable());
    }
}
