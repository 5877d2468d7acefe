//! JWE compact serialization (RFC 7516) with `ECDH-ES+A256KW` (RFC 7518 §4.6: an ephemeral
//! ECDH agreement, the Concat KDF, AES-256 key wrap of a random content key) and `A256GCM`.
//! Decryption checks the header before any key is used, in a fixed order: the five parts, the
//! forbidden parameters, `alg`, `enc`, `epk`; then the key unwrap and the GCM tag.

use aes_gcm::aead::AeadInPlace;
use aes_gcm::{Aes256Gcm, KeyInit, Nonce, Tag};
use aes_kw::KekAes256;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

use crate::error::JweError;
use crate::jwk::{DecryptionKey, EncryptionKey, Point, Scalar, b64};
use crate::{ALG, ENC};

/// Header parameters refused rather than ignored: compression (its lengths leak the
/// plaintext), keys or certificates named by the message itself (the receiver's key is the
/// only one that may decrypt), and extensions that would have to be understood (`crit`).
const FORBIDDEN: [&str; 5] = ["zip", "jku", "jwk", "x5u", "crit"];

impl EncryptionKey {
    /// Encrypts `plaintext` to this key: a JWE in compact serialization, its protected header
    /// `{"alg": "ECDH-ES+A256KW", "enc": "A256GCM", "epk": {…}}` and the key's `kid`.
    ///
    /// Keys are checked when read ([`EncryptionKey::from_jwk`] refuses small-order X25519
    /// keys), so this does not fail with a key this crate read; it still answers an error
    /// rather than panicking should the agreement ever give no secret.
    #[expect(
        clippy::expect_used,
        reason = "the key sizes are fixed by the types, and a webhook body is far under A256GCM's 64 GiB"
    )]
    pub fn encrypt(&self, plaintext: &[u8]) -> Result<String, JweError> {
        let ephemeral = Scalar::random(self.curve());
        let mut header = Map::new();
        header.insert("alg".into(), ALG.into());
        header.insert("enc".into(), ENC.into());
        header.insert("epk".into(), Value::Object(ephemeral.public().members()));
        if let Some(kid) = self.kid() {
            header.insert("kid".into(), kid.into());
        }
        let header = b64(Value::Object(header).to_string().as_bytes());
        let z = ephemeral
            .agree(&self.point)
            .ok_or(JweError::InvalidEphemeralKey)?;
        let kek = concat_kdf(&z, b"", b"");
        let cek = Zeroizing::new(random::<32>());
        let mut wrapped = [0u8; 40];
        KekAes256::try_from(kek.as_slice())
            .expect("a 32-byte key")
            .wrap(cek.as_ref(), &mut wrapped)
            .expect("40 bytes hold a wrapped 32-byte key");
        let iv = random::<12>();
        let mut ciphertext = plaintext.to_vec();
        let tag = Aes256Gcm::new(cek.as_ref().into())
            .encrypt_in_place_detached(Nonce::from_slice(&iv), header.as_bytes(), &mut ciphertext)
            .expect("A256GCM takes any plaintext shorter than 64 GiB");
        Ok([header, b64(&wrapped), b64(&iv), b64(&ciphertext), b64(&tag)].join("."))
    }
}

impl DecryptionKey {
    /// Decrypts a JWE that [`EncryptionKey::encrypt`] (or any JOSE library using
    /// `ECDH-ES+A256KW` and `A256GCM`) made to this key's public half. `apu` and `apv`, when
    /// the header carries them, enter the key derivation as RFC 7518 says.
    pub fn decrypt(&self, compact: &str) -> Result<Zeroizing<Vec<u8>>, JweError> {
        let mut parts = compact.split('.');
        let mut next = |what| parts.next().ok_or(JweError::Malformed(what));
        let (header_text, wrapped, iv, ciphertext, tag) = (
            next("five parts are needed")?,
            next("five parts are needed")?,
            next("five parts are needed")?,
            next("five parts are needed")?,
            next("five parts are needed")?,
        );
        if parts.next().is_some() {
            return Err(JweError::Malformed("more than five parts"));
        }
        let header = match serde_json::from_slice(&decode(header_text, "the header")?) {
            Ok(Value::Object(header)) => header,
            _ => return Err(JweError::Malformed("the header is not a JSON object")),
        };
        if let Some(name) = FORBIDDEN
            .into_iter()
            .find(|name| header.contains_key(*name))
        {
            return Err(JweError::ForbiddenHeader(name));
        }
        if header.get("alg").and_then(Value::as_str) != Some(ALG) {
            return Err(JweError::UnsupportedAlgorithm);
        }
        if header.get("enc").and_then(Value::as_str) != Some(ENC) {
            return Err(JweError::UnsupportedEncryption);
        }
        let epk = match header.get("epk") {
            Some(Value::Object(epk)) => {
                Point::from_members(epk).map_err(|_| JweError::InvalidEphemeralKey)?
            }
            _ => return Err(JweError::InvalidEphemeralKey),
        };
        let z = self
            .scalar
            .agree(&epk)
            .ok_or(JweError::InvalidEphemeralKey)?;
        let party = |name| match header.get(name) {
            None => Ok(Vec::new()),
            Some(Value::String(text)) => decode(text, name),
            Some(_) => Err(JweError::Malformed(name)),
        };
        let kek = concat_kdf(&z, &party("apu")?, &party("apv")?);

        let wrapped: [u8; 40] = decode(wrapped, "the encrypted key")?
            .try_into()
            .map_err(|_| JweError::Malformed("the encrypted key is not 40 bytes"))?;
        let iv: [u8; 12] = decode(iv, "the iv")?
            .try_into()
            .map_err(|_| JweError::Malformed("the iv is not 12 bytes"))?;
        let tag: [u8; 16] = decode(tag, "the tag")?
            .try_into()
            .map_err(|_| JweError::Malformed("the tag is not 16 bytes"))?;
        let mut plaintext = Zeroizing::new(decode(ciphertext, "the ciphertext")?);
        let mut cek = Zeroizing::new([0u8; 32]);
        KekAes256::try_from(kek.as_slice())
            .map_err(|_| JweError::DecryptionFailed)?
            .unwrap(&wrapped, cek.as_mut())
            .map_err(|_| JweError::DecryptionFailed)?;
        Aes256Gcm::new(cek.as_ref().into())
            .decrypt_in_place_detached(
                Nonce::from_slice(&iv),
                header_text.as_bytes(),
                &mut plaintext,
                Tag::from_slice(&tag),
            )
            .map_err(|_| JweError::DecryptionFailed)?;
        Ok(plaintext)
    }
}

/// Base64url without padding, as JOSE writes it; `what` names the part in the error.
fn decode(text: &str, what: &'static str) -> Result<Vec<u8>, JweError> {
    URL_SAFE_NO_PAD
        .decode(text)
        .map_err(|_| JweError::Malformed(what))
}

/// The Concat KDF of NIST SP 800-56A as RFC 7518 §4.6.2 uses it for `ECDH-ES+A256KW`: one
/// SHA-256 round (256 bits are needed) over the counter, `Z` and the OtherInfo (the algorithm,
/// `apu`, `apv`, each length-prefixed, and the key length in bits).
fn concat_kdf(z: &[u8; 32], apu: &[u8], apv: &[u8]) -> Zeroizing<[u8; 32]> {
    let mut hash = Sha256::new();
    hash.update(1u32.to_be_bytes());
    hash.update(z);
    for field in [ALG.as_bytes(), apu, apv] {
        hash.update(u32::try_from(field.len()).unwrap_or(u32::MAX).to_be_bytes());
        hash.update(field);
    }
    hash.update(256u32.to_be_bytes());
    let mut key = Zeroizing::new([0u8; 32]);
    key.copy_from_slice(&hash.finalize());
    key
}

#[expect(
    clippy::expect_used,
    reason = "the operating system's random number generator failing is a platform fault no caller can handle"
)]
fn random<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    // With no OS randomness there is nothing sensible left to do but stop.
    getrandom::fill(&mut bytes).expect("the operating system's random number generator failed");
    bytes
}
