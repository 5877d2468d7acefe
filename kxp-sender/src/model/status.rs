//! The states rows move through, as enums; stored and shown by their `as_str` names, so the
//! database and the JSON hold the same text as before the types existed.

use std::fmt;

use serde::Serialize;

/// A stored status text that names no state of its column.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {column} `{text}`")]
pub struct UnknownStatus {
    column: &'static str,
    text: String,
}

/// Defines `as_str`, `Display` and `TryFrom<String>` for a status enum from its names.
macro_rules! status_names {
    ($name:ident, $column:literal, { $($variant:ident => $text:literal),+ $(,)? }) => {
        impl $name {
            /// The stored (and shown) name.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = UnknownStatus;

            fn from_str(text: &str) -> Result<$name, UnknownStatus> {
                match text {
                    $($text => Ok($name::$variant),)+
                    _ => Err(UnknownStatus { column: $column, text: text.to_owned() }),
                }
            }
        }

        impl TryFrom<String> for $name {
            type Error = UnknownStatus;

            fn try_from(text: String) -> Result<$name, UnknownStatus> {
                text.parse()
            }
        }
    };
}

/// An endpoint's status, `kxp_endpoints.status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EndpointStatus {
    /// Deliveries flow (unless its circuit is open).
    Active,
    /// Paused by the merchant: deliveries are held, events still queue for it.
    Paused,
    /// Disabled by the sender after failing for too long: held like paused.
    Disabled,
    /// Deleted (softly: the row stays for its deliveries' history; the API answers 404).
    Deleted,
}

status_names!(EndpointStatus, "endpoint status", {
    Active => "active",
    Paused => "paused",
    Disabled => "disabled",
    Deleted => "deleted",
});

/// A delivery's status, `kxp_deliveries.status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryStatus {
    /// Waiting for its next try (or held).
    Pending,
    /// Leased by a worker, being tried.
    Delivering,
    /// A 2xx came back.
    Delivered,
    /// Every try failed, or its endpoint was deleted: the dead-letter queue.
    Dead,
    /// A pull endpoint's, in its feed, not yet committed past by its reader; never tried.
    Unread,
    /// Its event was erased by tag before it was delivered: finished, never tried again.
    Erased,
    /// Its event's payload passed its retention before it was delivered: finished, never
    /// tried again.
    Expired,
}

status_names!(DeliveryStatus, "delivery status", {
    Pending => "pending",
    Delivering => "delivering",
    Delivered => "delivered",
    Dead => "dead",
    Unread => "unread",
    Erased => "erased",
    Expired => "expired",
});

impl DeliveryStatus {
    /// Every status, in the order the API lists them.
    pub const ALL: [DeliveryStatus; 7] = [
        DeliveryStatus::Pending,
        DeliveryStatus::Delivering,
        DeliveryStatus::Delivered,
        DeliveryStatus::Dead,
        DeliveryStatus::Unread,
        DeliveryStatus::Erased,
        DeliveryStatus::Expired,
    ];
}

/// A circuit's state, as stored in `kxp_endpoints.circuit_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CircuitState {
    /// Deliveries flow.
    Closed,
    /// Deliveries are held until the next probe.
    Open,
    /// One delivery is probing.
    HalfOpen,
}

impl CircuitState {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            CircuitState::Closed => "closed",
            CircuitState::Open => "open",
            CircuitState::HalfOpen => "half_open",
        }
    }

    /// From the stored name (anything unknown reads as closed: deliveries keep flowing).
    pub fn parse(text: &str) -> CircuitState {
        match text {
            "open" => CircuitState::Open,
            "half_open" => CircuitState::HalfOpen,
            _ => CircuitState::Closed,
        }
    }
}

impl fmt::Display for CircuitState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<String> for CircuitState {
    fn from(text: String) -> CircuitState {
        CircuitState::parse(&text)
    }
}

/// What a finished attempt does to its endpoint's circuit or status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// Nothing changes.
    Stay,
    /// `closed` → `open`: hold the deliveries, tell the merchant.
    Open,
    /// `half_open` → `open`: the probe failed; hold again, wait longer. No new notification:
    /// the circuit never closed.
    Reopen,
    /// → `closed`: a success; release the held backlog at the rate limit.
    Close,
    /// → disabled: failing for too long; hold everything, tell the merchant.
    Disable,
}

impl Transition {
    /// A name for logs and metrics: `circuit_opened`, `circuit_reopened`, `circuit_closed`,
    /// `disabled`.
    pub fn as_str(self) -> &'static str {
        match self {
            Transition::Stay => "none",
            Transition::Open => "circuit_opened",
            Transition::Reopen => "circuit_reopened",
            Transition::Close => "circuit_closed",
            Transition::Disable => "disabled",
        }
    }

    /// The notification this change sends, if any.
    pub fn notice(self) -> Option<&'static str> {
        match self {
            Transition::Open => Some("endpoint.circuit_opened"),
            Transition::Disable => Some("endpoint.disabled"),
            _ => None,
        }
    }
}
