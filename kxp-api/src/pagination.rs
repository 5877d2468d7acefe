//! Lists: `{"data": [...], "next_cursor": …}`, walked with `?cursor=` and `?limit=`.

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::ids::Cursor;

/// One page of a list. `next_cursor` is `null` on the last page (and always, for the lists
/// that are never paged: an event's deliveries, a delivery's attempts, the schemas); otherwise
/// pass it as `?cursor=` to get the next page. A full page may be followed by an empty one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Page<T> {
    /// The items, oldest first.
    pub data: Vec<T>,
    /// Where the next page starts; `null` when there is none. Always present.
    #[schema(required = true)]
    pub next_cursor: Option<Cursor>,
}

impl<T> Page<T> {
    /// A page of `data`, followed by `next_cursor`.
    pub fn new(data: Vec<T>, next_cursor: Option<Cursor>) -> Page<T> {
        Page { data, next_cursor }
    }
}

/// `?cursor=&limit=` of a paged list.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema, IntoParams)]
#[into_params(parameter_in = Query)]
#[non_exhaustive]
pub struct PageQuery {
    /// The `next_cursor` of the previous page; the first page without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(value_type = Option<String>)]
    pub cursor: Option<Cursor>,
    /// Items per page, 1 to 500 (default 50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<u32>,
}

impl PageQuery {
    /// The first page, `limit` long.
    pub fn limit(limit: u32) -> PageQuery {
        PageQuery {
            cursor: None,
            limit: Some(limit),
        }
    }

    /// The same query from `cursor` on.
    pub fn after(&self, cursor: Option<Cursor>) -> PageQuery {
        PageQuery {
            cursor,
            limit: self.limit,
        }
    }
}
