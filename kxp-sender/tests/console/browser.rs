//! The harness: a headless Chromium driven over WebDriver, through a chromedriver this test
//! starts on a free loopback port and kills when done (also when the test panics: the whole
//! process group, so no browser outlives it). It knows nothing of the console; `app.rs` does.
//!
//! Where Chromium or chromedriver is not installed, [`Browser::start`] writes
//! `SKIPPED (browser): …` to stderr and returns `None` (the test passes), unless
//! `KXP_REQUIRE_BROWSER=1`: then it panics. Every wait is a capped WebDriver wait on a page
//! condition ([`WAIT`] at most), never a fixed sleep.

use std::io::Write;
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use fantoccini::cookies::Cookie;
use fantoccini::elements::Element;
use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde::Deserialize;
use serde_json::{Value, json};

/// Set to `1`, a missing browser fails the test instead of skipping it (CI sets it).
pub(crate) const REQUIRE_ENV: &str = "KXP_REQUIRE_BROWSER";
/// A directory: [`Browser::screenshot`] saves `<name>.png` there. Unset: no screenshots.
pub(crate) const SCREENSHOTS_ENV: &str = "KXP_SCREENSHOTS";
/// A path to another `axe.min.js` than the checked-in one (`assets/axe.min.js`).
pub(crate) const AXE_ENV: &str = "KXP_AXE_JS";
/// The Chromium binary, when not `chromium` on `PATH`.
pub(crate) const CHROMIUM_ENV: &str = "KXP_CHROMIUM";
/// The chromedriver binary, when not `chromedriver` on `PATH`.
pub(crate) const CHROMEDRIVER_ENV: &str = "KXP_CHROMEDRIVER";

/// The longest any wait for a page goes: a cap, not a delay (waits end as soon as the page is
/// there).
pub(crate) const WAIT: Duration = Duration::from_secs(20);

/// How often a wait looks again.
const POLL: Duration = Duration::from_millis(25);

/// Chromium's flags: headless, and quiet on a machine whose network is closed (no background
/// requests, updates, sync or QUIC probes). The profile is a fresh `--user-data-dir` per test.
const CHROMIUM_FLAGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,900",
];

/// axe-core 4.14.1's minified build (MPL-2.0, `assets/LICENSE`), checked in.
const AXE_JS: &str = include_str!("assets/axe.min.js");

/// The attribute [`Browser::submit`] marks the page it leaves with.
const LEFT: &str = "data-kxp-left";

/// A browser session of one test.
pub(crate) struct Browser {
    /// Dropped first (fields drop in order), then the driver is killed.
    client: Client,
    driver: Driver,
}

/// The chromedriver process (in a process group of its own, with the browser it starts) and
/// the directory of its log and of the browser's profile.
struct Driver {
    child: Child,
    dir: tempfile::TempDir,
}

impl Driver {
    fn log(&self) -> PathBuf {
        self.dir.path().join("chromedriver.log")
    }

    /// The end of chromedriver's log, for failure messages.
    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.log()).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

impl Drop for Driver {
    /// Kills chromedriver's process group (chromedriver, Chromium and its helpers), by the
    /// group's id, which is chromedriver's pid: this test's own processes and no others.
    fn drop(&mut self) {
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill")
            .args(["-KILL", "--", &group])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One axe-core violation: a rule and the elements that break it.
#[derive(Clone, Debug, Deserialize)]
pub(crate) struct Violation {
    /// The rule, e.g. `color-contrast`.
    pub id: String,
    /// `minor`, `moderate`, `serious` or `critical`.
    pub impact: Option<String>,
    /// What the rule asks, in words.
    pub help: String,
    /// A CSS selector of each element found.
    pub targets: Vec<String>,
}

impl Violation {
    /// Whether the issue's bar forbids it: `serious` or `critical`.
    pub(crate) fn is_serious(&self) -> bool {
        matches!(self.impact.as_deref(), Some("serious" | "critical"))
    }
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} ({}) at {}",
            self.impact.as_deref().unwrap_or("?"),
            self.id,
            self.help,
            self.targets.join(", ")
        )
    }
}

/// What one `axe.run()` found.
#[derive(Debug, Deserialize)]
pub(crate) struct Axe {
    /// How many rules passed: more than none, or axe did not really run.
    pub passes: usize,
    /// Every violation, of any impact.
    pub violations: Vec<Violation>,
}

/// `name` in `$env`, else the first of `names` found on `PATH`.
fn program(env: &str, names: &[&str]) -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(env).filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(path)).filter(|p| p.is_file());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| names.iter().map(move |name| dir.join(name)))
        .find(|p| p.is_file())
}

/// The browser is missing: a loud skip, or a failure under [`REQUIRE_ENV`].
fn missing(what: &str) -> Option<Browser> {
    let why = format!(
        "{what} (Debian: apt-get install chromium chromium-driver; or set {CHROMIUM_ENV} and \
         {CHROMEDRIVER_ENV})"
    );
    assert!(
        std::env::var(REQUIRE_ENV).as_deref() != Ok("1"),
        "{REQUIRE_ENV}=1 but {why}"
    );
    // The stderr handle itself, not `eprintln!`: libtest captures the macro's output of a
    // passing test, and a skip nobody sees is a silent pass.
    let _ = writeln!(std::io::stderr(), "SKIPPED (browser): {why}");
    None
}

/// A port nobody listens on just now, on 127.0.0.1.
fn free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    listener.local_addr().unwrap().port()
}

/// The axe-core source: [`AXE_ENV`]'s file, or the checked-in one.
fn axe_source() -> &'static str {
    static SOURCE: OnceLock<String> = OnceLock::new();
    SOURCE.get_or_init(
        || match std::env::var_os(AXE_ENV).filter(|p| !p.is_empty()) {
            Some(path) => std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{AXE_ENV}={}: {e}", Path::new(&path).display())),
            None => AXE_JS.to_owned(),
        },
    )
}

impl Browser {
    /// Starts chromedriver and a headless Chromium session; `None` (after the `SKIPPED` line)
    /// where either is not installed. Panics if they are installed but do not start.
    pub(crate) async fn start() -> Option<Browser> {
        let Some(chromium) = program(CHROMIUM_ENV, &["chromium", "chromium-browser"]) else {
            return missing("Chromium is not installed");
        };
        let Some(chromedriver) = program(CHROMEDRIVER_ENV, &["chromedriver"]) else {
            return missing("chromedriver is not installed");
        };
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let log = dir.path().join("chromedriver.log");
        let child = Command::new(&chromedriver)
            .arg(format!("--port={port}"))
            .arg(format!("--log-path={}", log.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // A group of its own, so that [`Driver::drop`] kills the browser with it.
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", chromedriver.display()));
        let mut driver = Driver { child, dir };

        // Listening yet? (A capped wait on the condition.)
        let deadline = Instant::now() + WAIT;
        while TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_err() {
            if let Some(status) = driver.child.try_wait().unwrap() {
                panic!(
                    "chromedriver exited ({status}) before listening:\n{}",
                    driver.log_tail()
                );
            }
            assert!(
                Instant::now() < deadline,
                "chromedriver did not listen on port {port} within {WAIT:?}:\n{}",
                driver.log_tail()
            );
            tokio::time::sleep(POLL).await;
        }

        let profile = driver.dir.path().join("profile");
        let mut args: Vec<String> = CHROMIUM_FLAGS.iter().map(ToString::to_string).collect();
        args.push(format!("--user-data-dir={}", profile.display()));
        let capabilities = json!({
            "browserName": "chrome",
            "goog:chromeOptions": { "binary": chromium, "args": args },
        });
        let Value::Object(capabilities) = capabilities else {
            unreachable!()
        };
        let client = ClientBuilder::new(HttpConnector::new())
            .capabilities(capabilities)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "no browser session from chromedriver: {e}\n{}",
                    driver.log_tail()
                )
            });
        Some(Browser { client, driver })
    }

    /// Ends the session (Chromium quits) and chromedriver.
    pub(crate) async fn close(self) {
        let Browser { client, driver } = self;
        let _ = client.close().await;
        drop(driver);
    }

    /// Opens `url` and waits for it to load.
    pub(crate) async fn goto(&self, url: &str) {
        if let Err(e) = self.client.goto(url).await {
            panic!("GET {url}: {e}");
        }
    }

    /// The current page's path (e.g. `/console/sign-in`).
    pub(crate) async fn path(&self) -> String {
        self.client.current_url().await.unwrap().path().to_owned()
    }

    /// The HTTP status the current page came with (the last response, after redirects).
    pub(crate) async fn status(&self) -> u16 {
        let status = self
            .execute(
                "const n = performance.getEntriesByType('navigation')[0]; \
                 return n ? n.responseStatus : null;",
                vec![],
            )
            .await;
        let status = status.as_u64().unwrap_or_else(|| {
            panic!("no navigation status on this page: {status}");
        });
        u16::try_from(status).unwrap()
    }

    /// The element `css` selects, waiting for it ([`WAIT`] at most).
    pub(crate) async fn find(&self, css: &str) -> Element {
        self.wait_for(Locator::Css(css), css).await
    }

    /// The first element whose text contains `text` among those `css` selects, waiting for one
    /// ([`WAIT`] at most: a capped wait on the condition, looked at every few milliseconds).
    pub(crate) async fn find_text(&self, css: &str, text: &str) -> Element {
        let deadline = Instant::now() + WAIT;
        loop {
            for element in self.client.find_all(Locator::Css(css)).await.unwrap() {
                if element.text().await.unwrap_or_default().contains(text) {
                    return element;
                }
            }
            assert!(
                Instant::now() < deadline,
                "no `{css}` with the text {text:?} on {} within {WAIT:?}; the page says:\n{}",
                self.path().await,
                self.body_text().await
            );
            tokio::time::sleep(POLL).await;
        }
    }

    async fn wait_for(&self, locator: Locator<'_>, what: &str) -> Element {
        match self
            .client
            .wait()
            .at_most(WAIT)
            .every(POLL)
            .for_element(locator)
            .await
        {
            Ok(element) => element,
            Err(e) => panic!(
                "no `{what}` on {} within {WAIT:?}: {e}; the page says:\n{}",
                self.path().await,
                self.body_text().await
            ),
        }
    }

    async fn body_text(&self) -> String {
        match self.client.find(Locator::Css("body")).await {
            Ok(body) => body.text().await.unwrap_or_default(),
            Err(e) => format!("(no body: {e})"),
        }
    }

    /// The rendered text of the element `css` selects (waiting for it).
    pub(crate) async fn text(&self, css: &str) -> String {
        self.find(css).await.text().await.unwrap()
    }

    /// How many elements `css` selects now (no wait).
    pub(crate) async fn count(&self, css: &str) -> usize {
        self.client.find_all(Locator::Css(css)).await.unwrap().len()
    }

    /// The attribute `name` of every element `css` selects now (no wait); `""` where unset.
    pub(crate) async fn attrs(&self, css: &str, name: &str) -> Vec<String> {
        let mut values = Vec::new();
        for element in self.client.find_all(Locator::Css(css)).await.unwrap() {
            values.push(element.attr(name).await.unwrap().unwrap_or_default());
        }
        values
    }

    /// Types `text` into the field `css` selects.
    pub(crate) async fn type_into(&self, css: &str, text: &str) {
        self.find(css).await.send_keys(text).await.unwrap();
    }

    /// Clicks the button `css` selects and waits for the page that answers (a form post or a
    /// link followed): the page it left is marked, and the wait ends when a document without
    /// the mark has loaded.
    pub(crate) async fn submit(&self, css: &str) {
        let button = self.find(css).await;
        self.execute(
            &format!("document.documentElement.setAttribute('{LEFT}', '');"),
            vec![],
        )
        .await;
        button.click().await.unwrap();
        self.wait_for(
            Locator::Css(&format!("html:not([{LEFT}])")),
            "the next page",
        )
        .await;
    }

    /// Sets the `value` of the element `css` selects (a hidden input, say), by script.
    pub(crate) async fn set_value(&self, css: &str, value: &str) {
        let done = self
            .execute(
                "const e = document.querySelector(arguments[0]); \
                 if (!e) return false; e.value = arguments[1]; return true;",
                vec![json!(css), json!(value)],
            )
            .await;
        assert_eq!(done, json!(true), "no `{css}` to set");
    }

    /// Removes the element `css` selects from the page, by script.
    pub(crate) async fn remove(&self, css: &str) {
        let done = self
            .execute(
                "const e = document.querySelector(arguments[0]); \
                 if (!e) return false; e.remove(); return true;",
                vec![json!(css)],
            )
            .await;
        assert_eq!(done, json!(true), "no `{css}` to remove");
    }

    /// Runs `script` (a function body; `arguments` are `args`) in the page and returns its
    /// value. WebDriver's scripts are not the page's: its Content-Security-Policy does not
    /// block them (`security.rs` checks that it blocks the page's own).
    pub(crate) async fn execute(&self, script: &str, args: Vec<Value>) -> Value {
        match self.client.execute(script, args).await {
            Ok(value) => value,
            Err(e) => panic!("script failed: {e}"),
        }
    }

    /// The cookie `name` as the current page sees it (HttpOnly ones too), if it is set.
    pub(crate) async fn cookie(&self, name: &str) -> Option<Cookie<'static>> {
        self.client
            .get_all_cookies()
            .await
            .unwrap()
            .into_iter()
            .find(|c| c.name() == name)
    }

    /// Sets a cookie `name=value` for the current page's host on `path`, as a script of the
    /// page would (so not HttpOnly). By script: fantoccini's `add_cookie` sends `"domain":
    /// null`, which chromedriver refuses, and a `Domain` of an IP address is no cookie at all.
    pub(crate) async fn add_cookie(&self, name: &str, value: &str, path: &str) {
        self.execute(
            "document.cookie = `${arguments[0]}=${arguments[1]}; path=${arguments[2]}; \
             samesite=strict`;",
            vec![json!(name), json!(value), json!(path)],
        )
        .await;
        // The cookies the current page sees (it must be on `path`).
        let found = self.client.get_all_cookies().await.unwrap();
        assert!(
            found.iter().any(|c| c.name() == name && c.value() == value),
            "the cookie {name} was not set: {found:?}"
        );
    }

    /// Forgets every cookie of the current page's origin.
    pub(crate) async fn delete_all_cookies(&self) {
        self.client.delete_all_cookies().await.unwrap();
    }

    /// Saves a PNG of the window as `$KXP_SCREENSHOTS/<name>.png`; nothing without it.
    pub(crate) async fn screenshot(&self, name: &str) {
        let Some(dir) = std::env::var_os(SCREENSHOTS_ENV).filter(|d| !d.is_empty()) else {
            return;
        };
        let png = self.client.screenshot().await.unwrap();
        std::fs::create_dir_all(&dir).unwrap();
        let path = Path::new(&dir).join(format!("{name}.png"));
        std::fs::write(&path, png).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }

    /// Runs axe-core on the current page: injected through WebDriver (the console's CSP
    /// forbids every script of the page's own, not WebDriver's), then `axe.run(document)`.
    pub(crate) async fn axe(&self) -> Axe {
        let loaded = self
            .execute(
                &format!("{}\n;return typeof window.axe;", axe_source()),
                vec![],
            )
            .await;
        assert_eq!(loaded, json!("object"), "axe-core did not load");
        let result = self
            .client
            .execute_async(
                r"const done = arguments[arguments.length - 1];
                window.axe.run(document, { resultTypes: ['violations'] }).then(
                    (r) => done({
                        passes: r.passes.length,
                        violations: r.violations.map((v) => ({
                            id: v.id,
                            impact: v.impact,
                            help: v.help,
                            targets: v.nodes.map((n) => n.target.flat().join(' ')),
                        })),
                    }),
                    (e) => done({ error: String(e) }),
                );",
                vec![],
            )
            .await
            .unwrap_or_else(|e| panic!("axe.run: {e}"));
        assert!(result.get("error").is_none(), "axe.run: {result}");
        serde_json::from_value(result).unwrap()
    }
}

/// What axe found on the pages a test visited, page by page (each also screenshotted).
#[derive(Default)]
pub(crate) struct Audit {
    pages: Vec<(String, Vec<Violation>)>,
}

impl Audit {
    /// Screenshots the current page as `name` and runs axe-core on it.
    pub(crate) async fn page(&mut self, b: &Browser, name: &str) {
        b.screenshot(name).await;
        let axe = b.axe().await;
        assert!(axe.passes > 0, "{name}: axe-core ran no rule");
        self.pages.push((name.to_owned(), axe.violations));
    }

    /// Every violation on stderr (the lesser ones too, for the record); fails on a serious
    /// or critical one.
    pub(crate) fn check(self) {
        let mut report = String::new();
        let mut serious = 0;
        for (page, violations) in &self.pages {
            for v in violations {
                serious += usize::from(v.is_serious());
                report.push_str(&format!("{page}: {v}\n"));
            }
        }
        if !report.is_empty() {
            let _ = writeln!(std::io::stderr(), "axe-core found:\n{report}");
        }
        assert_eq!(
            serious,
            0,
            "serious or critical accessibility violations on {} pages:\n{report}",
            self.pages.len()
        );
    }
}
