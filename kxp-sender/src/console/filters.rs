//! An endpoint's content filter in the console: the filter as JSON in a textarea, a dry run
//! of what is typed over the account's newest events, and saving it. Both go through the
//! service ([`test_filter`], [`change`]), so the checks and their messages are the API's. A
//! dry run changes nothing: a session that may only look can run one too.

use std::collections::BTreeMap;

use axum::Form;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Redirect, Response};
use kxp_api::{EndpointPatch, Patch, TestFilter};
use serde_json::Value;

use super::endpoints::not_found;
use super::error::ConsoleError;
use super::pages::{self, FilterShown};
use super::scope::InAccount;
use crate::app::{AppState, Error, change, test_filter};
use crate::model::{ConsoleAction, EndpointId};

/// `GET …/endpoints/{endpoint}/filter`: the endpoint's filter in the form.
pub(super) async fn form(
    State(state): State<AppState>,
    scope: InAccount,
    Path((_, id)): Path<(String, EndpointId)>,
) -> Result<Response, ConsoleError> {
    let endpoint = state
        .db
        .endpoint(&scope.account.id, &id)
        .await
        .map_err(not_found)?;
    let text = endpoint
        .content_filter
        .as_deref()
        .and_then(|stored| serde_json::from_str::<Value>(stored).ok())
        .and_then(|filter| serde_json::to_string_pretty(&filter).ok())
        .unwrap_or_default();
    let shown = FilterShown {
        text: &text,
        limit: "",
        refused: None,
        tried: None,
    };
    page(&scope, &endpoint, &shown, StatusCode::OK)
}

/// `POST …/filter/try`: runs the typed filter over the newest events, and shows which it
/// takes beside the form, as typed.
pub(super) async fn try_it(
    State(state): State<AppState>,
    scope: InAccount,
    Path((_, id)): Path<(String, EndpointId)>,
    Form(fields): Form<BTreeMap<String, String>>,
) -> Result<Response, ConsoleError> {
    scope
        .signed
        .check_csrf(fields.get("csrf_token").map_or("", String::as_str))?;
    let endpoint = state
        .db
        .endpoint(&scope.account.id, &id)
        .await
        .map_err(not_found)?;
    let text = fields.get("filter").map_or("", String::as_str);
    let limit = fields.get("limit").map_or("", |l| l.trim());
    let outcome = match (typed(text), parsed_limit(limit)) {
        (Ok(filter), Ok(limit)) => test_filter(
            &state,
            &scope.account,
            &id,
            &TestFilter::new(Some(filter), limit),
        )
        .await
        .map_err(|e| refusal(&e)),
        (Err(why), _) | (_, Err(why)) => Err(Some(why)),
    };
    let (refused, tried) = match outcome {
        Ok(tried) => (None, Some(tried)),
        Err(Some(why)) => (Some(why), None),
        Err(None) => return Err(ConsoleError::NotFound),
    };
    let status = match refused {
        Some(_) => StatusCode::UNPROCESSABLE_ENTITY,
        None => StatusCode::OK,
    };
    let shown = FilterShown {
        text,
        limit,
        refused: refused.as_deref(),
        tried: tried.as_ref(),
    };
    page(&scope, &endpoint, &shown, status)
}

/// `POST …/filter`: saves the typed filter (empty: none), or shows the form again with why
/// not.
pub(super) async fn save(
    State(state): State<AppState>,
    scope: InAccount,
    Path((_, id)): Path<(String, EndpointId)>,
    Form(fields): Form<BTreeMap<String, String>>,
) -> Result<Response, ConsoleError> {
    scope.check_form(fields.get("csrf_token").map_or("", String::as_str))?;
    let text = fields.get("filter").map_or("", String::as_str);
    let mut patch = EndpointPatch::default();
    let refused = match typed(text) {
        Ok(filter) => {
            patch.filter = Patch::Set(filter);
            match change(&state, &scope.account, &id, patch).await {
                Ok(_) => {
                    tracing::info!(target: "kxp_sender", endpoint_id = %id, "endpoint filter changed from the console");
                    scope
                        .audit(&state, ConsoleAction::EndpointFilter, Some(id.as_str()))
                        .await;
                    return Ok(
                        Redirect::to(&scope.url(&format!("/endpoints/{id}"))).into_response()
                    );
                }
                Err(e) => refusal(&e).ok_or(ConsoleError::NotFound)?,
            }
        }
        Err(why) => why,
    };
    let endpoint = state
        .db
        .endpoint(&scope.account.id, &id)
        .await
        .map_err(not_found)?;
    let shown = FilterShown {
        text,
        limit: "",
        refused: Some(&refused),
        tried: None,
    };
    page(&scope, &endpoint, &shown, StatusCode::UNPROCESSABLE_ENTITY)
}

fn page(
    scope: &InAccount,
    endpoint: &crate::model::Endpoint,
    shown: &FilterShown<'_>,
    status: StatusCode,
) -> Result<Response, ConsoleError> {
    let markup = pages::filter(&scope.frame(), endpoint, shown);
    Ok((status, Html(markup.into_string())).into_response())
}

/// The textarea's filter: empty is `{}` (every event), anything else must be JSON.
fn typed(text: &str) -> Result<Value, String> {
    match text.trim() {
        "" => Ok(Value::Object(serde_json::Map::new())),
        text => serde_json::from_str(text).map_err(|e| format!("the filter is not JSON ({e})")),
    }
}

/// The number of events to try on: empty is the default.
fn parsed_limit(text: &str) -> Result<Option<u32>, String> {
    match text {
        "" => Ok(None),
        text => text
            .parse()
            .map(Some)
            .map_err(|_| "the number of events must be a whole number".to_owned()),
    }
}

/// Why the service refused, for the page; `None` when the endpoint is gone (a 404 page).
fn refusal(error: &Error) -> Option<String> {
    match error {
        Error::NotFound => None,
        other => Some(other.to_string()),
    }
}
