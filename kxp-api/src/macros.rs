//! The two shapes every resource module repeats, written once: an id (a string newtype) and a
//! vocabulary (an enum of snake_case strings that keeps the ones it does not know).

/// An id: a `String` newtype, serialized as the bare string. Construction never fails: the
/// server is the authority on its ids, and a client that refused an id it was given would be
/// the one breaking the contract.
macro_rules! id_type {
    (
        $(#[$meta:meta])*
        $name:ident, example = $example:literal
    ) => {
        $(#[$meta])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// The id as the API writes it.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The id's text, taken out.
            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl core::fmt::Debug for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                core::fmt::Debug::fmt(&self.0, f)
            }
        }

        impl core::fmt::Display for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<String> for $name {
            fn from(id: String) -> $name {
                $name(id)
            }
        }

        impl From<&str> for $name {
            fn from(id: &str) -> $name {
                $name(id.to_owned())
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }

        impl core::str::FromStr for $name {
            type Err = core::convert::Infallible;

            fn from_str(text: &str) -> Result<$name, Self::Err> {
                Ok($name(text.to_owned()))
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl utoipa::PartialSchema for $name {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                let doc = [$(crate::macros::doc_of(stringify!($meta))),*].concat();
                utoipa::openapi::schema::ObjectBuilder::new()
                    .schema_type(utoipa::openapi::schema::Type::String)
                    .description(Some(doc.trim().to_owned()))
                    .examples([serde_json::json!($example)])
                    .into()
            }
        }

        impl utoipa::ToSchema for $name {}
    };
}

/// A vocabulary of snake_case strings as a `#[non_exhaustive]` enum with one more variant,
/// `Unknown(String)`, which keeps any text this version of the crate does not know: a newer
/// server may add values, and an older client must still read the answer. The OpenAPI schema
/// says the same: `anyOf` the known values or any other string.
macro_rules! string_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $text:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
            /// A value this version of the crate does not know, kept as sent: newer servers
            /// may add values, and clients must handle ones they do not know.
            Unknown(String),
        }

        impl $name {
            /// Every value this version knows, in documentation order.
            pub const KNOWN: &'static [$name] = &[$($name::$variant),+];

            /// The value as the API writes it.
            pub fn as_str(&self) -> &str {
                match self {
                    $( $name::$variant => $text, )+
                    $name::Unknown(text) => text,
                }
            }

            /// False for [`Self::Unknown`].
            pub fn is_known(&self) -> bool {
                !matches!(self, $name::Unknown(_))
            }

            /// The value for `text`; [`Self::Unknown`] when this version does not know it.
            pub fn parse(text: &str) -> $name {
                match text {
                    $( $text => $name::$variant, )+
                    other => $name::Unknown(other.to_owned()),
                }
            }
        }

        impl core::fmt::Display for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl From<String> for $name {
            fn from(text: String) -> $name {
                $name::parse(&text)
            }
        }

        impl core::str::FromStr for $name {
            type Err = core::convert::Infallible;

            fn from_str(text: &str) -> Result<$name, Self::Err> {
                Ok($name::parse(text))
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<$name, D::Error> {
                let text = <std::borrow::Cow<'de, str> as serde::Deserialize>::deserialize(deserializer)?;
                Ok($name::parse(&text))
            }
        }

        impl utoipa::PartialSchema for $name {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                use utoipa::openapi::schema::{AnyOfBuilder, ObjectBuilder, Type};
                let doc = [$(crate::macros::doc_of(stringify!($meta))),*].concat();
                let known = ObjectBuilder::new()
                    .schema_type(Type::String)
                    .enum_values(Some([$($text),+]));
                let other = ObjectBuilder::new()
                    .schema_type(Type::String)
                    .description(Some("A value added after this description was written: clients must accept values they do not know."));
                AnyOfBuilder::new()
                    .item(known)
                    .item(other)
                    .description(Some(doc.trim().to_owned()))
                    .into()
            }
        }

        impl utoipa::ToSchema for $name {}
    };
}

/// The text of a `doc = "…"` attribute as `stringify!` renders it (other attributes give
/// nothing), so the hand-written schemas carry the same descriptions as the derived ones.
pub(crate) fn doc_of(meta: &str) -> String {
    let Some(rest) = meta.strip_prefix("doc") else {
        return String::new();
    };
    let rest = rest.trim_start().trim_start_matches('=').trim();
    let line = serde_json::from_str::<String>(rest).unwrap_or_default();
    let line = line.strip_prefix(' ').unwrap_or(&line);
    format!("{line}\n")
}
