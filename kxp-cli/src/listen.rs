//! `kxp listen`: a platform's real events on a merchant's laptop, with no tunnel and no public
//! URL. It makes a temporary pull endpoint for the account, long-polls its feed, and POSTs each
//! event to the local receiver with the body byte for byte and signature headers made at
//! forwarding time; then commits the cursor past it. Ctrl-C deletes the endpoint.
//!
//! The API key (or a listen token, which can do nothing else) is used only to create and delete
//! the temporary endpoint: the feed is read, and the cursor committed, with the feed key
//! derived from the endpoint's secret.

use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use kxp_api::{Client, FeedItem, NewEndpoint};
use kxp_catchup::{Answer, Credential, FeedClient, FeedError};
use kxp_verify::{Secret, Signer};
use reqwest::Url;
use reqwest::header::{CONTENT_TYPE, USER_AGENT};
use serde::Serialize;

use crate::send::{parse_timeout, parse_url};

/// `User-Agent` of each forwarded request: the local receiver can tell `kxp listen` from a
/// real delivery.
const USER_AGENT_VALUE: &str = concat!("kxp-listen/", env!("CARGO_PKG_VERSION"));

/// How long a long poll waits at the sender for the next event.
const WAIT_SECONDS: u32 = 30;

/// Items per page.
const PAGE: u32 = 100;

/// The first pause before forwarding an event the local receiver refused again; it doubles
/// up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);

/// The longest pause between two tries of one event, or two attempts to reach the sender.
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// How often a session that is only retrying an event tells the sender it is still there: well
/// within the sender's idle timeout for temporary endpoints (10 minutes).
const HEARTBEAT: Duration = Duration::from_secs(60);

#[derive(Args)]
#[command(group = clap::ArgGroup::new("credential").required(true).args(["api_key", "token"]))]
pub(crate) struct ListenArgs {
    /// Where each event is POSTed: the local receiver's webhook URL.
    #[arg(long, value_name = "URL", value_parser = parse_url)]
    forward_to: Url,
    /// The sender's base URL.
    #[arg(
        long,
        value_name = "URL",
        env = "KXP_SERVER",
        default_value = "http://127.0.0.1:8080"
    )]
    api_url: String,
    /// The account's API key: used only to create and delete the temporary endpoint.
    #[arg(long, env = "KXP_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// A listen token (`kxp_lt_…`, from the console's "Listen locally" or `POST
    /// /v1/listen-tokens`) instead of an API key: it can do nothing but this.
    #[arg(
        long,
        env = "KXP_LISTEN_TOKEN",
        hide_env_values = true,
        conflicts_with = "api_key"
    )]
    token: Option<String>,
    /// An event type to forward (exact, or a prefix ending in `*`); repeat for several.
    /// Default: every type.
    #[arg(long = "events", value_name = "TYPE")]
    events: Vec<String>,
    /// One JSON object per try of an event instead of a line (after the `Signing secret:` and
    /// `Ready:` lines): event_id, type, sequence, status, duration_ms, error.
    #[arg(long)]
    json: bool,
    /// Skip an event the local receiver refuses (or cannot be reached for) instead of
    /// forwarding it again after a short backoff.
    #[arg(long)]
    no_retry: bool,
    /// Seconds to wait for the local receiver's answer to each event; fractions allowed.
    #[arg(long, value_name = "SECS", default_value = "10", value_parser = parse_timeout)]
    timeout: Duration,
}

pub(crate) fn listen(args: ListenArgs) -> ExitCode {
    crate::admin::run(run(args))
}

async fn run(args: ListenArgs) -> Result<(), String> {
    let credential = args
        .token
        .as_deref()
        .or(args.api_key.as_deref())
        .unwrap_or_default();
    let api = Client::new(&args.api_url, credential).map_err(|e| e.to_string())?;
    let mut new = NewEndpoint::pull().temporary();
    if !args.events.is_empty() {
        new.event_types = Some(args.events.clone());
    }
    new.description = Some(format!("kxp listen to {}", args.forward_to));
    let created = api
        .create_endpoint(&new)
        .await
        .map_err(|e| format!("creating the temporary endpoint failed: {e}"))?;
    let id = created.endpoint.id;
    let secret_text = created
        .secret
        .as_ref()
        .map(|s| s.expose().to_owned())
        .ok_or("the sender answered a pull endpoint without a secret")?;
    let types = created.endpoint.event_types.join(", ");
    // The secret first, on a line of its own, so the local receiver can be started with it.
    println!("Signing secret: {secret_text}");
    println!(
        "Ready: forwarding {types} to {} (endpoint {id}; Ctrl-C stops)",
        args.forward_to
    );
    let _ = std::io::stdout().flush();
    let secret = Secret::new(&secret_text).map_err(|e| e.to_string())?;
    let forwarder = Forwarder::new(&args, id.as_str(), secret)?;
    let forwarded = tokio::select! {
        forwarded = forwarder.run() => forwarded,
        () = crate::serve::stop_signal() => Ok(()),
    };
    match api.delete_endpoint(&id).await {
        Ok(_) => eprintln!("Deleted the temporary endpoint {id}."),
        Err(e) => eprintln!(
            "warning: the temporary endpoint {id} could not be deleted ({e}); the sender \
             removes it once no one has read it for 10 minutes"
        ),
    }
    forwarded
}

/// What forwards the feed's events to the local receiver.
struct Forwarder {
    feed: FeedClient,
    endpoint_id: String,
    signer: Signer,
    http: reqwest::Client,
    forward_to: Url,
    json: bool,
    retry: bool,
}

impl Forwarder {
    fn new(args: &ListenArgs, endpoint_id: &str, secret: Secret) -> Result<Forwarder, String> {
        let feed = FeedClient::new(&args.api_url, Credential::Secret(secret.clone()))
            .map_err(|e| e.to_string())?;
        // Redirects are reported, not followed, as `kxp send` does.
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(args.timeout)
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Forwarder {
            feed,
            endpoint_id: endpoint_id.to_owned(),
            signer: Signer::new(secret),
            http,
            forward_to: args.forward_to.clone(),
            json: args.json,
            retry: !args.no_retry,
        })
    }

    /// Forwards until the endpoint is gone. Where it stands is kept here, not re-read from the
    /// sender: a commit the sender missed (it was down) is made again before the next read,
    /// and nothing it forwarded is forwarded twice.
    async fn run(&self) -> Result<(), String> {
        let mut position = None;
        let mut uncommitted = None;
        let mut outage = Outage::default();
        loop {
            if let Some(sequence) = uncommitted {
                match self.feed.commit(&self.endpoint_id, sequence).await {
                    Ok(_) => uncommitted = None,
                    Err(e) => {
                        outage.wait(&e).await?;
                        continue;
                    }
                }
            }
            let after = match position {
                Some(after) => after,
                None => match self.feed.cursor(&self.endpoint_id).await {
                    Ok(cursor) => *position.insert(cursor.sequence),
                    Err(e) => {
                        outage.wait(&e).await?;
                        continue;
                    }
                },
            };
            let page = self
                .feed
                .page_waiting(&self.endpoint_id, after, PAGE, WAIT_SECONDS)
                .await;
            match page {
                Ok(Answer::Page(page)) => {
                    outage.over();
                    // Committed once per page (the feed takes 20 requests a second): where it
                    // stands is kept here meanwhile, so nothing is forwarded twice.
                    for item in page.items {
                        self.forward(&item).await;
                        position = Some(item.sequence);
                        uncommitted = Some(item.sequence);
                    }
                }
                Ok(Answer::Purged { earliest }) => {
                    eprintln!(
                        "warning: the sender's retention purged events {} to {} before they were \
                         read; going on from {earliest}",
                        after + 1,
                        earliest - 1
                    );
                    position = Some(earliest - 1);
                    uncommitted = Some(earliest - 1);
                }
                Err(e) => outage.wait(&e).await?,
            }
        }
    }

    /// Forwards `item` until the local receiver answers 2xx (or once, with `--no-retry`),
    /// printing each try.
    async fn forward(&self, item: &FeedItem) {
        if let Some(gone) = item.gone() {
            // Nothing to forward: the sender no longer holds the event's payload.
            let skipped = Tried {
                status: None,
                duration_ms: 0,
                error: Some(format!("skipped: its payload was {gone}")),
            };
            self.print(item, &skipped, None);
            return;
        }
        let mut backoff = FIRST_BACKOFF;
        let mut told = Instant::now();
        loop {
            let tried = self.try_once(item).await;
            let delivered = tried.status.is_some_and(|s| (200..300).contains(&s));
            self.print(item, &tried, (!delivered && self.retry).then_some(backoff));
            if delivered || !self.retry {
                return;
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
            // While the local receiver is down, the sender still hears from this session now
            // and then (reading the cursor counts as reading), or it would remove the
            // temporary endpoint as abandoned.
            if told.elapsed() >= HEARTBEAT {
                let _ = self.feed.cursor(&self.endpoint_id).await;
                told = Instant::now();
            }
        }
    }

    /// One POST of the item's body, signed now.
    async fn try_once(&self, item: &FeedItem) -> Tried {
        let started = Instant::now();
        let signature = self.signer.sign_now(item.body.as_bytes()).to_string();
        let sent = self
            .http
            .post(self.forward_to.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(USER_AGENT, USER_AGENT_VALUE)
            .header("X-Kxp-Signature", signature)
            .header("X-Kxp-Event-Id", item.event_id.as_str())
            .header("X-Kxp-Event-Type", &item.event_type)
            .body(item.body.clone())
            .send()
            .await;
        let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        match sent {
            Ok(response) => {
                let status = response.status().as_u16();
                Tried {
                    status: Some(status),
                    duration_ms,
                    error: (!(200..300).contains(&status)).then(|| format!("http_{status}")),
                }
            }
            Err(e) => Tried {
                status: None,
                duration_ms,
                error: Some(if e.is_timeout() {
                    "timeout".to_owned()
                } else if e.is_connect() {
                    "connection_refused".to_owned()
                } else {
                    e.without_url().to_string()
                }),
            },
        }
    }

    fn print(&self, item: &FeedItem, tried: &Tried, again_in: Option<Duration>) {
        if self.json {
            let line = Line {
                event_id: item.event_id.as_str(),
                event_type: &item.event_type,
                sequence: item.sequence,
                status: tried.status,
                duration_ms: tried.duration_ms,
                error: tried.error.as_deref(),
            };
            println!("{}", serde_json::to_string(&line).unwrap_or_default());
        } else {
            let now = time::OffsetDateTime::now_utc();
            let outcome = match (&tried.status, &tried.error) {
                (Some(status), None) => format!("{status}"),
                (Some(status), Some(_)) => format!("{status} (refused)"),
                (None, Some(error)) => error.clone(),
                (None, None) => "?".to_owned(),
            };
            let again = again_in.map_or(String::new(), |d| {
                format!("; forwarding it again in {} s", d.as_secs())
            });
            println!(
                "{:02}:{:02}:{:02}  {}  {}  -> {outcome}  {} ms{again}",
                now.hour(),
                now.minute(),
                now.second(),
                item.event_type,
                item.event_id,
                tried.duration_ms
            );
        }
        let _ = std::io::stdout().flush();
    }
}

/// One try of forwarding an event.
struct Tried {
    status: Option<u16>,
    duration_ms: u64,
    error: Option<String>,
}

/// `--json`'s line per try.
#[derive(Serialize)]
struct Line<'a> {
    event_id: &'a str,
    #[serde(rename = "type")]
    event_type: &'a str,
    sequence: u64,
    status: Option<u16>,
    duration_ms: u64,
    error: Option<&'a str>,
}

/// The sender being out of reach: said once when it starts and once when it ends, waited out
/// with a jittered backoff between tries.
#[derive(Default)]
struct Outage {
    since: Option<Instant>,
    backoff: Duration,
}

impl Outage {
    /// Waits before the next try after `error`; an error that waiting cannot mend (the endpoint
    /// is gone, the credential refused) ends `kxp listen`.
    async fn wait(&mut self, error: &FeedError) -> Result<(), String> {
        if let FeedError::Unauthorized = error {
            return Err(
                "the sender no longer knows the temporary endpoint (deleted, or removed after \
                 10 minutes without a reader); start kxp listen again"
                    .to_owned(),
            );
        }
        if let FeedError::RateLimited(after) = error {
            tokio::time::sleep(*after).await;
            return Ok(());
        }
        if self.since.is_none() {
            eprintln!("The sender is unreachable ({}); retrying…", error.code());
            self.since = Some(Instant::now());
            self.backoff = Duration::from_millis(500);
        }
        tokio::time::sleep(jittered(self.backoff)).await;
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        Ok(())
    }

    /// The sender answered again.
    fn over(&mut self) {
        if let Some(since) = self.since.take() {
            eprintln!(
                "The sender is back after {} s; resuming.",
                since.elapsed().as_secs()
            );
        }
    }
}

/// `pause` times a random factor from 0.5 to 1: many `kxp listen` sessions do not all come
/// back to a restarted sender at once.
fn jittered(pause: Duration) -> Duration {
    let mut byte = [0u8; 1];
    let random = getrandom::fill(&mut byte).map_or(0.5, |()| f64::from(byte[0]) / 255.0);
    pause.mul_f64(0.5 + random / 2.0)
}
