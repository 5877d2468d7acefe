//! The kxp event envelope with its `data` encrypted: `id`, `type`, `api_version` and
//! `created_at` stay in the clear (routing, dedup and the console still work), and `data_jwe`,
//! the JWE of `data`'s exact bytes, takes the place of `data`.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use zeroize::Zeroizing;

use crate::error::JweError;
use crate::jwk::{DecryptionKey, EncryptionKey};

/// An envelope that cannot be sealed or opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EnvelopeError {
    /// `not_an_envelope`: not a JSON object with string `id`, `type`, `api_version`,
    /// `created_at` and a `data` (to seal) or a string `data_jwe` (to open).
    #[error("the body is not a kxp event envelope with {0}")]
    NotAnEnvelope(&'static str),
    /// `not_encrypted`: an envelope with `data` in the clear where `data_jwe` was expected: a
    /// receiver that decrypts takes no event as if it had been encrypted.
    #[error("the event is not encrypted (it has no data_jwe)")]
    NotEncrypted,
    /// The JWE did not decrypt ([`JweError`]).
    #[error(transparent)]
    Jwe(#[from] JweError),
}

impl EnvelopeError {
    /// The stable snake_case name.
    pub fn code(&self) -> &'static str {
        match self {
            EnvelopeError::NotAnEnvelope(_) => "not_an_envelope",
            EnvelopeError::NotEncrypted => "not_encrypted",
            EnvelopeError::Jwe(e) => e.code(),
        }
    }
}

/// What a sender seals: exactly the five fields, so that no field it does not know of could be
/// dropped from encrypted deliveries only.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Plain<'a> {
    #[serde(borrow)]
    id: &'a RawValue,
    #[serde(rename = "type", borrow)]
    event_type: &'a RawValue,
    #[serde(borrow)]
    api_version: &'a RawValue,
    #[serde(borrow)]
    created_at: &'a RawValue,
    #[serde(borrow)]
    data: &'a RawValue,
}

#[derive(Serialize)]
struct Sealed<'a> {
    #[serde(borrow)]
    id: &'a RawValue,
    #[serde(rename = "type", borrow)]
    event_type: &'a RawValue,
    #[serde(borrow)]
    api_version: &'a RawValue,
    #[serde(borrow)]
    created_at: &'a RawValue,
    data_jwe: std::borrow::Cow<'a, str>,
}

/// What a receiver reads: [`Sealed`], with `data_jwe` possibly missing.
#[derive(Deserialize)]
struct Received<'a> {
    #[serde(borrow)]
    id: &'a RawValue,
    #[serde(rename = "type", borrow)]
    event_type: &'a RawValue,
    #[serde(borrow)]
    api_version: &'a RawValue,
    #[serde(borrow)]
    created_at: &'a RawValue,
    #[serde(borrow)]
    data_jwe: Option<std::borrow::Cow<'a, str>>,
}

#[derive(Serialize)]
struct Opened<'a> {
    id: &'a RawValue,
    #[serde(rename = "type")]
    event_type: &'a RawValue,
    api_version: &'a RawValue,
    created_at: &'a RawValue,
    data: &'a RawValue,
}

/// The envelope `payload` with its `data` encrypted to `key`: what a sender delivers to an
/// endpoint that registered an encryption key. The other fields keep their bytes.
#[expect(
    clippy::expect_used,
    reason = "raw JSON values and strings always serialize"
)]
pub fn seal_envelope(key: &EncryptionKey, payload: &str) -> Result<String, EnvelopeError> {
    let plain: Plain<'_> = serde_json::from_str(payload)
        .map_err(|_| EnvelopeError::NotAnEnvelope("id, type, api_version, created_at and data"))?;
    let sealed = Sealed {
        id: plain.id,
        event_type: plain.event_type,
        api_version: plain.api_version,
        created_at: plain.created_at,
        data_jwe: key.encrypt(plain.data.get().as_bytes())?.into(),
    };
    Ok(serde_json::to_string(&sealed).expect("raw values and a string serialize"))
}

/// The envelope `body` with `data_jwe` decrypted back into `data`, byte for byte as the
/// producer sent it: what a receiver hands its handler once the signature verified. An
/// envelope without `data_jwe` is refused: a receiver that expects encryption must not take a
/// plaintext event as if it had been encrypted.
#[expect(clippy::expect_used, reason = "raw JSON values always serialize")]
pub fn open_envelope(
    key: &DecryptionKey,
    body: &[u8],
) -> Result<Zeroizing<Vec<u8>>, EnvelopeError> {
    let sealed: Received<'_> = serde_json::from_slice(body).map_err(|_| {
        EnvelopeError::NotAnEnvelope("id, type, api_version, created_at and data_jwe")
    })?;
    let data = key.decrypt(
        sealed
            .data_jwe
            .as_deref()
            .ok_or(EnvelopeError::NotEncrypted)?,
    )?;
    let data = std::str::from_utf8(&data)
        .map_err(|_| EnvelopeError::NotAnEnvelope("data_jwe holding JSON"))?;
    let data: &RawValue = serde_json::from_str(data)
        .map_err(|_| EnvelopeError::NotAnEnvelope("data_jwe holding JSON"))?;
    let opened = Opened {
        id: sealed.id,
        event_type: sealed.event_type,
        api_version: sealed.api_version,
        created_at: sealed.created_at,
        data,
    };
    // Room for it all at once: a growing buffer would leave copies of the plaintext behind in
    // the memory it gives back.
    let mut out = Zeroizing::new(Vec::with_capacity(body.len() + data.get().len()));
    serde_json::to_writer(&mut *out, &opened).expect("raw values serialize");
    Ok(out)
}
