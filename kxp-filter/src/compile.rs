//! From JSON to a checked filter: every fault found here, with its place, so that matching
//! never meets one.

use serde_json::{Number, Value};

use crate::error::{FilterError, FilterErrorKind as Kind, Pointer};
use crate::set::ValueSet;

/// A checked filter, or a part of one.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Node {
    /// Every part holds (an object's keys, `$and`).
    All(Vec<Node>),
    /// Some part holds (`$or`).
    Any(Vec<Node>),
    /// The part does not hold (`$not`).
    Not(Box<Node>),
    /// The tests on what a path reaches, all holding.
    Field(Path, Vec<Test>),
}

/// Where a path starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Field {
    Id,
    Type,
    ApiVersion,
    CreatedAt,
    Data,
    Tags,
}

/// A dot path: its field and, under `data`, the keys below it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Path {
    pub field: Field,
    pub keys: Vec<String>,
}

/// A value to compare with.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Scalar {
    Str(String),
    Num(Number),
    Bool(bool),
    Null,
}

/// An ordered bound: only numbers and strings have an order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Bound {
    Str(String),
    Num(Number),
}

/// One test of what a path reaches.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Test {
    Eq(Scalar),
    Ne(Scalar),
    In(ValueSet),
    Nin(ValueSet),
    Gt(Bound),
    Gte(Bound),
    Lt(Bound),
    Lte(Bound),
    Exists(bool),
    Prefix(String),
}

/// Checks a whole filter, whose depth [`depth`] checked.
pub(crate) fn filter(value: &Value) -> Result<Node, FilterError> {
    node(value, &Pointer::Root)
}

/// Refuses the first container deeper than [`MAX_DEPTH`](crate::MAX_DEPTH), before anything
/// else walks the value.
pub(crate) fn depth(value: &Value) -> Result<(), FilterError> {
    level(value, &Pointer::Root, 1)
}

/// [`depth`] below a container at `level`.
fn level(value: &Value, at: &Pointer<'_>, level: usize) -> Result<(), FilterError> {
    let deeper = |child: &Value, at: &Pointer<'_>| self::level(child, at, level + 1);
    match value {
        Value::Object(_) | Value::Array(_) if level > crate::MAX_DEPTH => {
            Err(FilterError::at(at, Kind::TooDeep))
        }
        Value::Object(map) => map
            .iter()
            .try_for_each(|(key, child)| deeper(child, &Pointer::Key(at, key))),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .try_for_each(|(i, child)| deeper(child, &Pointer::Index(at, i))),
        _ => Ok(()),
    }
}

/// A filter: an object of paths and `$and`, `$or`, `$not`, all holding.
fn node(value: &Value, at: &Pointer<'_>) -> Result<Node, FilterError> {
    let Value::Object(map) = value else {
        return Err(FilterError::at(at, Kind::NotAnObject));
    };
    let mut parts = Vec::with_capacity(map.len());
    for (key, child) in map {
        let here = Pointer::Key(at, key);
        parts.push(match key.as_str() {
            "$and" => Node::All(group("$and", child, &here)?),
            "$or" => Node::Any(group("$or", child, &here)?),
            "$not" => Node::Not(Box::new(node(child, &here)?)),
            op if op.starts_with('$') => return Err(operator_fault(op, true, &here)),
            _ => Node::Field(path(key, &here)?, tests(child, &here)?),
        });
    }
    Ok(match <[Node; 1]>::try_from(parts) {
        Ok([one]) => one,
        Err(parts) => Node::All(parts),
    })
}

/// `$and`'s or `$or`'s filters.
fn group(op: &'static str, value: &Value, at: &Pointer<'_>) -> Result<Vec<Node>, FilterError> {
    match value {
        Value::Array(items) if !items.is_empty() => items
            .iter()
            .enumerate()
            .map(|(i, item)| node(item, &Pointer::Index(at, i)))
            .collect(),
        _ => Err(FilterError::at(at, Kind::EmptyGroup(op))),
    }
}

/// An unknown operator, or one in the wrong place: `$gt` where filters go (`among_filters`),
/// `$and` among a field's operators.
fn operator_fault(op: &str, among_filters: bool, at: &Pointer<'_>) -> FilterError {
    let field_op = FIELD_OPERATORS.contains(&op);
    let combinator = matches!(op, "$and" | "$or" | "$not");
    let kind = if (among_filters && field_op) || (!among_filters && combinator) {
        Kind::MisplacedOperator(op.to_owned())
    } else {
        Kind::UnknownOperator(op.to_owned())
    };
    FilterError::at(at, kind)
}

const FIELD_OPERATORS: [&str; 10] = [
    "$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$exists", "$prefix",
];

/// A dot path, which must start with one of the event's fields.
fn path(key: &str, at: &Pointer<'_>) -> Result<Path, FilterError> {
    let mut parts = key.split('.');
    let first = parts.next().unwrap_or_default();
    let keys: Vec<String> = parts.map(str::to_owned).collect();
    if first.is_empty() || keys.iter().any(String::is_empty) {
        return Err(FilterError::at(
            at,
            Kind::BadPath("an empty part (a leading, trailing or doubled dot)"),
        ));
    }
    if keys.iter().any(|k| k.starts_with('$')) {
        return Err(FilterError::at(
            at,
            Kind::BadPath("a part starts with $, which only operators do"),
        ));
    }
    let (field, name) = match first {
        "id" => (Field::Id, "id"),
        "type" => (Field::Type, "type"),
        "api_version" => (Field::ApiVersion, "api_version"),
        "created_at" => (Field::CreatedAt, "created_at"),
        "data" => (Field::Data, "data"),
        "tags" => (Field::Tags, "tags"),
        other => return Err(FilterError::at(at, Kind::UnknownField(other.to_owned()))),
    };
    if field != Field::Data && !keys.is_empty() {
        return Err(FilterError::at(at, Kind::NothingUnder(name)));
    }
    Ok(Path { field, keys })
}

/// A field's value: a literal (equality) or an operator object.
fn tests(value: &Value, at: &Pointer<'_>) -> Result<Vec<Test>, FilterError> {
    let Value::Object(ops) = value else {
        return Ok(vec![Test::Eq(scalar("$eq", value, at)?)]);
    };
    if ops.is_empty() {
        return Err(FilterError::at(at, Kind::NoOperator));
    }
    ops.iter()
        .map(|(op, operand)| test(op, operand, &Pointer::Key(at, op)))
        .collect()
}

fn test(op: &str, operand: &Value, at: &Pointer<'_>) -> Result<Test, FilterError> {
    Ok(match op {
        "$eq" => Test::Eq(scalar("$eq", operand, at)?),
        "$ne" => Test::Ne(scalar("$ne", operand, at)?),
        "$in" => Test::In(ValueSet::new(list("$in", operand, at)?)),
        "$nin" => Test::Nin(ValueSet::new(list("$nin", operand, at)?)),
        "$gt" => Test::Gt(bound("$gt", operand, at)?),
        "$gte" => Test::Gte(bound("$gte", operand, at)?),
        "$lt" => Test::Lt(bound("$lt", operand, at)?),
        "$lte" => Test::Lte(bound("$lte", operand, at)?),
        "$exists" => match operand {
            Value::Bool(b) => Test::Exists(*b),
            other => return Err(bad("$exists", "true or false", other, at)),
        },
        "$prefix" => match operand {
            Value::String(s) => Test::Prefix(s.clone()),
            other => return Err(bad("$prefix", "a string", other, at)),
        },
        other => return Err(operator_fault(other, false, at)),
    })
}

fn scalar(op: &'static str, value: &Value, at: &Pointer<'_>) -> Result<Scalar, FilterError> {
    Ok(match value {
        Value::String(s) => Scalar::Str(s.clone()),
        Value::Number(n) => Scalar::Num(n.clone()),
        Value::Bool(b) => Scalar::Bool(*b),
        Value::Null => Scalar::Null,
        other => {
            return Err(bad(
                op,
                "a string, a number, true, false or null (an array of values is $in's)",
                other,
                at,
            ));
        }
    })
}

fn list(op: &'static str, value: &Value, at: &Pointer<'_>) -> Result<Vec<Scalar>, FilterError> {
    let Value::Array(items) = value else {
        return Err(bad(op, "an array of values", value, at));
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| scalar(op, item, &Pointer::Index(at, i)))
        .collect()
}

fn bound(op: &'static str, value: &Value, at: &Pointer<'_>) -> Result<Bound, FilterError> {
    match value {
        Value::String(s) => Ok(Bound::Str(s.clone())),
        Value::Number(n) => Ok(Bound::Num(n.clone())),
        other => Err(bad(op, "a number or a string", other, at)),
    }
}

fn bad(op: &'static str, expected: &'static str, found: &Value, at: &Pointer<'_>) -> FilterError {
    FilterError::at(
        at,
        Kind::BadOperand {
            operator: op,
            expected,
            found: kind_of(found),
        },
    )
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
