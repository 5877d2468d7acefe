//! One attempt: open the endpoint's secrets, seal the payload if the endpoint asked for it
//! encrypted, send, decide what comes next (the retry schedule), log, and hand the outcome to
//! the [`Recorder`]. What the attempt returns feeds the endpoint's adaptive limit.

use std::sync::Arc;
use std::time::Duration;

use kxp_verify::TraceParent;

use crate::engine::auth::{self, Presented};
use crate::engine::batch::Answer;
use crate::engine::config::Shared;
use crate::engine::dispatch::{self, Outcome};
use crate::engine::egress;
use crate::engine::recorder::Recorder;
use crate::engine::traces;
use crate::model::{
    AttemptError, AttemptRecord, ED25519_PREFIX, EndpointId, EndpointKey, Failure, FailureKind,
    FinishAttempt, Finished, Job, KeyCheck, Material, NextState, Secrets, Transition, ms, now_ms,
    thin_notice,
};
use crate::policy::concurrency::Signal;
use crate::policy::schedule::AfterFailure;
use crate::store::{Db, open_secret};

/// The job's secrets, opened with the server's key ring and read. If one does not open (the
/// start-up check makes that a ring changed under a running fleet) or does not read (a row
/// altered by hand), the error is logged and none is used: the attempt fails as `no_secret`
/// and is retried, never sent unsigned or signed with part of its secrets.
pub(crate) fn open_secrets(
    shared: &Shared,
    endpoint_id: &EndpointId,
    secrets: &Secrets,
) -> Vec<Material> {
    let ring = shared.config.secrets_key.as_ref();
    let opened = secrets
        .0
        .iter()
        .map(|(_, entry)| {
            let entry = match entry.strip_prefix(ED25519_PREFIX) {
                Some(stored) => open_secret(ring, endpoint_id, stored)
                    .map(|seed| format!("{ED25519_PREFIX}{seed}")),
                None => open_secret(ring, endpoint_id, entry),
            }
            .map_err(|e| e.to_string())?;
            Material::parse(&entry)
                .ok_or_else(|| "it is not a secret or key (altered by hand?)".to_owned())
        })
        .collect::<Result<Vec<_>, _>>();
    opened.unwrap_or_else(|e| {
        tracing::error!(
            target: "kxp_sender", endpoint_id = %endpoint_id, error = %e,
            "a secret of the endpoint does not open or does not read"
        );
        Vec::new()
    })
}

/// What the attempt sends: the envelope as stored, or, for an endpoint with an encryption key,
/// the envelope with `data` sealed to that key as `data_jwe` (made anew for each attempt, with
/// the key the endpoint has now). A key or envelope that does not seal fails the attempt:
/// `data` is never sent in the clear to an endpoint that asked for it encrypted.
pub(crate) fn sealed<'p>(
    jwk: Option<&str>,
    payload: &'p str,
) -> Result<std::borrow::Cow<'p, str>, Failure> {
    let Some(jwk) = jwk else {
        return Ok(payload.into());
    };
    let failed = |why: String| Failure::new(FailureKind::EncryptionFailed, why);
    let key = kxp_jwe::EncryptionKey::from_jwk(jwk).map_err(|e| failed(e.to_string()))?;
    kxp_jwe::seal_envelope(&key, payload)
        .map(Into::into)
        .map_err(|e| failed(e.to_string()))
}

/// What an attempt (or a feed item) carries for the envelope `payload`: the thin notice, for an
/// endpoint that takes them (nothing of `data` in it, so nothing to seal), else
/// [`sealed`]'s.
pub(crate) fn body<'p>(
    jwk: Option<&str>,
    thin: bool,
    payload: &'p str,
) -> Result<std::borrow::Cow<'p, str>, Failure> {
    if !thin {
        return sealed(jwk, payload);
    }
    thin_notice(payload).map(Into::into).ok_or_else(|| {
        Failure::new(
            FailureKind::InvalidHeader,
            "the stored event is no envelope: no thin notice can be made of it",
        )
    })
}

/// The fingerprints of the secrets (and keys) an attempt is signed with, in their order.
fn fingerprints(secrets: &[Material]) -> Vec<String> {
    secrets.iter().map(Material::fingerprint).collect()
}

/// What a delivered attempt's confirmation (`verified_key`) says about the job's secrets:
/// nothing to record unless it names one of them or a `when_confirmed` rotation is counting.
fn key_check(job: &Job, signed_with: &[String], verified_key: Option<&str>) -> Option<KeyCheck> {
    let verified = verified_key
        .and_then(|key| signed_with.iter().position(|f| f == key))
        .and_then(|i| job.secrets.0.get(i).map(|(id, _)| *id));
    (verified.is_some() || job.confirming).then_some(KeyCheck {
        verified,
        confirming: job.confirming,
    })
}

/// Sends one job and records its outcome; returns what the outcome says about the endpoint's
/// load, and whether recording it closed the endpoint's circuit.
pub(super) async fn attempt(
    db: &Db,
    recorder: &Recorder,
    owner: &str,
    shared: &Arc<Shared>,
    job: &Job,
) -> (Signal, bool) {
    let number = job.attempts + 1;
    let started_at = now_ms();
    let secrets = open_secrets(shared, &job.endpoint_id, &job.secrets);
    let span = shared.traces.attempt(job, number);
    let traceparent = traces::outgoing(job, &span);
    let (outcome, took, peer) = send(shared, job, number, &secrets, traceparent).await;
    if let Some(der) = peer {
        watch(db, shared, job, &der);
    }
    span.end_attempt(&outcome, took);
    if let Some(failure) = held_by_proxy(shared, &outcome).await {
        // The egress proxy's failure, not the endpoint's: the delivery goes back untried,
        // nothing is recorded and the circuit takes no step.
        tracing::info!(
            target: "kxp_sender::egress", delivery_id = %job.id, endpoint_id = %job.endpoint_id,
            error = %failure, "attempt held back: the egress proxy failed"
        );
        super::release(db, &job.account_id, &job.id, owner).await;
        return (Signal::Neutral, false);
    }
    shared.metrics.attempt(&outcome, took);
    let next = match &outcome {
        Outcome::Delivered { .. } => NextState::Delivered,
        Outcome::Rejected { retry_after, .. } => after_failure(shared, number, *retry_after),
        Outcome::Failed(_) => after_failure(shared, number, None),
    };
    log(job, number, &outcome, next, took);
    let (record, keys) = record(job, &outcome, &secrets, started_at, took);
    let finished = recorder
        .finish(FinishAttempt {
            delivery_id: job.id.clone(),
            endpoint_id: job.endpoint_id.clone(),
            account_id: job.account_id.clone(),
            owner: owner.to_owned(),
            attempt: number,
            record,
            next,
            keys,
        })
        .await;
    let closed = matches!(
        finished,
        Ok(Finished::Recorded {
            transition: Some(Transition::Close),
            ..
        })
    );
    report(shared, job, next, &finished);
    (signal(&outcome, took), closed)
}

/// Whether the attempt failed at the egress proxy: it said so, or it failed without a clear
/// answer (a timeout, a connection lost, a token request that did not come back) and the
/// proxy's probe fails too (a proxy that stops answering leaves the attempts waiting on it to
/// their timeouts).
async fn held_by_proxy<'o>(shared: &Shared, outcome: &'o Outcome) -> Option<&'o Failure> {
    let Outcome::Failed(failure) = outcome else {
        return None;
    };
    let held = match (failure.kind, shared.client.egress()) {
        (FailureKind::ProxyError, _) => true,
        (
            FailureKind::Timeout
            | FailureKind::Connect
            | FailureKind::Request
            | FailureKind::AuthFailed,
            Some(egress),
        ) => egress::at_fault(egress).await,
        _ => false,
    };
    held.then_some(failure)
}

/// Records the endpoint's own certificate (DER) as the attempt's handshake showed it, when this
/// process has not done so within the hour, in a task of its own: the attempt does not wait.
fn watch(db: &Db, shared: &Arc<Shared>, job: &Job, der: &[u8]) {
    let Some(seen) = shared.certificates.observe(&job.endpoint_id, der) else {
        return;
    };
    let (db, shared) = (db.clone(), shared.clone());
    let endpoint = EndpointKey::new(&job.account_id, &job.endpoint_id);
    tokio::spawn(async move {
        match db
            .record_server_certificate(&endpoint, &seen, now_ms())
            .await
        {
            Ok(0) => {}
            Ok(_) => shared.notices.notify_one(),
            Err(e) => {
                shared.certificates.forget(&endpoint.id);
                tracing::warn!(
                    target: "kxp_sender", endpoint_id = %endpoint.id, error = %e,
                    "recording the endpoint's certificate failed; the next attempt tries again"
                );
            }
        }
    });
}

/// Sends attempt `number` of the job, signed with `secrets`, with `traceparent` if any: its
/// outcome, how long it took, and the certificate the endpoint's server presented.
async fn send(
    shared: &Shared,
    job: &Job,
    number: i64,
    secrets: &[Material],
    traceparent: Option<TraceParent>,
) -> (Outcome, Duration, Option<Vec<u8>>) {
    let started = crate::model::instant();
    let timeout = Duration::from_millis(u64::try_from(job.timeout_ms).unwrap_or(5000));
    let presented = match present(shared, job, timeout).await {
        Ok(presented) => presented,
        Err(failure) => return (Outcome::Failed(failure), started.elapsed(), None),
    };
    match body(job.encryption_jwk.as_deref(), job.thin, &job.payload) {
        Ok(payload) => {
            let request = dispatch::Request {
                url: &job.url,
                payload: &payload,
                event_id: job.event_id.as_str(),
                event_type: &job.event_type,
                delivery_id: job.id.as_str(),
                attempt: number,
                endpoint_id: Some(job.endpoint_id.as_str()),
                sequence: job.sequence,
                traceparent,
                secrets,
                credentials: &presented.headers,
                // The token fetch, if any, came out of the attempt's time.
                timeout: timeout.saturating_sub(started.elapsed()),
                allow_http: shared.config.dev,
            };
            let client = presented.client.as_ref().unwrap_or(&shared.client);
            let (outcome, _, peer) = dispatch::send_watching(client, &request).await;
            shared
                .tokens
                .after(&job.endpoint_id, &presented, &outcome)
                .await;
            (outcome, started.elapsed(), peer)
        }
        Err(failure) => (Outcome::Failed(failure), started.elapsed(), None),
    }
}

/// What the attempt presents for the endpoint's credentials, if it has any: an OAuth2 token
/// is fetched (or waited for) within the attempt's `timeout`, and an endpoint with `tls` is
/// sent to through its own client.
async fn present(shared: &Shared, job: &Job, timeout: Duration) -> Result<Presented, Failure> {
    let Some(stored) = &job.credentials.0 else {
        return Ok(Presented::default());
    };
    let credentials = auth::open(shared.config.secrets_key.as_ref(), &job.endpoint_id, stored)?;
    let mut presented = shared
        .tokens
        .present(
            &shared.client,
            &job.endpoint_id,
            &credentials,
            timeout,
            shared.config.dev,
        )
        .await?;
    if let Some(tls) = &credentials.tls {
        presented.client = Some(shared.tls_clients.client(
            &shared.client,
            &job.endpoint_id,
            tls,
        )?);
    }
    Ok(presented)
}

/// The attempt as the store records it, and what its confirmation says about the job's
/// secrets (signed with `secrets`, started at `started_at`, taking `took`).
fn record(
    job: &Job,
    outcome: &Outcome,
    secrets: &[Material],
    started_at: i64,
    took: Duration,
) -> (AttemptRecord, Option<KeyCheck>) {
    let (snippet, error) = match outcome {
        Outcome::Delivered { snippet, .. } => (Some(snippet.clone()), None),
        Outcome::Rejected {
            status, snippet, ..
        } => (Some(snippet.clone()), Some(AttemptError::Http(*status))),
        Outcome::Failed(failure) => (None, Some(AttemptError::Failed(failure.clone()))),
    };
    let signed_with = fingerprints(secrets);
    let verified_key = match outcome {
        Outcome::Delivered { verified_key, .. } => Some(verified_key.clone()),
        _ => None,
    };
    let keys = verified_key
        .as_ref()
        .and_then(|key| key_check(job, &signed_with, key.as_deref()));
    let record = AttemptRecord {
        started_at,
        duration_ms: ms(took),
        status_code: outcome.status(),
        error,
        response_snippet: snippet,
        signed_with: signed_with.join(","),
        verified_key: verified_key.flatten(),
    };
    (record, keys)
}

/// Counts and logs what recording the attempt did: the delivery's end, the endpoint's state
/// change and its notices, or why nothing was recorded.
fn report(shared: &Shared, job: &Job, next: NextState, finished: &Answer<Finished>) {
    match finished {
        Ok(Finished::Recorded {
            transition,
            notices,
        }) => {
            match next {
                NextState::Delivered => shared.metrics.delivery_ended(true),
                NextState::Dead => shared.metrics.delivery_ended(false),
                NextState::RetryAt(_) => {}
            }
            if let Some(t) = *transition {
                shared.metrics.transition(t);
            }
            match *transition {
                Some(t @ (Transition::Open | Transition::Disable)) => tracing::warn!(
                    target: "kxp_sender::circuit", endpoint_id = %job.endpoint_id,
                    transition = t.as_str(), notices, "endpoint state changed"
                ),
                Some(t) => tracing::info!(
                    target: "kxp_sender::circuit", endpoint_id = %job.endpoint_id,
                    transition = t.as_str(), "endpoint state changed"
                ),
                None => {}
            }
            if *notices > 0 {
                shared.notices.notify_one();
            }
        }
        Ok(Finished::LeaseLost) => tracing::warn!(
            target: "kxp_sender", delivery_id = %job.id,
            "lease expired during the attempt; another worker owns the delivery now"
        ),
        // The lease will run out and the delivery will be tried again: at least once, never lost.
        Err(e) => {
            tracing::error!(target: "kxp_sender", delivery_id = %job.id, error = %e, "recording an attempt failed")
        }
    }
}

fn after_failure(shared: &Shared, attempts_made: i64, retry_after: Option<Duration>) -> NextState {
    let made = u32::try_from(attempts_made).unwrap_or(u32::MAX);
    match shared
        .config
        .schedule
        .after_failure(made, draw(), retry_after)
    {
        AfterFailure::RetryIn(delay) => NextState::RetryAt(now_ms().saturating_add(ms(delay))),
        AfterFailure::Dead => NextState::Dead,
    }
}

fn log(job: &Job, attempt: i64, outcome: &Outcome, next: NextState, took: Duration) {
    let took_ms = ms(took);
    let next = match next {
        NextState::Delivered => "delivered".to_owned(),
        NextState::RetryAt(at) => format!("retry in {} ms", at.saturating_sub(now_ms()).max(0)),
        NextState::Dead => "dead".to_owned(),
    };
    match outcome {
        Outcome::Delivered { status, .. } => tracing::info!(
            target: "kxp_sender", delivery_id = %job.id, event_id = %job.event_id, endpoint_id = %job.endpoint_id,
            attempt, status, duration_ms = took_ms, "delivered"
        ),
        // A 4xx usually means the receiver is misconfigured (wrong secret, wrong route): loud.
        Outcome::Rejected { status, .. } if (400..500).contains(status) => tracing::warn!(
            target: "kxp_sender", delivery_id = %job.id, event_id = %job.event_id, endpoint_id = %job.endpoint_id,
            attempt, status, duration_ms = took_ms, next = %next, "endpoint refused the delivery"
        ),
        Outcome::Rejected { status, .. } => tracing::info!(
            target: "kxp_sender", delivery_id = %job.id, event_id = %job.event_id, endpoint_id = %job.endpoint_id,
            attempt, status, duration_ms = took_ms, next = %next, "endpoint failed"
        ),
        Outcome::Failed(error) => tracing::info!(
            target: "kxp_sender", delivery_id = %job.id, event_id = %job.event_id, endpoint_id = %job.endpoint_id,
            attempt, error = %error, duration_ms = took_ms, next = %next, "attempt failed"
        ),
    }
}

/// What an outcome says about the endpoint's load, for its adaptive limit.
fn signal(outcome: &Outcome, took: Duration) -> Signal {
    match outcome {
        Outcome::Delivered { .. } => Signal::Answered(took.as_secs_f64() * 1000.0),
        Outcome::Rejected {
            status: 429 | 503, ..
        } => Signal::Overloaded,
        Outcome::Failed(failure)
            if matches!(failure.kind, FailureKind::Timeout | FailureKind::Connect) =>
        {
            Signal::Overloaded
        }
        _ => Signal::Neutral,
    }
}

/// A uniform draw in `0.0..1.0` from the OS generator, for jitter.
fn draw() -> f64 {
    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_err() {
        return 0.5;
    }
    (u64::from_le_bytes(bytes) >> 11) as f64 / (1u64 << 53) as f64
}
