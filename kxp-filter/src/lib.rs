//! Content filters for webhook endpoints: which events an endpoint takes, by the values in
//! them, beside the event types it subscribes to.
//!
//! A filter is a JSON object. Each key is a **dot path** into the event, whose first part is
//! one of the event's fields ([`FIELDS`]: `id`, `type`, `api_version`, `created_at`, `data`,
//! `tags`), and each value is either a literal (a string, number, boolean or `null`: the field
//! equals it) or an **operator object**: `$eq`, `$ne`, `$gt`, `$gte`, `$lt`, `$lte`, `$in`,
//! `$nin`, `$exists`, `$prefix`, several of them all holding. `$and` and `$or` (an array of
//! filters) and `$not` (a filter) combine filters; the keys of one object all hold.
//!
//! ```
//! use kxp_filter::{Event, Filter};
//! use serde_json::json;
//!
//! let filter = Filter::from_value(&json!({
//!     "type": {"$prefix": "payment."},
//!     "data.amount": {"$gte": 10000},
//!     "$or": [{"data.customer.country": {"$in": ["DE", "FR"]}}, {"tags": "vip"}]
//! }))?;
//!
//! let data = json!({"amount": 25000, "customer": {"country": "FR"}});
//! let event = Event { event_type: "payment.succeeded", data: &data, ..Event::default() };
//! assert!(filter.matches(&event));
//!
//! let small = json!({"amount": 500, "customer": {"country": "FR"}});
//! assert!(!filter.matches(&Event { data: &small, ..event }));
//!
//! // A fault names where it is, as a JSON pointer into the filter.
//! let refused = Filter::from_value(&json!({"$and": [{"data.amount": {"$gt": true}}]}));
//! assert_eq!(refused.unwrap_err().pointer(), "/$and/0/data.amount/$gt");
//! # Ok::<(), kxp_filter::FilterError>(())
//! ```
//!
//! # Semantics
//!
//! - **Numbers compare numerically**, integers exactly (`2` equals `2.0`; two integers beyond
//!   2^53 are never rounded to compare them); **strings bytewise** (so RFC 3339 times of one shape,
//!   like `created_at`'s `2026-12-05T10:11:12Z`, compare in time order: write a bound in the
//!   same shape, whole seconds and `Z`). A comparison between different kinds (a
//!   number and a string, `$gt` with a boolean field) is **no match**, never an error.
//! - **A missing field** matches only `$exists: false`, `$ne` and `$nin`: those are the
//!   negations of `$exists: true`, `$eq` and `$in`, and a field that is not there equals
//!   nothing. `null` is a value: `{"data.x": null}` matches `"x": null`, not a missing `x`.
//! - **Arrays**: a path that reaches an array matches when any element does (`{"tags": "vip"}`
//!   matches an event tagged `vip` among others), and a path through an array of objects
//!   reaches the field of each (`data.items.sku`). `$ne` and `$nin` being negations, they
//!   match when **no** element equals. `$exists` asks whether the path reaches anything at
//!   all, an empty array included; an event without tags has no `tags` to reach
//!   (`{"tags": {"$exists": false}}` takes the untagged ones). Several operators on one path, or
//!   paths through one array of objects, may each be met by a different element; arrays within
//!   arrays are not opened, and a path part is always a key (`items.0` is the key `"0"`).
//! - An empty filter (`{}`) takes every event.
//!
//! Filters are small by construction: at most [`MAX_BYTES`] of compact JSON and
//! [`MAX_DEPTH`] levels of nesting. Running one costs time linear in the event's size, however
//! it is written (`$in` and `$nin` look values up in sets).
//!
//! # Layout
//!
//! - [`Filter`] — checked on the way in ([`Filter::from_value`], [`Filter::from_json`]); a
//!   value of it is always a valid filter, and [`Filter::matches`] cannot fail.
//! - [`Event`] — what a filter reads of an event.
//! - [`FilterError`] — what is wrong and where ([`FilterError::pointer`]), with a stable
//!   [`FilterErrorKind::code`].

mod compile;
mod error;
mod matching;
mod set;

use serde_json::Value;

pub use error::{FilterError, FilterErrorKind};

/// The README's example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// The largest filter, in bytes of its compact JSON.
pub const MAX_BYTES: usize = 4096;

/// The deepest filter: levels of objects and arrays, the outer object being the first.
pub const MAX_DEPTH: usize = 8;

/// The event's fields a path can start with; only `data` has anything under it.
pub const FIELDS: [&str; 6] = ["id", "type", "api_version", "created_at", "data", "tags"];

/// A checked filter: one that parses, within [`MAX_BYTES`] and [`MAX_DEPTH`], whose every
/// operator takes what it was given.
#[derive(Debug, Clone, PartialEq)]
pub struct Filter {
    source: Value,
    root: compile::Node,
}

impl Filter {
    /// Checks `value` as a filter.
    pub fn from_value(value: &Value) -> Result<Filter, FilterError> {
        // Depth first: a value built in code can be deeper than any parser allows, and writing
        // it out to measure it would recurse as deep.
        compile::depth(value)?;
        let bytes = value.to_string().len();
        if bytes > MAX_BYTES {
            return Err(FilterError::at_root(FilterErrorKind::TooLarge { bytes }));
        }
        let root = compile::filter(value)?;
        Ok(Filter {
            source: value.clone(),
            root,
        })
    }

    /// Parses and checks a filter from JSON text (at most [`MAX_BYTES`] of it, whitespace
    /// included: a stored filter is compact).
    pub fn from_json(text: &str) -> Result<Filter, FilterError> {
        if text.len() > MAX_BYTES {
            return Err(FilterError::at_root(FilterErrorKind::TooLarge {
                bytes: text.len(),
            }));
        }
        let value: Value = serde_json::from_str(text)
            .map_err(|e| FilterError::at_root(FilterErrorKind::NotJson(e.to_string())))?;
        Filter::from_value(&value)
    }

    /// Whether `event` passes the filter.
    pub fn matches(&self, event: &Event<'_>) -> bool {
        matching::node(&self.root, event)
    }

    /// Whether it takes every event (`{}`): storing it is storing no filter.
    pub fn is_empty(&self) -> bool {
        self.source.as_object().is_some_and(|o| o.is_empty())
    }

    /// The filter as it was given.
    pub fn as_value(&self) -> &Value {
        &self.source
    }

    /// The filter as compact JSON, the form to store it in ([`Filter::from_json`] reads it
    /// back).
    pub fn to_json(&self) -> String {
        self.source.to_string()
    }
}

/// What a filter reads of an event: its envelope's fields and its tags. Every field defaults
/// to empty (and `data` to `null`), for tests and for callers that lack one.
#[derive(Debug, Clone, Copy)]
pub struct Event<'a> {
    /// `id`.
    pub id: &'a str,
    /// `type`.
    pub event_type: &'a str,
    /// `api_version`.
    pub api_version: &'a str,
    /// `created_at`, RFC 3339 as the envelope has it.
    pub created_at: &'a str,
    /// `data`, as the producer sent it.
    pub data: &'a Value,
    /// `tags`: the event's tags (never in the envelope, but the producer gave them).
    pub tags: &'a [String],
}

impl Default for Event<'_> {
    fn default() -> Self {
        Event {
            id: "",
            event_type: "",
            api_version: "",
            created_at: "",
            data: &Value::Null,
            tags: &[],
        }
    }
}
