//! The grammar every broker's URL shares (the account, its header, the prefetch), shown on
//! AMQP URLs; each broker's module tests its own parameters.

use super::*;

const ACC: &str = "acc_0123456789abcdef0123456789abcdef";

fn parse(url: &str) -> Result<IngestSource, IngestUrlError> {
    url.parse()
}

#[test]
fn the_account_may_come_from_the_header_when_allowed() {
    let source = parse("amqp://mq?queue=q&account_header=allow").unwrap();
    assert!(source.account.is_none());
    assert_eq!(source.account_header, AccountHeader::Any);
    assert_eq!(
        parse("amqp://mq?queue=q").unwrap_err(),
        IngestUrlError::Missing("account")
    );
}

#[test]
fn the_header_may_be_limited_to_a_list_of_accounts() {
    let source = parse("amqp://mq?queue=q&account_header=allow:acc_b,acc_a,acc_b").unwrap();
    let ids = |ids: &[&str]| {
        ids.iter()
            .map(|id| AccountId::from((*id).to_owned()))
            .collect()
    };
    assert_eq!(
        source.account_header,
        AccountHeader::Only(ids(&["acc_a", "acc_b"]))
    );
    assert!(source.account.is_none());
    let many = vec![ACC; 200].join(",");
    let source = parse(&format!("amqp://mq?queue=q&account_header=allow:{many}")).unwrap();
    assert_eq!(source.account_header, AccountHeader::Only(ids(&[ACC])));
    for value in [
        "allow:",
        "allow:acc_a,",
        "allow:acc_a,,acc_b",
        "allow:nope",
        "allow:acc_a;acc_b",
        "allowed:acc_a",
        "deny",
    ] {
        let url = format!("amqp://mq?queue=q&account_header={value}");
        let error = parse(&url).unwrap_err().to_string();
        assert!(error.starts_with("`account_header`"), "{url}: {error}");
    }
}

#[test]
fn bad_urls_are_refused_by_name() {
    let cases = [
        ("http://mq?queue=q&account=acc_x", "scheme"),
        (&*format!("amqp://mq?account={ACC}"), "queue="),
        (
            &*format!("amqp://mq?queue=q&account={ACC}&stream=s"),
            "stream",
        ),
        (
            &*format!("nats://n?stream=s&subject=x&account={ACC}"),
            "durable=",
        ),
        (
            &*format!("nats://n?stream=s&subject=x&durable=d&account={ACC}&queu=q"),
            "queu",
        ),
        (
            &*format!("amqp://mq?queue=q&queue=r&account={ACC}"),
            "twice",
        ),
        (
            &*format!("amqp://mq?queue=q&account={ACC}&prefetch=0"),
            "prefetch",
        ),
        ("amqp://mq?queue=q&account=nope", "account"),
        (
            &*format!("amqp://mq?queue=q&account={ACC}&account_header=yes"),
            "allow",
        ),
    ];
    for (url, says) in cases {
        let error = parse(url).unwrap_err().to_string();
        assert!(error.contains(says), "{url}: {error}");
    }
}

#[test]
fn a_default_prefetch_and_an_ignored_header_unless_the_url_says() {
    let source = parse(&format!("amqp://mq?queue=q&account={ACC}")).unwrap();
    assert_eq!(source.prefetch, DEFAULT_PREFETCH);
    assert_eq!(source.account_header, AccountHeader::Ignored);
    let source = parse(&format!("amqp://mq?queue=q&account={ACC}&prefetch=8")).unwrap();
    assert_eq!(source.prefetch, 8);
}

/// A parameter of another broker is refused by its name, never passed on to this one's client.
#[cfg(feature = "nats")]
#[test]
fn a_parameter_of_another_broker_is_refused() {
    let error = parse(&format!("amqp://mq?queue=q&account={ACC}&stream=s")).unwrap_err();
    assert_eq!(error, IngestUrlError::Unknown("stream".to_owned()));
    let error = parse(&format!(
        "nats://n?stream=s&subject=x&durable=d&account={ACC}&queue=q"
    ));
    assert_eq!(
        error.unwrap_err(),
        IngestUrlError::Unknown("queue".to_owned())
    );
}
