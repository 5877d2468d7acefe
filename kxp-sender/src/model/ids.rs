//! Typed ids: an endpoint id cannot be passed where a delivery id is wanted.
//!
//! Each is a `String` on the wire and in the database (serde-transparent, stored as TEXT), with
//! a type prefix and a UUIDv7 (`ep_…`, `dlv_…`), so ids sort by creation time and serve as
//! cursors. Event ids are UUIDv4s: they are the receivers' dedup key, in every envelope.

use std::fmt;

/// Defines one id newtype over `String`.
macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
        #[derive(serde::Serialize, serde::Deserialize, sqlx::Type)]
        #[serde(transparent)]
        #[sqlx(transparent)]
        pub struct $name(String);

        impl $name {
            /// The id as stored and shown.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The id as an owned `String`.
            pub fn into_string(self) -> String {
                self.0
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

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        // Read as `&str` wherever a query binds it or a log line prints it.
        impl std::ops::Deref for $name {
            type Target = str;

            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
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
    };
}

id_type!(
    /// An account's id, `acc_…`: the unit of isolation.
    AccountId
);
id_type!(
    /// An endpoint's id, `ep_…`.
    EndpointId
);
id_type!(
    /// An event's id: a UUIDv4, the receivers' dedup key.
    EventId
);
id_type!(
    /// A delivery's id, `dlv_…`.
    DeliveryId
);
id_type!(
    /// A notification's id, `ntf_…`.
    NotificationId
);
id_type!(
    /// A registered schema's id, `sch_…`.
    SchemaId
);

/// An id with a type prefix and a UUIDv7, so ids sort by creation time and serve as cursors.
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::now_v7().simple())
}

/// 32 bytes from the OS CSPRNG, as 64 hex characters: endpoint secrets and API keys.
pub fn random_hex_32() -> String {
    let mut bytes = [0u8; 32];
    // The OS generator failing is an unrecoverable platform fault; nothing sensible is left
    // to do but stop, rather than hand out a predictable secret.
    getrandom::fill(&mut bytes).expect("the operating system's random number generator failed");
    hex::encode(bytes)
}

/// SHA-256 hex: how API keys are stored, so a database leak does not leak working keys.
pub fn sha256_hex(data: &[u8]) -> String {
    use sha2_std::Digest;
    hex::encode(sha2_std::Sha256::digest(data))
}
