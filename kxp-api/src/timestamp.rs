//! Times on the wire: RFC 3339 strings, UTC, whole seconds (`2026-11-30T01:02:03Z`).

use core::fmt;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// An RFC 3339 time as the API writes it. The text is kept as received, so a time read from
/// one answer goes back into a query (`since`, `until`) byte for byte; [`Timestamp::unix_ms`]
/// reads it as a number.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Timestamp(String);

/// The text given to [`Timestamp`]'s `FromStr` is not an RFC 3339 time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimestampError(String);

impl fmt::Display for TimestampError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` is not an RFC 3339 time such as 2026-11-30T01:02:03Z",
            self.0
        )
    }
}

impl std::error::Error for TimestampError {}

impl Timestamp {
    /// Unix milliseconds as the server writes them: UTC, truncated to whole seconds (the
    /// envelope's `created_at` form). Times outside the years 0000–9999, which no clock
    /// produces, are clamped to that range rather than written as text RFC 3339 cannot carry.
    pub fn from_unix_ms(ms: i64) -> Timestamp {
        // 0000-01-01T00:00:00Z and 9999-12-31T23:59:59Z.
        const FIRST: i64 = -62_167_219_200;
        const LAST: i64 = 253_402_300_799;
        let seconds = ms.div_euclid(1000).clamp(FIRST, LAST);
        let text = OffsetDateTime::from_unix_timestamp(seconds)
            .ok()
            .and_then(|t| t.format(&Rfc3339).ok())
            .unwrap_or_else(|| "1970-01-01T00:00:00Z".to_owned());
        Timestamp(text)
    }

    /// The time as Unix milliseconds; `None` when the text is not RFC 3339.
    pub fn unix_ms(&self) -> Option<i64> {
        let t = OffsetDateTime::parse(&self.0, &Rfc3339).ok()?;
        i64::try_from(t.unix_timestamp_nanos() / 1_000_000).ok()
    }

    /// The text as the API writes it.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Checks the text, so a bad `--since` fails before a request is sent.
impl core::str::FromStr for Timestamp {
    type Err = TimestampError;

    fn from_str(text: &str) -> Result<Timestamp, TimestampError> {
        match OffsetDateTime::parse(text, &Rfc3339) {
            Ok(_) => Ok(Timestamp(text.to_owned())),
            Err(_) => Err(TimestampError(text.to_owned())),
        }
    }
}

impl AsRef<str> for Timestamp {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl utoipa::PartialSchema for Timestamp {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, SchemaFormat, Type};
        ObjectBuilder::new()
            .schema_type(Type::String)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::DateTime)))
            .description(Some("An RFC 3339 time, UTC, whole seconds."))
            .examples([serde_json::json!("2026-11-30T01:02:03Z")])
            .into()
    }
}

impl utoipa::ToSchema for Timestamp {}
