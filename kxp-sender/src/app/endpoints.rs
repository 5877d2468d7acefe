//! What is done to an endpoint: registering and changing it, with every check of `POST
//! /v1/endpoints` and `PATCH /v1/endpoints/{id}` and the endpoint challenge last (the only one
//! that connects); pausing, resuming, deleting it; rotating its secret. The API and the
//! console's forms and buttons all come through here.

use std::collections::BTreeMap;
use std::time::Duration;

use kxp_api::{
    Credential, Endpoint, EndpointAuth, EndpointCreated, EndpointMode, EndpointPatch, EndpointTls,
    NewEndpoint, Patch, PayloadMode, Secret, Signing,
};

use super::checks::{
    check_choices, check_description, check_encryption_jwk, check_event_types, check_filter,
    check_name, check_rate_limit, check_timeout, check_url,
};
use super::credentials;
use super::views::public_key;
use super::{AppState, DEFAULT_OVERLAP, Error, MAX_ENDPOINTS};
use crate::engine::config::Shared;
use crate::engine::{auth, dispatch, egress, tls};
use crate::model::{
    Account, Credentials, CredentialsView, EndpointChanges, EndpointId,
    NewEndpoint as StoredEndpoint, Rotated, ms,
};
use crate::store::{StoreError, open_credentials, seal_credentials};

/// Registers an endpoint for `account` with every check of `POST /v1/endpoints`, the
/// challenge last (the only one that connects): the API and the console's form both come
/// through here. The answer holds the signing secret, to be shown once.
pub(crate) async fn register(
    state: &AppState,
    account: &Account,
    new: NewEndpoint,
) -> Result<EndpointCreated, Error> {
    if state.db.endpoint_count(&account.id).await? >= MAX_ENDPOINTS {
        return Err(Error::TooManyEndpoints(format!(
            "an account has at most {MAX_ENDPOINTS} endpoints; delete one first"
        )));
    }
    let mode = new.mode.clone().unwrap_or_default();
    if mode == EndpointMode::Pull {
        check_pull(&new)?;
        if new.temporary && state.db.temporary_count(&account.id).await? >= MAX_TEMPORARY {
            return Err(Error::TooManyEndpoints(format!(
                "an account has at most {MAX_TEMPORARY} temporary endpoints (kxp listen \
                 sessions) at once; end one first"
            )));
        }
    } else if new.temporary {
        return Err(Error::Invalid(
            "temporary: only a pull endpoint can be temporary".to_owned(),
        ));
    }
    let payload_mode = new.payload.clone().unwrap_or_default();
    check_payload_mode(&payload_mode)?;
    let rate_limit = new.rate_limit_per_second.map(i64::from);
    let url = match (&mode, &new.url) {
        (EndpointMode::Pull, _) => None,
        (_, Some(url)) => Some(check_url(url, &state.shared)?),
        (_, None) => {
            return Err(Error::Invalid(
                "url: required for a push endpoint (or \"mode\": \"pull\")".to_owned(),
            ));
        }
    };
    let event_types = new.event_types.unwrap_or_else(|| vec!["*".to_owned()]);
    check_event_types(&event_types)?;
    let content_filter = match &new.filter {
        Some(filter) => check_filter(filter)?,
        None => None,
    };
    let description = new.description.unwrap_or_default();
    check_description(&description)?;
    let timeout = match new.timeout_ms {
        None => state.shared.config.delivery_timeout,
        Some(ms) => check_timeout(ms)?,
    };
    if let Some(version) = &new.api_version {
        check_name("api_version", version, 64)?;
    }
    if let Some(limit) = rate_limit {
        check_rate_limit(limit)?;
    }
    check_choices(new.signing.as_ref(), new.format.as_ref())?;
    let encryption_jwk = new
        .encryption_jwk
        .as_ref()
        .map(check_encryption_jwk)
        .transpose()?;
    let credentials = credentials::check_new(new.headers, new.auth, new.tls, &state.shared)?;
    if let Some(url) = url.as_ref().filter(|_| !new.skip_challenge) {
        challenge(
            &state.shared,
            url,
            timeout,
            credentials.as_ref().map(|(c, _)| c),
        )
        .await?;
    }
    let created = state
        .db
        .create_endpoint_with(
            account,
            &StoredEndpoint {
                url: url.as_ref().map_or("", reqwest::Url::as_str),
                mode,
                temporary: new.temporary,
                payload_mode,
                event_types: &event_types,
                content_filter,
                description: &description,
                timeout_ms: ms(timeout),
                api_version: new.api_version.as_deref(),
                rate_limit_per_second: rate_limit,
                signing: new.signing.clone().unwrap_or_default(),
                format: new.format.clone().unwrap_or_default(),
                encryption_jwk,
                trace_propagation: new.trace_propagation.unwrap_or(true),
                credentials,
            },
            state.shared.config.secrets_key.as_ref(),
        )
        .await?;
    Ok(EndpointCreated {
        endpoint: Endpoint::from(created.endpoint),
        secret: created.secret.map(Secret::from),
        public_key: created.public_key.as_ref().map(public_key),
    })
}

/// The most temporary pull endpoints an account has at once: a leaked listen token cannot fill
/// the account's endpoints, nor multiply each event's deliveries by hundreds.
pub(crate) const MAX_TEMPORARY: u64 = 10;

/// Refuses for a pull endpoint what only an HTTP attempt uses (a URL, a timeout, a rate limit,
/// custom headers, `auth`, `tls`, encryption) and signing other than HMAC: its reader holds the
/// secret it signs feed requests with, and verifies items with.
/// A known payload mode: `full` or `thin`.
fn check_payload_mode(mode: &PayloadMode) -> Result<(), Error> {
    if mode.is_known() {
        Ok(())
    } else {
        Err(Error::invalid("payload: full or thin"))
    }
}

fn check_pull(new: &NewEndpoint) -> Result<(), Error> {
    let attempt_only = [
        ("url", new.url.is_some()),
        ("timeout_ms", new.timeout_ms.is_some()),
        ("rate_limit_per_second", new.rate_limit_per_second.is_some()),
        ("encryption_jwk", new.encryption_jwk.is_some()),
        ("headers", new.headers.is_some()),
        ("auth", new.auth.is_some()),
        ("tls", new.tls.is_some()),
        ("payload", new.payload == Some(PayloadMode::Thin)),
    ];
    if let Some((field, _)) = attempt_only.iter().find(|(_, given)| *given) {
        return Err(Error::Invalid(format!(
            "{field}: a pull endpoint is sent nothing, so it takes no {field}"
        )));
    }
    if new.signing.as_ref().is_some_and(|s| *s != Signing::Hmac) {
        return Err(Error::Invalid(
            "signing: a pull endpoint signs with hmac only (its reader signs feed requests with \
             the secret)"
                .to_owned(),
        ));
    }
    Ok(())
}

/// Runs the endpoint challenge ([`dispatch::challenge`]) against `url`, presenting the
/// endpoint's `credentials` as deliveries will; a failure is [`Error::ChallengeFailed`] saying
/// what came back.
async fn challenge(
    shared: &Shared,
    url: &reqwest::Url,
    timeout: Duration,
    credentials: Option<&Credentials>,
) -> Result<(), Error> {
    let client = match credentials.and_then(|c| c.tls.as_ref()) {
        Some(tls) => tls::Clients::one_off(&shared.client, tls).map_err(|failure| {
            Error::ChallengeFailed(format!("the endpoint's tls could not be used: {failure}"))
        })?,
        None => shared.client.clone(),
    };
    // An OAuth2 token comes through the shared client (the public roots), as attempts' do.
    let headers = match credentials {
        Some(credentials) => {
            match auth::for_challenge(&shared.client, credentials, timeout, shared.config.dev).await
            {
                Ok(headers) => headers,
                Err(_) if egress_failed(shared).await => return Err(Error::EgressUnavailable),
                Err(failure) => {
                    return Err(Error::ChallengeFailed(format!(
                        "the endpoint challenge of {url} could not present the endpoint's \
                         credentials: {failure}; send \"skip_challenge\": true to register it \
                         without the check"
                    )));
                }
            }
        }
        None => Vec::new(),
    };
    match dispatch::challenge(&client, url.as_str(), &headers, timeout).await {
        Ok(()) => Ok(()),
        Err(_) if egress_failed(shared).await => Err(Error::EgressUnavailable),
        Err(why) => Err(Error::ChallengeFailed(format!(
            "the endpoint challenge of {url} failed: {why}. The endpoint must answer \
             `GET <url>?challenge=<token>` with a 2xx and the token as the whole body, as kxp \
             receivers (kxp-axum, kxp-actix) do; send \"skip_challenge\": true to register it \
             without the check"
        ))),
    }
}

/// Whether a challenge that failed failed at the egress proxy (as an attempt's failure is
/// judged: the proxy is known to be failing, or its probe fails now).
async fn egress_failed(shared: &Shared) -> bool {
    match shared.client.egress() {
        Some(egress) => egress::at_fault(egress).await,
        None => false,
    }
}

/// Changes one of `account`'s endpoints with every check of `PATCH /v1/endpoints/{id}` (a new
/// URL is challenged, last, unless `skip_challenge`): the API and the console's edit form both
/// come through here. A new `format` is a rotation into it, with the default overlap; its
/// result comes back beside the endpoint.
pub(crate) async fn change(
    state: &AppState,
    account: &Account,
    id: &EndpointId,
    patch: EndpointPatch,
) -> Result<(crate::model::Endpoint, Option<Rotated>), Error> {
    let rate_limit = patch
        .rate_limit_per_second
        .into_option()
        .map(|r| r.map(i64::from));
    let api_version = patch.api_version.into_option();
    let url = patch
        .url
        .as_deref()
        .map(|url| check_url(url, &state.shared))
        .transpose()?;
    if let Some(types) = &patch.event_types {
        check_event_types(types)?;
    }
    let content_filter = patch
        .filter
        .into_option()
        .map(|filter| filter.as_ref().map(check_filter).transpose())
        .transpose()?
        .map(Option::flatten);
    if let Some(description) = &patch.description {
        check_description(description)?;
    }
    let timeout = patch.timeout_ms.map(check_timeout).transpose()?;
    if let Some(Some(version)) = &api_version {
        check_name("api_version", version, 64)?;
    }
    if let Some(Some(limit)) = rate_limit {
        check_rate_limit(limit)?;
    }
    check_choices(patch.signing.as_ref(), patch.format.as_ref())?;
    let encryption_jwk = patch
        .encryption_jwk
        .clone()
        .into_option()
        .map(|jwk| jwk.as_ref().map(check_encryption_jwk).transpose())
        .transpose()?;
    if let Some(mode) = &patch.payload {
        check_payload_mode(mode)?;
    }
    let current = state.db.endpoint(&account.id, id).await?;
    if current.is_pull() {
        let attempt_only = [
            ("url", url.is_some()),
            ("timeout_ms", timeout.is_some()),
            ("rate_limit_per_second", matches!(rate_limit, Some(Some(_)))),
            ("encryption_jwk", matches!(encryption_jwk, Some(Some(_)))),
            ("headers", !patch.headers.is_unchanged()),
            ("auth", !patch.auth.is_unchanged()),
            ("tls", !patch.tls.is_unchanged()),
            ("payload", patch.payload == Some(PayloadMode::Thin)),
            (
                "signing",
                patch.signing.as_ref().is_some_and(|s| *s != Signing::Hmac),
            ),
        ];
        if let Some((field, _)) = attempt_only.iter().find(|(_, given)| *given) {
            return Err(Error::Invalid(format!(
                "{field}: {id} is a pull endpoint, which is sent nothing and signs with hmac only"
            )));
        }
    }
    let ring = state.shared.config.secrets_key.as_ref();
    let new_credentials =
        !(patch.headers.is_unchanged() && patch.auth.is_unchanged() && patch.tls.is_unchanged());
    let challenged = url
        .as_ref()
        .filter(|url| url.as_str() != current.url && !patch.skip_challenge);
    let parts = (patch.headers, patch.auth, patch.tls);
    let mut credentials = if new_credentials || challenged.is_some() {
        Some(merged(state, account, id, &parts).await?)
    } else {
        None
    };
    if let Some(url) = challenged {
        let timeout = timeout.unwrap_or_else(|| {
            Duration::from_millis(u64::try_from(current.timeout_ms).unwrap_or(5000))
        });
        let presented = credentials
            .as_ref()
            .map(|m| &m.credentials)
            .filter(|c| !c.is_empty());
        challenge(&state.shared, url, timeout, presented).await?;
    }
    let new_format = patch
        .format
        .as_ref()
        .filter(|format| **format != current.format);
    if new_format.is_some() && patch.signing.is_some() {
        // Each is its own transaction: together, a refused rotation would leave the signing
        // change made.
        return Err(Error::invalid(
            "change signing and format in two requests: a change of format is a rotation",
        ));
    }
    if let Some(signing) = &patch.signing {
        state
            .db
            .change_signing(&account.id, id, signing, ring)
            .await?;
    }
    let rotated = match new_format {
        Some(format) => {
            let overlap = ms(DEFAULT_OVERLAP);
            let rotated = state
                .db
                .rotate_secret(&account.id, id, overlap, None, ring, Some(format))
                .await?;
            tracing::info!(
                target: "kxp_sender", endpoint_id = %id, format = %format, overlap_ms = overlap,
                "endpoint format changed: both formats sign until the overlap ends"
            );
            Some(rotated)
        }
        None => None,
    };
    let mut changes = EndpointChanges {
        url: url.map(String::from),
        event_types: patch.event_types,
        content_filter,
        description: patch.description,
        timeout_ms: timeout.map(ms),
        api_version,
        rate_limit_per_second: rate_limit,
        encryption_jwk,
        trace_propagation: patch.trace_propagation,
        payload_mode: patch.payload.clone(),
        ..EndpointChanges::default()
    };
    if !new_credentials {
        let endpoint = state.db.update_endpoint(&account.id, id, &changes).await?;
        return Ok((endpoint, rotated));
    }
    // The write names the credentials the change was merged onto: one made meanwhile (another
    // of the console's forms, another client) is merged onto again, never undone.
    for _ in 0..MERGE_ROUNDS {
        let merge = match credentials.take() {
            Some(merge) => merge,
            None => merged(state, account, id, &parts).await?,
        };
        changes.credentials = Some(seal_credentials(ring, id, &merge.credentials, &merge.view));
        changes.credentials_were = Some(merge.stored);
        match state.db.update_endpoint(&account.id, id, &changes).await {
            Err(StoreError::NotFound) if state.db.endpoint(&account.id, id).await.is_ok() => {}
            result => return Ok((result?, rotated)),
        }
    }
    Err(Error::Unavailable)
}

/// How many times a change of credentials is merged onto newer ones before it gives up.
const MERGE_ROUNDS: usize = 5;

/// An endpoint's credentials with a change's `headers`, `auth` and `tls` applied, checked.
struct Merged {
    /// The credentials as they were stored when read (`None`: none).
    stored: Option<String>,
    credentials: Credentials,
    view: CredentialsView,
}

/// Reads one of `account`'s endpoints' credentials and applies `parts` (`headers`, `auth`,
/// `tls` of a change) to them. `tls` left as it was is not checked again: a certificate that
/// has expired since must not stop a change of the headers or the URL.
async fn merged(
    state: &AppState,
    account: &Account,
    id: &EndpointId,
    parts: &(
        Patch<BTreeMap<String, Credential>>,
        Patch<EndpointAuth>,
        Patch<EndpointTls>,
    ),
) -> Result<Merged, Error> {
    let ring = state.shared.config.secrets_key.as_ref();
    let stored = state.db.endpoint_credentials(&account.id, id).await?;
    let mut credentials = match &stored {
        Some(stored) => open_credentials(ring, id, stored).map_err(StoreError::from)?,
        None => Credentials::default(),
    };
    let (headers, auth, tls) = parts.clone();
    if let Some(headers) = headers.into_option() {
        credentials.headers = headers.unwrap_or_default();
    }
    if let Some(auth) = auth.into_option() {
        credentials.auth = auth;
    }
    let view = match tls.into_option() {
        Some(tls) => {
            // `{}` is no TLS settings at all, as `null` is.
            credentials.tls = tls.filter(|tls| *tls != EndpointTls::default());
            credentials::check(&credentials, &state.shared)?
        }
        None => {
            let current = state.db.endpoint(&account.id, id).await?;
            let kept = CredentialsView::of_row(current.credentials_view.as_deref()).tls;
            credentials::check_keeping(&credentials, &state.shared, kept)?
        }
    };
    Ok(Merged {
        stored,
        credentials,
        view,
    })
}

/// Gives one of `account`'s endpoints a new secret (and a new key if it signs with Ed25519);
/// the ones it had sign on for `overlap`, or until `confirmations` deliveries in a row were
/// verified with the new one. One rotation too many is a [`Conflict`](Error::Conflict).
pub(crate) async fn rotate_secret(
    state: &AppState,
    account: &Account,
    id: &EndpointId,
    overlap: Duration,
    confirmations: Option<u32>,
) -> Result<Rotated, Error> {
    let ring = state.shared.config.secrets_key.as_ref();
    Ok(state
        .db
        .rotate_secret(&account.id, id, ms(overlap), confirmations, ring, None)
        .await?)
}

/// Pauses one of `account`'s endpoints: its deliveries are held (still pending, no attempt
/// spent) until it is resumed. Returns it, and how many deliveries were held.
pub(crate) async fn pause(
    state: &AppState,
    account: &Account,
    id: &EndpointId,
) -> Result<(crate::model::Endpoint, u64), Error> {
    Ok(state.db.pause_endpoint(&account.id, id).await?)
}

/// Resumes one of `account`'s paused or disabled endpoints: its circuit closes, and the
/// workers are woken for its deliveries now due. Returns it, and how many are due.
pub(crate) async fn resume(
    state: &AppState,
    account: &Account,
    id: &EndpointId,
) -> Result<(crate::model::Endpoint, u64), Error> {
    let (endpoint, due) = state
        .db
        .resume_endpoint(&account.id, id, &state.shared.config.protection)
        .await?;
    if due > 0 {
        state.shared.wake_workers();
    }
    Ok((endpoint, due))
}

/// Deletes one of `account`'s endpoints; its unfinished deliveries become dead with
/// `endpoint_deleted`. Returns how many.
pub(crate) async fn delete(
    state: &AppState,
    account: &Account,
    id: &EndpointId,
) -> Result<u64, Error> {
    Ok(state.db.delete_endpoint(&account.id, id).await?)
}
