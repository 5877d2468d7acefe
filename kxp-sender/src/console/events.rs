//! Finding an event: one box that takes an event id, a delivery id or a tag (the producer's own
//! order id, say), with filters by type, delivery status, endpoint and time, a page at a time.
//! An event's page (its envelope, deliveries and attempts), a delivery's URL (its event's page,
//! at the delivery), and replaying one delivery.

use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Redirect, Response};

use super::endpoints::{not_found, page};
use super::error::ConsoleError;
use super::pages::{self, DeliveryView, Found, SearchForm};
use super::scope::{Checked, InAccount};
use crate::app::{self, AppState, Error};
use crate::model::{
    ConsoleAction, DeliveryFilter, DeliveryId, EndpointId, EventFilter, EventId, parse_rfc3339,
};
use crate::store::StoreError;

/// Results per page.
const PAGE: i64 = 50;

/// The search's query string, as the form sends it.
#[derive(serde::Deserialize, Default)]
pub(super) struct SearchQuery {
    #[serde(default)]
    q: String,
    #[serde(default, rename = "type")]
    event_type: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    endpoint: String,
    #[serde(default)]
    since: String,
    #[serde(default)]
    until: String,
    /// The next page of events: `<created_at ms>:<event id>` of the last one shown.
    before: Option<String>,
    /// The next page of deliveries: the last one shown.
    after: Option<String>,
}

/// `GET /console/a/{account}/events`: the search form, and what it finds. An id that exists
/// goes straight to its page.
pub(super) async fn search(
    State(state): State<AppState>,
    scope: InAccount,
    Query(query): Query<SearchQuery>,
) -> Result<Response, ConsoleError> {
    let account = &scope.account.id;
    let q = query.q.trim().to_owned();
    if uuid::Uuid::parse_str(&q).is_ok()
        && let Ok(event) = state.db.event(account, &EventId::from(q.as_str())).await
    {
        let to = scope.url(&format!("/events/{}", event.id));
        return Ok(Redirect::to(&to).into_response());
    }
    if q.starts_with("dlv_")
        && let Ok(d) = state
            .db
            .delivery(account, &DeliveryId::from(q.as_str()))
            .await
    {
        let to = scope.url(&format!("/events/{}#{}", d.event_id, d.id));
        return Ok(Redirect::to(&to).into_response());
    }
    let form = SearchForm {
        q: query.q.clone(),
        event_type: query.event_type.clone(),
        status: query.status.clone(),
        endpoint: query.endpoint.clone(),
        since: query.since.clone(),
        until: query.until.clone(),
    };
    let (since, until) = match (time(&query.since), time(&query.until)) {
        (Ok(since), Ok(until)) => (since, until),
        (Err(bad), _) | (_, Err(bad)) => {
            let why = format!("{bad:?} is not a time: use the picker, or e.g. 2026-12-01T09:30");
            let markup = pages::search(&scope.frame(), &form, &Found::Nothing, Some(&why), None);
            return Ok(page(markup));
        }
    };
    let asked = [
        &q,
        &query.event_type,
        &query.status,
        &query.endpoint,
        &query.since,
        &query.until,
    ]
    .iter()
    .any(|field| !field.trim().is_empty());
    let this = |extra: &str| {
        #[expect(clippy::expect_used, reason = "a constant, valid URL")]
        let mut url = reqwest::Url::parse("http://console.invalid/").expect("a valid base");
        url.query_pairs_mut().extend_pairs([
            ("q", &*query.q),
            ("type", &query.event_type),
            ("status", &query.status),
            ("endpoint", &query.endpoint),
            ("since", &query.since),
            ("until", &query.until),
        ]);
        scope.url(&format!(
            "/events?{}&{extra}",
            url.query().unwrap_or_default()
        ))
    };
    if !query.status.is_empty() || !query.endpoint.trim().is_empty() {
        let filter = DeliveryFilter {
            status: (!query.status.is_empty()).then(|| query.status.clone()),
            endpoint_id: Some(query.endpoint.trim())
                .filter(|e| !e.is_empty())
                .map(EndpointId::from),
            since,
            until,
            ..DeliveryFilter::default()
        };
        let mut found = state
            .db
            .deliveries(account, &filter, query.after.as_deref(), PAGE + 1)
            .await?;
        let next = (found.len() > PAGE as usize).then(|| {
            found.truncate(PAGE as usize);
            this(&format!("after={}", found[found.len() - 1].id))
        });
        let markup = pages::search(
            &scope.frame(),
            &form,
            &Found::Deliveries(&found),
            None,
            next.as_deref(),
        );
        return Ok(page(markup));
    }
    if !asked {
        return Ok(page(pages::search(
            &scope.frame(),
            &form,
            &Found::Nothing,
            None,
            None,
        )));
    }
    let before = query.before.as_deref().and_then(|cursor| {
        let (at, id) = cursor.split_once(':')?;
        Some((at.parse().ok()?, id.to_owned()))
    });
    let filter = EventFilter {
        tag: Some(q).filter(|q| !q.is_empty()),
        event_type: Some(query.event_type.trim().to_owned()).filter(|t| !t.is_empty()),
        since,
        until,
        before,
    };
    let mut found = state.db.events(account, &filter, PAGE + 1).await?;
    let next = (found.len() > PAGE as usize).then(|| {
        found.truncate(PAGE as usize);
        let last = &found[found.len() - 1];
        this(&format!("before={}:{}", last.created_at, last.id))
    });
    let markup = pages::search(
        &scope.frame(),
        &form,
        &Found::Events(&found),
        None,
        next.as_deref(),
    );
    Ok(page(markup))
}

/// A time from the form: empty (none), the picker's `YYYY-MM-DDTHH:MM` (UTC), or RFC 3339.
fn time(text: &str) -> Result<Option<i64>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    let full = match text.len() {
        16 => format!("{text}:00Z"),
        19 => format!("{text}Z"),
        _ => text.to_owned(),
    };
    parse_rfc3339(&full)
        .map(Some)
        .ok_or_else(|| text.to_owned())
}

/// `GET /console/a/{account}/events/{event}`.
pub(super) async fn show(
    State(state): State<AppState>,
    scope: InAccount,
    Path((_, id)): Path<(String, EventId)>,
) -> Result<Response, ConsoleError> {
    let account = &scope.account.id;
    let event = state.db.event(account, &id).await.map_err(not_found)?;
    let mut views = Vec::new();
    for delivery in state.db.event_deliveries(account, &id).await? {
        let endpoint = match state.db.endpoint(account, &delivery.endpoint_id).await {
            Ok(endpoint) => Some(endpoint),
            Err(StoreError::NotFound) => None,
            Err(e) => return Err(e.into()),
        };
        let attempts = state.db.attempts(account, &delivery.id).await?;
        views.push(DeliveryView {
            delivery,
            endpoint,
            attempts,
        });
    }
    let refresh = pages::in_flight(views.iter().map(|v| &v.delivery));
    Ok(page(pages::event(&scope.frame(), &event, &views, refresh)))
}

/// `GET /console/a/{account}/deliveries/{delivery}`: its event's page, at it.
pub(super) async fn delivery(
    State(state): State<AppState>,
    scope: InAccount,
    Path((_, id)): Path<(String, DeliveryId)>,
) -> Result<Response, ConsoleError> {
    let delivery = state
        .db
        .delivery(&scope.account.id, &id)
        .await
        .map_err(not_found)?;
    let to = scope.url(&format!("/events/{}#{}", delivery.event_id, delivery.id));
    Ok(Redirect::to(&to).into_response())
}

/// `POST /console/a/{account}/deliveries/{delivery}/replay`: queues it again, then shows its
/// event, which refreshes until the replay is through.
pub(super) async fn replay(
    State(state): State<AppState>,
    Checked { scope, id }: Checked<DeliveryId>,
) -> Result<Response, ConsoleError> {
    let replayed = match app::replay(&state, &scope.account, &id).await {
        Ok(replayed) => replayed,
        Err(Error::Conflict { message, .. }) => {
            return Ok(super::endpoints::refused("Not replayed", &message));
        }
        Err(e) => return Err(e.into()),
    };
    tracing::info!(target: "kxp_sender", delivery_id = %id, replay = %replayed.id,
        "delivery replayed from the console");
    scope
        .audit(&state, ConsoleAction::DeliveryReplay, Some(id.as_str()))
        .await;
    let to = scope.url(&format!("/events/{}#{}", replayed.event_id, replayed.id));
    Ok(Redirect::to(&to).into_response())
}
