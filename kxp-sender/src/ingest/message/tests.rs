use super::*;

#[test]
fn a_usable_message_id_is_the_key_as_it_is() {
    assert_eq!(
        key(Some("pay_123.created"), "amqp", || unreachable!()),
        "pay_123.created"
    );
}

#[test]
fn an_id_that_cannot_be_a_key_is_hashed_and_a_missing_one_replaced() {
    let long = "x".repeat(300);
    let hashed = key(Some(&long), "amqp", || unreachable!());
    assert!(hashed.starts_with("amqp-id:") && is_idempotency_key(&hashed));
    assert_eq!(key(Some(&long), "amqp", || unreachable!()), hashed);
    assert_eq!(key(None, "nats", || "S:1:7".to_owned()), "nats:S:1:7");
    assert!(key(Some("with space"), "amqp", || unreachable!()).starts_with("amqp-id:"));
}

#[test]
fn what_no_retry_cures_is_rejected_and_the_rest_is_held() {
    let reason = |error: Error| match Refused::of(&error) {
        Refused::For(reason) => Some(reason),
        Refused::Backlog | Refused::Store => None,
    };
    assert_eq!(
        reason(Error::InvalidJson(String::new())),
        Some(RejectReason::InvalidJson)
    );
    assert_eq!(
        reason(Error::invalid("")),
        Some(RejectReason::InvalidRequest)
    );
    assert_eq!(
        reason(Error::TooLarge(String::new())),
        Some(RejectReason::PayloadTooLarge)
    );
    assert_eq!(
        reason(Error::SchemaViolation {
            path: String::new(),
            message: String::new()
        }),
        Some(RejectReason::SchemaViolation)
    );
    assert_eq!(
        reason(Error::KeyReused),
        Some(RejectReason::IdempotencyKeyReused)
    );
    assert!(matches!(
        Refused::of(&Error::BacklogFull(String::new())),
        Refused::Backlog
    ));
    for held in [Error::Unavailable, Error::Sealed, Error::NotFound] {
        assert!(matches!(Refused::of(&held), Refused::Store), "{held:?}");
    }
}

#[test]
fn a_body_over_the_limit_is_refused_by_its_length_before_any_parse() {
    // Not JSON at all: were it parsed first, it would be `invalid_json`.
    let body = b"not json ".repeat((1000 + REQUEST_OVERHEAD) / 9 + 1);
    let (reason, detail) = check_length(&body, 1000).unwrap_err();
    assert_eq!(reason, RejectReason::PayloadTooLarge);
    assert!(detail.contains(&body.len().to_string()), "{detail}");
    // Up to the limit, the length says nothing: the API's checks decide.
    assert!(check_length(&body[..1000 + REQUEST_OVERHEAD], 1000).is_ok());
    assert!(check_length(b"not json", 0).is_ok());
}

// Shown on AMQP sources: the header's rules are the same on every broker.
#[cfg(feature = "amqp")]
#[test]
fn the_header_names_an_account_only_as_far_as_the_source_lets_it() {
    const OWN: &str = "acc_own";
    let source =
        |query: &str| -> IngestSource { format!("amqp://mq?queue=q&{query}").parse().unwrap() };
    let ignored = source(&format!("account={OWN}"));
    let any = source(&format!("account={OWN}&account_header=allow"));
    let listed = source(&format!("account={OWN}&account_header=allow:acc_a,acc_b"));
    let nameless = source("account_header=allow:acc_a");
    fn reason(found: Result<&str, (RejectReason, String)>) -> Result<&str, RejectReason> {
        found.map_err(|(reason, _)| reason)
    }
    for (source, header, expected) in [
        (&ignored, Claim::Absent, Ok(OWN)),
        (&ignored, Claim::Account("acc_a"), Ok(OWN)),
        (&ignored, Claim::Unreadable("an integer"), Ok(OWN)),
        (&any, Claim::Absent, Ok(OWN)),
        (&any, Claim::Account("acc_z"), Ok("acc_z")),
        (
            &any,
            Claim::Unreadable("a table"),
            Err(RejectReason::InvalidRequest),
        ),
        (&listed, Claim::Account("acc_b"), Ok("acc_b")),
        (&listed, Claim::Account(OWN), Ok(OWN)),
        (
            &listed,
            Claim::Account("acc_z"),
            Err(RejectReason::AccountNotAllowed),
        ),
        (
            &listed,
            Claim::Account("acc_a,acc_b"),
            Err(RejectReason::AccountNotAllowed),
        ),
        (
            &listed,
            Claim::Unreadable("a byte array"),
            Err(RejectReason::InvalidRequest),
        ),
        (&listed, Claim::Absent, Ok(OWN)),
        (&nameless, Claim::Absent, Err(RejectReason::AccountRequired)),
        (&nameless, Claim::Account("acc_a"), Ok("acc_a")),
        (
            &nameless,
            Claim::Account("acc_own"),
            Err(RejectReason::AccountNotAllowed),
        ),
    ] {
        assert_eq!(
            reason(named(source, header)),
            expected,
            "{source:?} {header:?}"
        );
    }
    let (_, detail) = named(&any, Claim::Unreadable("a table")).unwrap_err();
    assert!(detail.contains("a table"), "{detail}");
}

#[test]
fn details_are_one_bounded_line() {
    let detail = printable(&format!("a\nb\r{}", "é".repeat(600)));
    assert!(detail.starts_with("a b "));
    assert!(detail.len() <= MAX_DETAIL && !detail.contains('\n'));
}
