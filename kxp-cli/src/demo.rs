//! `kxp demo`: the whole system on one machine in about twenty seconds, with nothing to install.
//!
//! The real sender ([`kxp_sender::start`]: SQLite in a temporary folder, development mode, the
//! retry schedule shrunk from a day and a half to six seconds) delivers a few hundred events,
//! emitted through its public HTTP API as a payment platform's code would, to an in-process
//! receiver built from kxp-axum and kxp-dedup that misbehaves on purpose ([`receiver`]): down,
//! then flaky, with one endpoint broken until the demo fixes it. The outage and the broken
//! endpoint open circuit breakers: their deliveries are held without using up retries, probed,
//! and drained at the rate limit once a probe succeeds. A few payments are rejected by the
//! shop on every try: too sparse to open the circuit, they use up their schedule and go dead,
//! and once the shop is fixed the demo replays the dead-letter queue through the API.
//! The receiver's ledger is the evidence: the command exits non-zero unless every emitted event
//! was processed exactly once ([`report::verdict`]).
//!
//! With `--keep-running` the sender and the receiver stay up after the verdict: a few more
//! payments go dead on purpose and stay dead, and the demo prints a portal link to the
//! sender's console, where they wait to be replayed ([`Stage::keep_running`]), until Ctrl-C.
//!
//! This file is the narrative: the command, the run from start to verdict, and the [`Watch`]
//! that narrates and replays. The calls it makes through [`kxp_api::Client`] are in [`api`],
//! the receiver in [`receiver`], the figures and the verdict in [`report`], the temporary
//! folder and the seed in [`sandbox`].

mod api;
mod receiver;
mod report;
mod sandbox;

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use clap::Args;
use kxp_api::{BulkReplay, CircuitState, Client, DeliveryStatus, EndpointId, EventId};
use kxp_sender::Protection;
use kxp_sender::{Config, Schedule};
use tokio::task::JoinHandle;

use self::api::{all_deliveries, client, create_endpoint, emit_all, set_ops_url};
use self::receiver::{ENDPOINT_TIMEOUT, FlakyReceiver, Phase, Reserved};
use self::report::{Deliveries, Live, Progress};
use self::sandbox::{TempDir, random_seed};

#[derive(Args)]
pub(crate) struct DemoArgs {
    /// How many events to emit; every tenth is a refund, for the endpoint that is broken at
    /// first.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    events: u64,
    /// Seed of the receiver's flaky pattern (random by default, and printed, so that a run
    /// can be repeated).
    #[arg(long)]
    seed: Option<u64>,
    /// Print a plain progress line every second instead of a progress bar (automatic when
    /// stdout is not a terminal).
    #[arg(long)]
    no_progress: bool,
    /// After the verdict, keep the sender and the receiver running, leave a few dead
    /// deliveries to replay, and print a link that signs in to the sender's console; Ctrl-C
    /// stops.
    #[arg(long)]
    keep_running: bool,
}

/// The demo's retry schedule: the default's nine tries, over six seconds instead of a day and
/// a half, with the default ±25 % jitter.
const SCHEDULE: &str = "0s,200ms,500ms,1s,2s,3s,4s,5s,6s";

/// Events are emitted at this pace (a payment every 40 ms), over at most [`MAX_EMISSION`].
const EMIT_EVERY: Duration = Duration::from_millis(40);
const MAX_EMISSION: Duration = Duration::from_secs(15);

/// After the last event is emitted, everything must settle within this.
const SETTLE_WITHIN: Duration = Duration::from_secs(40);

/// The payments the shop rejects are emitted at least this long before the last event, so
/// that their schedule (six seconds, more with jitter and the outage's hold) runs out while
/// other payments still succeed in between: the rejections stay sparse.
const REJECT_CLEAR_OF_END: Duration = Duration::from_secs(8);

/// The circuit breaker at the demo's pace: it opens during the receiver's outage and on the
/// broken refunds route, probes every second or two, and drains held deliveries at 100/s. It
/// takes more failures in a row than one delivery has tries, so a rejected payment alone
/// never opens it: its schedule runs out and it goes dead.
const PROTECTION: Protection = Protection {
    breaker_failures: 10,
    breaker_cooldown: Duration::from_millis(500),
    breaker_cooldown_max: Duration::from_secs(2),
    disable_after: Duration::from_secs(3 * 24 * 60 * 60),
    rate_limit: 100,
};

/// Rounds of "replay what is dead" before giving up.
const MAX_REPLAY_ROUNDS: u32 = 3;

/// `--keep-running`: payments left dead for the console, one in every [`KEPT_EVERY`] of those
/// the shop keeps taking meanwhile, one every [`SHOP_EVERY`].
const KEPT_DEAD: u64 = 3;
const KEPT_EVERY: u64 = 3;
const SHOP_EVERY: Duration = Duration::from_millis(100);

/// `--keep-running`: the kept payments must be dead within this.
const KEPT_DEAD_WITHIN: Duration = Duration::from_secs(30);

/// How long the printed portal link works (the API allows up to 24 h).
const LINK_TTL: Duration = Duration::from_secs(60 * 60);

pub(crate) fn demo(args: DemoArgs) -> ExitCode {
    let bar = !args.no_progress && std::io::stdout().is_terminal();
    let mut progress = Progress::new(bar, args.events);
    // The progress display is the interface: logs only for problems (warn and up), above the
    // bar. The receiver's one line per request is left out: the table counts them, and so are
    // circuit changes: the demo narrates them.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new("warn,kxp_webhooks=off,kxp_sender::circuit=off")
    });
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(progress.log_writer())
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();

    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        tokio::select! {
            result = async {
                let (summary, stage) = run(&args, &mut progress).await?;
                if args.keep_running {
                    return Ok((summary, Some(stage)));
                }
                stage.stop().await?;
                Ok::<_, String>((summary, None))
            } => Some(result),
            // Dropping the run removes its temporary folder.
            _ = tokio::signal::ctrl_c() => None,
        }
    });
    progress.finish();
    let code = match result {
        None => {
            eprintln!("interrupted");
            ExitCode::from(130)
        }
        Some(Err(e)) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
        Some(Ok((summary, stage))) => {
            println!();
            print!("{}", report::table(&summary));
            println!();
            let code = match report::verdict(&summary) {
                Ok(()) => {
                    println!(
                        "OK: {0}/{0} events processed exactly once.",
                        summary.emitted
                    );
                    ExitCode::SUCCESS
                }
                Err(why) => {
                    println!("FAILED: {why}.");
                    ExitCode::FAILURE
                }
            };
            match stage {
                Some(stage) => runtime.block_on(async {
                    let kept = tokio::select! {
                        kept = stage.keep_running(summary.emitted) => kept,
                        _ = tokio::signal::ctrl_c() => Ok(()),
                    };
                    let stopped = stage.stop().await;
                    match kept.and(stopped) {
                        Ok(()) => {
                            println!("stopped: the demo's folder is removed");
                            code
                        }
                        Err(e) => {
                            eprintln!("error: {e}");
                            ExitCode::FAILURE
                        }
                    }
                }),
                None => code,
            }
        }
    };
    // Answers the receiver still holds back (late acknowledgements) are abandoned.
    runtime.shutdown_timeout(Duration::from_secs(1));
    code
}

/// Runs the demo to its summary; the sender and the receiver are still up in the [`Stage`].
/// The secret of an endpoint the demo registered (with HMAC signing, the default).
fn hmac_secret(created: &kxp_api::EndpointCreated) -> Result<&str, String> {
    created.secret.as_ref().map(|s| s.expose()).ok_or_else(|| {
        format!(
            "endpoint {} was registered without a secret",
            created.endpoint.id
        )
    })
}

async fn run(args: &DemoArgs, progress: &mut Progress) -> Result<(report::Summary, Stage), String> {
    let began = Instant::now();
    let seed = args.seed.unwrap_or_else(random_seed);
    let dir = TempDir::new()?;

    let schedule: Schedule = SCHEDULE
        .parse()
        .map_err(|e| format!("the demo's schedule: {e}"))?;
    let config = Config {
        database_url: dir.sqlite_url("sender.db"),
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        dev: true,
        schedule,
        delivery_timeout: ENDPOINT_TIMEOUT,
        poll_interval: Duration::from_millis(50),
        // Fresh and random for this run; the demo keeps it to itself.
        api_key: Some(kxp_sender::random_hex_32()),
        protection: PROTECTION,
        ..Config::default()
    };
    let api_key = config.api_key.clone().unwrap_or_default();
    let sender = kxp_sender::start(config)
        .await
        .map_err(|e| format!("cannot start the sender: {e}"))?;
    let api = client(sender.addr(), api_key)?;

    let reserved = Reserved::new()?;
    let base = format!("http://{}", reserved.addr());
    let payments = create_endpoint(
        &api,
        &format!("{base}/webhooks/payments"),
        "payment.*",
        "kxp demo: the shop (flaky)",
    )
    .await?;
    let refunds = create_endpoint(
        &api,
        &format!("{base}/webhooks/refunds"),
        "refund.*",
        "kxp demo: bookkeeping (broken until fixed)",
    )
    .await?;
    // The merchant's on-call hook: told when a circuit opens or an endpoint is disabled.
    let ops_secret = set_ops_url(&api, &format!("{base}/webhooks/ops")).await?;
    let pace = EMIT_EVERY.min(MAX_EMISSION / u32::try_from(args.events).unwrap_or(u32::MAX));
    // The rejected payments are picked among those emitted early enough.
    let clear_of_end = REJECT_CLEAR_OF_END.as_nanos() / pace.as_nanos().max(1);
    let window = args
        .events
        .saturating_sub(u64::try_from(clear_of_end).unwrap_or(u64::MAX));
    let rejected: std::collections::BTreeSet<u64> = receiver::rejected(seed, window)
        .into_iter()
        .filter(|seq| *seq < args.events)
        .collect();
    let rejected_count = rejected.len();
    let receiver = FlakyReceiver::start(
        reserved,
        &dir.sqlite_url("receiver.db"),
        receiver::Script {
            seed,
            flaky_below: args.events,
            rejected,
        },
        receiver::Secrets {
            payments: hmac_secret(&payments)?,
            refunds: hmac_secret(&refunds)?,
            ops: ops_secret.expose(),
        },
    )
    .await?;
    let (payments, refunds) = (payments.endpoint, refunds.endpoint);
    drop(ops_secret);

    progress.say(&format!(
        "kxp demo: {} events through the real sender to a receiver that misbehaves on purpose (seed {seed})",
        args.events
    ));
    progress.say(&format!(
        "  sender    {} · SQLite in {} · tries at {SCHEDULE} (±25 %)",
        api.base_url().as_str().trim_end_matches('/'),
        dir.path.display()
    ));
    progress.say(&format!(
        "  payments  {base}/webhooks/payments · kxp-axum + kxp-dedup · refuses connections for {:.1}s, answers 503 until {:.1}s, then flaky",
        receiver::NOT_LISTENING_FOR.as_secs_f64(),
        receiver::STARTING_UNTIL.as_secs_f64()
    ));
    if rejected_count > 0 {
        progress.say(&format!(
            "            and a bug in the shop rejects {rejected_count} of the payments (500) on every try until it is fixed"
        ));
    }
    progress.say(&format!(
        "  refunds   {base}/webhooks/refunds · every 10th event · answers 500 to everything until fixed"
    ));
    progress.say(&format!(
        "  ops       {base}/webhooks/ops · the merchant's on-call hook: told when a circuit opens or an endpoint is disabled"
    ));

    let emitted = Arc::new(Mutex::new(Vec::new()));
    let emission = tokio::spawn(emit_all(api.clone(), args.events, pace, emitted.clone()));

    let mut watch = Watch {
        api: &api,
        receiver: &receiver,
        endpoints: [
            (payments.id.clone(), "payments", CircuitState::Closed),
            (refunds.id.clone(), "refunds", CircuitState::Closed),
        ],
        refunds_fixed: false,
        notices_seen: 0,
        payments_dead_seen: 0,
        payments_endpoint: &payments.id,
        refunds_endpoint: &refunds.id,
        progress,
        requested: args.events,
        emitted: &emitted,
    };
    let settled = watch.until_settled(emission).await?;

    let deliveries = Deliveries::of(&all_deliveries(&api).await?);
    let ledger = receiver.ledger().await?;
    let counts = receiver.counts();
    let ids = lock(&emitted).clone();
    let summary = report::summarize(
        args.events,
        &ids,
        &deliveries,
        &counts,
        &ledger,
        settled,
        began.elapsed(),
    );

    let stage = Stage {
        sender,
        receiver,
        api,
        dir,
    };
    Ok((summary, stage))
}

/// The sender and the receiver of a run, still up after its summary.
struct Stage {
    sender: kxp_sender::Server,
    receiver: FlakyReceiver,
    api: Client,
    /// Removed when dropped, after both are stopped.
    dir: TempDir,
}

impl Stage {
    /// Stops the receiver and the sender, then removes the temporary folder; returns the
    /// receiver's error, if it had one.
    async fn stop(self) -> Result<(), String> {
        let Stage {
            sender,
            receiver,
            dir,
            ..
        } = self;
        let stopped = receiver.stop().await;
        sender.shutdown().await;
        drop(dir);
        stopped
    }

    /// `--keep-running`, after the verdict: the shop keeps taking payments (sequence numbers
    /// from `first` on, one every [`SHOP_EVERY`], never flaky) and rejects [`KEPT_DEAD`] of
    /// them on every try until their schedule has run out and they are dead. The successes in
    /// between keep the circuit closed. Then the shop is fixed (a replay goes through), and a
    /// portal link to the console is printed, where the dead deliveries wait to be replayed.
    /// Returns only on an error; Ctrl-C ends it.
    async fn keep_running(&self, first: u64) -> Result<(), String> {
        let stamp = || {
            format!(
                "[{:>5.1}s]",
                self.receiver.started().elapsed().as_secs_f64()
            )
        };
        println!();
        println!(
            "{} --keep-running: the sender and the receiver stay up; the shop takes a payment every {} ms, and its bug is back for {KEPT_DEAD} of them",
            stamp(),
            SHOP_EVERY.as_millis()
        );
        let kept: Vec<u64> = (1..=KEPT_DEAD).map(|n| first + n * KEPT_EVERY).collect();
        self.receiver.reject(kept.iter().copied());
        let mut kept_ids = Vec::new();
        let began = Instant::now();
        let mut last_look = Instant::now();
        let mut ticker = tokio::time::interval(SHOP_EVERY);
        let mut seq = first;
        loop {
            ticker.tick().await;
            let id = api::emit_payment(&self.api, seq).await?;
            if kept.contains(&seq) {
                kept_ids.push(id);
            }
            seq += 1;
            if kept_ids.len() as u64 == KEPT_DEAD
                && last_look.elapsed() >= Duration::from_millis(500)
            {
                last_look = Instant::now();
                let dead = api::dead_letters(&self.api)
                    .await?
                    .into_iter()
                    .filter(|d| kept_ids.contains(&d.event_id))
                    .count();
                if dead == kept_ids.len() {
                    break;
                }
            }
            if began.elapsed() > KEPT_DEAD_WITHIN {
                return Err(format!(
                    "the {KEPT_DEAD} rejected payments were not dead within {}s",
                    KEPT_DEAD_WITHIN.as_secs()
                ));
            }
        }
        self.receiver.accept_rejected();
        println!(
            "{} the {KEPT_DEAD} rejected payments are dead (every try answered 500, among {} payments that went through); the shop is fixed now, so a replay goes through",
            stamp(),
            seq - first - KEPT_DEAD
        );
        let waiting = api::dead_letters(&self.api).await?.len();
        let link = api::portal_link(&self.api, LINK_TTL).await?;
        println!();
        println!(
            "open this link: the console shows the demo's endpoints, events and attempts; {waiting} dead deliveries wait in Dead letters: replay them there"
        );
        println!("  {}", link.url);
        println!(
            "  (it signs in once, until {}) · the demo runs until Ctrl-C, which removes its folder",
            link.expires_at
        );
        std::future::pending::<()>().await;
        Ok(())
    }
}

/// Watches the run: shows progress, narrates, and replays dead deliveries once the first round
/// has settled.
struct Watch<'a> {
    api: &'a Client,
    receiver: &'a FlakyReceiver,
    /// Each endpoint's id, name, and circuit state as last seen.
    endpoints: [(EndpointId, &'static str, CircuitState); 2],
    refunds_fixed: bool,
    /// Operational notices already narrated.
    notices_seen: usize,
    /// Dead payments (not replayed) already narrated.
    payments_dead_seen: u64,
    payments_endpoint: &'a EndpointId,
    refunds_endpoint: &'a EndpointId,
    progress: &'a mut Progress,
    requested: u64,
    emitted: &'a Mutex<Vec<EventId>>,
}

impl Watch<'_> {
    /// Returns whether everything settled (every delivery delivered or dead, with nothing left
    /// to replay) before the deadline.
    async fn until_settled(
        &mut self,
        emission: JoinHandle<Result<(), String>>,
    ) -> Result<bool, String> {
        let started = self.receiver.started();
        let mut emission = Some(emission);
        let mut emitted_at: Option<Duration> = None;
        let mut phase = Phase::NotListening;
        let mut rounds = 0;
        let mut last_poll: Option<Instant> = None;
        let mut view = Deliveries::default();
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        loop {
            tick.tick().await;
            let elapsed = started.elapsed();
            let stamp = format!("[{:>5.1}s]", elapsed.as_secs_f64());
            let now = Phase::at(elapsed);
            if now != phase {
                phase = now;
                self.progress.say(&match now {
                    Phase::Starting => {
                        format!("{stamp} receiver listening, but answering 503 while it starts")
                    }
                    _ => format!(
                        "{stamp} receiver up, but flaky: 500s, slow answers, acknowledgements lost after processing"
                    ),
                });
            }
            if let Some(failure) = self.receiver.failure() {
                return Err(failure);
            }
            if let Some(handle) = emission.take_if(|h| h.is_finished()) {
                emitted_at = Some(elapsed);
                match handle.await {
                    Ok(Ok(())) => self.progress.say(&format!(
                        "{stamp} all {} events emitted (POST /v1/events, one Idempotency-Key each)",
                        self.requested
                    )),
                    Ok(Err(e)) => self.progress.say(&format!("{stamp} emitting stopped: {e}")),
                    Err(e) => self.progress.say(&format!("{stamp} emitting stopped: {e}")),
                }
            }
            if last_poll.is_none_or(|t| t.elapsed() >= Duration::from_millis(500)) {
                last_poll = Some(Instant::now());
                let rows = all_deliveries(self.api).await?;
                view = Deliveries::of(&rows);
                self.narrate_circuits(&stamp).await?;
                let payments_dead = rows
                    .iter()
                    .filter(|d| d.endpoint_id == *self.payments_endpoint)
                    .filter(|d| d.status == DeliveryStatus::Dead && d.replayed_by.is_none())
                    .count() as u64;
                if payments_dead > self.payments_dead_seen {
                    self.progress.say(&format!(
                        "{stamp} payments: {payments_dead} dead so far (the shop rejected every try until the schedule ran out), waiting in the dead-letter queue"
                    ));
                }
                self.payments_dead_seen = payments_dead;
                let refunds_waiting = rows
                    .iter()
                    .filter(|d| d.endpoint_id == *self.refunds_endpoint)
                    .filter(|d| {
                        matches!(
                            d.status,
                            DeliveryStatus::Pending | DeliveryStatus::Delivering
                        )
                    })
                    .count() as u64;
                if emitted_at.is_some()
                    && !self.refunds_fixed
                    && view.in_flight > 0
                    && view.in_flight == refunds_waiting
                {
                    self.progress.say(&format!(
                        "{stamp} only refunds are left: {refunds_waiting} deliveries wait there, held by its open circuit without using up retries"
                    ));
                    self.fix_refunds(&stamp);
                }
                if emitted_at.is_some() && view.in_flight == 0 {
                    if view.dead == 0 || rounds == MAX_REPLAY_ROUNDS {
                        self.show(elapsed, &view);
                        self.progress.say(&if view.dead == 0 {
                            format!("{stamp} settled: nothing pending, nothing dead")
                        } else {
                            format!(
                                "{stamp} settled, but {} deliveries are still dead after {rounds} replays",
                                view.dead
                            )
                        });
                        return Ok(view.dead == 0);
                    }
                    rounds += 1;
                    self.replay_dead(&stamp).await?;
                    // The next look must see the replays, not this listing.
                    last_poll = None;
                }
            }
            self.show(elapsed, &view);
            // Emitting has its own bound (MAX_EMISSION at the demo's pace); a stuck API gets
            // a few times that.
            let deadline = emitted_at.map_or(MAX_EMISSION * 4, |at| at + SETTLE_WITHIN);
            if elapsed > deadline {
                self.progress.say(&format!(
                    "{stamp} gave up waiting: deliveries still in flight"
                ));
                if let Some(handle) = emission {
                    handle.abort();
                }
                return Ok(false);
            }
        }
    }

    fn show(&mut self, elapsed: Duration, view: &Deliveries) {
        let live = Live {
            elapsed,
            emitted: lock(self.emitted).len() as u64,
            requested: self.requested,
            counts: self.receiver.counts(),
            dead: view.dead,
            receiver: Phase::at(elapsed).describe(),
        };
        self.progress.update(&live);
    }

    fn fix_refunds(&mut self, stamp: &str) {
        if !self.refunds_fixed {
            self.refunds_fixed = true;
            self.receiver.fix_refunds();
            self.progress.say(&format!("{stamp} refunds handler fixed"));
        }
    }

    /// Says when an endpoint's circuit breaker changes state.
    async fn narrate_circuits(&mut self, stamp: &str) -> Result<(), String> {
        for (id, name, seen) in &mut self.endpoints {
            let state = self
                .api
                .endpoint(id)
                .await
                .map_err(|e| format!("GET /v1/endpoints/{id}: {e}"))?
                .endpoint
                .circuit_state;
            if state == *seen {
                continue;
            }
            self.progress.say(&match state {
                CircuitState::Open => format!(
                    "{stamp} {name}: circuit open after {} failures in a row; its deliveries are held (no retries used)",
                    PROTECTION.breaker_failures
                ),
                CircuitState::HalfOpen => format!("{stamp} {name}: circuit half-open, probing with one delivery"),
                _ => format!(
                    "{stamp} {name}: probe succeeded, circuit closed; held deliveries drain at {}/s",
                    PROTECTION.rate_limit
                ),
            });
            *seen = state;
        }
        for notice in self.receiver.notices().iter().skip(self.notices_seen) {
            let name = self
                .endpoints
                .iter()
                .find(|(id, _, _)| *id == notice.endpoint_id.as_str())
                .map_or("an unknown endpoint", |(_, name, _)| *name);
            self.progress.say(&format!(
                "{stamp} ops webhook received: {} for {name} (signed with the account's ops secret, verified)",
                notice.kind
            ));
            self.notices_seen += 1;
        }
        Ok(())
    }

    /// Fixes the refunds route and the shop, then replays the dead deliveries of every endpoint
    /// that has some, through the API.
    async fn replay_dead(&mut self, stamp: &str) -> Result<(), String> {
        let rows = all_deliveries(self.api).await?;
        let mut dead_by_endpoint: Vec<(EndpointId, u64)> = Vec::new();
        for d in rows
            .iter()
            .filter(|d| d.status == DeliveryStatus::Dead && d.replayed_by.is_none())
        {
            match dead_by_endpoint
                .iter_mut()
                .find(|(id, _)| *id == d.endpoint_id)
            {
                Some((_, n)) => *n += 1,
                None => dead_by_endpoint.push((d.endpoint_id.clone(), 1)),
            }
        }
        for (endpoint, dead) in dead_by_endpoint {
            if endpoint == *self.refunds_endpoint {
                self.progress.say(&format!(
                    "{stamp} {dead} refund deliveries are dead: the refunds handler failed all of their tries"
                ));
                self.fix_refunds(stamp);
                self.progress
                    .say(&format!("{stamp} replaying the refunds' dead letters"));
            } else if endpoint == *self.payments_endpoint {
                self.progress.say(&format!(
                    "{stamp} {dead} payment {} dead: the shop rejected all of {} tries",
                    if dead == 1 {
                        "delivery is"
                    } else {
                        "deliveries are"
                    },
                    if dead == 1 { "its" } else { "their" }
                ));
                self.receiver.accept_rejected();
                self.progress.say(&format!(
                    "{stamp} the shop's bug is fixed; replaying the payments' dead letters"
                ));
            } else {
                self.progress.say(&format!(
                    "{stamp} {dead} deliveries to {endpoint} are dead; replaying them"
                ));
            }
            let queued = self
                .api
                .replay_endpoint(&endpoint, &BulkReplay::status(DeliveryStatus::Dead))
                .await
                .map_err(|e| format!("POST /v1/endpoints/{endpoint}/replay: {e}"))?
                .queued;
            self.progress.say(&format!(
                "{stamp} POST /v1/endpoints/{endpoint}/replay → {queued} deliveries queued again (same event ids)"
            ));
        }
        Ok(())
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
