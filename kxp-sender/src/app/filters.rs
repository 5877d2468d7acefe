//! A dry run of a content filter: which of the account's newest events it takes, changing
//! nothing. The API and the console's form both come through here.

use std::sync::Arc;

use kxp_api::{EventId, FilterTested, TestFilter};
use serde_json::Value;

use super::checks::check_filter;
use super::{AppState, Error};
use crate::model::{Account, ContentFilter, EndpointId, Event};

/// How many events a dry run reads unless told.
const DEFAULT_TEST_EVENTS: u32 = 100;

/// The most events a dry run reads.
const MAX_TEST_EVENTS: u32 = 1000;

/// Events read and run at a time: a page's payloads are all that is in memory at once.
const PAGE: u32 = 50;

/// A dry run stops once it has read this much of events' payloads (a thousand events of
/// half a megabyte would be half a gigabyte): `tested` then says how far it got.
const MAX_TEST_BYTES: usize = 64 << 20;

/// Runs `test`'s filter (checked as a change's is), or the endpoint's own, over the account's
/// newest events. The filter alone: the endpoint's types and pinned version are not applied,
/// so a filter can be tried before the types are chosen. Each page is run off the async
/// workers: reading a large payload and running a filter over it is CPU work.
pub(crate) async fn test_filter(
    state: &AppState,
    account: &Account,
    id: &EndpointId,
    test: &TestFilter,
) -> Result<FilterTested, Error> {
    let limit = match test.limit {
        None => DEFAULT_TEST_EVENTS,
        Some(n @ 1..=MAX_TEST_EVENTS) => n,
        Some(_) => {
            return Err(Error::invalid(format!(
                "limit must be 1 to {MAX_TEST_EVENTS}"
            )));
        }
    };
    let endpoint = state.db.endpoint(&account.id, id).await?;
    let stored = match &test.filter {
        Some(filter) => check_filter(filter)?,
        None => endpoint.content_filter,
    };
    let filter = Arc::new(ContentFilter::of(stored.as_deref()));
    let (mut tested, mut read, mut matches) = (0u32, 0usize, Vec::new());
    let mut cursor: Option<(i64, EventId)> = None;
    while tested < limit && read < MAX_TEST_BYTES {
        let want = PAGE.min(limit - tested);
        let page = state
            .db
            .recent_events(&account.id, cursor.as_ref(), i64::from(want))
            .await?;
        let Some((last, _)) = page.last() else {
            break;
        };
        cursor = Some((last.created_at, last.id.clone()));
        tested += u32::try_from(page.len()).unwrap_or(want);
        read += page.iter().map(|(e, _)| e.payload.len()).sum::<usize>();
        let filter = filter.clone();
        let taken = tokio::task::spawn_blocking(move || taken(&filter, page))
            .await
            .map_err(|_| Error::Unavailable)?;
        matches.extend(taken);
    }
    Ok(FilterTested {
        tested: u64::from(tested),
        matched: matches.len() as u64,
        matches,
    })
}

/// The ids of the events of `page` that `filter` takes, in the page's order. An event whose
/// payload is gone (or going) is taken by none: its content is no one's to test any more.
fn taken(filter: &ContentFilter, page: Vec<(Event, Vec<String>)>) -> Vec<EventId> {
    page.into_iter()
        .filter(|(event, _)| event.gone().is_none())
        .filter(|(event, tags)| {
            // The envelope as stored: `data` as the producer sent it, `created_at` as sent.
            let envelope: Option<Value> = serde_json::from_str(&event.payload).ok();
            let content = envelope.as_ref().map(|envelope| kxp_filter::Event {
                id: event.id.as_str(),
                event_type: &event.event_type,
                api_version: &event.api_version,
                created_at: envelope["created_at"].as_str().unwrap_or_default(),
                data: &envelope["data"],
                tags,
            });
            filter.takes(content.as_ref())
        })
        .map(|(event, _)| event.id)
        .collect()
}
