//! Arbitrary body bytes, signed and verified with a fixed secret, then parsed as an `Event`.
//!
//! Signing first is what a real receiver sees: `Verified::parse` is the only way to an `Event`,
//! so the parser's input is always an authentic body, and an attacker who controls one (a
//! merchant's own customer data inside `data`) controls these bytes.

#![no_main]

use std::sync::LazyLock;

use kxp_verify::{EnvelopeError, Secret, Signer, Verifier};
use libfuzzer_sys::fuzz_target;
use serde::de::IgnoredAny;
use serde_json::Value;

const SECRET: &str = "41ab92590637ac82026ca65266b2898428ea491b1e6d543d7202cf486ea62965";
const NOW: u64 = 1_764_464_523;
/// `Verified::parse`'s documented limit: ids are dedup keys and must fit an index.
const MAX_ID_LEN: usize = 255;
/// The shortest run of payload that counts as quoted; shorter ones match common words by chance.
const QUOTE_LEN: usize = 8;

fn secret() -> Secret {
    Secret::new(SECRET).expect("the fixed secret is not empty")
}

static SIGNER: LazyLock<Signer> = LazyLock::new(|| Signer::new(secret()));
static VERIFIER: LazyLock<Verifier> = LazyLock::new(|| Verifier::new(secret()));

/// Every error message the parser can give, produced from bodies that reach each of its
/// branches. A body that happens to spell a word of these messages (`envelope`, `printable`) is
/// not quoted by them, so those words are not counted as leaks.
static OWN_WORDS: LazyLock<Vec<String>> = LazyLock::new(|| {
    let fields = r#""id":"e","type":"t","api_version":"v","created_at":"c","data":{}"#;
    let mut bodies = vec![
        String::new(),
        "not json".to_owned(),
        "[1]".to_owned(),
        r#"{"id":"","type":"t","api_version":"v","created_at":"c","data":{}}"#.to_owned(),
        format!(r#"{{{fields},"id":"e"}}"#),
    ];
    // One body per missing field, so each `missing field` message is included.
    for field in ["id", "type", "api_version", "created_at", "data"] {
        let without: Vec<&str> = fields
            .split(',')
            .filter(|pair| !pair.starts_with(&format!("\"{field}\"")))
            .collect();
        bodies.push(format!("{{{}}}", without.join(",")));
    }
    bodies
        .iter()
        .filter_map(|body| parse(body.as_bytes()).err())
        .map(|error| error.to_string())
        .collect()
});

fn parse(body: &[u8]) -> Result<kxp_verify::Event<Value>, EnvelopeError> {
    let header = SIGNER.sign(NOW, body).to_string();
    match VERIFIER.verify(&header, body, NOW) {
        Ok(verified) => {
            assert_eq!(verified.body(), body);
            verified.parse::<Value>()
        }
        // Signed a moment ago with the one configured secret: nothing may refuse it.
        Err(error) => panic!("refused its own fresh signature: {error}"),
    }
}

fuzz_target!(|body: &[u8]| {
    agrees_with_the_borrowed_envelope(body);
    match parse(body) {
        Ok(event) => {
            let id = event.id();
            // The id becomes a primary key and a log field: it must be bounded and printable,
            // whatever JSON escapes produced it.
            assert!(
                !id.is_empty() && id.len() <= MAX_ID_LEN,
                "id of {} bytes",
                id.len()
            );
            assert!(
                id.bytes().all(|b| b.is_ascii_graphic()),
                "id {id:?} is not printable ASCII"
            );
        }
        Err(error) => assert_not_quoted(&error, body),
    }
});

/// `Verified::envelope` (what the middlewares read) accepts exactly the bodies `parse` accepts,
/// with the same fields, and thin notices; it refuses the others with the same error.
fn agrees_with_the_borrowed_envelope(body: &[u8]) {
    let header = SIGNER.sign(NOW, body).to_string();
    let Ok(verified) = VERIFIER.verify(&header, body, NOW) else {
        panic!("refused its own fresh signature");
    };
    let parsed = verified.parse::<IgnoredAny>();
    match (verified.envelope(), parsed) {
        (Ok(envelope), Ok(event)) => {
            assert_eq!(envelope.id(), event.id());
            assert_eq!(envelope.event_type(), event.event_type());
            assert_eq!(envelope.api_version(), event.api_version());
            assert_eq!(envelope.created_at(), event.created_at());
            assert!(!envelope.is_thin(), "an event with data read as thin");
        }
        // A thin notice's own error, its id, where `parse` stops at the missing `data`.
        (Err(a), Err(b)) if a != b => assert_eq!(
            (a.to_string().as_str(), b.to_string().as_str()),
            (
                "invalid_envelope: `id` must be 1 to 255 bytes of printable ASCII",
                "invalid_envelope: missing field `data`"
            )
        ),
        (Err(_), Err(_)) => {}
        // A thin notice has no `data`: an envelope, never an event.
        (Ok(envelope), Err(_)) if envelope.is_thin() => {}
        (a, b) => panic!("envelope {a:?} but parse {b:?}"),
    }
}

/// Envelope errors end up in logs, and payment bodies carry personal data, so no error may
/// repeat a piece of the body. Only alphanumeric runs of valid UTF-8 are looked for: those are
/// what card numbers, names and tokens look like, and punctuation or one-byte coincidences
/// (`1`, `{`, `line`) would raise false alarms.
fn assert_not_quoted(error: &EnvelopeError, body: &[u8]) {
    if std::str::from_utf8(body).is_err() {
        return;
    }
    let message = error.to_string();
    for run in body.windows(QUOTE_LEN) {
        if !run.iter().all(u8::is_ascii_alphanumeric) {
            continue;
        }
        let run = std::str::from_utf8(run).expect("ASCII alphanumerics are UTF-8");
        if message.contains(run) && !OWN_WORDS.iter().any(|own| own.contains(run)) {
            panic!("error {message:?} quotes {run:?} from the body");
        }
    }
}
