//! The audit log of the API: every change made with an operator key (a request that is not a
//! read, and succeeded) is recorded with the operator, the account it named, the route and
//! the path. Account keys act on their own account only and are not recorded here: the log
//! is of what the platform's people did to merchants' accounts.

use axum::extract::{MatchedPath, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use kxp_api::ACCOUNT_HEADER;

use super::AppState;
use crate::model::{AccountId, Actor, AuditAction, KeyKind, NewAudit};

/// Runs the request; records it afterwards when it was a change made with an operator key.
pub(super) async fn record(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let change = !matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    );
    let key = request
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .map(|(_, key)| key.trim().to_owned())
        .filter(|key| change && KeyKind::of(key) == KeyKind::Operator);
    let Some(key) = key else {
        return next.run(request).await;
    };
    let account = request
        .headers()
        .get(ACCOUNT_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(|v| AccountId::from(v.trim()));
    let route = request.extensions().get::<MatchedPath>().map_or_else(
        || request.uri().path().to_owned(),
        |m| m.as_str().to_owned(),
    );
    // The operator routes act for no account (they make and list accounts): a header sent
    // with them names nothing that was acted on.
    let account = account.filter(|_| !route.starts_with("/v1/accounts"));
    let action = AuditAction::Api {
        method: request.method().to_string(),
        route,
    };
    let path = request.uri().path().to_owned();
    let response = next.run(request).await;
    if response.status().is_success() {
        let recorded = match state.db.operator_by_key(&key).await {
            Ok(Some(operator)) => {
                let actor = Actor::Operator {
                    id: operator.id,
                    name: operator.name,
                };
                let entry = NewAudit {
                    actor: &actor,
                    account_id: account.as_ref(),
                    action: &action,
                    target: Some(&path),
                };
                state.db.audit(&entry).await
            }
            Ok(None) => Ok(()),
            Err(e) => Err(e),
        };
        if let Err(e) = recorded {
            tracing::error!(target: "kxp_sender", error = %e, action = %action.text(),
                "could not record an operator's change in the audit log");
        }
    }
    response
}
