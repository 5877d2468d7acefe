//! Secrets the API shows once: an endpoint's signing secret, a rotated one, the ops secret.

use core::fmt;

use serde::{Deserialize, Serialize};

/// A signing secret, shown only in the answer that creates it: `Debug` prints `[redacted]`
/// and there is no `Display`, so a secret reaches a log only through [`Secret::expose`].
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// The secret's text (the HMAC key's own bytes), to hand to the receiver.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl From<String> for Secret {
    fn from(secret: String) -> Secret {
        Secret(secret)
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl utoipa::PartialSchema for Secret {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::schema::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .description(Some(
                "A signing secret: 64 hex digits, used as the HMAC-SHA256 key as it is (its own \
                 bytes, not hex-decoded). Shown only in the answer that creates it.",
            ))
            .examples([serde_json::json!(
                "4f0c1d9e2b7a3c5d6e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9012a3b4c5d6"
            )])
            .into()
    }
}

impl utoipa::ToSchema for Secret {}
