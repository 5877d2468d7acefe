//! Typed ids: an endpoint id cannot be passed where a delivery id is wanted.
//!
//! The ids are the API's own ([`kxp_api`]'s, with its `sqlx` feature): one type per id for the
//! whole workspace, a `String` on the wire and in the database (serde-transparent, stored as
//! TEXT), with a type prefix and a UUIDv7 (`ep_…`, `dlv_…`), so ids sort by creation time and
//! serve as cursors. Event ids are UUIDv4s: they are the receivers' dedup key, in every envelope.

pub use kxp_api::{AccountId, DeliveryId, EndpointId, EventId, OperatorId};
pub(crate) use kxp_api::{ErasureId, NotificationId, SchemaId};

/// An endpoint as the account-keyed schema names it: by its account and its id. Endpoint ids
/// are unique on their own in practice, but the tables are keyed by account first (so that a
/// database can be split by account), and a statement that names an endpoint without its account
/// cannot be routed to the account's part: the store's statements about one endpoint take this.
///
/// Keys sort by endpoint id (then account): the order in which every process, this release's
/// and the one before, locks endpoint rows, so two batches never wait for each other in
/// opposite orders.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct EndpointKey {
    /// The account.
    pub account_id: AccountId,
    /// The endpoint.
    pub id: EndpointId,
}

impl EndpointKey {
    /// The key of the account's endpoint `id`.
    pub(crate) fn new(account_id: &AccountId, id: &EndpointId) -> EndpointKey {
        EndpointKey {
            account_id: account_id.clone(),
            id: id.clone(),
        }
    }
}

impl Ord for EndpointKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (&self.id, &self.account_id).cmp(&(&other.id, &other.account_id))
    }
}

impl PartialOrd for EndpointKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// An id with a type prefix and a UUIDv7, so ids sort by creation time and serve as cursors.
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::now_v7().simple())
}

/// A new delivery's id ([`new_id`] with `dlv`).
pub(crate) fn new_delivery_id() -> DeliveryId {
    DeliveryId::from(new_id("dlv"))
}

/// 32 bytes from the OS CSPRNG, as 64 hex characters: endpoint secrets and API keys.
pub fn random_hex_32() -> String {
    let mut bytes = [0u8; 32];
    fill_random(&mut bytes);
    hex::encode(bytes)
}

/// Fills `bytes` from the OS CSPRNG: every secret, key, nonce and token the sender makes.
#[expect(
    clippy::expect_used,
    reason = "the OS generator failing is an unrecoverable platform fault: stopping is better \
              than handing out a predictable secret or repeating a nonce"
)]
pub(crate) fn fill_random(bytes: &mut [u8]) {
    getrandom::fill(bytes).expect("the operating system's random number generator failed");
}

/// What an API key belongs to, told by its prefix: `kxp_op_…` an operator, any other an
/// account. The prefix lets people (and secret scanners) tell an all-accounts key from a
/// one-account key at a glance, and lets the server look a key's hash up in one table only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyKind {
    /// `kxp_…`: one account's key.
    Account,
    /// `kxp_op_…`: an operator's key.
    Operator,
    /// `kxp_lt_…`: a listen token: its account's temporary pull endpoints only.
    Listen,
}

impl KeyKind {
    /// The prefix of the keys the server makes of this kind.
    const fn prefix(self) -> &'static str {
        match self {
            KeyKind::Account => "kxp_",
            KeyKind::Operator => "kxp_op_",
            KeyKind::Listen => "kxp_lt_",
        }
    }

    /// The kind of `key`, by its prefix.
    pub(crate) fn of(key: &str) -> KeyKind {
        if key.starts_with(KeyKind::Operator.prefix()) {
            KeyKind::Operator
        } else if key.starts_with(KeyKind::Listen.prefix()) {
            KeyKind::Listen
        } else {
            KeyKind::Account
        }
    }

    /// A new key of this kind: the prefix and 32 random bytes in hex.
    pub(crate) fn new_key(self) -> String {
        format!("{}{}", self.prefix(), random_hex_32())
    }
}

/// SHA-256 hex: how API keys are stored, so a database leak does not leak working keys.
pub fn sha256_hex(data: &[u8]) -> String {
    use sha2_std::Digest;
    hex::encode(sha2_std::Sha256::digest(data))
}
