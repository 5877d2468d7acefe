//! `PATCH` bodies: a field left out stays as it is, which is not the same as `null`.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A nullable field of a `PATCH` body: left out, `null` (cleared) or a value. `Option<T>`
/// cannot say all three; this serializes nothing for [`Patch::Unchanged`] (the field carries
/// `#[serde(default, skip_serializing_if = "Patch::is_unchanged")]`), `null` for
/// [`Patch::Clear`] and the value for [`Patch::Set`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Patch<T> {
    /// Left out: the field stays as it is.
    #[default]
    Unchanged,
    /// `null`: the field is cleared.
    Clear,
    /// The new value.
    Set(T),
}

impl<T> Patch<T> {
    /// True for [`Patch::Unchanged`]: the field is left out of the body.
    pub fn is_unchanged(&self) -> bool {
        matches!(self, Patch::Unchanged)
    }

    /// `None` (unchanged), `Some(None)` (cleared) or `Some(Some(value))`: the store's form.
    pub fn into_option(self) -> Option<Option<T>> {
        match self {
            Patch::Unchanged => None,
            Patch::Clear => Some(None),
            Patch::Set(value) => Some(Some(value)),
        }
    }
}

impl<T> From<Option<T>> for Patch<T> {
    /// `Some` sets, `None` clears (there is no "unchanged" in an `Option`).
    fn from(value: Option<T>) -> Patch<T> {
        match value {
            Some(value) => Patch::Set(value),
            None => Patch::Clear,
        }
    }
}

impl<T: Serialize> Serialize for Patch<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            // Only reached without the `skip_serializing_if`: `null` is the safer reading
            // of nothing.
            Patch::Unchanged | Patch::Clear => serializer.serialize_none(),
            Patch::Set(value) => serializer.serialize_some(value),
        }
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Patch<T> {
    /// Called only when the field is present (absence is `#[serde(default)]`): `null` clears.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Patch<T>, D::Error> {
        Option::<T>::deserialize(deserializer).map(Patch::from)
    }
}

/// For a `PATCH` field that may be left out but, when given, is not `null`: use with
/// `#[serde(default, deserialize_with = "…")]`, so `null` is refused rather than read as
/// "unchanged".
pub(crate) fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    deserializer: D,
) -> Result<Option<T>, D::Error> {
    T::deserialize(deserializer).map(Some)
}
