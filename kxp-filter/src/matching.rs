//! A checked filter against one event: what each path reaches, and each test on it.

use std::cmp::Ordering;

use serde_json::{Number, Value};

use crate::Event;
use crate::compile::{Bound, Field, Node, Path, Scalar, Test};
use crate::set::ValueSet;

pub(crate) fn node(node: &Node, event: &Event<'_>) -> bool {
    match node {
        Node::All(parts) => parts.iter().all(|part| self::node(part, event)),
        Node::Any(parts) => parts.iter().any(|part| self::node(part, event)),
        Node::Not(part) => !self::node(part, event),
        Node::Field(path, tests) => {
            let reached = reach(path, event);
            tests.iter().all(|test| passes(test, &reached))
        }
    }
}

/// What a path reaches in an event: nothing (missing), or one or more values (more than one
/// through an array of objects).
#[derive(Debug, Clone, Copy)]
enum Reached<'a> {
    Str(&'a str),
    Json(&'a Value),
    Tags(&'a [String]),
}

/// A value a test compares: an element of a reached array, or a reached value itself.
#[derive(Debug, Clone, Copy)]
enum Candidate<'a> {
    Str(&'a str),
    Json(&'a Value),
}

fn reach<'a>(path: &Path, event: &Event<'a>) -> Vec<Reached<'a>> {
    let data = match path.field {
        Field::Id => return vec![Reached::Str(event.id)],
        Field::Type => return vec![Reached::Str(event.event_type)],
        Field::ApiVersion => return vec![Reached::Str(event.api_version)],
        Field::CreatedAt => return vec![Reached::Str(event.created_at)],
        // An event without tags has none to reach: `{"tags": {"$exists": false}}` is "untagged".
        Field::Tags if event.tags.is_empty() => return Vec::new(),
        Field::Tags => return vec![Reached::Tags(event.tags)],
        Field::Data => event.data,
    };
    let mut here = vec![data];
    for key in &path.keys {
        let mut next = Vec::new();
        for value in here {
            match value {
                Value::Object(map) => next.extend(map.get(key)),
                Value::Array(items) => next.extend(
                    items
                        .iter()
                        .filter_map(|item| item.as_object().and_then(|map| map.get(key))),
                ),
                _ => {}
            }
        }
        here = next;
    }
    here.into_iter().map(Reached::Json).collect()
}

/// Every value a test compares: each reached value, or each element of a reached array.
fn candidates<'a>(reached: &[Reached<'a>]) -> impl Iterator<Item = Candidate<'a>> {
    reached
        .iter()
        .flat_map(|r| -> Box<dyn Iterator<Item = Candidate<'a>> + 'a> {
            match *r {
                Reached::Str(s) => Box::new(std::iter::once(Candidate::Str(s))),
                Reached::Tags(tags) => Box::new(tags.iter().map(|t| Candidate::Str(t))),
                Reached::Json(Value::Array(items)) => Box::new(items.iter().map(Candidate::Json)),
                Reached::Json(value) => Box::new(std::iter::once(Candidate::Json(value))),
            }
        })
}

fn passes(test: &Test, reached: &[Reached<'_>]) -> bool {
    let mut each = candidates(reached);
    match test {
        Test::Exists(wanted) => reached.is_empty() != *wanted,
        Test::Eq(want) => each.any(|c| equals(c, want)),
        Test::Ne(want) => !each.any(|c| equals(c, want)),
        Test::In(set) => each.any(|c| within(c, set)),
        Test::Nin(set) => !each.any(|c| within(c, set)),
        Test::Gt(b) => each.any(|c| order(c, b) == Some(Ordering::Greater)),
        Test::Gte(b) => {
            each.any(|c| matches!(order(c, b), Some(Ordering::Greater | Ordering::Equal)))
        }
        Test::Lt(b) => each.any(|c| order(c, b) == Some(Ordering::Less)),
        Test::Lte(b) => each.any(|c| matches!(order(c, b), Some(Ordering::Less | Ordering::Equal))),
        Test::Prefix(prefix) => {
            each.any(|c| text(c).is_some_and(|s| s.starts_with(prefix.as_str())))
        }
    }
}

fn text<'a>(candidate: Candidate<'a>) -> Option<&'a str> {
    match candidate {
        Candidate::Str(s) => Some(s),
        Candidate::Json(Value::String(s)) => Some(s),
        Candidate::Json(_) => None,
    }
}

fn equals(candidate: Candidate<'_>, want: &Scalar) -> bool {
    match (candidate, want) {
        (Candidate::Json(Value::Number(n)), Scalar::Num(w)) => {
            compare(n, w) == Some(Ordering::Equal)
        }
        (Candidate::Json(Value::Bool(b)), Scalar::Bool(w)) => b == w,
        (Candidate::Json(Value::Null), Scalar::Null) => true,
        (c, Scalar::Str(w)) => text(c) == Some(w.as_str()),
        _ => false,
    }
}

/// Whether a candidate is in `$in`'s (or `$nin`'s) values.
fn within(candidate: Candidate<'_>, set: &ValueSet) -> bool {
    match candidate {
        Candidate::Str(s) => set.has_str(s),
        Candidate::Json(Value::String(s)) => set.has_str(s),
        Candidate::Json(Value::Number(n)) => set.has_number(n),
        Candidate::Json(Value::Bool(b)) => set.has_bool(*b),
        Candidate::Json(Value::Null) => set.has_null(),
        Candidate::Json(_) => false,
    }
}

/// How a candidate compares with a bound: `None` across kinds.
fn order(candidate: Candidate<'_>, bound: &Bound) -> Option<Ordering> {
    match (candidate, bound) {
        (Candidate::Json(Value::Number(n)), Bound::Num(b)) => compare(n, b),
        (c, Bound::Str(b)) => text(c).map(|s| s.as_bytes().cmp(b.as_bytes())),
        _ => None,
    }
}

/// 2^65: past every integer a JSON number reads as (i64 and u64), and exactly representable;
/// a float's whole part below it converts to i128 exactly.
pub(crate) const WHOLE_LIMIT: f64 = 36_893_488_147_419_103_232.0;

/// A JSON number, exactly: an integer as one (i64 and u64 both fit in i128), else a float.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Num {
    Int(i128),
    Float(f64),
}

pub(crate) fn num(n: &Number) -> Option<Num> {
    if let Some(i) = n.as_i64() {
        Some(Num::Int(i128::from(i)))
    } else if let Some(u) = n.as_u64() {
        Some(Num::Int(i128::from(u)))
    } else {
        n.as_f64().filter(|f| !f.is_nan()).map(Num::Float)
    }
}

/// Compares two numbers by value: integers exactly, an integer and a float without rounding
/// the integer to a float.
pub(crate) fn compare(a: &Number, b: &Number) -> Option<Ordering> {
    match (num(a)?, num(b)?) {
        (Num::Int(x), Num::Int(y)) => Some(x.cmp(&y)),
        (Num::Float(x), Num::Float(y)) => x.partial_cmp(&y),
        (Num::Int(i), Num::Float(f)) => Some(int_float(i, f)),
        (Num::Float(f), Num::Int(i)) => Some(int_float(i, f).reverse()),
    }
}

/// `i` against a float that is not NaN: by the float's whole part exactly (every integer a
/// JSON number reads as is below 2^64, and so is any float's whole part that matters), then
/// by its fraction.
fn int_float(i: i128, f: f64) -> Ordering {
    if f >= WHOLE_LIMIT {
        return Ordering::Less;
    }
    if f <= -WHOLE_LIMIT {
        return Ordering::Greater;
    }
    let whole = f.trunc();
    // Exact: `whole` is an integer of magnitude below 2^65.
    let whole_int = whole as i128;
    i.cmp(&whole_int).then(if f > whole {
        Ordering::Less
    } else if f < whole {
        Ordering::Greater
    } else {
        Ordering::Equal
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(text: &str) -> Number {
        serde_json::from_str(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn integers_compare_exactly_and_against_floats_without_rounding() {
        let cases = [
            ("1", "1.0", Ordering::Equal),
            ("3", "3.5", Ordering::Less),
            ("-3", "-3.5", Ordering::Greater),
            ("4", "3.5", Ordering::Greater),
            // Both round to 9007199254740992.0 as floats: compared exactly, they differ.
            ("9007199254740993", "9007199254740992", Ordering::Greater),
            ("9007199254740993", "9007199254740992.0", Ordering::Greater),
            (
                "18446744073709551615",
                "-9223372036854775808",
                Ordering::Greater,
            ),
            ("18446744073709551615", "1e30", Ordering::Less),
            ("-9223372036854775808", "-1e30", Ordering::Greater),
            ("0", "-0.0", Ordering::Equal),
            ("2.5", "2.25", Ordering::Greater),
        ];
        for (a, b, expected) in cases {
            assert_eq!(compare(&n(a), &n(b)), Some(expected), "{a} vs {b}");
            assert_eq!(
                compare(&n(b), &n(a)),
                Some(expected.reverse()),
                "{b} vs {a}"
            );
        }
    }
}
