//! Failed console sign-ins per client, in memory: after [`MAX_FAILURES`] failures within
//! [`WINDOW`] from one client, its sign-ins are refused until the oldest of them is a window
//! old. A client is an IPv4 address or an IPv6 /64 (one host is usually given a whole /64, so
//! counting its addresses one by one would count nothing).
//!
//! An attempt counts as failed from the moment it is let through, unless it is then forgiven
//! (it signed in, or it tried no credential): so many attempts sent at once are held to the
//! limit as well, instead of all passing the check before any of them has failed.
//!
//! The table is bounded: at most [`MAX_CLIENTS`] clients are followed. When it is full, clients
//! whose failures are all older than the window are dropped; if every one of them failed within
//! the window, a new client's attempt is let through uncounted (and a warning says so, once a
//! window). A flood from more addresses than that could sign in as often as it likes from the
//! ones left out, which it could do from fresh addresses anyway; the other way round, one
//! shared budget for the overflow, would let such a flood lock every merchant and operator out.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::time::Duration;

use tokio::time::Instant;

/// Failed sign-ins a client may make within [`WINDOW`]; the next attempt is refused.
pub(crate) const MAX_FAILURES: usize = 20;

/// How long a failure counts.
pub(crate) const WINDOW: Duration = Duration::from_secs(60);

/// The most clients followed at once: with up to [`MAX_FAILURES`] instants each, a few MiB.
pub(crate) const MAX_CLIENTS: usize = 10_000;

/// The attempts of each client that count as failed, and when the table was last reported
/// full.
#[derive(Debug, Default)]
pub(crate) struct SignInLimiter {
    clients: HashMap<Client, Failures>,
    /// When an attempt last went uncounted for want of room and was reported.
    reported_full: Option<Instant>,
}

/// One client's failures within the window, oldest first (at most [`MAX_FAILURES`]).
#[derive(Debug, Default)]
struct Failures {
    at: VecDeque<Instant>,
    /// Whether its refusal has been reported since it was last let through.
    reported: bool,
}

/// Whom failures are counted against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Client {
    V4([u8; 4]),
    /// The /64 prefix.
    V6([u8; 8]),
}

impl Client {
    fn of(ip: IpAddr) -> Client {
        match ip.to_canonical() {
            IpAddr::V4(v4) => Client::V4(v4.octets()),
            IpAddr::V6(v6) => {
                let mut prefix = [0u8; 8];
                prefix.copy_from_slice(&v6.octets()[..8]);
                Client::V6(prefix)
            }
        }
    }
}

/// What [`SignInLimiter::attempt`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// Let it through. It counts as failed unless [`SignInLimiter::forgive`] is given `at`.
    Counted {
        /// When it was counted.
        at: Instant,
    },
    /// Let it through, uncounted: the table is full of clients that failed within the window.
    Untracked {
        /// The first such attempt in a window: to be logged (the others are not, so a flood
        /// does not flood the logs too).
        report: bool,
    },
    /// Refuse it: the client has failed [`MAX_FAILURES`] times within the window.
    Refused {
        /// How long until the oldest failure is a window old.
        wait: Duration,
        /// The client's first refusal since it was last let through: to be logged.
        report: bool,
    },
}

impl SignInLimiter {
    /// Decides whether `ip` may try to sign in at `now` and, if it may, counts the attempt as
    /// failed until it is forgiven.
    pub(crate) fn attempt(&mut self, ip: IpAddr, now: Instant) -> Attempt {
        let client = Client::of(ip);
        let tracked = self.clients.len();
        match self.clients.get_mut(&client) {
            Some(failures) => {
                forget_old(&mut failures.at, now);
                let oldest = failures.at.front().copied();
                if let Some(oldest) = oldest.filter(|_| failures.at.len() >= MAX_FAILURES) {
                    let wait = (oldest + WINDOW).saturating_duration_since(now);
                    let report = !failures.reported;
                    failures.reported = true;
                    return Attempt::Refused { wait, report };
                }
            }
            None if tracked >= MAX_CLIENTS => {
                self.clients.retain(|_, failures| {
                    forget_old(&mut failures.at, now);
                    !failures.at.is_empty()
                });
                if self.clients.len() >= MAX_CLIENTS {
                    let report = self
                        .reported_full
                        .is_none_or(|at| now.saturating_duration_since(at) >= WINDOW);
                    if report {
                        self.reported_full = Some(now);
                    }
                    return Attempt::Untracked { report };
                }
            }
            None => {}
        }
        let failures = self.clients.entry(client).or_default();
        failures.reported = false;
        failures.at.push_back(now);
        Attempt::Counted { at: now }
    }

    /// Takes back the attempt of `ip` counted at `at`: it did not fail.
    pub(crate) fn forgive(&mut self, ip: IpAddr, at: Instant) {
        let client = Client::of(ip);
        let Some(failures) = self.clients.get_mut(&client) else {
            return;
        };
        if let Some(index) = failures.at.iter().rposition(|counted| *counted == at) {
            failures.at.remove(index);
        }
        if failures.at.is_empty() {
            self.clients.remove(&client);
        }
    }

    /// How many clients are followed.
    #[cfg(test)]
    fn clients(&self) -> usize {
        self.clients.len()
    }
}

/// Drops the failures that are a window old.
fn forget_old(failures: &mut VecDeque<Instant>, now: Instant) {
    while failures
        .front()
        .is_some_and(|at| now.saturating_duration_since(*at) >= WINDOW)
    {
        failures.pop_front();
    }
}

#[cfg(test)]
mod tests;
