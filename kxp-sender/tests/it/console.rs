//! The console's sign-in (issue 12, item 1: portal links and sessions) over real HTTP, as a
//! browser without a cookie jar would do it: a portal link's GET changes nothing and its POST
//! works once; sessions are cookies with the right flags; every console URL without a session
//! redirects to sign-in; forms need the session's CSRF token, and a `read` session cannot
//! change anything; operators sign in with their key. One scenario on SQLite and PostgreSQL.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kxp_api::{NewAccount, NewPortalLink, PortalScope};
use reqwest::StatusCode;
use reqwest::header::{CONTENT_TYPE, COOKIE, LOCATION, SET_COOKIE};

use crate::support::{Database, Sender, sender, sender_with};

/// A browser without a cookie jar, that does not follow redirects: every cookie is passed by
/// hand, so each test says exactly which cookie a request carries.
pub(crate) struct Browser {
    pub(crate) base: String,
    pub(crate) http: reqwest::Client,
}

impl Browser {
    pub(crate) fn of(s: &Sender) -> Browser {
        Browser {
            base: s.api.base.clone(),
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
        }
    }

    pub(crate) async fn get(&self, path: &str, cookie: Option<&str>) -> reqwest::Response {
        let mut request = self.http.get(format!("{}{path}", self.base));
        if let Some(cookie) = cookie {
            request = request.header(COOKIE, cookie);
        }
        request.send().await.unwrap()
    }

    /// A form post; the values here are hex or ids, so they need no percent-encoding.
    pub(crate) async fn post(
        &self,
        path: &str,
        cookie: &str,
        form: &[(&str, &str)],
    ) -> reqwest::Response {
        let body = form
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("&");
        self.http
            .post(format!("{}{path}", self.base))
            .header(COOKIE, cookie)
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .unwrap()
    }

    /// Opens the link's page and presses its button: the response of the POST.
    pub(crate) async fn press_link(&self, url: &str) -> reqwest::Response {
        let path = url
            .strip_prefix(&self.base)
            .expect("the link is on the server's origin");
        let page = self.get(path, None).await;
        assert_eq!(page.status(), 200);
        let sign_in = cookie_pair(&page, "kxp_sign_in").unwrap();
        let html = page.text().await.unwrap();
        assert_eq!(html.matches("<form method=\"post\"").count(), 1, "{html}");
        assert!(html.contains("action=\"/console/sign-in\""), "{html}");
        let csrf = hidden(&html, "csrf_token");
        let token = hidden(&html, "token");
        self.post(
            "/console/sign-in",
            &sign_in,
            &[("csrf_token", &csrf), ("token", &token)],
        )
        .await
    }

    /// Signs in with a fresh link of `scope` made by `client`: the session cookie (`name=value`).
    pub(crate) async fn session(&self, client: &kxp_api::Client, scope: PortalScope) -> String {
        let link = new_link(client, NewPortalLink::new(scope)).await;
        let response = self.press_link(&link.url).await;
        assert_eq!(response.status(), StatusCode::SEE_OTHER);
        cookie_pair(&response, "kxp_session").unwrap()
    }

    /// The console's home page with `cookie` (for a merchant, its account's page, which
    /// `/console` redirects to): its status and text.
    pub(crate) async fn home(&self, cookie: &str) -> (StatusCode, String) {
        let mut response = self.get("/console", Some(cookie)).await;
        let to = response
            .headers()
            .get(LOCATION)
            .map(|l| l.to_str().unwrap().to_owned());
        if let Some(account_page) = to.filter(|to| to.starts_with("/console/a/acc_")) {
            response = self.get(&account_page, Some(cookie)).await;
        }
        let status = response.status();
        if status == StatusCode::SEE_OTHER {
            assert_eq!(response.headers()[LOCATION], "/console/sign-in");
        }
        (status, response.text().await.unwrap())
    }

    /// The CSRF token of the home page's forms.
    pub(crate) async fn csrf(&self, cookie: &str) -> String {
        let (status, html) = self.home(cookie).await;
        assert_eq!(status, 200, "{html}");
        hidden(&html, "csrf_token")
    }
}

/// A new portal link made by `client`.
pub(crate) async fn new_link(client: &kxp_api::Client, new: NewPortalLink) -> kxp_api::PortalLink {
    client.create_portal_link(&new).await.unwrap()
}

/// The `Set-Cookie` of `name` in full.
pub(crate) fn set_cookie(response: &reqwest::Response, name: &str) -> Option<String> {
    response
        .headers()
        .get_all(SET_COOKIE)
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .find(|v| v.starts_with(&format!("{name}=")))
}

/// `name=value` of a cookie the response sets (not one it removes).
pub(crate) fn cookie_pair(response: &reqwest::Response, name: &str) -> Option<String> {
    let set = set_cookie(response, name)?;
    let pair = set.split(';').next().unwrap().to_owned();
    (pair.len() > name.len() + 1).then_some(pair)
}

/// The value of the hidden input `name` of a page.
pub(crate) fn hidden(html: &str, name: &str) -> String {
    let marker = format!("name=\"{name}\" value=\"");
    let at = html
        .find(&marker)
        .unwrap_or_else(|| panic!("no {name} in {html}"))
        + marker.len();
    html[at..].split('"').next().unwrap().to_owned()
}

each_backend!(portal_links_sign_in_once);
on_citus!(portal_links_sign_in_once);

async fn portal_links_sign_in_once(database: Database) {
    let s = database.sender("0s").await;
    let b = Browser::of(&s);
    let (_, op_key) = s.server.db().create_operator("Olga").await.unwrap();
    let op = s.api.with_key(&op_key).client;
    let shop_b = op.create_account(&NewAccount::new("Shop B")).await.unwrap();
    let b_client = s.api.with_key(shop_b.api_key.expose()).client;

    // A link: absolute, on this origin, 15 minutes by default.
    let link = new_link(&s.api.client, NewPortalLink::default()).await;
    assert!(
        link.url
            .starts_with(&format!("{}/console/sign-in/", b.base)),
        "{}",
        link.url
    );
    assert_eq!(link.scope, PortalScope::Manage);
    let ttl = link.expires_at.unix_ms().unwrap() - kxp_sender::now_ms();
    assert!((890_000..=900_000).contains(&ttl), "{ttl}");

    // A GET changes nothing: twice, the same page; then the POST signs in.
    let path = link.url.strip_prefix(&b.base).unwrap();
    for _ in 0..2 {
        let page = b.get(path, None).await;
        assert_eq!(page.status(), 200);
        assert!(cookie_pair(&page, "kxp_session").is_none());
    }
    let first = b.press_link(&link.url).await;
    assert_eq!(first.status(), StatusCode::SEE_OTHER);
    assert_eq!(first.headers()[LOCATION], "/console");
    let set = set_cookie(&first, "kxp_session").unwrap();
    for flag in ["HttpOnly", "SameSite=Strict", "Path=/console"] {
        assert!(set.contains(flag), "{set}");
    }
    assert!(!set.contains("Secure"), "--dev: no Secure flag: {set}");
    let a_session = cookie_pair(&first, "kxp_session").unwrap();
    let (status, html) = b.home(&a_session).await;
    assert_eq!(status, 200);
    let account = s.api.client.account().await.unwrap();
    assert!(
        html.contains(account.id.as_str()) && html.contains(&account.name),
        "{html}"
    );
    assert!(html.contains("manage"), "{html}");

    // Used: the same link again opens no session.
    let again = b.press_link(&link.url).await;
    assert_eq!(again.status(), StatusCode::GONE);
    assert!(cookie_pair(&again, "kxp_session").is_none());
    assert!(again.text().await.unwrap().contains("already used"));
    // Unknown: the same page.
    let unknown = b
        .press_link(&format!("{}/console/sign-in/{}", b.base, "ab".repeat(32)))
        .await;
    assert_eq!(unknown.status(), StatusCode::GONE);

    // Two POSTs of one link at once: one session.
    let link = new_link(&s.api.client, NewPortalLink::default()).await;
    let (one, two) = tokio::join!(b.press_link(&link.url), b.press_link(&link.url));
    let mut statuses = [one.status().as_u16(), two.status().as_u16()];
    statuses.sort_unstable();
    assert_eq!(statuses, [303, 410]);

    // Expired: a 1-second link, pressed after 1.2 s.
    let link = new_link(&s.api.client, NewPortalLink::default().ttl_seconds(1)).await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(b.press_link(&link.url).await.status(), StatusCode::GONE);

    // Lifetimes beyond 24 h (or of 0 s) are refused with 400.
    for ttl in [0, 86_401] {
        let (status, body) = s
            .api
            .call(
                "POST",
                "/v1/portal-links",
                Some(serde_json::json!({"ttl_seconds": ttl})),
            )
            .await;
        assert_eq!(
            (status, body["error"].as_str()),
            (400, Some("invalid_ttl")),
            "{body}"
        );
    }
    // An operator key makes links for the account it names.
    let op_for_b = op.clone().for_account(shop_b.account.id.clone());
    let b_link = new_link(&op_for_b, NewPortalLink::new(PortalScope::Read)).await;
    let b_read = cookie_pair(&b.press_link(&b_link.url).await, "kxp_session").unwrap();
    assert!(b.home(&b_read).await.1.contains("Shop B"));

    // A read session cannot sign out everywhere (403, nothing ends), but can sign out.
    let csrf = b.csrf(&b_read).await;
    let refused = b
        .post(
            "/console/sign-out-everywhere",
            &b_read,
            &[("csrf_token", &csrf)],
        )
        .await;
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    assert_eq!(b.home(&b_read).await.0, 200);
    let out = b
        .post("/console/sign-out", &b_read, &[("csrf_token", &csrf)])
        .await;
    assert_eq!(out.status(), StatusCode::SEE_OTHER);
    assert_eq!(b.home(&b_read).await.0, StatusCode::SEE_OTHER);

    // CSRF: sign out everywhere without the right token changes nothing.
    let a_other = b.session(&s.api.client, PortalScope::Manage).await;
    let b_manage = b.session(&b_client, PortalScope::Manage).await;
    let csrf = b.csrf(&a_session).await;
    for form in [
        vec![],
        vec![("csrf_token", "0".repeat(64))],
        vec![("csrf_token", b.csrf(&a_other).await)],
    ] {
        let form: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let refused = b
            .post("/console/sign-out-everywhere", &a_session, &form)
            .await;
        assert_eq!(refused.status(), StatusCode::FORBIDDEN, "{form:?}");
    }
    assert_eq!(b.home(&a_session).await.0, 200);
    assert_eq!(b.home(&a_other).await.0, 200);
    // With it: every session of the account ends, another account's goes on.
    let done = b
        .post(
            "/console/sign-out-everywhere",
            &a_session,
            &[("csrf_token", &csrf)],
        )
        .await;
    assert_eq!(done.status(), StatusCode::SEE_OTHER);
    assert_eq!(done.headers()[LOCATION], "/console/sign-in");
    assert_eq!(b.home(&a_session).await.0, StatusCode::SEE_OTHER);
    assert_eq!(b.home(&a_other).await.0, StatusCode::SEE_OTHER);
    assert_eq!(b.home(&b_manage).await.0, 200);

    // Operators sign in with their key; a wrong key gets the form again, 401, no session.
    let form = b.get("/console/sign-in", None).await;
    assert_eq!(form.status(), 200);
    let sign_in = cookie_pair(&form, "kxp_sign_in").unwrap();
    let csrf = hidden(&form.text().await.unwrap(), "csrf_token");
    for wrong in ["kxp_op_nope", "kxp_test_key", ""] {
        let refused = b
            .post(
                "/console/sign-in",
                &sign_in,
                &[("csrf_token", &csrf), ("key", wrong)],
            )
            .await;
        assert_eq!(refused.status(), StatusCode::UNAUTHORIZED, "{wrong}");
        assert!(set_cookie(&refused, "kxp_session").is_none());
        assert!(refused.text().await.unwrap().contains("does not sign in"));
    }
    // The right key, but from another page (no sign-in cookie): refused.
    let forged = b
        .post(
            "/console/sign-in",
            "",
            &[("csrf_token", &csrf), ("key", &op_key)],
        )
        .await;
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);
    let signed = b
        .post(
            "/console/sign-in",
            &sign_in,
            &[("csrf_token", &csrf), ("key", &op_key)],
        )
        .await;
    assert_eq!(signed.status(), StatusCode::SEE_OTHER);
    let op_session = cookie_pair(&signed, "kxp_session").unwrap();
    let (status, html) = b.home(&op_session).await;
    assert_eq!(status, 200);
    assert!(html.contains("operator") && html.contains("Olga"), "{html}");
    s.server.shutdown().await;
}

#[tokio::test]
async fn without_a_session_every_console_url_redirects_to_sign_in_with_the_security_headers() {
    let s = sender("0s").await;
    let b = Browser::of(&s);
    for (path, cookie) in [
        ("/console", None),
        ("/console/endpoints", None),
        ("/console/no/such/page", None),
        ("/console", Some("kxp_session=deadbeef")),
    ] {
        let response = b.get(path, cookie).await;
        assert_eq!(response.status(), StatusCode::SEE_OTHER, "{path}");
        assert_eq!(response.headers()[LOCATION], "/console/sign-in", "{path}");
    }
    for path in ["/console/sign-out", "/console/sign-out-everywhere"] {
        let response = b.post(path, "", &[("csrf_token", "x")]).await;
        assert_eq!(response.status(), StatusCode::SEE_OTHER, "{path}");
    }
    let root = b.get("/", None).await;
    assert_eq!(root.status(), StatusCode::SEE_OTHER);
    assert_eq!(root.headers()[LOCATION], "/console");

    // With a session, an unknown console page is a 404 page, not the API's JSON.
    let session = b.session(&s.api.client, PortalScope::Read).await;
    let missing = b.get("/console/no/such/page", Some(&session)).await;
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    assert!(
        missing.headers()[CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );

    // The headers, on pages, redirects and the stylesheet alike.
    for path in [
        "/console",
        "/console/sign-in",
        "/console/sign-in/abc",
        "/console/assets/console.css",
        "/console/assets/console.js",
    ] {
        let response = b.get(path, Some(&session)).await;
        let h = response.headers();
        let csp = h["content-security-policy"].to_str().unwrap();
        for directive in [
            "default-src 'none'",
            "script-src 'self'",
            "style-src 'self'",
            "form-action 'self'",
            "frame-ancestors 'none'",
            "base-uri 'none'",
        ] {
            assert!(csp.contains(directive), "{path}: {csp}");
        }
        assert!(!csp.contains("unsafe-inline"), "{csp}");
        assert_eq!(h["referrer-policy"], "no-referrer", "{path}");
        assert_eq!(h["x-content-type-options"], "nosniff", "{path}");
        if !path.starts_with("/console/assets/") {
            assert_eq!(h["cache-control"], "no-store", "{path}");
        }
    }
    let css = b.get("/console/assets/console.css", None).await;
    assert_eq!(css.status(), 200);
    assert!(
        css.headers()[CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/css")
    );
    // No script where no secret is shown (the one script file adds its copy button), and no
    // inline style.
    let html = b.home(&session).await.1;
    assert!(
        !html.contains("<script") && !html.contains("style="),
        "{html}"
    );
    s.server.shutdown().await;
}

#[tokio::test]
async fn outside_dev_the_session_cookie_is_secure() {
    let s = sender_with("0s", |c| c.dev = false).await;
    let b = Browser::of(&s);
    let link = new_link(&s.api.client, NewPortalLink::default()).await;
    let signed = b.press_link(&link.url).await;
    assert_eq!(signed.status(), StatusCode::SEE_OTHER);
    let set = set_cookie(&signed, "kxp_session").unwrap();
    for flag in ["HttpOnly", "SameSite=Strict", "Secure", "Path=/console"] {
        assert!(set.contains(flag), "{set}");
    }
    s.server.shutdown().await;
}

#[tokio::test]
async fn a_non_loopback_listener_needs_a_public_url() {
    let dir = tempfile::tempdir().unwrap();
    let config = |public_url: Option<&str>| kxp_sender::Config {
        database_url: format!("sqlite://{}", dir.path().join("kxp.db").display()),
        listen: std::net::SocketAddr::from(([0, 0, 0, 0], 0)),
        public_url: public_url.map(str::to_owned),
        api_key: Some("kxp_test_key".to_owned()),
        ..kxp_sender::Config::default()
    };
    let refused = kxp_sender::start(config(None)).await.err();
    assert!(
        matches!(refused, Some(kxp_sender::StartError::PublicUrlRequired(_))),
        "{refused:?}"
    );
    for bad in [
        "kxp.example.com",
        "https://",
        "https://kxp.example.com/console?x",
    ] {
        let refused = kxp_sender::start(config(Some(bad))).await.err();
        assert!(
            matches!(refused, Some(kxp_sender::StartError::InvalidPublicUrl(_))),
            "{bad}: {refused:?}"
        );
    }
    // With one, links are built on it.
    let server = kxp_sender::start(config(Some("https://kxp.example.com/")))
        .await
        .unwrap();
    let client = kxp_api::Client::new(
        &format!("http://127.0.0.1:{}", server.addr().port()),
        "kxp_test_key",
    )
    .unwrap();
    let link = new_link(&client, NewPortalLink::default()).await;
    assert!(
        link.url
            .starts_with("https://kxp.example.com/console/sign-in/"),
        "{}",
        link.url
    );
    server.shutdown().await;
}

/// Everything the server logs, kept in memory.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Write for Logs {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

// The subscriber is the process's global one, at `kxp serve`'s default level (info): a scoped
// one misses events whose callsites other tests' threads registered first. It sees every test's
// logs, which only makes the check wider.
#[tokio::test]
async fn no_credential_link_token_operator_key_or_session_id_reaches_the_logs() {
    let logs = Logs::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_writer(move || writer.clone())
        .finish();
    tracing::subscriber::set_global_default(subscriber).expect("no other test sets one");
    let s = sender("0s").await;
    let b = Browser::of(&s);
    let link = new_link(&s.api.client, NewPortalLink::default()).await;
    let token = link.url.rsplit('/').next().unwrap().to_owned();
    let session = cookie_pair(&b.press_link(&link.url).await, "kxp_session").unwrap();
    let (_, op_key) = s.server.db().create_operator("Olga").await.unwrap();
    let form = b.get("/console/sign-in", None).await;
    let sign_in = cookie_pair(&form, "kxp_sign_in").unwrap();
    let csrf = hidden(&form.text().await.unwrap(), "csrf_token");
    let op = b
        .post(
            "/console/sign-in",
            &sign_in,
            &[("csrf_token", &csrf), ("key", &op_key)],
        )
        .await;
    let op_session = cookie_pair(&op, "kxp_session").unwrap();
    // Endpoint credentials, sent with deliveries, refused at registration and failing attempts.
    let receiver = crate::support::Receiver::start(vec![]).await;
    let tokens = crate::credentials::TokenServer::start(3600).await;
    let bearer = serde_json::json!({"type": "bearer", "token": "log-b3arer"});
    s.api
        .endpoint(
            &receiver.url,
            serde_json::json!({"headers": {"X-Gateway-Key": "log-gw-key"}, "auth": bearer}),
        )
        .await;
    s.api
        .endpoint(
            &receiver.url,
            serde_json::json!({"auth": tokens.auth(serde_json::json!({}))}),
        )
        .await;
    let pki = crate::mtls::Pki::new("Log CA");
    let client = pki.issue("kxp-logs", &[], rcgen::ExtendedKeyUsagePurpose::ClientAuth);
    let tls = serde_json::json!({"client_certificate": client.cert, "client_key": client.key});
    s.api
        .endpoint(&receiver.url, serde_json::json!({"tls": tls}))
        .await;
    let event = s.api.emit("payment.succeeded", serde_json::json!({})).await;
    s.api
        .wait_for(&event, "delivered", Duration::from_secs(10))
        .await;
    tokens.set(crate::credentials::Mode::Down);
    let refused =
        serde_json::json!({"url": receiver.url, "auth": tokens.auth(serde_json::json!({}))});
    let (status, _) = s.api.call("POST", "/v1/endpoints", Some(refused)).await;
    assert_eq!(status, 422);
    s.server.shutdown().await;
    // Started again without KXP_SECRETS_KEY: a warning that credentials are in the clear.
    let url = s.database_url.clone();
    sender_with("0s", move |c| c.database_url = url)
        .await
        .server
        .shutdown()
        .await;

    let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert!(
        text.contains("a portal link was created"),
        "the capture works: {text}"
    );
    assert!(text.contains("console: signed in"), "{text}");
    assert!(text.contains("delivered"), "{text}");
    assert!(
        text.contains("credentials (custom headers, auth) are stored in the clear"),
        "{text}"
    );
    for secret in [
        &token[..],
        &op_key,
        &session[12..],
        &op_session[12..],
        "log-b3arer",
        "log-gw-key",
        "client-s3cret",
        "tok-1",
        "PRIVATE KEY",
        client.key.lines().nth(1).unwrap(),
    ] {
        assert!(!text.contains(secret), "{secret} is in the logs:\n{text}");
    }
}

/// The operators' key form: the sign-in cookie (`name=value`) and the form's CSRF token.
async fn key_form(b: &Browser) -> (String, String) {
    let form = b.get("/console/sign-in", None).await;
    assert_eq!(form.status(), 200);
    let sign_in = cookie_pair(&form, "kxp_sign_in").unwrap();
    let csrf = hidden(&form.text().await.unwrap(), "csrf_token");
    (sign_in, csrf)
}

/// A sign-in form post, from the client `X-Forwarded-For` names (through a proxy on loopback).
/// The values are hex, keys or ids: no percent-encoding needed.
async fn sign_in_as(
    b: &Browser,
    forwarded_for: Option<&str>,
    cookie: &str,
    form: &[(&str, &str)],
) -> reqwest::Response {
    let headers: Vec<(&str, &str)> = forwarded_for
        .map(|client| ("x-forwarded-for", client))
        .into_iter()
        .collect();
    sign_in_with(b, &headers, cookie, form).await
}

/// [`sign_in_as`] with `headers` added.
async fn sign_in_with(
    b: &Browser,
    headers: &[(&str, &str)],
    cookie: &str,
    form: &[(&str, &str)],
) -> reqwest::Response {
    let body = form
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&");
    let mut request = b
        .http
        .post(format!("{}/console/sign-in", b.base))
        .header(COOKIE, cookie)
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.unwrap()
}

/// Login CSRF from a sibling subdomain: it can fetch a signed token pair from the console and
/// plant its cookie, so the browser's word on where the post came from is what refuses it.
#[tokio::test]
async fn a_sign_in_posted_from_another_site_is_refused() {
    let s = sender("0s").await;
    let b = Browser::of(&s);
    let (_, op_key) = s.server.db().create_operator("Olga").await.unwrap();
    let host = b.base.trim_start_matches("http://").to_owned();
    let own_origin = format!("http://{host}");
    for (headers, expected) in [
        (vec![("sec-fetch-site", "same-site")], StatusCode::FORBIDDEN),
        (
            vec![("sec-fetch-site", "cross-site")],
            StatusCode::FORBIDDEN,
        ),
        (
            vec![("origin", "https://evil.example")],
            StatusCode::FORBIDDEN,
        ),
        (vec![("origin", "null")], StatusCode::FORBIDDEN),
        (
            vec![("sec-fetch-site", "same-origin")],
            StatusCode::SEE_OTHER,
        ),
        (vec![("origin", own_origin.as_str())], StatusCode::SEE_OTHER),
        (vec![], StatusCode::SEE_OTHER),
    ] {
        let (sign_in, csrf) = key_form(&b).await;
        let answer = sign_in_with(
            &b,
            &headers,
            &sign_in,
            &[("csrf_token", &csrf), ("key", &op_key)],
        )
        .await;
        assert_eq!(answer.status(), expected, "{headers:?}");
        assert_eq!(
            cookie_pair(&answer, "kxp_session").is_some(),
            expected == StatusCode::SEE_OTHER
        );
    }
    s.server.shutdown().await;
}

#[tokio::test]
async fn a_planted_sign_in_cookie_with_a_matching_but_unsigned_token_is_refused() {
    let s = sender("0s").await;
    let b = Browser::of(&s);
    let (_, op_key) = s.server.db().create_operator("Olga").await.unwrap();
    let (sign_in, csrf) = key_form(&b).await;
    // The server's token: random ‖ HMAC, 128 hex digits.
    assert_eq!(csrf.len(), 128, "{csrf}");
    assert_eq!(sign_in, format!("kxp_sign_in={csrf}"));

    // What a sibling subdomain can plant: any value as the cookie, the same in a forged form.
    let unsigned = [
        "ab".repeat(32),
        "ab".repeat(64),
        format!("{}{}", &csrf[..64], "0".repeat(64)),
    ];
    for planted in &unsigned {
        let refused = sign_in_as(
            &b,
            None,
            &format!("kxp_sign_in={planted}"),
            &[("csrf_token", planted), ("key", &op_key)],
        )
        .await;
        assert_eq!(refused.status(), StatusCode::FORBIDDEN, "{planted}");
        assert!(cookie_pair(&refused, "kxp_session").is_none());
    }
    // A token this server signed, but not the cookie's: refused too.
    let (_, other_csrf) = key_form(&b).await;
    let refused = sign_in_as(
        &b,
        None,
        &sign_in,
        &[("csrf_token", &other_csrf), ("key", &op_key)],
    )
    .await;
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    // The page's own pair signs in.
    let signed = sign_in_as(
        &b,
        None,
        &sign_in,
        &[("csrf_token", &csrf), ("key", &op_key)],
    )
    .await;
    assert_eq!(signed.status(), StatusCode::SEE_OTHER);
    assert!(cookie_pair(&signed, "kxp_session").is_some());
    s.server.shutdown().await;
}

#[tokio::test]
async fn the_21st_failed_sign_in_within_a_minute_is_429_with_retry_after() {
    let s = sender("0s").await;
    let b = Browser::of(&s);
    let (_, op_key) = s.server.db().create_operator("Olga").await.unwrap();
    let (sign_in, csrf) = key_form(&b).await;
    let wrong = format!("kxp_op_{}", "0".repeat(64));

    // Refused CSRF tokens try no credential, and are not counted.
    for _ in 0..5 {
        let refused = sign_in_as(&b, None, &sign_in, &[("csrf_token", "x"), ("key", &wrong)]).await;
        assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    }
    // Twenty failures: ten wrong keys and ten unusable links.
    for _ in 0..10 {
        let refused = sign_in_as(
            &b,
            None,
            &sign_in,
            &[("csrf_token", &csrf), ("key", &wrong)],
        )
        .await;
        assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    }
    let unknown = "ab".repeat(32);
    for _ in 0..10 {
        let refused = sign_in_as(
            &b,
            None,
            &sign_in,
            &[("csrf_token", &csrf), ("token", &unknown)],
        )
        .await;
        assert_eq!(refused.status(), StatusCode::GONE);
    }
    // The 21st is not tried, even with the right key: 429 and when to come back.
    let limited = sign_in_as(
        &b,
        None,
        &sign_in,
        &[("csrf_token", &csrf), ("key", &op_key)],
    )
    .await;
    assert_eq!(limited.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry_after: u64 = limited.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry_after), "{retry_after}");
    assert!(cookie_pair(&limited, "kxp_session").is_none());
    assert!(
        limited.headers()[CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    assert!(
        limited
            .text()
            .await
            .unwrap()
            .contains("Too many sign-in attempts")
    );
    // A link is refused alike.
    let link = new_link(&s.api.client, NewPortalLink::default()).await;
    assert_eq!(
        b.press_link(&link.url).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );

    // Behind a proxy on loopback, each client is counted by the address the proxy names:
    // another client signs in, and the limited one stays limited through the proxy too.
    let other = sign_in_as(
        &b,
        Some("198.51.100.1, 203.0.113.7"),
        &sign_in,
        &[("csrf_token", &csrf), ("key", &op_key)],
    )
    .await;
    assert_eq!(other.status(), StatusCode::SEE_OTHER);
    let through_proxy = sign_in_as(
        &b,
        Some("127.0.0.1"),
        &sign_in,
        &[("csrf_token", &csrf), ("key", &op_key)],
    )
    .await;
    assert_eq!(through_proxy.status(), StatusCode::TOO_MANY_REQUESTS);
    s.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_sign_ins_sent_at_once_are_held_to_the_limit_too() {
    let s = sender("0s").await;
    let b = Browser::of(&s);
    let (sign_in, csrf) = key_form(&b).await;
    let wrong = format!("kxp_op_{}", "0".repeat(64));
    let form = [("csrf_token", csrf.as_str()), ("key", wrong.as_str())];
    // Fifty at once: each counts as failed from when it is let through, so no more than twenty
    // are tried, however they interleave.
    let answers =
        futures_util::future::join_all((0..50).map(|_| sign_in_as(&b, None, &sign_in, &form)))
            .await;
    let mut statuses: Vec<u16> = answers.iter().map(|a| a.status().as_u16()).collect();
    statuses.sort_unstable();
    assert_eq!(statuses, [[401; 20].as_slice(), &[429; 30]].concat());
    s.server.shutdown().await;
}

#[tokio::test]
async fn after_a_portal_link_sign_in_the_first_page_names_the_account_escaped() {
    let s = sender("0s").await;
    let b = Browser::of(&s);
    let (_, op_key) = s.server.db().create_operator("Olga").await.unwrap();
    let op = s.api.with_key(&op_key).client;
    let lure = op
        .create_account(&NewAccount::new("Shop <b>A</b> & \"Co\""))
        .await
        .unwrap();
    let lure_client = s.api.with_key(lure.api_key.expose()).client;
    let id = lure.account.id.to_string();

    let session = b.session(&lure_client, PortalScope::Manage).await;
    let (status, html) = b.home(&session).await;
    assert_eq!(status, 200);
    let banner = format!("Signed in to Shop &lt;b&gt;A&lt;/b&gt; &amp; &quot;Co&quot; ({id})");
    assert!(html.contains(&banner), "{html}");
    assert!(html.contains("role=\"status\""), "{html}");
    assert!(!html.contains("<b>A</b>"), "{html}");
    // Once: the next page does not say it again.
    let (_, again) = b.home(&session).await;
    assert!(!again.contains("Signed in to"), "{again}");

    // An operator's sign-in has no such line.
    let (sign_in, csrf) = key_form(&b).await;
    let signed = sign_in_as(
        &b,
        None,
        &sign_in,
        &[("csrf_token", &csrf), ("key", &op_key)],
    )
    .await;
    let op_session = cookie_pair(&signed, "kxp_session").unwrap();
    let page = b.get(&format!("/console/a/{id}"), Some(&op_session)).await;
    assert_eq!(page.status(), 200);
    let page = page.text().await.unwrap();
    assert!(!page.contains("Signed in to"), "{page}");
    s.server.shutdown().await;
}
