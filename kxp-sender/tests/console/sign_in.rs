//! Signing in and out in the browser: a portal link's page changes nothing until its button
//! is pressed, which opens the merchant's session; operators sign in with their key; a `read`
//! session says so and cannot sign out everywhere; signing out ends the session itself.

use kxp_api::PortalScope;

use crate::app::{Console, OPERATOR, SHOP, css, paths};
use crate::browser::Browser;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_portal_link_signs_in_once_its_page_is_pressed_and_signing_out_ends_the_session() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let c = Console::start().await;
    let link = c.link(PortalScope::Manage).await;
    let ttl = link.expires_at.unix_ms().unwrap() - kxp_sender::now_ms();
    assert!((890_000..=900_000).contains(&ttl), "{ttl}");

    // Opening the link (twice: a mail scanner, then the merchant) signs nobody in.
    for _ in 0..2 {
        b.goto(&link.url).await;
        assert_eq!(b.status().await, 200);
        assert_eq!(b.text(css::H1).await, "Sign in");
        assert_eq!(b.count(css::POST_FORM).await, 1);
        let form = b.find(css::POST_FORM).await;
        // `action` as the browser resolves it: this origin.
        let action = form.prop("action").await.unwrap().unwrap();
        assert_eq!(action, c.url(paths::SIGN_IN));
        assert_eq!(b.text(css::SUBMIT).await, "Continue to the console");
        assert!(b.cookie(css::SESSION_COOKIE).await.is_none());
    }

    // Pressing the button signs in: the account's pages, which name it, and say so once.
    b.submit(css::SUBMIT).await;
    assert_eq!(b.path().await, c.merchant_home());
    assert_eq!(b.status().await, 200);
    let page = b.text(css::BODY).await;
    assert!(page.contains(SHOP), "{page}");
    let account = c.merchant_home().rsplit('/').next().unwrap().to_owned();
    let banner = b.text(r#"p.notice[role="status"]"#).await;
    assert_eq!(banner, format!("Signed in to {SHOP} ({account})"));
    b.goto(&c.url(&c.merchant_home())).await;
    assert_eq!(b.count(r#"p.notice[role="status"]"#).await, 0, "once");
    assert!(!page.contains(css::READ_ONLY), "{page}");
    let session = b
        .cookie(css::SESSION_COOKIE)
        .await
        .expect("a session cookie");
    assert_eq!(session.http_only(), Some(true));
    assert_eq!(
        session.same_site().map(|s| s.to_string()).as_deref(),
        Some("Strict")
    );
    assert_eq!(session.path(), Some(paths::HOME));
    assert_ne!(session.secure(), Some(true), "--dev: not Secure");
    let value = session.value().to_owned();

    // Signing out: the sign-in page, no cookie; and the old cookie opens nothing any more.
    b.submit(css::SIGN_OUT).await;
    assert_eq!(b.path().await, paths::SIGN_IN);
    assert!(b.cookie(css::SESSION_COOKIE).await.is_none());
    b.add_cookie(css::SESSION_COOKIE, &value, paths::HOME).await;
    b.goto(&c.url(paths::HOME)).await;
    assert_eq!(b.path().await, paths::SIGN_IN);

    b.close().await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_signs_in_with_the_key_form_and_a_wrong_key_is_refused() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let c = Console::start().await;
    b.goto(&c.url(paths::SIGN_IN)).await;
    assert_eq!(b.text(css::H1).await, "Sign in");
    assert_eq!(b.count(css::POST_FORM).await, 1);
    assert_eq!(b.count(r#"label[for="key"]"#).await, 1);

    // A wrong key: the form again (401) with an alert, and no session.
    b.type_into(css::KEY, &format!("kxp_op_{}", "0".repeat(64)))
        .await;
    b.submit(css::SUBMIT).await;
    assert_eq!(b.status().await, 401);
    assert_eq!(b.path().await, paths::SIGN_IN);
    assert!(b.text(css::ALERT).await.contains("does not sign in"));
    assert!(b.cookie(css::SESSION_COOKIE).await.is_none());

    // The operator's key, typed into the form it came back with.
    b.type_into(css::KEY, &c.operator_key).await;
    b.submit(css::SUBMIT).await;
    assert_eq!(b.path().await, paths::HOME);
    assert_eq!(b.status().await, 200);
    let main = b.text(css::MAIN).await;
    assert!(
        main.contains(&format!("Signed in as the operator {OPERATOR}")),
        "{main}"
    );
    assert!(b.cookie(css::SESSION_COOKIE).await.is_some());

    b.close().await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_session_shows_its_scope_and_cannot_sign_out_everywhere() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let c = Console::start().await;
    c.sign_in(&b, PortalScope::Read).await;
    let page = b.text(css::BODY).await;
    assert!(page.contains(SHOP), "{page}");
    b.find_text("header", css::READ_ONLY).await;
    // No form that would change something: signing out only.
    for action in b.attrs(css::POST_FORMS, "action").await {
        assert!(
            [paths::SIGN_OUT, paths::SIGN_OUT_EVERYWHERE].contains(&action.as_str()),
            "a read session is offered {action}"
        );
    }

    // A change (ending every session of the account) is refused: 403, and the session lives.
    b.submit(css::SIGN_OUT_EVERYWHERE).await;
    assert_eq!(b.status().await, 403);
    assert_eq!(b.text(css::H1).await, "Read only");
    assert!(b.text(css::MAIN).await.contains("Nothing was changed"));
    b.goto(&c.url(paths::HOME)).await;
    assert_eq!(b.path().await, c.merchant_home());
    b.find_text("header", css::READ_ONLY).await;

    // Signing out (this session only) is allowed.
    b.submit(css::SIGN_OUT).await;
    assert_eq!(b.path().await, paths::SIGN_IN);
    b.goto(&c.url(paths::HOME)).await;
    assert_eq!(b.path().await, paths::SIGN_IN);

    b.close().await;
    c.shutdown().await;
}
