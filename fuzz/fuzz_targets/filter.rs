//! `Filter::from_json` on arbitrary text, and every accepted filter run on events of every
//! shape.
//!
//! The sender checks a merchant's filter on the way in and runs it on each event at ingestion,
//! inside the transaction that stores the event: a filter that parses must never panic on any
//! event, its stored form must read back as the same filter, and `$not` of it must take
//! exactly the events it does not. And the operators must agree with each other, each read by
//! code of its own: for the first path of the filter and a value from it, `$ne` and `$nin`
//! take exactly what equality does not, `$in` of one value what equality does (a set lookup
//! against a comparison), and `$gte`/`$lte` what `$gt`/`$lt` or equality do.

#![no_main]

use std::sync::OnceLock;

use kxp_filter::{Event, Filter};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(filter) = Filter::from_json(text) else {
        return;
    };
    let stored = filter.to_json();
    match Filter::from_json(&stored) {
        Ok(again) => assert_eq!(again, filter, "{stored} read back differently"),
        Err(e) => panic!("the stored form {stored} is refused: {e}"),
    }
    // One level more, and up to 9 bytes longer: within the limits or refused, never a panic.
    let negated = Filter::from_value(&json!({ "$not": filter.as_value() })).ok();
    let laws = laws(filter.as_value());
    let tags = ["vip".to_owned(), "eu".to_owned(), String::new()];
    for (i, data) in samples().iter().enumerate() {
        let event = Event {
            id: "0b7d1f6e-3d0a-4c55-9d0e-6d1c2f3a4b5c",
            event_type: ["payment.succeeded", "refund.created", ""][i % 3],
            api_version: "2026-01-01",
            created_at: "2026-12-05T10:11:12.345Z",
            data,
            tags: &tags[..i % 4],
        };
        let taken = filter.matches(&event);
        if let Some(negated) = &negated {
            assert_eq!(negated.matches(&event), !taken, "$not of {stored}");
        }
        if let Some(laws) = &laws {
            laws.hold(&event);
        }
    }
});

/// Filters on one path and one value whose answers must agree.
struct Laws {
    eq: Filter,
    ne: Filter,
    r#in: Filter,
    nin: Filter,
    /// `$gt`, `$gte`, `$lt`, `$lte`, for a number or a string.
    order: Option<[Filter; 4]>,
}

impl Laws {
    fn hold(&self, event: &Event<'_>) {
        let eq = self.eq.matches(event);
        let source = self.eq.as_value();
        assert_eq!(self.ne.matches(event), !eq, "$ne against {source}");
        assert_eq!(self.r#in.matches(event), eq, "$in of one against {source}");
        assert_eq!(self.nin.matches(event), !eq, "$nin of one against {source}");
        if let Some([gt, gte, lt, lte]) = &self.order {
            assert_eq!(
                gte.matches(event),
                gt.matches(event) || eq,
                "$gte against {source}"
            );
            assert_eq!(
                lte.matches(event),
                lt.matches(event) || eq,
                "$lte against {source}"
            );
        }
    }
}

/// The laws for the filter's first path and the first value it compares that path with
/// (a literal, or an operator's operand); `None` when it has none.
fn laws(filter: &Value) -> Option<Laws> {
    let (path, given) = filter
        .as_object()?
        .iter()
        .find(|(k, _)| !k.starts_with('$'))?;
    let value = match given {
        Value::Object(ops) => ops.values().find(|v| !v.is_array() && !v.is_object())?,
        Value::Array(_) => return None,
        literal => literal,
    };
    let with = |op: &str, operand: Value| {
        Filter::from_value(&json!({ path.as_str(): { op: operand } })).ok()
    };
    let order = match value {
        Value::Number(_) | Value::String(_) => Some([
            with("$gt", value.clone())?,
            with("$gte", value.clone())?,
            with("$lt", value.clone())?,
            with("$lte", value.clone())?,
        ]),
        _ => None,
    };
    Some(Laws {
        eq: with("$eq", value.clone())?,
        ne: with("$ne", value.clone())?,
        r#in: with("$in", json!([value]))?,
        nin: with("$nin", json!([value]))?,
        order,
    })
}

/// `data` of every shape a path can meet: nested objects, arrays of objects and of values,
/// every kind of scalar, integers at the edges of i64 and u64, floats, empty containers.
fn samples() -> &'static [Value] {
    static SAMPLES: OnceLock<Vec<Value>> = OnceLock::new();
    SAMPLES.get_or_init(|| {
        vec![
            json!({"amount": 25000, "currency": "EUR", "customer": {"country": "FR", "tier": null},
                   "items": [{"sku": "A-1", "qty": 2}, {"sku": 7, "qty": [1, 2]}, 3, "x"],
                   "risk": 0.25, "live": true}),
            json!({"amount": "25000", "customer": "someone", "items": [], "risk": [0.1, -0.0]}),
            json!({"amount": 9007199254740993u64, "x": -9223372036854775808i64,
                   "y": 18446744073709551615u64, "z": 1e300, "a": {"b": {"c": {"d": [[1], {}]}}}}),
            json!({}),
            json!([{"amount": 1}, null, "s"]),
            Value::Null,
            json!("just a string"),
        ]
    })
}
