//! Authentication: who calls, from `Authorization: Bearer <key>`, and for which account.
//!
//! Three kinds of key, told apart by prefix ([`KeyKind`]) and each looked up by its hash in its
//! own table: an account's key (`kxp_…`) acts for that account only; an operator's
//! (`kxp_op_…`) reaches the operator routes ([`AsOperator`]) and acts for the one account the
//! request names in `X-Kxp-Account` ([`Authed`]); a listen token (`kxp_lt_…`, `kxp listen`'s)
//! reaches only [`LISTEN_ROUTES`], for its account's temporary pull endpoints only
//! ([`ListenOnly`]), and is 403 `forbidden` everywhere else. All count against the API rate
//! limit, per owner: an operator acting for many accounts draws on its own budget, not theirs.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use kxp_api::{ACCOUNT_HEADER, ErrorCode};

use super::{ApiError, AppState};
use crate::model::{Account, AccountId, Actor, KeyKind, Operator};

/// The account a request acts for: the caller's own (an account key), or the one named by
/// `X-Kxp-Account` (an operator key, which must name one: 400 `account_required` without it).
/// An account key that names another account is refused with 404, the answer for an account
/// that does not exist: it neither acts nor learns whether the account is real.
pub(crate) struct Authed(pub Account);

/// The operator behind an operator key: the only callers of `/v1/accounts`. An account key is
/// refused there with 401, as if it named no one (to these routes it does not).
pub(crate) struct AsOperator(pub Operator);

/// Whose key a request carries.
enum Caller {
    Account(Account),
    Operator(Operator),
    /// A listen token's account.
    Listen(Account),
}

/// The routes a listen token reaches (method, route): making, reading and deleting a temporary
/// pull endpoint. The handlers refuse it any other endpoint ([`ListenOnly`]).
pub(crate) const LISTEN_ROUTES: &[(&str, &str)] = &[
    ("POST", "/v1/endpoints"),
    ("GET", "/v1/endpoints/{id}"),
    ("DELETE", "/v1/endpoints/{id}"),
];

/// Whether the request's [`Authed`] account came from a listen token: then the handler acts
/// only on (or makes only) a temporary pull endpoint. Read after `Authed`, which sets it.
pub(crate) struct ListenOnly(pub bool);

/// Who made an [`Authed`] request, for what keeps their name (an erasure): the operator whose
/// key named the account (`X-Kxp-Account`), else the account itself. Read after `Authed`,
/// which sets it.
pub(crate) struct ActingAs(pub Option<Operator>);

impl ActingAs {
    /// The actor, for `account` (the request's [`Authed`] account).
    pub(crate) fn actor(self, account: &Account) -> Actor {
        match self.0 {
            Some(operator) => Actor::Operator {
                id: operator.id,
                name: operator.name,
            },
            None => Actor::Account {
                id: account.id.clone(),
                name: account.name.clone(),
            },
        }
    }
}

/// The mark [`Authed`] leaves on an operator key's request, for [`ActingAs`].
#[derive(Clone)]
struct OperatorMark(Operator);

/// The mark [`Authed`] leaves on a listen token's request, for [`ListenOnly`].
#[derive(Clone, Copy)]
struct ListenTokenMark;

fn forbidden() -> ApiError {
    ApiError::new(
        ErrorCode::Forbidden,
        "a listen token only creates, reads and deletes its account's temporary pull endpoints",
    )
}

fn unauthorized() -> ApiError {
    ApiError::new(
        ErrorCode::Unauthorized,
        "a valid `Authorization: Bearer <api key>` header is required",
    )
}

/// The caller, once its key is found and within the rate limit.
async fn caller(parts: &Parts, state: &AppState) -> Result<Caller, ApiError> {
    let key = parts
        .headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token)
        .filter(|k| !k.is_empty())
        .ok_or_else(unauthorized)?;
    let caller = match KeyKind::of(key) {
        KeyKind::Account => state.db.account_by_key(key).await?.map(Caller::Account),
        KeyKind::Operator => state.db.operator_by_key(key).await?.map(Caller::Operator),
        KeyKind::Listen => state
            .db
            .account_by_listen_token(key)
            .await?
            .map(Caller::Listen),
    }
    .ok_or_else(unauthorized)?;
    let rate = state.shared.config.api_rate_limit;
    if rate > 0 {
        // Keyed by the id of the key's owner: `acc_…` and `op_…` never collide.
        let owner = match &caller {
            Caller::Account(account) | Caller::Listen(account) => account.id.as_str(),
            Caller::Operator(operator) => operator.id.as_str(),
        };
        let granted = state
            .shared
            .api_requests
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .try_take(owner, Some(rate), crate::model::tokio_instant());
        if !granted {
            return Err(ApiError::new(
                ErrorCode::RateLimited,
                format!("this key made more than {rate} requests in the last second"),
            )
            .retry_after(1));
        }
    }
    Ok(caller)
}

impl FromRequestParts<AppState> for Authed {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let caller = caller(parts, state).await?;
        // A header that is not text names no account there is.
        let named = parts
            .headers
            .get(ACCOUNT_HEADER)
            .map(|v| v.to_str().unwrap_or_default().trim());
        let no_such_account = || ApiError::new(ErrorCode::NotFound, "no such account");
        if let Caller::Listen(account) = caller {
            let route = parts
                .extensions
                .get::<axum::extract::MatchedPath>()
                .map(axum::extract::MatchedPath::as_str);
            let allowed = LISTEN_ROUTES
                .iter()
                .any(|(method, path)| parts.method.as_str() == *method && route == Some(*path));
            if !allowed || named.is_some_and(|id| id != account.id.as_str()) {
                return Err(forbidden());
            }
            parts.extensions.insert(ListenTokenMark);
            return Ok(Authed(account));
        }
        match (caller, named) {
            (Caller::Listen(_), _) => Err(forbidden()),
            (Caller::Account(account), None) => Ok(Authed(account)),
            (Caller::Account(account), Some(id)) if id == account.id.as_str() => {
                Ok(Authed(account))
            }
            (Caller::Account(_), Some(_)) => Err(no_such_account()),
            (Caller::Operator(_), None) => Err(ApiError::new(
                ErrorCode::AccountRequired,
                format!(
                    "an operator key acts for one account on this route: name it with the \
                     `{ACCOUNT_HEADER}: acc_…` header"
                ),
            )),
            (Caller::Operator(operator), Some(id)) => {
                let account = state.db.account(&AccountId::from(id)).await?;
                let account = account.ok_or_else(no_such_account)?;
                parts.extensions.insert(OperatorMark(operator));
                Ok(Authed(account))
            }
        }
    }
}

impl FromRequestParts<AppState> for AsOperator {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        match caller(parts, state).await? {
            Caller::Operator(operator) => Ok(AsOperator(operator)),
            Caller::Listen(_) => Err(forbidden()),
            Caller::Account(_) => Err(ApiError::new(
                ErrorCode::Unauthorized,
                "this route takes an operator key (`kxp operators create`), not an account's",
            )),
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for ListenOnly {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        _: &S,
    ) -> Result<Self, std::convert::Infallible> {
        Ok(ListenOnly(
            parts.extensions.get::<ListenTokenMark>().is_some(),
        ))
    }
}

impl<S: Send + Sync> FromRequestParts<S> for ActingAs {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        _: &S,
    ) -> Result<Self, std::convert::Infallible> {
        Ok(ActingAs(
            parts
                .extensions
                .get::<OperatorMark>()
                .map(|mark| mark.0.clone()),
        ))
    }
}

/// The token of a `Bearer` credential. The scheme is case-insensitive (RFC 9110, section 11.1),
/// so `bearer` and `BEARER` clients are not turned away.
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim_start().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

#[cfg(test)]
mod tests {
    use super::bearer_token;

    #[test]
    fn the_scheme_is_case_insensitive_and_the_token_is_not() {
        assert_eq!(bearer_token("Bearer kxp_Ab1"), Some("kxp_Ab1"));
        assert_eq!(bearer_token("bearer kxp_Ab1"), Some("kxp_Ab1"));
        assert_eq!(bearer_token("BEARER  kxp_Ab1 "), Some("kxp_Ab1"));
        assert_eq!(bearer_token("Basic a2V5Og=="), None);
        assert_eq!(bearer_token("Bearer"), None);
        assert_eq!(bearer_token("Bearerkxp_Ab1"), None);
    }
}
