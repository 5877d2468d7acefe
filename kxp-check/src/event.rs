//! The test events: the envelope of ARCHITECTURE.md with a fresh UUIDv4, the chosen (test)
//! type, and `data` naming the check that sent it, so that a merchant's logs say why it came.
//!
//! The bytes are chosen so that no JSON library writes them back the same: a space after each
//! `:` and `,` (which compact writers drop) and a non-ASCII character (which Python, PHP and
//! others escape). A receiver that parses and re-serializes before verifying fails at once,
//! instead of on the first real event whose bytes happen to differ.

use std::io;

use serde::Serialize;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::Check;

/// The schema version the events' `data` follows.
const API_VERSION: &str = "2026-11-01";

/// `data.note`, with its non-ASCII dash.
const NOTE: &str = "a test event from kxp check — not a real payment";

/// One event, serialized once: every send of it carries exactly these bytes.
#[derive(Debug, Clone)]
pub(crate) struct TestEvent {
    pub(crate) id: String,
    pub(crate) body: Vec<u8>,
}

#[derive(Serialize)]
struct Envelope<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    event_type: &'a str,
    api_version: &'a str,
    created_at: &'a str,
    data: Data<'a>,
}

#[derive(Serialize)]
struct Data<'a> {
    kxp_check: &'a str,
    note: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    padding: Option<&'a str>,
}

/// JSON with a space after each `:` and `,`, on one line: `{"id": "…", "type": "…"}`.
struct Spaced;

impl serde_json::ser::Formatter for Spaced {
    fn begin_object_key<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> io::Result<()> {
        if first { Ok(()) } else { w.write_all(b", ") }
    }

    fn begin_object_value<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        w.write_all(b": ")
    }
}

impl TestEvent {
    /// A new event of `event_type`, sent by `check`.
    pub(crate) fn new(event_type: &str, check: Check) -> TestEvent {
        TestEvent::padded(event_type, check, 0)
    }

    /// A new event of `size` bytes, `data.padding` making up the difference (or of its own size,
    /// a few hundred bytes, when that is within a few bytes of `size` or over it).
    pub(crate) fn padded(event_type: &str, check: Check, size: usize) -> TestEvent {
        let id = uuid::Uuid::new_v4().to_string();
        let now = OffsetDateTime::now_utc();
        // Whole seconds, as in the documented envelope: `2026-11-30T01:02:03Z`.
        let now = now.replace_nanosecond(0).unwrap_or(now);
        let created_at = now.format(&Rfc3339).unwrap_or_default();
        let serialize = |padding: Option<&str>| {
            let envelope = Envelope {
                id: &id,
                event_type,
                api_version: API_VERSION,
                created_at: &created_at,
                data: Data {
                    kxp_check: check.name(),
                    note: NOTE,
                    padding,
                },
            };
            let mut body = Vec::new();
            let mut writer = serde_json::Serializer::with_formatter(&mut body, Spaced);
            // Plain strings into a Vec: nothing here can fail.
            let _ = envelope.serialize(&mut writer);
            body
        };
        let mut body = serialize(None);
        if body.len() < size {
            let around = serialize(Some("")).len();
            body = serialize(Some(&"x".repeat(size.saturating_sub(around))));
        }
        TestEvent { id, body }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_follow_the_envelope_and_are_marked_as_tests() {
        let event = TestEvent::new("kxp.test.payment.succeeded", Check::ValidEvent);
        let value: serde_json::Value = serde_json::from_slice(&event.body).unwrap();
        assert_eq!(value["id"], event.id.as_str());
        assert_eq!(value["type"], "kxp.test.payment.succeeded");
        assert_eq!(value["api_version"], API_VERSION);
        assert_eq!(
            value["data"],
            serde_json::json!({"kxp_check": "valid_event", "note": NOTE})
        );
        // No JSON library writes these bytes back as they are.
        let text = String::from_utf8(event.body.clone()).unwrap();
        assert!(
            text.starts_with(&format!(r#"{{"id": "{}", "type": "#, event.id)),
            "{text}"
        );
        assert_ne!(serde_json::to_vec(&value).unwrap(), event.body);
        assert!(text.contains('—'));
        let created_at = value["created_at"].as_str().unwrap();
        assert!(
            OffsetDateTime::parse(created_at, &Rfc3339).is_ok(),
            "{created_at}"
        );
        assert!(
            created_at.ends_with('Z') && !created_at.contains('.'),
            "{created_at}"
        );
        assert_ne!(event.id, TestEvent::new("t", Check::ValidEvent).id);
    }

    #[test]
    fn padded_events_are_exactly_the_size_asked_for() {
        for size in [1025, 4097, 1024 * 1024 + 1] {
            let event = TestEvent::padded("kxp.test.x", Check::BodyOverLimit, size);
            assert_eq!(event.body.len(), size);
            assert!(serde_json::from_slice::<serde_json::Value>(&event.body).is_ok());
        }
        // Smaller than the event itself: the event, unpadded.
        let small = TestEvent::padded("kxp.test.x", Check::BodyOverLimit, 10);
        assert!(!String::from_utf8(small.body).unwrap().contains("padding"));
    }
}
