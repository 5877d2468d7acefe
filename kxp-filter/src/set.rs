//! `$in`'s and `$nin`'s values as sets: one lookup per value the path reaches, however long
//! the list, so a filter's cost stays linear in the event's size.

use std::collections::HashSet;

use serde_json::Number;

use crate::compile::Scalar;
use crate::matching::{Num, WHOLE_LIMIT, num};

/// A list of values, by kind. Numbers equal by value (`2` is `2.0`), as `$eq` has them: every
/// whole number is kept as an integer, the others as floats.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct ValueSet {
    strings: HashSet<String>,
    integers: HashSet<i128>,
    /// Sorted (JSON has no NaN).
    fractions: Vec<f64>,
    /// Whether `false`, `true` are in it.
    booleans: [bool; 2],
    null: bool,
}

impl ValueSet {
    pub(crate) fn new(values: Vec<Scalar>) -> ValueSet {
        let mut set = ValueSet::default();
        for value in values {
            match value {
                Scalar::Str(s) => {
                    set.strings.insert(s);
                }
                Scalar::Num(n) => match number_key(&n) {
                    Some(Key::Integer(i)) => {
                        set.integers.insert(i);
                    }
                    Some(Key::Fraction(f)) => set.fractions.push(f),
                    None => {}
                },
                Scalar::Bool(b) => set.booleans[usize::from(b)] = true,
                Scalar::Null => set.null = true,
            }
        }
        set.fractions.sort_by(f64::total_cmp);
        set.fractions.dedup();
        set
    }

    pub(crate) fn has_str(&self, s: &str) -> bool {
        self.strings.contains(s)
    }

    pub(crate) fn has_number(&self, n: &Number) -> bool {
        match number_key(n) {
            Some(Key::Integer(i)) => self.integers.contains(&i),
            Some(Key::Fraction(f)) => self
                .fractions
                .binary_search_by(|probe| probe.total_cmp(&f))
                .is_ok(),
            None => false,
        }
    }

    pub(crate) fn has_bool(&self, b: bool) -> bool {
        self.booleans[usize::from(b)]
    }

    pub(crate) fn has_null(&self) -> bool {
        self.null
    }
}

enum Key {
    Integer(i128),
    Fraction(f64),
}

/// A number's key: an integer for every whole number below 2^65 in size (whatever its JSON
/// form), else the float (`-0.0` is the integer 0, so it equals `0`).
fn number_key(n: &Number) -> Option<Key> {
    Some(match num(n)? {
        Num::Int(i) => Key::Integer(i),
        Num::Float(f) if f.fract() == 0.0 && f.abs() < WHOLE_LIMIT => Key::Integer(f as i128),
        Num::Float(f) => Key::Fraction(f),
    })
}
