//! axe-core on every page of the console, in the state a person sees it: zero `serious` or
//! `critical` violations (issue 12, section 3, item 4). The same walk saves a screenshot of
//! each page into `$KXP_SCREENSHOTS` when it is set (item 5).
//!
//! A new page: one more `audit.page(&b, "<name>")` once the browser shows it.

use kxp_api::PortalScope;

use crate::app::{Console, css, paths};
use crate::browser::{Audit, Browser, Violation};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_has_no_serious_or_critical_axe_violations() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let c = Console::start().await;
    let mut audit = Audit::default();

    // Signed out: the key form, and what a wrong key gets.
    b.goto(&c.url(paths::SIGN_IN)).await;
    audit.page(&b, "sign-in").await;
    b.type_into(css::KEY, "kxp_op_wrong").await;
    b.submit(css::SUBMIT).await;
    assert_eq!(b.status().await, 401);
    audit.page(&b, "sign-in-refused").await;

    // A portal link's page; where a managing merchant lands.
    let link = c.link(PortalScope::Manage).await;
    b.goto(&link.url).await;
    audit.page(&b, "portal-link").await;
    b.submit(css::SUBMIT).await;
    let home = c.merchant_home();
    assert_eq!(b.path().await, home);
    audit.page(&b, "home-merchant").await;
    // Every other section its navigation links to: a section added later joins the walk.
    for href in b.attrs("header nav a", "href").await {
        let Some(section) = href.strip_prefix(&home).filter(|s| !s.is_empty()) else {
            continue;
        };
        b.goto(&c.url(&href)).await;
        audit
            .page(&b, &format!("merchant{}", section.replace('/', "-")))
            .await;
    }

    // One endpoint's page, and its credentials' forms (a receiver that is never sent to:
    // no event is emitted).
    let mut new = kxp_api::NewEndpoint::new("http://127.0.0.1:9/hook");
    new.skip_challenge = true;
    new.headers = Some([("X-Gateway-Key".to_owned(), "k".into())].into());
    new.filter = Some(serde_json::json!({"data.amount": {"$gte": 10000}}));
    let endpoint = c.shop.create_endpoint(&new).await.unwrap().endpoint.id;
    b.goto(&c.url(&c.shop_path(&format!("/endpoints/{endpoint}"))))
        .await;
    audit.page(&b, "merchant-endpoint").await;
    b.goto(&c.url(&c.shop_path(&format!("/endpoints/{endpoint}/credentials"))))
        .await;
    audit.page(&b, "merchant-endpoint-credentials").await;
    // Its filter, and what a dry run shows.
    b.goto(&c.url(&c.shop_path(&format!("/endpoints/{endpoint}/filter"))))
        .await;
    audit.page(&b, "merchant-endpoint-filter").await;
    b.submit("button[formaction$='/filter/try']").await;
    assert_eq!(b.status().await, 200);
    audit.page(&b, "merchant-endpoint-filter-tried").await;

    // The error pages: no such page (404), a form without its token (403).
    b.goto(&c.url("/console/no-such-page")).await;
    assert_eq!(b.status().await, 404);
    audit.page(&b, "error-not-found").await;
    b.goto(&c.url(&home)).await;
    b.remove(&css::csrf_of(paths::SIGN_OUT)).await;
    b.submit(css::SIGN_OUT).await;
    assert_eq!(b.status().await, 403);
    audit.page(&b, "error-refused").await;

    // A used link (410).
    b.delete_all_cookies().await;
    b.goto(&link.url).await;
    b.submit(css::SUBMIT).await;
    assert_eq!(b.status().await, 410);
    audit.page(&b, "error-link-unusable").await;

    // A read-only merchant, and what a change gets (403).
    c.sign_in(&b, PortalScope::Read).await;
    audit.page(&b, "home-merchant-read").await;
    b.submit(css::SIGN_OUT_EVERYWHERE).await;
    assert_eq!(b.status().await, 403);
    audit.page(&b, "error-read-only").await;

    // An operator.
    b.delete_all_cookies().await;
    c.sign_in_as_operator(&b).await;
    audit.page(&b, "home-operator").await;

    audit.check();
    b.close().await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_finds_a_violation_put_on_a_page() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let c = Console::start().await;
    // A check that passes on every page must also be able to fail: an image without a text
    // alternative is a critical violation (`image-alt`).
    b.goto(&c.url(paths::SIGN_IN)).await;
    b.execute(
        "const img = document.createElement('img'); img.id = 'no-alt'; \
         img.src = '/console/assets/console.css'; document.querySelector('main').append(img);",
        vec![],
    )
    .await;
    let serious: Vec<Violation> = b
        .axe()
        .await
        .violations
        .into_iter()
        .filter(Violation::is_serious)
        .collect();
    assert!(
        serious
            .iter()
            .any(|v| v.id == "image-alt" && v.targets.iter().any(|t| t == "#no-alt")),
        "{serious:?}"
    );

    b.close().await;
    c.shutdown().await;
}
