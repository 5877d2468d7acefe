use std::net::{Ipv4Addr, Ipv6Addr};

use super::*;

fn v4(n: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(n))
}

fn counted(attempt: Attempt) -> Instant {
    match attempt {
        Attempt::Counted { at } => at,
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_21st_attempt_within_a_minute_waits_until_the_oldest_failure_is_a_minute_old() {
    let mut limiter = SignInLimiter::default();
    let start = crate::model::tokio_instant();
    let ip = v4(0xcb00_7107);
    for n in 0..MAX_FAILURES as u64 {
        counted(limiter.attempt(ip, start + Duration::from_secs(n)));
    }
    let now = start + Duration::from_secs(30);
    let wait = Duration::from_secs(30);
    assert_eq!(
        limiter.attempt(ip, now),
        Attempt::Refused { wait, report: true }
    );
    assert_eq!(
        limiter.attempt(ip, now),
        Attempt::Refused {
            wait,
            report: false
        },
        "reported once"
    );
    counted(limiter.attempt(v4(0xcb00_7108), now));
    // The oldest failure ages out, and one more attempt is let through.
    let later = start + WINDOW;
    counted(limiter.attempt(ip, later));
    assert_eq!(
        limiter.attempt(ip, later),
        Attempt::Refused {
            wait: Duration::from_secs(1),
            report: true
        }
    );
    // A minute after the last failure, nothing is left of the client.
    counted(limiter.attempt(ip, later + WINDOW));
    assert_eq!(limiter.clients(), 2);
}

#[test]
fn forgiven_attempts_do_not_count_and_attempts_at_once_are_held_to_the_limit() {
    let mut limiter = SignInLimiter::default();
    let now = crate::model::tokio_instant();
    let ip = v4(7);
    // Signed in, or refused for their CSRF token: forgiven, however many.
    for _ in 0..3 * MAX_FAILURES {
        let at = counted(limiter.attempt(ip, now));
        limiter.forgive(ip, at);
    }
    assert_eq!(limiter.clients(), 0);
    // Many at once, none finished yet: only MAX_FAILURES are let through.
    let in_flight: Vec<Attempt> = (0..50).map(|_| limiter.attempt(ip, now)).collect();
    let through = in_flight
        .iter()
        .filter(|a| matches!(a, Attempt::Counted { .. }))
        .count();
    assert_eq!(through, MAX_FAILURES);
    // One of them signs in: its place is free again.
    limiter.forgive(ip, now);
    counted(limiter.attempt(ip, now));
}

#[test]
fn an_ipv6_host_counts_as_its_slash_64_and_a_mapped_ipv4_as_itself() {
    let mut limiter = SignInLimiter::default();
    let now = crate::model::tokio_instant();
    for n in 0..MAX_FAILURES as u16 {
        let ip = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 1, 2, n, n, n, n));
        counted(limiter.attempt(ip, now));
    }
    let neighbour = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 1, 2, 0xffff, 0, 0, 1));
    assert!(matches!(
        limiter.attempt(neighbour, now),
        Attempt::Refused { .. }
    ));
    let next_net = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 1, 3, 0, 0, 0, 1));
    counted(limiter.attempt(next_net, now));
    let mapped = IpAddr::V6(Ipv4Addr::new(203, 0, 113, 9).to_ipv6_mapped());
    for _ in 0..MAX_FAILURES {
        counted(limiter.attempt(mapped, now));
    }
    let plain = IpAddr::V4(Ipv4Addr::new(203, 0, 113, 9));
    assert!(matches!(
        limiter.attempt(plain, now),
        Attempt::Refused { .. }
    ));
}

#[test]
fn a_flood_of_distinct_addresses_never_grows_the_table_past_its_bound() {
    let mut limiter = SignInLimiter::default();
    let start = crate::model::tokio_instant();
    for n in 0..MAX_CLIENTS as u32 {
        counted(limiter.attempt(v4(n), start));
    }
    assert_eq!(
        limiter.attempt(v4(u32::MAX - 1), start),
        Attempt::Untracked { report: true }
    );
    for n in 0..500 {
        limiter.attempt(v4(MAX_CLIENTS as u32 + n), start);
    }
    assert_eq!(limiter.clients(), MAX_CLIENTS);
    assert_eq!(
        limiter.attempt(v4(u32::MAX), start),
        Attempt::Untracked { report: false },
        "reported once a window"
    );
    // Followed clients are still counted meanwhile.
    counted(limiter.attempt(v4(0), start));
    // A window later the old ones make room for new ones.
    counted(limiter.attempt(v4(u32::MAX), start + WINDOW));
    assert_eq!(limiter.clients(), 1);
}
