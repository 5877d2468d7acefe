//! The kxp receiver contract, without a web framework.
//!
//! `kxp-axum` and `kxp-actix` are thin: each reads the header and the body its own way, then
//! hands them to a [`Receiver`], and turns a [`Rejection`] into its own response type. Everything
//! that must behave the same in both — which status for which failure, the JSON error body, the
//! endpoint challenge, the one log line per request, the `X-Kxp-Verified-Key` of a 2xx — lives
//! here, once.
//!
//! ```
//! use kxp_receiver::{Receiver, Rejection};
//! use kxp_verify::{Secret, Signer, Verifier};
//!
//! let receiver = Receiver::new(Verifier::from_secret_list("whsec")?).clock(|| 1764464523);
//! let body = br#"{"id":"evt_1","type":"payment.succeeded","api_version":"2026-11-01",
//!                "created_at":"2026-11-30T01:02:03Z","data":{}}"#.to_vec();
//! let header = Signer::from_secret_list("whsec")?.sign(1764464523, &body).to_string();
//!
//! let accepted = receiver.check(header.as_bytes(), body.clone())?;
//! assert_eq!(accepted.event_id(), "evt_1");
//! // The 2xx answer names the secret that verified it.
//! let key = kxp_receiver::verified_key_value(200, accepted.key_fingerprint());
//! assert_eq!(key, Some(kxp_verify::key_fingerprint(b"whsec").to_string()));
//!
//! let rejected = receiver.check(b"t=1,v1=00", body).unwrap_err();
//! assert_eq!((rejected.status(), rejected.json_body()), (401, r#"{"error":"malformed_header"}"#.to_owned()));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod challenge;
mod confirm;
mod format;
mod log;
mod receiver;
mod rejection;
#[cfg(feature = "otel")]
mod trace;

pub use challenge::challenge_token;
pub use confirm::{VERIFIED_KEY_HEADER, verified_key_value};
pub use format::Format;
/// The key of [`Receiver::decrypt_with`], from kxp-jwe.
pub use kxp_jwe::DecryptionKey;
pub use log::{RequestLog, outcome_for_status};
pub use receiver::{Accepted, DEFAULT_BODY_LIMIT, FromEnvError, Receiver};
pub use rejection::Rejection;
#[cfg(feature = "otel")]
pub use trace::handler_span;
