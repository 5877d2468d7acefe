//! The mailer against a local SMTP sink, and the address, URL and header checks without one.

use std::time::Duration;

use kxp_testkit::smtp::SmtpSink;

use super::*;

const FROM: &str = "kxp <ops@example.com>";
const WAIT: Duration = Duration::from_secs(10);

#[tokio::test]
async fn a_message_arrives_as_sent() {
    let sink = SmtpSink::start().await;
    let mailer = Mailer::new(&sink.url(), FROM).unwrap();
    mailer
        .send(
            "Ops Team <oncall@example.org>",
            "Zürich — 5 €",
            "Zürich — 5 €\nsecond line\n.leading dot",
        )
        .await
        .unwrap();

    let mails = sink.wait_for(1, WAIT).await;
    let mail = &mails[0];
    assert_eq!(mail.from, "ops@example.com");
    assert_eq!(mail.to, ["oncall@example.org"]);
    assert_eq!(mail.user, None);
    assert_eq!(
        mail.header("From").as_deref(),
        Some("kxp <ops@example.com>")
    );
    assert_eq!(
        mail.header("To").as_deref(),
        Some("\"Ops Team\" <oncall@example.org>")
    );
    assert_eq!(mail.subject().as_deref(), Some("Zürich — 5 €"));
    assert_eq!(mail.body(), "Zürich — 5 €\nsecond line\n.leading dot");
    assert_eq!(
        mail.header("Content-Type").as_deref(),
        Some("text/plain; charset=utf-8")
    );
    assert_eq!(mail.header("MIME-Version").as_deref(), Some("1.0"));
    assert!(mail.header("Date").is_some(), "{}", mail.data);
    let id = mail.header("Message-ID").unwrap();
    assert!(id.starts_with('<') && id.ends_with("@example.com>"), "{id}");
}

#[tokio::test]
async fn a_long_ascii_line_arrives_whole() {
    let sink = SmtpSink::start().await;
    let mailer = Mailer::new(&sink.url(), FROM).unwrap();
    let line = "x".repeat(2000);
    mailer.send("a@example.org", "long", &line).await.unwrap();
    assert_eq!(sink.wait_for(1, WAIT).await[0].body(), line);
}

/// A subject comes from event data: a line break in it must not start a header of its own.
#[tokio::test]
async fn a_line_break_in_the_subject_adds_no_header() {
    let sink = SmtpSink::start().await;
    let mailer = Mailer::new(&sink.url(), FROM).unwrap();
    mailer
        .send("a@example.org", "hi\r\nBcc: evil@example.net", "body")
        .await
        .unwrap();
    let mail = &sink.wait_for(1, WAIT).await[0];
    assert_eq!(mail.header("Bcc"), None, "{}", mail.data);
    assert_eq!(mail.to, ["a@example.org"]);
    assert_eq!(mail.subject().as_deref(), Some("hi Bcc: evil@example.net"));
}

#[tokio::test]
async fn a_url_with_credentials_authenticates() {
    let sink = SmtpSink::start().await;
    let url = sink.url().replace("smtp://", "smtp://kxp%40ops:s3cr%2Ft@");
    let mailer = Mailer::new(&url, FROM).unwrap();
    mailer.send("a@example.org", "hi", "body").await.unwrap();
    assert_eq!(
        sink.wait_for(1, WAIT).await[0].user.as_deref(),
        Some("kxp@ops")
    );
}

#[tokio::test]
async fn a_refused_transaction_is_a_send_error_with_the_reply() {
    let sink = SmtpSink::start().await;
    let mailer = Mailer::new(&sink.url(), FROM).unwrap();
    sink.refuse_next(1);
    let err = mailer
        .send("a@example.org", "hi", "body")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "smtp_send");
    assert!(
        matches!(
            err,
            MailError::Send {
                code: Some(451),
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("try again later"), "{err}");
    assert!(err.to_string().contains("451"), "{err}");
    assert!(sink.messages().is_empty());

    // The refusal was for one transaction only: the retry goes through.
    mailer.send("a@example.org", "hi", "body").await.unwrap();
    assert_eq!(sink.wait_for(1, WAIT).await.len(), 1);
}

#[tokio::test]
async fn an_unreachable_server_is_a_send_error() {
    let port = closed_port().await;
    let mailer = Mailer::new(&format!("smtp://127.0.0.1:{port}"), FROM).unwrap();
    let err = mailer
        .send("a@example.org", "hi", "body")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "smtp_send");
    assert!(matches!(err, MailError::Send { code: None, .. }), "{err:?}");
}

#[tokio::test]
async fn bad_addresses_are_address_errors() {
    let sink = SmtpSink::start().await;
    for from in ["", "ops", "ops@", "kxp <ops@example.com", "a b@example.com"] {
        let err = Mailer::new(&sink.url(), from).unwrap_err();
        assert_eq!(err.kind(), "address", "{from:?}: {err}");
    }
    let mailer = Mailer::new(&sink.url(), FROM).unwrap();
    let err = mailer
        .send("not an address", "hi", "body")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "address");
    assert!(err.to_string().contains("not an address"), "{err}");
    assert!(sink.messages().is_empty());
}

#[test]
fn check_address_accepts_bare_addresses_only() {
    for good in [
        "a@example.com",
        "first.last+tag@sub.example.co.uk",
        "ops@bücher.example",
    ] {
        check_address(good).unwrap_or_else(|e| panic!("{good}: {e}"));
    }
    let long = format!("{}@{}.com", "a".repeat(60), "b".repeat(200));
    for bad in [
        "",
        "a",
        "a@",
        "@example.com",
        "a@@example.com",
        "a b@example.com",
        " a@example.com",
        "a@example.com\r\n",
        "Ops <a@example.com>",
        "a@exa mple.com",
        long.as_str(),
    ] {
        let err = check_address(bad).expect_err(bad);
        assert_eq!(err.kind(), "address");
        assert!(err.to_string().contains("invalid e-mail address"), "{err}");
    }
}

#[test]
fn bad_urls_are_url_errors() {
    for url in [
        "",
        "127.0.0.1:25",
        "http://smtp.example.com",
        "smtp://smtp.example.com?tls=sometimes",
        "smtp://:25",
        "smtp://user:pw@[::1",
    ] {
        let err = Mailer::new(url, FROM).unwrap_err();
        assert_eq!(err.kind(), "smtp_url", "{url:?}: {err}");
    }
    let err = Mailer::new("http://smtp.example.com", FROM).unwrap_err();
    assert!(err.to_string().contains("use smtp:// or smtps://"), "{err}");
    let err = Mailer::new("smtp://smtp.example.com?tls=sometimes", FROM).unwrap_err();
    assert!(err.to_string().contains("use tls=required"), "{err}");
}

#[tokio::test]
async fn every_url_form_builds() {
    for url in [
        "smtp://127.0.0.1:2525",
        "smtp://smtp.example.com?tls=required",
        "smtp://smtp.example.com?tls=opportunistic",
        "smtps://user:pw@smtp.example.com",
        "smtps://smtp.example.com:2465",
    ] {
        Mailer::new(url, FROM).unwrap_or_else(|e| panic!("{url}: {e}"));
    }
}

#[tokio::test]
async fn the_password_never_leaks() {
    let port = closed_port().await;
    let url = format!("smtp://user:hunter2@127.0.0.1:{port}");
    let mailer = Mailer::new(&url, FROM).unwrap();
    let shown = format!("{mailer:?}");
    assert!(!shown.contains("hunter2"), "{shown}");
    assert!(shown.contains("[redacted]"), "{shown}");

    let err = mailer
        .send("a@example.org", "hi", "body")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "smtp_send");
    for text in [err.to_string(), format!("{err:?}")] {
        assert!(!text.contains("hunter2"), "{text}");
    }

    // A URL lettre refuses, and one that puts the password where `redact_passwords` does
    // not look for it.
    for url in [
        "smtpx://user:hunter2@127.0.0.1",
        "smtp://user:hunter2@127.0.0.1?tls=hunter2",
    ] {
        let err = Mailer::new(url, FROM).unwrap_err();
        for text in [err.to_string(), format!("{err:?}")] {
            assert!(!text.contains("hunter2"), "{text}");
        }
    }
}

#[test]
fn secrets_are_scrubbed_in_both_forms() {
    let secrets = url_secrets("smtp://u:p%40ss%2Fw0rd@host");
    assert_eq!(secrets, ["p%40ss%2Fw0rd", "p@ss/w0rd"]);
    assert_eq!(
        scrub("server said p@ss/w0rd and p%40ss%2Fw0rd", &secrets),
        "server said [redacted] and [redacted]"
    );
    assert!(url_secrets("smtp://u@host").is_empty());
    assert!(url_secrets("not a url").is_empty());
}

/// A port nothing listens on: bound, then released.
async fn closed_port() -> u16 {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    listener.local_addr().unwrap().port()
}
