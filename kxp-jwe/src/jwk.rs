//! The keys: a merchant's public JWK, which the sender encrypts to, and the private JWK the
//! merchant's receiver decrypts with. Only the two curves `ECDH-ES+A256KW` is used with here:
//! P-256 (`kty` `EC`) and X25519 (`kty` `OKP`).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use curve25519_dalek::MontgomeryPoint;
use p256::elliptic_curve::sec1::ToEncodedPoint;
use serde_json::{Map, Value, json};
use zeroize::{Zeroize, Zeroizing};

use crate::ALG;
use crate::error::JwkError;

/// The curve of a key, and so of every JWE made to it: the registered key pins it, never a
/// received header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Curve {
    /// NIST P-256 (`{"kty": "EC", "crv": "P-256"}`).
    P256,
    /// X25519 (`{"kty": "OKP", "crv": "X25519"}`, RFC 8037).
    X25519,
}

/// A public point on one of the curves.
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum Point {
    P256(p256::PublicKey),
    X25519([u8; 32]),
}

impl Point {
    pub(crate) fn curve(&self) -> Curve {
        match self {
            Point::P256(_) => Curve::P256,
            Point::X25519(_) => Curve::X25519,
        }
    }

    /// The JWK members of the point: `kty`, `crv`, `x` (and `y`).
    pub(crate) fn members(&self) -> Map<String, Value> {
        let value = match self {
            Point::P256(key) => {
                let point = key.to_encoded_point(false);
                let (Some(x), Some(y)) = (point.x(), point.y()) else {
                    unreachable!("an uncompressed point has both coordinates")
                };
                json!({"kty": "EC", "crv": "P-256", "x": b64(x), "y": b64(y)})
            }
            Point::X25519(u) => json!({"kty": "OKP", "crv": "X25519", "x": b64(u)}),
        };
        match value {
            Value::Object(members) => members,
            _ => unreachable!("json! of an object"),
        }
    }

    /// The point a JWK's members name (its `kty`, `crv`, `x`, `y`), checked: on the curve.
    pub(crate) fn from_members(jwk: &Map<String, Value>) -> Result<Point, JwkError> {
        let text = |name| jwk.get(name).and_then(Value::as_str);
        match (text("kty"), text("crv")) {
            (Some("EC"), Some("P-256")) => {
                let x: [u8; 32] = coordinate(jwk, "x")?;
                let y: [u8; 32] = coordinate(jwk, "y")?;
                let mut sec1 = [4u8; 65];
                sec1[1..33].copy_from_slice(&x);
                sec1[33..].copy_from_slice(&y);
                // Refuses points off the curve and the identity.
                p256::PublicKey::from_sec1_bytes(&sec1)
                    .map(Point::P256)
                    .map_err(|_| JwkError::InvalidKey("x"))
            }
            (Some("OKP"), Some("X25519")) => {
                let u: [u8; 32] = coordinate(jwk, "x")?;
                usable_x25519(&u)
                    .then_some(Point::X25519(u))
                    .ok_or(JwkError::InvalidKey("x"))
            }
            _ => Err(JwkError::UnsupportedKey),
        }
    }
}

/// The canonical u-coordinates of X25519's points of small order, on the curve and on its
/// twist (X25519 takes both): 0, 1, p − 1 and the two of order 8, as libsodium lists them.
/// Non-canonical encodings (p and past it) are refused separately. The test below checks that
/// each sends every clamped scalar to zero.
const SMALL_ORDER: [[u8; 32]; 5] = [
    [0; 32],
    {
        let mut one = [0; 32];
        one[0] = 1;
        one
    },
    [
        0xe0, 0xeb, 0x7a, 0x7c, 0x3b, 0x41, 0xb8, 0xae, 0x16, 0x56, 0xe3, 0xfa, 0xf1, 0x9f, 0xc4,
        0x6a, 0xda, 0x09, 0x8d, 0xeb, 0x9c, 0x32, 0xb1, 0xfd, 0x86, 0x62, 0x05, 0x16, 0x5f, 0x49,
        0xb8, 0x00,
    ],
    [
        0x5f, 0x9c, 0x95, 0xbc, 0xa3, 0x50, 0x8c, 0x24, 0xb1, 0xd0, 0xb1, 0x55, 0x9c, 0x83, 0xef,
        0x5b, 0x04, 0x44, 0x5c, 0xc4, 0x58, 0x1c, 0x8e, 0x86, 0xd8, 0x22, 0x4e, 0xdd, 0xd0, 0x9f,
        0x11, 0x57,
    ],
    {
        let mut minus_one = [0xff; 32];
        minus_one[0] = 0xec;
        minus_one[31] = 0x7f;
        minus_one
    },
];

/// Whether `u` is a canonical X25519 public key of large order: below 2^255 − 19 (the top bit
/// clear, and not one of the 19 values past the prime) and not of small order. A small-order
/// key would make every shared secret zero: a sender could not encrypt to it at all, and a
/// receiver would derive a key anybody knows. A table, not a scalar multiplication: every
/// attempt to an encrypting endpoint reads its key (a multiplication cost as much as the
/// encryption's own agreement).
fn usable_x25519(u: &[u8; 32]) -> bool {
    let past_prime = u[31] == 0x7f && u[1..31].iter().all(|&b| b == 0xff) && u[0] >= 0xed;
    u[31] & 0x80 == 0 && !past_prime && !SMALL_ORDER.contains(u)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_small_order_table_holds_small_order_points_only() {
        for u in SMALL_ORDER {
            for scalar in [[1u8; 32], [0x5a; 32], [0xff; 32]] {
                assert_eq!(
                    MontgomeryPoint(u).mul_clamped(scalar).to_bytes(),
                    [0; 32],
                    "{u:?}"
                );
            }
        }
        // And the keys the crate makes are all of large order.
        for _ in 0..64 {
            let Point::X25519(u) = Scalar::random(Curve::X25519).public() else {
                unreachable!("an X25519 scalar")
            };
            assert!(usable_x25519(&u));
            assert_ne!(MontgomeryPoint(u).mul_clamped([1; 32]).to_bytes(), [0; 32]);
        }
    }
}

pub(crate) fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// The base64url member `name`, exactly `N` bytes long.
fn coordinate<const N: usize>(
    jwk: &Map<String, Value>,
    name: &'static str,
) -> Result<[u8; N], JwkError> {
    let text = jwk
        .get(name)
        .and_then(Value::as_str)
        .ok_or(JwkError::InvalidKey(name))?;
    let mut bytes = URL_SAFE_NO_PAD
        .decode(text)
        .map_err(|_| JwkError::InvalidKey(name))?;
    let fixed = <[u8; N]>::try_from(bytes.as_slice()).map_err(|_| JwkError::InvalidKey(name));
    bytes.zeroize();
    fixed
}

fn object(jwk: &str) -> Result<Map<String, Value>, JwkError> {
    match serde_json::from_str(jwk) {
        Ok(Value::Object(members)) => Ok(members),
        _ => Err(JwkError::InvalidJson),
    }
}

/// `alg`, if given, must be ours, and `use`, if given, `enc`.
fn check_use(jwk: &Map<String, Value>) -> Result<(), JwkError> {
    let alg_ok = jwk.get("alg").is_none_or(|alg| alg == ALG);
    let use_ok = jwk.get("use").is_none_or(|u| u == "enc");
    if alg_ok && use_ok {
        Ok(())
    } else {
        Err(JwkError::UnsupportedAlgorithm)
    }
}

fn kid_of(jwk: &Map<String, Value>) -> Option<String> {
    jwk.get("kid").and_then(Value::as_str).map(str::to_owned)
}

/// A merchant's public key: what the sender encrypts `data` to.
#[derive(Clone, PartialEq, Eq)]
pub struct EncryptionKey {
    pub(crate) point: Point,
    kid: Option<String>,
}

impl EncryptionKey {
    /// Reads a public JWK (RFC 7517): P-256 or X25519, with `alg` `ECDH-ES+A256KW` and `use`
    /// `enc` if it says either. A JWK holding the private part is refused
    /// ([`JwkError::PrivateKey`]), so that it is never stored where only a public key belongs.
    pub fn from_jwk(jwk: &str) -> Result<EncryptionKey, JwkError> {
        let jwk = object(jwk)?;
        if jwk.contains_key("d") {
            return Err(JwkError::PrivateKey);
        }
        check_use(&jwk)?;
        Ok(EncryptionKey {
            point: Point::from_members(&jwk)?,
            kid: kid_of(&jwk),
        })
    }

    /// Its curve.
    pub fn curve(&self) -> Curve {
        self.point.curve()
    }

    /// Its `kid`, copied into each JWE's header when it has one.
    pub fn kid(&self) -> Option<&str> {
        self.kid.as_deref()
    }

    /// The key as a JWK, normalized: `kty`, `crv`, `x` (`y`), `alg`, `use` and `kid` if it has
    /// one. What a sender stores and shows.
    pub fn to_jwk(&self) -> Value {
        let mut members = self.point.members();
        members.insert("alg".into(), ALG.into());
        members.insert("use".into(), "enc".into());
        if let Some(kid) = &self.kid {
            members.insert("kid".into(), kid.clone().into());
        }
        Value::Object(members)
    }
}

impl std::fmt::Debug for EncryptionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EncryptionKey")
            .field("curve", &self.curve())
            .field("kid", &self.kid)
            .finish()
    }
}

/// A private scalar.
#[derive(Clone)]
pub(crate) enum Scalar {
    P256(p256::SecretKey),
    X25519(Zeroizing<[u8; 32]>),
}

impl Scalar {
    /// A new private key on `curve`, from the OS CSPRNG.
    #[expect(
        clippy::expect_used,
        reason = "the operating system's random number generator failing is a platform fault no caller can handle"
    )]
    pub(crate) fn random(curve: Curve) -> Scalar {
        loop {
            let mut bytes = Zeroizing::new([0u8; 32]);
            // With no OS randomness there is nothing sensible left to do but stop.
            getrandom::fill(bytes.as_mut())
                .expect("the operating system's random number generator failed");
            match curve {
                Curve::X25519 => return Scalar::X25519(bytes),
                // Rejection sampling: zero and values at or past the order are refused (a
                // chance of about 2^-32 each draw).
                Curve::P256 => {
                    if let Ok(key) = p256::SecretKey::from_slice(bytes.as_ref()) {
                        return Scalar::P256(key);
                    }
                }
            }
        }
    }

    pub(crate) fn public(&self) -> Point {
        match self {
            Scalar::P256(key) => Point::P256(key.public_key()),
            Scalar::X25519(k) => Point::X25519(MontgomeryPoint::mul_base_clamped(**k).to_bytes()),
        }
    }

    /// The ECDH shared secret `Z` with `point` (the x-coordinate, for P-256); `None` when
    /// `point` is on the other curve or, for X25519, of small order (an all-zero `Z`, which an
    /// attacker could pick to fix the key).
    pub(crate) fn agree(&self, point: &Point) -> Option<Zeroizing<[u8; 32]>> {
        match (self, point) {
            (Scalar::P256(key), Point::P256(public)) => {
                let shared =
                    p256::ecdh::diffie_hellman(key.to_nonzero_scalar(), public.as_affine());
                let mut z = Zeroizing::new([0u8; 32]);
                z.copy_from_slice(shared.raw_secret_bytes());
                Some(z)
            }
            (Scalar::X25519(k), Point::X25519(u)) => {
                let z = Zeroizing::new(MontgomeryPoint(*u).mul_clamped(**k).to_bytes());
                (z.iter().fold(0u8, |acc, b| acc | b) != 0).then_some(z)
            }
            _ => None,
        }
    }
}

/// A merchant's private key: what their receiver decrypts `data_jwe` with. Its `Debug` shows
/// no key.
#[derive(Clone)]
pub struct DecryptionKey {
    pub(crate) scalar: Scalar,
    kid: Option<String>,
}

impl DecryptionKey {
    /// A new key pair on `curve`, from the OS CSPRNG, with `kid` for the public JWK.
    pub fn generate(curve: Curve, kid: Option<&str>) -> DecryptionKey {
        DecryptionKey {
            scalar: Scalar::random(curve),
            kid: kid.map(str::to_owned),
        }
    }

    /// Reads a private JWK: a public one's members and `d`.
    pub fn from_jwk(jwk: &str) -> Result<DecryptionKey, JwkError> {
        let mut jwk = object(jwk)?;
        check_use(&jwk)?;
        if !jwk.contains_key("d") {
            return Err(JwkError::NotPrivate);
        }
        let point = Point::from_members(&jwk)?;
        let d: Zeroizing<[u8; 32]> = Zeroizing::new(coordinate(&jwk, "d")?);
        if let Some(Value::String(mut text)) = jwk.remove("d") {
            text.zeroize();
        }
        let scalar = match point.curve() {
            Curve::P256 => Scalar::P256(
                p256::SecretKey::from_slice(d.as_ref()).map_err(|_| JwkError::InvalidKey("d"))?,
            ),
            Curve::X25519 => Scalar::X25519(d),
        };
        if scalar.public() != point {
            return Err(JwkError::InvalidKey("d"));
        }
        Ok(DecryptionKey {
            scalar,
            kid: kid_of(&jwk),
        })
    }

    /// The public half, to register with the sender.
    pub fn public(&self) -> EncryptionKey {
        EncryptionKey {
            point: self.scalar.public(),
            kid: self.kid.clone(),
        }
    }

    /// The private JWK (the public one and `d`), to keep where the receiver reads its
    /// secrets. Wiped on drop.
    pub fn to_jwk(&self) -> Zeroizing<String> {
        let Value::Object(mut members) = self.public().to_jwk() else {
            unreachable!("a JWK is an object")
        };
        let d = match &self.scalar {
            Scalar::P256(key) => b64(&key.to_bytes()),
            Scalar::X25519(k) => b64(k.as_ref()),
        };
        members.insert("d".into(), d.into());
        Zeroizing::new(Value::Object(members).to_string())
    }

    /// Its curve.
    pub fn curve(&self) -> Curve {
        match self.scalar {
            Scalar::P256(_) => Curve::P256,
            Scalar::X25519(_) => Curve::X25519,
        }
    }
}

impl std::fmt::Debug for DecryptionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecryptionKey")
            .field("curve", &self.curve())
            .field("kid", &self.kid)
            .finish_non_exhaustive()
    }
}
