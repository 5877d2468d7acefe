use super::*;
use crate::engine::sources::{IngestSource, split};

const ACC: &str = "acc_0123456789abcdef0123456789abcdef";

/// The stream and consumer `url` names, or why not.
fn nats(url: &str) -> Result<Nats, IngestUrlError> {
    let url = reqwest::Url::parse(url).unwrap();
    let (_, params) = split(&url, Nats::grammar().params)?;
    Nats::parse(&url, params)
}

#[test]
fn a_nats_url_names_stream_subject_and_consumer() {
    let url = format!(
        "nats://u:p@127.0.0.1:4222?stream=PAY&subject=pay.events&durable=kxp&account={ACC}"
    );
    let found = nats(&url).unwrap();
    assert_eq!(found.server, "nats://127.0.0.1:4222");
    assert_eq!(found.rejected_subject, "kxp.rejected.PAY");
    let source: IngestSource = url.parse().unwrap();
    assert_eq!(source.name(), "nats:PAY/kxp");
}

#[test]
fn nats_credentials_are_taken_out_of_the_url_and_never_shown() {
    let with = |userinfo: &str| {
        format!("nats://{userinfo}@nats:4222?stream=S&subject=s&durable=d&account={ACC}")
    };
    let found = nats(&with("kxp:s%40cret")).unwrap();
    assert_eq!(found.server, "nats://nats:4222");
    assert!(found.auth == NatsAuth::UserPassword("kxp".to_owned(), "s@cret".to_owned()));
    let source: IngestSource = with("kxp:s%40cret").parse().unwrap();
    assert!(!source.redacted().contains("cret"), "{}", source.redacted());
    assert!(nats(&with("t0ken")).unwrap().auth == NatsAuth::Token("t0ken".to_owned()));
    let token: IngestSource = with("t0ken").parse().unwrap();
    assert!(!token.redacted().contains("t0ken"), "{}", token.redacted());
    assert!(!format!("{token:?}").contains("t0ken"));
}

#[test]
fn a_nats_source_whose_rejects_fall_in_its_own_filter_is_refused() {
    let nats = |query: &str| nats(&format!("nats://n:4222?stream=LOOP&durable=d&{query}")).unwrap();
    for looping in [
        nats("subject=loop.>&rejected_subject=loop.rejected"),
        nats("subject=loop.*&rejected_subject=loop.rejected"),
        nats("subject=loop.rejected&rejected_subject=loop.rejected"),
        // The default, kxp.rejected.<stream>, under a filter on kxp.>.
        nats("subject=kxp.>"),
        nats("subject=>"),
    ] {
        let reason = looping.refusal().expect("refused");
        assert!(reason.contains("rejected subject"), "{reason}");
    }
    for fine in [
        nats("subject=loop.in&rejected_subject=loop.rejected"),
        nats("subject=loop.*.in&rejected_subject=loop.rejected"),
        nats("subject=loop.>&rejected_subject=rejects.loop"),
        nats("subject=payments.events.>"),
    ] {
        assert_eq!(fine.refusal(), None);
    }
}

#[test]
fn nats_subjects_must_be_well_formed() {
    for (query, says) in [
        ("subject=loop..in", "`subject`"),
        ("subject=loop.>.in", "`subject`"),
        (
            "subject=loop.in&rejected_subject=loop.*",
            "`rejected_subject`",
        ),
        (
            "subject=loop.in&rejected_subject=loop.",
            "`rejected_subject`",
        ),
    ] {
        let url = format!("nats://n?stream=S&durable=d&account={ACC}&{query}");
        // No `unwrap_err`: a parsed source has no `Debug`, its credentials being in it.
        let Err(error) = nats(&url) else {
            panic!("{url} was taken");
        };
        let error = error.to_string();
        assert!(error.starts_with(says), "{url}: {error}");
    }
}

#[test]
fn a_nats_url_takes_no_parameter_it_does_not_know() {
    for (query, says) in [
        ("stream=s&subject=x", "durable="),
        ("stream=s&subject=x&durable=d&queu=q", "queu"),
    ] {
        let url = format!("nats://n?account={ACC}&{query}");
        let error = url.parse::<IngestSource>().unwrap_err().to_string();
        assert!(error.contains(says), "{url}: {error}");
    }
}

#[test]
fn the_account_header_is_found_in_any_case_and_refused_when_given_twice() {
    assert_eq!(account_claim(None), Claim::Absent);
    let mut headers = HeaderMap::new();
    headers.insert("Nats-Msg-Id", "m-1");
    assert_eq!(account_claim(Some(&headers)), Claim::Absent);
    headers.insert("X-KXP-Account", "acc_a");
    assert_eq!(account_claim(Some(&headers)), Claim::Account("acc_a"));
    headers.append("X-KXP-Account", "acc_b");
    assert_eq!(
        account_claim(Some(&headers)),
        Claim::Unreadable("given more than once")
    );
    let mut headers = HeaderMap::new();
    headers.insert("x-kxp-account", "acc_a");
    headers.insert("X-Kxp-Account", "acc_a");
    assert!(matches!(
        account_claim(Some(&headers)),
        Claim::Unreadable(_)
    ));
}
