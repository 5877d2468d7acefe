//! Pages of lists: `?cursor=&limit=` in, [`kxp_api::Page`] (`{"data": [...], "next_cursor":
//! …}`) out.

use kxp_api::{Cursor, Page};
use serde::Deserialize;
use utoipa::IntoParams;

use super::ApiError;

pub(super) const DEFAULT_PAGE: i64 = 50;
pub(super) const MAX_PAGE: i64 = 500;

/// Where a page starts and how long it is.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct PageParams {
    /// The `next_cursor` of the previous page; absent for the first page.
    pub(super) cursor: Option<String>,
    /// Items per page, 1 to 500 (default 50).
    #[param(minimum = 1, maximum = 500)]
    pub(super) limit: Option<i64>,
}

impl PageParams {
    pub(super) fn limit(&self) -> Result<i64, ApiError> {
        match self.limit {
            None => Ok(DEFAULT_PAGE),
            Some(n) if (1..=MAX_PAGE).contains(&n) => Ok(n),
            Some(_) => Err(ApiError::invalid(format!(
                "limit must be between 1 and {MAX_PAGE}"
            ))),
        }
    }
}

/// A page of `items`: a full page carries the cursor of its last item, a short one is the
/// last page.
pub(super) fn page<T>(items: Vec<T>, limit: i64, cursor: impl Fn(&T) -> String) -> Page<T> {
    let full = i64::try_from(items.len()).unwrap_or(i64::MAX) >= limit;
    let next = if full {
        items.last().map(|item| Cursor::from(cursor(item)))
    } else {
        None
    };
    Page::new(items, next)
}

/// A list that is never cut into pages: `next_cursor` is always `null`.
pub(super) fn whole<T>(items: Vec<T>) -> Page<T> {
    Page::new(items, None)
}
