//! The planning step alone: targets, budgets, account rooms and the scan's charge, from plans
//! written by hand.

use super::*;

fn endpoint(id: &str) -> EndpointId {
    EndpointId::from(id)
}

fn account(id: &str) -> AccountId {
    AccountId::from(id)
}

/// A plan with these endpoint caps (default 4), these account caps (others 8), and these
/// ready endpoints.
fn plan(caps: &[(&str, usize)], accounts: &[(&str, usize)], ready: &[(&str, &str, usize)]) -> Plan {
    Plan {
        caps: caps.iter().map(|(id, c)| (endpoint(id), *c)).collect(),
        default_cap: 4,
        accounts: AccountCaps {
            listed: accounts.iter().map(|(id, c)| (account(id), *c)).collect(),
            others: 8,
        },
        with_work: HashSet::new(),
        ready: ready
            .iter()
            .map(|(id, a, held)| {
                let key = EndpointKey {
                    account_id: account(a),
                    id: endpoint(id),
                };
                (key, *held)
            })
            .collect(),
    }
}

/// The targets for `budget`, sorted by endpoint, and the endpoints left for later.
fn targets(plan: &mut Plan, budget: usize) -> (Vec<(String, usize)>, Vec<String>) {
    let mut later = Vec::new();
    let mut targets: Vec<(String, usize)> = plan
        .targets(budget, |key| later.push(key.id.to_string()))
        .into_iter()
        .map(|(key, cap)| (key.id.to_string(), cap))
        .collect();
    targets.sort();
    later.sort();
    (targets, later)
}

#[test]
fn each_endpoint_gets_its_cap_and_one_without_a_limit_yet_the_default() {
    let mut plan = plan(
        &[("ep_a", 2)],
        &[],
        &[("ep_a", "acc_1", 0), ("ep_b", "acc_2", 0)],
    );
    let (targets, later) = targets(&mut plan, 100);
    assert_eq!(targets, [("ep_a".into(), 2), ("ep_b".into(), 4)]);
    assert!(later.is_empty());
    assert_eq!(
        plan.accounts.of(&"acc_1".into()),
        6,
        "its account is charged"
    );
    assert!(plan.ready.is_empty(), "the ready endpoints are used up");
}

#[test]
fn the_accounts_holding_least_are_served_first_within_the_budget() {
    let mut plan = plan(
        &[],
        &[],
        &[("ep_busy", "acc_busy", 5), ("ep_idle", "acc_idle", 0)],
    );
    let (targets, later) = targets(&mut plan, 6);
    assert_eq!(targets, [("ep_busy".into(), 2), ("ep_idle".into(), 4)]);
    assert!(later.is_empty());
}

#[test]
fn an_endpoint_left_without_a_worker_is_named_for_the_next_round() {
    let mut plan = plan(&[], &[], &[("ep_a", "acc_1", 0), ("ep_b", "acc_2", 1)]);
    let (targets, later) = targets(&mut plan, 3);
    assert_eq!(targets, [("ep_a".into(), 3)]);
    assert_eq!(later, ["ep_b"]);
}

#[test]
fn an_account_with_its_share_waits_but_a_full_endpoint_is_named_by_its_attempts() {
    let mut plan = plan(
        &[("ep_full", 0)],
        &[("acc_fair", 0)],
        &[("ep_fair", "acc_fair", 3), ("ep_full", "acc_2", 0)],
    );
    let (targets, later) = targets(&mut plan, 10);
    assert!(targets.is_empty());
    assert_eq!(
        later,
        ["ep_fair"],
        "ep_full is named again when an attempt ends"
    );
}

#[test]
fn endpoints_of_one_account_share_its_room() {
    let mut plan = plan(
        &[],
        &[("acc_1", 5)],
        &[("ep_a", "acc_1", 0), ("ep_b", "acc_1", 0)],
    );
    let (targets, _) = targets(&mut plan, 100);
    assert_eq!(targets.iter().map(|(_, cap)| cap).sum::<usize>(), 5);
    assert_eq!(plan.accounts.of(&"acc_1".into()), 0);
}

#[test]
fn what_the_scan_took_is_charged_to_its_endpoints_and_accounts() {
    let mut plan = plan(&[("ep_a", 2)], &[("acc_1", 1)], &[]);
    let (a, b) = (endpoint("ep_a"), endpoint("ep_b"));
    let (one, two) = (account("acc_1"), account("acc_2"));
    plan.charge([(&a, &one), (&a, &one), (&b, &two)]);
    assert_eq!(plan.caps[&endpoint("ep_a")], 0);
    assert_eq!(
        plan.caps[&endpoint("ep_b")],
        3,
        "an unknown endpoint starts at the default"
    );
    assert_eq!(plan.accounts.of(&"acc_1".into()), 0, "never below zero");
    assert_eq!(
        plan.accounts.of(&"acc_2".into()),
        7,
        "an unknown account starts at others"
    );
    assert_eq!(plan.accounts.of(&"acc_3".into()), 8);
}
