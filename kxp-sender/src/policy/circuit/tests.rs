use super::*;

fn p() -> Protection {
    Protection {
        breaker_failures: 3,
        breaker_cooldown: Duration::from_secs(10),
        breaker_cooldown_max: Duration::from_secs(60),
        disable_after: Duration::from_secs(1000),
        rate_limit: 5,
    }
}

fn after(state: CircuitState, success: bool, failures: i64, since: Option<i64>) -> AfterAttempt {
    AfterAttempt {
        state,
        probe: state == CircuitState::HalfOpen,
        active: true,
        success,
        consecutive_failures: failures,
        failing_since: since,
    }
}

#[test]
fn the_breaker_opens_at_the_threshold_and_not_before() {
    let now = 1_000_000;
    let closed = CircuitState::Closed;
    assert_eq!(
        decide(&p(), &after(closed, false, 2, Some(now)), now),
        Transition::Stay
    );
    assert_eq!(
        decide(&p(), &after(closed, false, 3, Some(now)), now),
        Transition::Open
    );
    assert_eq!(
        decide(&p(), &after(closed, true, 0, None), now),
        Transition::Stay
    );
    // Already open: a straggler's failure changes nothing, and sends nothing again.
    let open = CircuitState::Open;
    assert_eq!(
        decide(&p(), &after(open, false, 9, Some(now)), now),
        Transition::Stay
    );
}

#[test]
fn a_probe_closes_or_reopens() {
    let now = 1_000_000;
    let half = CircuitState::HalfOpen;
    assert_eq!(
        decide(&p(), &after(half, true, 0, None), now),
        Transition::Close
    );
    assert_eq!(
        decide(&p(), &after(half, false, 4, Some(now)), now),
        Transition::Reopen
    );
    assert_eq!(Transition::Reopen.notice(), None);
    // A straggler (in flight since before the circuit opened) failing is not the probe.
    let straggler = AfterAttempt {
        probe: false,
        ..after(half, false, 5, Some(now))
    };
    assert_eq!(decide(&p(), &straggler, now), Transition::Stay);
    assert_eq!(Transition::Open.notice(), Some("endpoint.circuit_opened"));
    assert_eq!(Transition::Disable.notice(), Some("endpoint.disabled"));
    // A success of an attempt that was in flight when the circuit opened closes it too.
    let open = CircuitState::Open;
    assert_eq!(
        decide(&p(), &after(open, true, 0, None), now),
        Transition::Close
    );
}

#[test]
fn failing_for_the_whole_period_disables() {
    let now = 10_000_000;
    let since = now - 1_000_000;
    for state in [
        CircuitState::Closed,
        CircuitState::Open,
        CircuitState::HalfOpen,
    ] {
        assert_eq!(
            decide(&p(), &after(state, false, 1, Some(since)), now),
            Transition::Disable
        );
        assert_ne!(
            decide(&p(), &after(state, false, 1, Some(since + 1)), now),
            Transition::Disable
        );
        // A success in between starts the period again: no `failing_since`.
        assert_ne!(
            decide(&p(), &after(state, true, 0, None), now),
            Transition::Disable
        );
    }
    let mut paused = after(CircuitState::Closed, false, 99, Some(since));
    paused.active = false;
    assert_eq!(decide(&p(), &paused, now), Transition::Stay);
}

#[test]
fn follow_ups() {
    use CircuitState::*;
    assert_eq!(
        follow_up(&p(), Transition::Close, true, HalfOpen, None),
        FollowUp::ReleaseHeld { spacing_ms: 200 }
    );
    assert_eq!(
        follow_up(&p(), Transition::Open, true, Closed, None),
        FollowUp::HoldEndpoint
    );
    assert_eq!(
        follow_up(&p(), Transition::Stay, false, Closed, None),
        FollowUp::Nothing
    );
    assert_eq!(
        follow_up(&p(), Transition::Open, false, Closed, None),
        FollowUp::HoldDelivery
    );
    assert_eq!(
        follow_up(&p(), Transition::Stay, false, Open, None),
        FollowUp::HoldDelivery
    );
    assert_eq!(next_probe_at(&p(), Transition::Open, 5, 1000), Some(11_000));
    assert_eq!(
        next_probe_at(&p(), Transition::Reopen, 0, 1000),
        Some(21_000)
    );
    assert_eq!(next_probe_at(&p(), Transition::Close, 0, 1000), None);
}

#[test]
fn probes_back_off_to_the_cap() {
    assert_eq!(probe_delay(&p(), 0), Duration::from_secs(10));
    assert_eq!(probe_delay(&p(), 1), Duration::from_secs(20));
    assert_eq!(probe_delay(&p(), 2), Duration::from_secs(40));
    assert_eq!(probe_delay(&p(), 3), Duration::from_secs(60));
    assert_eq!(probe_delay(&p(), 1000), Duration::from_secs(60));
}

#[test]
fn rates_and_spacing() {
    assert_eq!(p().rate_of(None), Some(5));
    assert_eq!(p().rate_of(Some(20)), Some(20));
    let unlimited = Protection {
        rate_limit: 0,
        ..p()
    };
    assert_eq!(unlimited.rate_of(None), None);
    assert_eq!(spacing_ms(Some(5)), 200);
    assert_eq!(spacing_ms(Some(4000)), 0);
    assert_eq!(spacing_ms(None), 0);
}
