//! The console's refusals, in the browser: a used, expired or unknown portal link opens no
//! session (an error page, 410); without a session every console URL lands on sign-in; a
//! form posted without its CSRF token, or with a wrong one, is refused (403) and changes
//! nothing; the Content-Security-Policy blocks the page's own scripts.

use kxp_api::{NewPortalLink, PortalScope};
use serde_json::json;

use crate::app::{Console, css, paths, until_past};
use crate::browser::Browser;

/// The page a refused portal link gets: 410, the error page, no session.
async fn refused_link(b: &Browser) {
    assert_eq!(b.status().await, 410);
    assert_eq!(b.text(css::H1).await, "This link does not work");
    assert!(
        b.text(css::MAIN)
            .await
            .contains("already used, has expired")
    );
    assert!(b.cookie(css::SESSION_COOKIE).await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_used_or_unknown_link_is_refused_and_opens_no_session() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let c = Console::start().await;
    let link = c.link(PortalScope::Manage).await;
    b.goto(&link.url).await;
    b.submit(css::SUBMIT).await;
    assert_eq!(b.path().await, c.merchant_home());

    // Another browser (no cookies) with the same link: its page shows (a GET looks nothing
    // up), and pressing it opens nothing.
    b.delete_all_cookies().await;
    b.goto(&link.url).await;
    assert_eq!(b.status().await, 200);
    b.submit(css::SUBMIT).await;
    refused_link(&b).await;
    b.goto(&c.url(paths::HOME)).await;
    assert_eq!(b.path().await, paths::SIGN_IN);

    // A link that never existed: the same page.
    b.goto(&c.url(&format!("/console/sign-in/{}", "ab".repeat(32))))
        .await;
    b.submit(css::SUBMIT).await;
    refused_link(&b).await;

    b.close().await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_link_is_refused() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let c = Console::start().await;
    let asked = kxp_sender::now_ms();
    let link = c.link_with(NewPortalLink::default().ttl_seconds(1)).await;
    let expires_at = link.expires_at.unix_ms().unwrap();
    // `expires_at` is in whole seconds (the API's timestamps), and the server stores the same
    // instant: the link stops working exactly when it says.
    assert!(
        expires_at % 1000 == 0 && expires_at > asked && expires_at <= asked + 1_000 + 10_000,
        "asked at {asked}, expires at {expires_at}"
    );
    b.goto(&link.url).await;
    // Pressed only once the server's clock is past when the link expires.
    until_past(expires_at).await;
    b.submit(css::SUBMIT).await;
    refused_link(&b).await;

    b.close().await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_session_every_console_url_lands_on_sign_in() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let c = Console::start().await;
    for path in [
        "/",
        "/console",
        "/console/anything",
        "/console/endpoints",
        "/console/events/evt_0123",
        "/console/a/b/c?x=1",
    ] {
        b.goto(&c.url(path)).await;
        assert_eq!(b.path().await, paths::SIGN_IN, "{path}");
        assert_eq!(b.status().await, 200, "{path}");
        assert_eq!(b.count(css::KEY).await, 1, "{path}: the key form");
    }
    // A cookie naming no session is no session.
    b.add_cookie(css::SESSION_COOKIE, &"ab".repeat(32), paths::HOME)
        .await;
    for path in ["/console", "/console/anything"] {
        b.goto(&c.url(path)).await;
        assert_eq!(
            b.path().await,
            paths::SIGN_IN,
            "{path} with a made-up cookie"
        );
    }

    b.close().await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_form_without_the_right_csrf_token_is_refused_and_changes_nothing() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let c = Console::start().await;

    // The sign-in forms (login CSRF): a link's page with its token removed or changed is
    // refused and the link stays unused; the key form likewise opens no session.
    let link = c.link(PortalScope::Manage).await;
    let csrf = css::csrf_of(paths::SIGN_IN);
    for wrong in [None, Some("0".repeat(64))] {
        b.goto(&link.url).await;
        match &wrong {
            None => b.remove(&csrf).await,
            Some(value) => b.set_value(&csrf, value).await,
        }
        b.submit(css::SUBMIT).await;
        assert_eq!(b.status().await, 403, "{wrong:?}");
        assert_eq!(b.text(css::H1).await, "Refused");
        assert!(b.cookie(css::SESSION_COOKIE).await.is_none());
        b.goto(&c.url(paths::SIGN_IN)).await;
        b.set_value(&csrf, &"1".repeat(64)).await;
        b.type_into(css::KEY, &c.operator_key).await;
        b.submit(css::SUBMIT).await;
        assert_eq!(b.status().await, 403, "the key form, {wrong:?}");
        assert!(b.cookie(css::SESSION_COOKIE).await.is_none());
    }
    b.goto(&link.url).await;
    b.submit(css::SUBMIT).await;
    assert_eq!(b.path().await, c.merchant_home(), "the link still works");
    let session = b.cookie(css::SESSION_COOKIE).await.unwrap();

    // Signed in: the sign-out forms without their token, or with another, are refused and the
    // session lives on.
    for (action, button) in [
        (paths::SIGN_OUT, css::SIGN_OUT),
        (paths::SIGN_OUT_EVERYWHERE, css::SIGN_OUT_EVERYWHERE),
    ] {
        let csrf = css::csrf_of(action);
        for wrong in [None, Some("0".repeat(64)), Some(String::new())] {
            b.goto(&c.url(paths::HOME)).await;
            match &wrong {
                None => b.remove(&csrf).await,
                Some(value) => b.set_value(&csrf, value).await,
            }
            b.submit(button).await;
            assert_eq!(b.path().await, action);
            assert_eq!(b.status().await, 403, "{action} with {wrong:?}");
            assert_eq!(b.text(css::H1).await, "Refused");
            assert!(b.text(css::MAIN).await.contains("Nothing was changed"));
            b.goto(&c.url(paths::HOME)).await;
            assert_eq!(
                b.path().await,
                c.merchant_home(),
                "{action} with {wrong:?} signed out"
            );
            let now = b.cookie(css::SESSION_COOKIE).await.unwrap();
            assert_eq!(now.value(), session.value());
        }
    }

    b.close().await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pages_policy_blocks_their_own_scripts_not_webdriver() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let c = Console::start().await;
    // An inline script added to the page runs as it is added, unless a policy forbids it.
    let inject = "window.kxpRan = 'no'; \
                  const s = document.createElement('script'); \
                  s.textContent = \"window.kxpRan = 'yes'\"; \
                  document.head.appendChild(s); \
                  return window.kxpRan;";
    // Without a policy (a blank page), it runs: the check can tell.
    b.goto("about:blank").await;
    assert_eq!(b.execute(inject, vec![]).await, json!("yes"));
    // On the console's pages it does not, while WebDriver's own script (this one) runs.
    c.sign_in(&b, PortalScope::Read).await;
    for path in [paths::HOME, paths::SIGN_IN, "/console/no-such-page"] {
        b.goto(&c.url(path)).await;
        assert_eq!(b.execute(inject, vec![]).await, json!("no"), "{path}");
    }

    b.close().await;
    c.shutdown().await;
}
