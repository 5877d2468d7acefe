//! The MAC of one catch-up feed item: what binds an item's number, event, ordering key and
//! body to the endpoint whose feed served it.
//!
//! An item's signature headers cover its body only, as a delivery's do; the number and the
//! ordering key, which ordered mode orders by, would otherwise rest on TLS alone. The sender
//! MACs each item with the key of the credential that read the page, and the receiver checks
//! every item before using any of its values.

use sha2::{Digest, Sha256};

use crate::hex;
use crate::secret::Secret;

/// What the item MAC is computed under, first in its message: versioned, so that another
/// encoding can come beside it, and distinct from every other message a feed key signs.
pub const FEED_ITEM_MAC_LABEL: &str = "kxp-feed-item-v1";

/// The fields of a feed item its MAC covers, borrowed from wherever the item is.
///
/// The MAC is lowercase hex of HMAC-SHA256, keyed with the **item key**, over the
/// concatenation of six fields, each written as its length in 4 bytes big-endian and then its
/// bytes: [`FEED_ITEM_MAC_LABEL`], the endpoint id, the sequence number as 8 bytes
/// big-endian, the event id, the ordering key (empty when there is none), and the 32 raw
/// bytes of the body's SHA-256. Text is UTF-8. The item key is the [`Secret::feed_key`] of
/// the credential the page was read with: of the endpoint's secret that signed the request,
/// or, for a feed token, of [`Secret::from_feed_token`].
///
/// No ordering key and an empty one encode alike: the sender accepts 1 to 128 characters, so
/// an empty key never exists.
///
/// ```
/// use kxp_verify::{FeedItemFields, Secret};
///
/// let item_key = Secret::new("whsec_test")?.feed_key();
/// let item = FeedItemFields {
///     endpoint_id: "ep_1",
///     sequence: 8,
///     event_id: "6f1c2b0e-9d3a-4e57-8b21-0c4d5e6f7a81",
///     ordering_key: Some("pay_123"),
///     body: br#"{"id":"6f1c2b0e-9d3a-4e57-8b21-0c4d5e6f7a81","type":"payment.succeeded"}"#,
/// };
/// let mac = item.mac_hex(&item_key);
/// assert_eq!(mac, "c94f3ec9b650a7b534e1188b2e05dab7e3e14463e9ffe77fb35cf82f962fd352");
/// assert!(item.verify_mac(&item_key, &mac));
/// // Another number under the same MAC is refused.
/// assert!(!FeedItemFields { sequence: 9, ..item }.verify_mac(&item_key, &mac));
/// # Ok::<(), kxp_verify::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeedItemFields<'a> {
    /// The endpoint whose feed serves the item (the one the receiver asked for).
    pub endpoint_id: &'a str,
    /// The item's number in the endpoint's sequence.
    pub sequence: u64,
    /// The event's id.
    pub event_id: &'a str,
    /// The event's ordering key, if it has one.
    pub ordering_key: Option<&'a str>,
    /// The item's body, byte for byte as served.
    pub body: &'a [u8],
}

impl FeedItemFields<'_> {
    /// The item's MAC under `item_key`, as bytes.
    pub fn mac(&self, item_key: &Secret) -> [u8; 32] {
        let body_hash: [u8; 32] = Sha256::digest(self.body).into();
        let sequence = self.sequence.to_be_bytes();
        let ordering_key = self.ordering_key.unwrap_or("").as_bytes();
        item_key.mac_of([
            &length(FEED_ITEM_MAC_LABEL.as_bytes()),
            FEED_ITEM_MAC_LABEL.as_bytes(),
            &length(self.endpoint_id.as_bytes()),
            self.endpoint_id.as_bytes(),
            &length(&sequence),
            &sequence,
            &length(self.event_id.as_bytes()),
            self.event_id.as_bytes(),
            &length(ordering_key),
            ordering_key,
            &length(&body_hash),
            &body_hash,
        ])
    }

    /// The item's MAC under `item_key`, as the 64 lowercase hex digits the feed's `mac` field
    /// carries.
    #[cfg(feature = "alloc")]
    pub fn mac_hex(&self, item_key: &Secret) -> alloc::string::String {
        hex_string(&self.mac(item_key))
    }

    /// Whether `mac` (64 hex digits, either case, as `v1` signatures are read) is the item's
    /// MAC under `item_key`. Compared in constant time, so how long a refusal takes tells
    /// nothing of the right MAC; anything but 64 hex digits is refused.
    pub fn verify_mac(&self, item_key: &Secret, mac: &str) -> bool {
        verify(&self.mac(item_key), mac)
    }
}

/// What the MAC of a feed page's frame is computed under ([`FeedPageFields`]).
pub const FEED_PAGE_MAC_LABEL: &str = "kxp-feed-page-v1";

/// What the MAC of a feed's 410 `sequence_purged` answer is computed under
/// ([`FeedPageFields`]).
pub const FEED_PURGED_MAC_LABEL: &str = "kxp-feed-purged-v1";

/// The frame of one feed answer, which its items' MACs do not cover: the endpoint, the `after`
/// it answers, and where the feed stands — a page's `latest`, or a 410's `earliest`.
///
/// Without it, anyone on the way could answer with another `latest` (one below the receiver's
/// checkpoint reads as a reset of the sender) or a 410 whose `earliest` moves the checkpoint
/// past events never processed. The MAC is lowercase hex of HMAC-SHA256 under the item key
/// ([`FeedItemFields`]) over four length-prefixed fields, as the item's are: the label
/// ([`FEED_PAGE_MAC_LABEL`] for a page, [`FEED_PURGED_MAC_LABEL`] for a 410), the endpoint id,
/// `after` as 8 bytes big-endian, and `latest` or `earliest` as 8 bytes big-endian. `after`
/// binds the answer to the request, so an answer to another `after` does not pass for this
/// one.
///
/// ```
/// use kxp_verify::{FeedPageFields, Secret};
///
/// let item_key = Secret::new("whsec_test")?.feed_key();
/// let page = FeedPageFields::page("ep_1", 7, 12);
/// let mac = page.mac_hex(&item_key);
/// assert!(page.verify_mac(&item_key, &mac));
/// assert!(!FeedPageFields::page("ep_1", 7, 3).verify_mac(&item_key, &mac));
/// assert!(!FeedPageFields::purged("ep_1", 7, 12).verify_mac(&item_key, &mac));
/// # Ok::<(), kxp_verify::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeedPageFields<'a> {
    label: &'static str,
    /// The endpoint whose feed answered (the one the receiver asked for).
    pub endpoint_id: &'a str,
    /// The `after` of the request answered.
    pub after: u64,
    /// A page's `latest`, or a 410's `earliest`.
    pub bound: u64,
}

impl<'a> FeedPageFields<'a> {
    /// The frame of a page: `latest`, the highest number the endpoint has given.
    pub fn page(endpoint_id: &'a str, after: u64, latest: u64) -> FeedPageFields<'a> {
        FeedPageFields {
            label: FEED_PAGE_MAC_LABEL,
            endpoint_id,
            after,
            bound: latest,
        }
    }

    /// The frame of a 410 `sequence_purged`: `earliest`, the first number the feed holds
    /// after the purged ones.
    pub fn purged(endpoint_id: &'a str, after: u64, earliest: u64) -> FeedPageFields<'a> {
        FeedPageFields {
            label: FEED_PURGED_MAC_LABEL,
            endpoint_id,
            after,
            bound: earliest,
        }
    }

    /// The frame's MAC under `item_key`, as bytes.
    pub fn mac(&self, item_key: &Secret) -> [u8; 32] {
        let (after, bound) = (self.after.to_be_bytes(), self.bound.to_be_bytes());
        item_key.mac_of([
            &length(self.label.as_bytes()),
            self.label.as_bytes(),
            &length(self.endpoint_id.as_bytes()),
            self.endpoint_id.as_bytes(),
            &length(&after),
            &after,
            &length(&bound),
            &bound,
        ])
    }

    /// The frame's MAC under `item_key`, as 64 lowercase hex digits.
    #[cfg(feature = "alloc")]
    pub fn mac_hex(&self, item_key: &Secret) -> alloc::string::String {
        hex_string(&self.mac(item_key))
    }

    /// Whether `mac` (64 hex digits, either case) is the frame's MAC under `item_key`,
    /// compared in constant time.
    pub fn verify_mac(&self, item_key: &Secret, mac: &str) -> bool {
        verify(&self.mac(item_key), mac)
    }
}

/// 32 bytes as 64 lowercase hex digits.
#[cfg(feature = "alloc")]
fn hex_string(mac: &[u8; 32]) -> alloc::string::String {
    // Hex digits are ASCII: each byte is one char.
    hex::encode_32(mac).iter().map(|&b| char::from(b)).collect()
}

/// Whether `mac` is 64 hex digits (either case) spelling `expected`, in constant time.
fn verify(expected: &[u8; 32], mac: &str) -> bool {
    let Ok(digits) = <&[u8; 64]>::try_from(mac.as_bytes()) else {
        return false;
    };
    hex::is_hex_64(digits) && bool::from(hex::matches(expected, digits))
}

/// A field's length prefix: 4 bytes big-endian. Every field the MAC covers is far shorter than
/// 4 GiB (ids and ordering keys are at most a few hundred bytes; the rest have fixed sizes),
/// so the saturation at `u32::MAX` is never reached; it only keeps the encoding total.
fn length(field: &[u8]) -> [u8; 4] {
    u32::try_from(field.len()).unwrap_or(u32::MAX).to_be_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::format;

    const BODY: &[u8] =
        br#"{"id":"6f1c2b0e-9d3a-4e57-8b21-0c4d5e6f7a81","type":"payment.succeeded"}"#;

    fn item() -> FeedItemFields<'static> {
        FeedItemFields {
            endpoint_id: "ep_1",
            sequence: 8,
            event_id: "6f1c2b0e-9d3a-4e57-8b21-0c4d5e6f7a81",
            ordering_key: Some("pay_123"),
            body: BODY,
        }
    }

    fn key() -> Secret {
        Secret::new("whsec_test").unwrap().feed_key()
    }

    fn hex_of(mac: [u8; 32]) -> std::string::String {
        std::string::String::from_utf8(hex::encode_32(&mac).to_vec()).unwrap()
    }

    #[test]
    fn a_frame_is_its_four_length_prefixed_fields_under_its_label() {
        for (frame, label, bound) in [
            (
                FeedPageFields::page("ep_1", 7, 12),
                "kxp-feed-page-v1",
                12u64,
            ),
            (
                FeedPageFields::purged("ep_1", 7, 12),
                "kxp-feed-purged-v1",
                12,
            ),
        ] {
            let mut message = std::vec::Vec::new();
            for field in [
                label.as_bytes(),
                b"ep_1",
                &7u64.to_be_bytes(),
                &bound.to_be_bytes(),
            ] {
                message.extend_from_slice(&u32::try_from(field.len()).unwrap().to_be_bytes());
                message.extend_from_slice(field);
            }
            assert_eq!(frame.mac(&key()), key().mac_of([&message[..]]));
            let mac = frame.mac_hex(&key());
            assert!(frame.verify_mac(&key(), &mac));
            assert!(frame.verify_mac(&key(), &mac.to_uppercase()));
            for other in [
                FeedPageFields {
                    endpoint_id: "ep_2",
                    ..frame
                },
                FeedPageFields { after: 8, ..frame },
                FeedPageFields { bound: 13, ..frame },
            ] {
                assert!(!other.verify_mac(&key(), &mac), "{other:?}");
            }
            let token_key = Secret::from_feed_token("kxpft_test").feed_key();
            assert!(!frame.verify_mac(&token_key, &mac));
        }
        // A page and a 410 of the same numbers are told apart.
        let page = FeedPageFields::page("ep_1", 7, 12).mac_hex(&key());
        assert!(!FeedPageFields::purged("ep_1", 7, 12).verify_mac(&key(), &page));
    }

    #[test]
    fn the_vector_of_the_signature_format() {
        // docs/signature-format.md, computed there with Python's hmac and hashlib.
        assert_eq!(
            hex_of(item().mac(&key())),
            "c94f3ec9b650a7b534e1188b2e05dab7e3e14463e9ffe77fb35cf82f962fd352"
        );
        let token_key = Secret::from_feed_token("kxpft_test").feed_key();
        assert_eq!(
            hex_of(item().mac(&token_key)),
            "b26d919b51617c56aa174469a803a0c9e0964f5f240eb0edae05a5fecbdc68f7"
        );
    }

    #[test]
    fn the_message_is_the_length_prefixed_fields() {
        let mut message = std::vec::Vec::new();
        let body_hash = Sha256::digest(BODY);
        for field in [
            &b"kxp-feed-item-v1"[..],
            b"ep_1",
            &8u64.to_be_bytes(),
            b"6f1c2b0e-9d3a-4e57-8b21-0c4d5e6f7a81",
            b"pay_123",
            &body_hash,
        ] {
            message.extend_from_slice(&u32::try_from(field.len()).unwrap().to_be_bytes());
            message.extend_from_slice(field);
        }
        assert_eq!(item().mac(&key()), key().mac_of([&message[..]]));
    }

    #[test]
    fn every_field_changes_the_mac() {
        let mac = item().mac_hex(&key());
        assert!(item().verify_mac(&key(), &mac));
        let changed = [
            FeedItemFields {
                endpoint_id: "ep_2",
                ..item()
            },
            FeedItemFields {
                sequence: 9,
                ..item()
            },
            FeedItemFields {
                sequence: 8 << 32,
                ..item()
            },
            FeedItemFields {
                event_id: "6f1c2b0e-9d3a-4e57-8b21-0c4d5e6f7a82",
                ..item()
            },
            FeedItemFields {
                ordering_key: Some("pay_124"),
                ..item()
            },
            FeedItemFields {
                ordering_key: None,
                ..item()
            },
            FeedItemFields {
                body: b"{}",
                ..item()
            },
            // A byte moved from one field to the next: the lengths tell them apart.
            FeedItemFields {
                endpoint_id: "ep_16",
                event_id: "f1c2b0e-9d3a-4e57-8b21-0c4d5e6f7a81",
                ..item()
            },
        ];
        for other in changed {
            assert!(!other.verify_mac(&key(), &mac), "{other:?}");
        }
    }

    #[test]
    fn no_ordering_key_and_an_empty_one_are_the_same() {
        let none = FeedItemFields {
            ordering_key: None,
            ..item()
        };
        let empty = FeedItemFields {
            ordering_key: Some(""),
            ..item()
        };
        assert_eq!(none.mac(&key()), empty.mac(&key()));
    }

    #[test]
    fn only_the_item_key_verifies() {
        let mac = item().mac_hex(&key());
        let secret = Secret::new("whsec_test").unwrap();
        for wrong in [
            // The webhook key itself, not its feed key.
            secret,
            Secret::new("whsec_other").unwrap().feed_key(),
            Secret::from_feed_token("kxpft_test").feed_key(),
        ] {
            assert!(!item().verify_mac(&wrong, &mac));
        }
    }

    #[test]
    fn a_mac_is_read_in_either_case_and_nothing_else_passes() {
        let mac = item().mac_hex(&key());
        assert!(item().verify_mac(&key(), &mac.to_ascii_uppercase()));
        let short = mac.get(..63).unwrap();
        for bad in [
            "",
            short,
            &format!("{mac}0"),
            &format!("{short}g"),
            &format!(" {short}"),
        ] {
            assert!(!item().verify_mac(&key(), bad), "{bad:?}");
        }
    }
}
