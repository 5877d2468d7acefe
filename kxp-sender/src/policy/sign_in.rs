//! Failed console sign-ins per client, in memory: after [`MAX_FAILURES`] failures within
//! [`WINDOW`] from one client, its sign-ins are refused until the oldest of them is a window
//! old. A client is an IPv4 address or an IPv6 /64 (one host is usually given a whole /64, so
//! counting its addresses one by one would count nothing).
//!
//! The table is bounded: at most [`MAX_CLIENTS`] clients are followed. When it is full, clients
//! whose failures are all older than the window are dropped; if every one of them failed within
//! the window, a new client's failure is not recorded (and a warning says so). A flood from
//! more addresses than that could sign in as often as it likes from the ones left out, which it
//! could do from fresh addresses anyway; the other way round, one shared bucket for the
//! overflow, would let such a flood lock every merchant and operator out.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::time::Duration;

use tokio::time::Instant;

/// Failed sign-ins a client may make within [`WINDOW`]; the next attempt is refused.
pub const MAX_FAILURES: usize = 20;

/// How long a failure counts.
pub const WINDOW: Duration = Duration::from_secs(60);

/// The most clients followed at once: with up to [`MAX_FAILURES`] instants each, a few MiB.
pub const MAX_CLIENTS: usize = 10_000;

/// The failures of each client within the window, oldest first.
#[derive(Debug, Default)]
pub struct SignInLimiter {
    failures: HashMap<Client, VecDeque<Instant>>,
    /// When a failure last went unrecorded for want of room and was reported.
    reported_full: Option<Instant>,
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

/// What [`SignInLimiter::failed`] recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// Counted; the client may still try.
    Counted,
    /// Counted, and that was the client's last one: its sign-ins are refused from now on.
    NowLimited,
    /// Not counted: the table is full of clients that failed within the window. `report`:
    /// the first such failure in a window, to be logged (the others are not, so a flood does
    /// not flood the logs too).
    TableFull {
        /// Whether to log it.
        report: bool,
    },
}

impl SignInLimiter {
    /// How long `ip` must wait before it may try to sign in again; `None`: it may now.
    pub fn wait(&mut self, ip: IpAddr, now: Instant) -> Option<Duration> {
        let client = Client::of(ip);
        let failures = self.failures.get_mut(&client)?;
        forget_old(failures, now);
        if failures.is_empty() {
            self.failures.remove(&client);
            return None;
        }
        let oldest = *failures.front()?;
        (failures.len() >= MAX_FAILURES).then(|| (oldest + WINDOW).saturating_duration_since(now))
    }

    /// Records a failed sign-in from `ip` at `now`.
    pub fn failed(&mut self, ip: IpAddr, now: Instant) -> Recorded {
        let client = Client::of(ip);
        if !self.failures.contains_key(&client) && self.failures.len() >= MAX_CLIENTS {
            self.failures.retain(|_, failures| {
                forget_old(failures, now);
                !failures.is_empty()
            });
            if self.failures.len() >= MAX_CLIENTS {
                let report = self
                    .reported_full
                    .is_none_or(|at| now.saturating_duration_since(at) >= WINDOW);
                if report {
                    self.reported_full = Some(now);
                }
                return Recorded::TableFull { report };
            }
        }
        let failures = self.failures.entry(client).or_default();
        forget_old(failures, now);
        failures.push_back(now);
        // A client refused is not let in to fail again, so this stays at most MAX_FAILURES.
        while failures.len() > MAX_FAILURES {
            failures.pop_front();
        }
        match failures.len() >= MAX_FAILURES {
            true => Recorded::NowLimited,
            false => Recorded::Counted,
        }
    }

    /// How many clients are followed.
    #[cfg(test)]
    fn clients(&self) -> usize {
        self.failures.len()
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
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use super::*;

    fn v4(n: u32) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(n))
    }

    #[test]
    fn the_21st_attempt_within_a_minute_waits_until_the_oldest_failure_is_a_minute_old() {
        let mut limiter = SignInLimiter::default();
        let start = Instant::now();
        let ip = v4(0xcb00_7107);
        for n in 0..MAX_FAILURES as u64 {
            assert_eq!(limiter.wait(ip, start), None);
            let expected = match n + 1 == MAX_FAILURES as u64 {
                true => Recorded::NowLimited,
                false => Recorded::Counted,
            };
            assert_eq!(limiter.failed(ip, start + Duration::from_secs(n)), expected);
        }
        let now = start + Duration::from_secs(30);
        assert_eq!(limiter.wait(ip, now), Some(Duration::from_secs(30)));
        assert_eq!(limiter.wait(v4(0xcb00_7108), now), None, "another address");
        // The oldest failure ages out, and one more attempt is let through.
        let later = start + WINDOW;
        assert_eq!(limiter.wait(ip, later), None);
        assert_eq!(limiter.failed(ip, later), Recorded::NowLimited);
        assert_eq!(limiter.wait(ip, later), Some(Duration::from_secs(1)));
        // A minute after the last failure, nothing is left of the client.
        assert_eq!(limiter.wait(ip, later + WINDOW), None);
        assert_eq!(limiter.clients(), 0);
    }

    #[test]
    fn an_ipv6_host_counts_as_its_slash_64_and_a_mapped_ipv4_as_itself() {
        let mut limiter = SignInLimiter::default();
        let now = Instant::now();
        for n in 0..MAX_FAILURES as u16 {
            let ip = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 1, 2, n, n, n, n));
            limiter.failed(ip, now);
        }
        let neighbour = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 1, 2, 0xffff, 0, 0, 1));
        assert!(limiter.wait(neighbour, now).is_some());
        let next_net = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 1, 3, 0, 0, 0, 1));
        assert_eq!(limiter.wait(next_net, now), None);
        let mapped = IpAddr::V6(Ipv4Addr::new(203, 0, 113, 9).to_ipv6_mapped());
        for _ in 0..MAX_FAILURES {
            limiter.failed(mapped, now);
        }
        assert!(
            limiter
                .wait(IpAddr::V4(Ipv4Addr::new(203, 0, 113, 9)), now)
                .is_some()
        );
    }

    #[test]
    fn a_flood_of_distinct_addresses_never_grows_the_table_past_its_bound() {
        let mut limiter = SignInLimiter::default();
        let start = Instant::now();
        for n in 0..MAX_CLIENTS as u32 {
            limiter.failed(v4(n), start);
        }
        assert_eq!(
            limiter.failed(v4(u32::MAX - 1), start),
            Recorded::TableFull { report: true }
        );
        for n in 0..500 {
            limiter.failed(v4(MAX_CLIENTS as u32 + n), start);
        }
        assert_eq!(limiter.clients(), MAX_CLIENTS);
        assert_eq!(
            limiter.failed(v4(u32::MAX), start),
            Recorded::TableFull { report: false },
            "reported once, at the first"
        );
        // Followed clients are still counted meanwhile.
        assert_eq!(limiter.failed(v4(0), start), Recorded::Counted);
        // A window later the old ones make room for new ones.
        let later = start + WINDOW;
        assert_eq!(limiter.failed(v4(u32::MAX), later), Recorded::Counted);
        assert_eq!(limiter.clients(), 1);
    }
}
