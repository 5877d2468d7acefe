//! Why a filter was refused, and where.

use std::fmt;

/// A refused filter: what is wrong ([`FilterError::kind`]) at which place in it
/// ([`FilterError::pointer`]). Its `Display` says both, in a sentence fit for an API answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterError {
    pointer: String,
    kind: FilterErrorKind,
}

impl FilterError {
    pub(crate) fn at_root(kind: FilterErrorKind) -> FilterError {
        FilterError {
            pointer: String::new(),
            kind,
        }
    }

    pub(crate) fn at(pointer: &Pointer<'_>, kind: FilterErrorKind) -> FilterError {
        FilterError {
            pointer: pointer.to_string(),
            kind,
        }
    }

    /// Where the fault is: a JSON pointer (RFC 6901) into the filter, such as
    /// `/$and/1/data.amount/$gt`; empty for the filter as a whole.
    pub fn pointer(&self) -> &str {
        &self.pointer
    }

    /// What the fault is.
    pub fn kind(&self) -> &FilterErrorKind {
        &self.kind
    }
}

impl fmt::Display for FilterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.pointer.is_empty() {
            write!(f, "filter: {}", self.kind)
        } else {
            write!(f, "filter at {}: {}", self.pointer, self.kind)
        }
    }
}

impl std::error::Error for FilterError {}

/// What is wrong with a filter. Each has a stable [`code`](FilterErrorKind::code).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FilterErrorKind {
    /// More than [`MAX_BYTES`](crate::MAX_BYTES) of compact JSON.
    TooLarge {
        /// Its size.
        bytes: usize,
    },
    /// Nested deeper than [`MAX_DEPTH`](crate::MAX_DEPTH).
    TooDeep,
    /// The text is not JSON.
    NotJson(String),
    /// A filter (the whole, or an element of `$and`/`$or`, or `$not`'s) that is not an object.
    NotAnObject,
    /// `$and` or `$or` without an array of at least one filter.
    EmptyGroup(&'static str),
    /// An operator this language does not have.
    UnknownOperator(String),
    /// A field's operator (such as `$gt`) where filters go, or `$and`/`$or`/`$not` among a
    /// field's operators.
    MisplacedOperator(String),
    /// A path that is empty, has an empty part, or a part that starts with `$`.
    BadPath(&'static str),
    /// A path that does not start with one of the event's [`FIELDS`](crate::FIELDS).
    UnknownField(String),
    /// A path under a field that has nothing under it (everything but `data`).
    NothingUnder(&'static str),
    /// An operator given what it does not take.
    BadOperand {
        /// The operator (`$eq` for a literal).
        operator: &'static str,
        /// What it takes.
        expected: &'static str,
        /// What it was given.
        found: &'static str,
    },
    /// An operator object without any operator (`{}` as a field's value).
    NoOperator,
}

impl FilterErrorKind {
    /// A stable name for the fault, for programs to tell them apart.
    pub fn code(&self) -> &'static str {
        match self {
            FilterErrorKind::TooLarge { .. } => "too_large",
            FilterErrorKind::TooDeep => "too_deep",
            FilterErrorKind::NotJson(_) => "not_json",
            FilterErrorKind::NotAnObject => "not_an_object",
            FilterErrorKind::EmptyGroup(_) => "empty_group",
            FilterErrorKind::UnknownOperator(_) => "unknown_operator",
            FilterErrorKind::MisplacedOperator(_) => "misplaced_operator",
            FilterErrorKind::BadPath(_) => "bad_path",
            FilterErrorKind::UnknownField(_) => "unknown_field",
            FilterErrorKind::NothingUnder(_) => "nothing_under",
            FilterErrorKind::BadOperand { .. } => "bad_operand",
            FilterErrorKind::NoOperator => "no_operator",
        }
    }
}

impl fmt::Display for FilterErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FilterErrorKind::TooLarge { bytes } => write!(
                f,
                "{bytes} bytes; a filter is at most {} bytes of compact JSON",
                crate::MAX_BYTES
            ),
            FilterErrorKind::TooDeep => write!(
                f,
                "nested too deeply; a filter has at most {} levels of objects and arrays",
                crate::MAX_DEPTH
            ),
            FilterErrorKind::NotJson(why) => write!(f, "not JSON ({why})"),
            FilterErrorKind::NotAnObject => f.write_str(
                "expected a filter: an object of paths (such as \"data.amount\") and $and, $or, $not",
            ),
            FilterErrorKind::EmptyGroup(op) => {
                write!(f, "{op} takes an array of at least one filter")
            }
            FilterErrorKind::UnknownOperator(key) if !key.starts_with('$') => write!(
                f,
                "{key:?} is not an operator: a field's value is a literal or operators; to \
                 reach a field inside an object, extend the path (\"data.customer.{key}\")"
            ),
            FilterErrorKind::UnknownOperator(op) => write!(
                f,
                "unknown operator {op:?}; a field takes $eq, $ne, $gt, $gte, $lt, $lte, $in, \
                 $nin, $exists, $prefix, and filters combine with $and, $or, $not"
            ),
            FilterErrorKind::MisplacedOperator(op) => match op.as_str() {
                "$and" | "$or" | "$not" => write!(
                    f,
                    "{op} combines filters: put it beside the paths, not among a field's operators"
                ),
                _ => write!(
                    f,
                    "{op} is a field's operator: write {{\"<path>\": {{{op:?}: …}}}}"
                ),
            },
            FilterErrorKind::BadPath(why) => write!(f, "bad path: {why}"),
            FilterErrorKind::UnknownField(field) => write!(
                f,
                "unknown field {field:?}; a path starts with id, type, api_version, created_at, \
                 data or tags (such as \"data.{field}\")"
            ),
            FilterErrorKind::NothingUnder(field) => write!(
                f,
                "{field} has nothing under it; only data has fields of its own"
            ),
            FilterErrorKind::BadOperand {
                operator,
                expected,
                found,
            } => write!(f, "{operator} takes {expected}, not {found}"),
            FilterErrorKind::NoOperator => f.write_str(
                "an operator object needs at least one operator (to compare with an object, \
                 compare its fields: \"data.customer.country\")",
            ),
        }
    }
}

/// A place in a filter, built up as the check descends: printed as an RFC 6901 pointer.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Pointer<'a> {
    Root,
    Key(&'a Pointer<'a>, &'a str),
    Index(&'a Pointer<'a>, usize),
}

impl fmt::Display for Pointer<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pointer::Root => Ok(()),
            Pointer::Key(parent, key) => {
                write!(f, "{parent}/")?;
                for c in key.chars() {
                    match c {
                        '~' => f.write_str("~0")?,
                        '/' => f.write_str("~1")?,
                        c => write!(f, "{c}")?,
                    }
                }
                Ok(())
            }
            Pointer::Index(parent, i) => write!(f, "{parent}/{i}"),
        }
    }
}
