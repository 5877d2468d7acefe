//! Pages of lists (`?cursor=&limit=` in, `{"data": [...], "next_cursor": …}` out) and the
//! PATCH field helpers (left out, `null`, or set).

use axum::Json;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Value, json};

use super::ApiError;

pub(super) const DEFAULT_PAGE: i64 = 50;
pub(super) const MAX_PAGE: i64 = 500;

#[derive(Deserialize)]
pub(super) struct Page {
    pub(super) cursor: Option<String>,
    pub(super) limit: Option<i64>,
}

impl Page {
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

pub(super) fn list<T: Serialize>(
    items: Vec<T>,
    limit: i64,
    cursor: impl Fn(&T) -> String,
) -> Json<Value> {
    let full = i64::try_from(items.len()).unwrap_or(i64::MAX) >= limit;
    let next = if full {
        items.last().map(&cursor)
    } else {
        None
    };
    Json(json!({"data": items, "next_cursor": next}))
}

/// A field that may be left out but, when given, is not `null`.
pub(super) fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// A field that may be left out (`None`), cleared (`Some(None)`) or set.
pub(super) fn nullable<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}
