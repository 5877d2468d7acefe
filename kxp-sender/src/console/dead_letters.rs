//! The dead-letter queue of an account, overall or of one endpoint: a page of the dead
//! deliveries not replayed yet; replaying one is [`events::replay`](super::events::replay);
//! replaying all behind a confirmation that counts them at one instant and a POST that replays
//! exactly those (the dead by that instant, not replayed since), then the page shows the
//! replays until they are through.

use axum::Form;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::endpoints::{not_found, page};
use super::error::ConsoleError;
use super::pages::{self, DeadLetters};
use super::scope::InAccount;
use crate::app::{self, AppState, Error};
use crate::model::{ConsoleAction, DeliveryFilter, Endpoint, EndpointId, now_ms};
use crate::store::StoreError;

/// Dead deliveries per page.
const PAGE: i64 = 50;

/// Replays shown after a bulk replay.
const REPLAYS_SHOWN: i64 = 50;

/// The page's query.
#[derive(Deserialize, Default)]
pub(super) struct DeadQuery {
    /// Only this endpoint's.
    endpoint: Option<EndpointId>,
    /// After this delivery id (the next page).
    after: Option<String>,
    /// A bulk replay started at this instant (Unix ms): show its replays.
    replayed_at: Option<i64>,
    /// How many it queued.
    queued: Option<u64>,
}

/// `GET /console/a/{account}/dead-letters`.
pub(super) async fn list(
    State(state): State<AppState>,
    scope: InAccount,
    Query(query): Query<DeadQuery>,
) -> Result<Response, ConsoleError> {
    let account = &scope.account.id;
    let endpoint = narrowed(&state, &scope, query.endpoint.as_ref()).await?;
    let filter = DeliveryFilter {
        status: Some("dead".to_owned()),
        endpoint_id: query.endpoint.clone(),
        ..DeliveryFilter::default()
    };
    let dead = state
        .db
        .deliveries(account, &filter, query.after.as_deref(), PAGE + 1)
        .await?;
    let more = dead.len() > PAGE as usize;
    let mut rows = Vec::with_capacity(dead.len());
    let mut urls: Vec<Endpoint> = Vec::new();
    for delivery in dead.into_iter().take(PAGE as usize) {
        let url = match urls.iter().find(|e| e.id == delivery.endpoint_id) {
            Some(endpoint) => Some(endpoint.url.clone()),
            None => match state.db.endpoint(account, &delivery.endpoint_id).await {
                Ok(endpoint) => {
                    let url = endpoint.url.clone();
                    urls.push(endpoint);
                    Some(url)
                }
                Err(StoreError::NotFound) => None,
                Err(e) => return Err(e.into()),
            },
        };
        rows.push((delivery, url));
    }
    let narrow = |first: char| {
        query
            .endpoint
            .as_ref()
            .map(|e| format!("{first}endpoint={e}"))
            .unwrap_or_default()
    };
    let next = match (more, rows.last()) {
        (true, Some((last, _))) => {
            Some(scope.url(&format!("/dead-letters?after={}{}", last.id, narrow('&'))))
        }
        _ => None,
    };
    let count = state.db.count_dead(account, &filter).await?;
    let replays = match query.replayed_at {
        Some(at) => {
            state
                .db
                .replays_since(account, query.endpoint.as_ref(), at, REPLAYS_SHOWN)
                .await?
        }
        None => Vec::new(),
    };
    let view = DeadLetters {
        endpoint: endpoint.as_ref(),
        dead: &rows,
        next: next.as_deref(),
        count,
        replays: &replays,
        queued: query.queued,
        replay_all: scope.url(&format!("/dead-letters/replay{}", narrow('?'))),
        here: {
            #[expect(clippy::expect_used, reason = "a constant, valid URL")]
            let mut url = reqwest::Url::parse("http://console.invalid/").expect("a valid base");
            let replayed_at = query.replayed_at.map(|at| at.to_string());
            let queued = query.queued.map(|n| n.to_string());
            let mut pairs = url.query_pairs_mut();
            for (name, value) in [
                ("endpoint", query.endpoint.as_ref().map(EndpointId::as_str)),
                ("after", query.after.as_deref()),
                ("replayed_at", replayed_at.as_deref()),
                ("queued", queued.as_deref()),
            ] {
                if let Some(value) = value {
                    pairs.append_pair(name, value);
                }
            }
            drop(pairs);
            match url.query() {
                Some(query) if !query.is_empty() => scope.url(&format!("/dead-letters?{query}")),
                _ => scope.url("/dead-letters"),
            }
        },
    };
    Ok(page(pages::dead_letters(&scope.frame(), &view)))
}

/// The endpoint a page is narrowed to (404 if it is not the account's).
async fn narrowed(
    state: &AppState,
    scope: &InAccount,
    endpoint: Option<&EndpointId>,
) -> Result<Option<Endpoint>, ConsoleError> {
    match endpoint {
        None => Ok(None),
        Some(id) => Ok(Some(
            state
                .db
                .endpoint(&scope.account.id, id)
                .await
                .map_err(not_found)?,
        )),
    }
}

/// The confirmation's query: which endpoint, if one.
#[derive(Deserialize)]
pub(super) struct ReplayQuery {
    endpoint: Option<EndpointId>,
}

/// `GET /console/a/{account}/dead-letters/replay`: counts what a replay of all would queue,
/// now, and asks.
pub(super) async fn confirm(
    State(state): State<AppState>,
    scope: InAccount,
    Query(query): Query<ReplayQuery>,
) -> Result<Response, ConsoleError> {
    scope.signed.check_may_change()?;
    let endpoint = narrowed(&state, &scope, query.endpoint.as_ref()).await?;
    let counted_at = now_ms();
    let filter = DeliveryFilter {
        status: Some("dead".to_owned()),
        endpoint_id: query.endpoint,
        dead_by: Some(counted_at),
        ..DeliveryFilter::default()
    };
    let count = state.db.count_dead(&scope.account.id, &filter).await?;
    let markup = pages::replay_confirm(&scope.frame(), endpoint.as_ref(), count, counted_at);
    Ok(page(markup))
}

/// What the confirmation posts.
#[derive(Deserialize)]
pub(super) struct ReplayForm {
    #[serde(default)]
    csrf_token: String,
    /// The instant of the count.
    dead_by: i64,
    /// Only this endpoint's.
    endpoint: Option<EndpointId>,
}

/// `POST /console/a/{account}/dead-letters/replay`: replays the dead deliveries counted (dead
/// by `dead_by` and not replayed since), endpoint by endpoint, each once.
pub(super) async fn replay_all(
    State(state): State<AppState>,
    scope: InAccount,
    Form(form): Form<ReplayForm>,
) -> Result<Response, ConsoleError> {
    scope.check_form(&form.csrf_token)?;
    let account = &scope.account.id;
    let started = now_ms();
    let endpoints = match narrowed(&state, &scope, form.endpoint.as_ref()).await? {
        Some(endpoint) => vec![endpoint],
        None => state.db.endpoints(account, None, i64::MAX).await?,
    };
    let filter = DeliveryFilter {
        status: Some("dead".to_owned()),
        dead_by: Some(form.dead_by.min(started)),
        ..DeliveryFilter::default()
    };
    let mut queued = 0;
    for endpoint in endpoints {
        queued += match app::replay_endpoint(&state, &scope.account, &endpoint.id, &filter).await {
            Ok(queued) => queued,
            // Deleted since the count: nothing can be replayed to it, the others still are.
            Err(Error::NotFound | Error::Conflict { .. }) => 0,
            Err(e) => return Err(e.into()),
        };
    }
    tracing::info!(target: "kxp_sender", queued, "dead deliveries replayed from the console");
    scope
        .audit(
            &state,
            ConsoleAction::DeadLettersReplay { queued },
            form.endpoint.as_ref().map(EndpointId::as_str),
        )
        .await;
    let narrow = form
        .endpoint
        .map(|e| format!("&endpoint={e}"))
        .unwrap_or_default();
    let to = scope.url(&format!(
        "/dead-letters?replayed_at={started}&queued={queued}{narrow}"
    ));
    Ok(Redirect::to(&to).into_response())
}
