//! The console under test: a real `kxp serve` (the library's [`kxp_sender::start`]) on
//! 127.0.0.1 with a fresh SQLite database, an operator and a merchant account made through
//! the API, and the console's pages as the tests see them (paths, selectors, sign-in flows).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use kxp_api::{NewAccount, NewPortalLink, PortalLink, PortalScope};
use kxp_sender::{Config, Server};

use crate::browser::{Browser, WAIT};

/// The operator every test's server has.
pub(crate) const OPERATOR: &str = "Olga Operator";
/// The merchant account every test's server has (made by the operator through the API).
pub(crate) const SHOP: &str = "Acme Shop";

/// The console's paths.
pub(crate) mod paths {
    /// Where a sign-in lands (303), and the console's entry: an operator's home (the
    /// accounts), which sends a merchant on to its account's pages ([`merchant_home`]).
    ///
    /// [`merchant_home`]: super::Console::merchant_home
    pub(crate) const HOME: &str = "/console";
    /// The operators' key form; where every console URL without a session goes.
    pub(crate) const SIGN_IN: &str = "/console/sign-in";
    /// Ends this session.
    pub(crate) const SIGN_OUT: &str = "/console/sign-out";
    /// Ends every session of this account (or operator).
    pub(crate) const SIGN_OUT_EVERYWHERE: &str = "/console/sign-out-everywhere";
}

/// Selectors of the console's pages.
pub(crate) mod css {
    /// The only post form of a portal link's page, and of the key form.
    pub(crate) const POST_FORM: &str = r#"form[method="post"]"#;
    /// Its button.
    pub(crate) const SUBMIT: &str = r#"form[method="post"] button[type="submit"]"#;
    /// The key form's field.
    pub(crate) const KEY: &str = "#key";
    /// The key form's "that key does not sign in".
    pub(crate) const ALERT: &str = r#"[role="alert"]"#;
    /// The page's heading.
    pub(crate) const H1: &str = "main h1";
    /// The page's content.
    pub(crate) const MAIN: &str = "main";
    /// The whole page.
    pub(crate) const BODY: &str = "body";
    /// Every form that posts.
    pub(crate) const POST_FORMS: &str = r#"form[method="post"]"#;
    /// What a `read` session's pages say (the header's badge).
    pub(crate) const READ_ONLY: &str = "read only";
    /// The home page's sign-out button.
    pub(crate) const SIGN_OUT: &str = r#"form[action="/console/sign-out"] button"#;
    /// The home page's sign-out-everywhere button.
    pub(crate) const SIGN_OUT_EVERYWHERE: &str =
        r#"form[action="/console/sign-out-everywhere"] button"#;
    /// The session cookie.
    pub(crate) const SESSION_COOKIE: &str = "kxp_session";

    /// The CSRF input of the form posting to `action`.
    pub(crate) fn csrf_of(action: &str) -> String {
        format!(r#"form[action="{action}"] input[name="csrf_token"]"#)
    }
}

/// A running server with its operator and merchant.
pub(crate) struct Console {
    pub server: Server,
    /// `http://127.0.0.1:<port>`
    pub base: String,
    /// The operator's key (`kxp_op_…`), for the key form.
    pub operator_key: String,
    /// The merchant's account id (`acc_…`).
    pub shop_id: String,
    /// The merchant's API client (its account key): it asks for portal links.
    pub shop: kxp_api::Client,
    _dir: tempfile::TempDir,
}

impl Console {
    /// Starts the server in `--dev` mode on a fresh SQLite file.
    pub(crate) async fn start() -> Console {
        Console::start_with(|_| {}).await
    }

    /// [`Console::start`] with a retry schedule of `schedule` (no jitter) and the circuit
    /// breaker out of the way: deliveries to a failing receiver go dead within moments.
    pub(crate) async fn start_with_schedule(schedule: &str) -> Console {
        let schedule = schedule
            .parse::<kxp_sender::Schedule>()
            .unwrap()
            .with_jitter(0.0)
            .unwrap();
        Console::start_with(move |config| {
            config.schedule = schedule;
            config.protection = kxp_sender::Protection {
                breaker_failures: u32::MAX,
                ..kxp_sender::Protection::default()
            };
        })
        .await
    }

    /// [`Console::start`], with `tweak` applied to the configuration first.
    pub(crate) async fn start_with(tweak: impl FnOnce(&mut Config)) -> Console {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config {
            database_url: format!("sqlite://{}", dir.path().join("kxp.db").display()),
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            dev: true,
            api_key: Some("kxp_console_test_key".to_owned()),
            poll_interval: Duration::from_millis(20),
            ..Config::default()
        };
        tweak(&mut config);
        let server = kxp_sender::start(config).await.unwrap();
        let base = format!("http://{}", server.addr());
        // As `kxp operators create` does.
        let (_, operator_key) = server.db().create_operator(OPERATOR).await.unwrap();
        let operator = kxp_api::Client::new(&base, &operator_key).unwrap();
        let shop = operator
            .create_account(&NewAccount::new(SHOP))
            .await
            .unwrap();
        let shop_id = shop.account.id.as_str().to_owned();
        let shop = kxp_api::Client::new(&base, shop.api_key.expose()).unwrap();
        Console {
            server,
            base,
            operator_key,
            shop_id,
            shop,
            _dir: dir,
        }
    }

    /// Stops the server.
    pub(crate) async fn shutdown(self) {
        self.server.shutdown().await;
    }

    /// The absolute URL of `path` on this server.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The operator's API client (its operator key).
    pub(crate) fn operator(&self) -> kxp_api::Client {
        kxp_api::Client::new(&self.base, &self.operator_key).unwrap()
    }

    /// The path of the merchant's account page `rest` (`""`, or starting with `/`).
    pub(crate) fn shop_path(&self, rest: &str) -> String {
        format!("/console/a/{}{rest}", self.shop_id)
    }

    /// Posts a form to `path` as a plain HTTP client (no browser) holding the session cookie
    /// `session`, with `fields`; answers the status (redirects are not followed).
    pub(crate) async fn post_form(
        &self,
        session: &str,
        path: &str,
        fields: &[(&str, &str)],
    ) -> u16 {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        // URL-encoded as a form is (reqwest's `form` feature is off).
        let mut encoded = reqwest::Url::parse("http://form.invalid/").unwrap();
        encoded.query_pairs_mut().extend_pairs(fields);
        let body = encoded.query().unwrap_or_default().to_owned();
        http.post(self.url(path))
            .header(
                reqwest::header::COOKIE,
                format!("{}={session}", css::SESSION_COOKIE),
            )
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST {path}: {e}"))
            .status()
            .as_u16()
    }

    /// Where a merchant's session lands: its account's first page.
    pub(crate) fn merchant_home(&self) -> String {
        format!("/console/a/{}", self.shop_id)
    }

    /// A new portal link of the merchant's, of `scope`, valid 15 minutes.
    pub(crate) async fn link(&self, scope: PortalScope) -> PortalLink {
        self.link_with(NewPortalLink::new(scope)).await
    }

    /// A new portal link of the merchant's, as `new` asks.
    pub(crate) async fn link_with(&self, new: NewPortalLink) -> PortalLink {
        let link = self.shop.create_portal_link(&new).await.unwrap();
        assert!(
            link.url.starts_with(&self.url("/console/sign-in/")),
            "{}",
            link.url
        );
        link
    }

    /// Signs `b` in as the merchant with a fresh link of `scope`: its page, its button, the
    /// account's pages.
    pub(crate) async fn sign_in(&self, b: &Browser, scope: PortalScope) {
        let link = self.link(scope).await;
        b.goto(&link.url).await;
        b.submit(css::SUBMIT).await;
        assert_eq!(
            b.path().await,
            self.merchant_home(),
            "{}",
            b.text("body").await
        );
    }

    /// Signs `b` in as the operator, through the key form.
    pub(crate) async fn sign_in_as_operator(&self, b: &Browser) {
        b.goto(&self.url(paths::SIGN_IN)).await;
        b.type_into(css::KEY, &self.operator_key).await;
        b.submit(css::SUBMIT).await;
        assert_eq!(b.path().await, paths::HOME, "{}", b.text("body").await);
    }
}

/// Waits until this process's clock (the server's: it runs in this process) is past
/// `unix_ms`: a capped wait on the condition the server checks (`expires_at > now`), not a
/// guessed delay.
pub(crate) async fn until_past(unix_ms: i64) {
    let deadline = Instant::now() + WAIT;
    while kxp_sender::now_ms() <= unix_ms {
        assert!(
            Instant::now() < deadline,
            "the clock did not pass {unix_ms} within {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
