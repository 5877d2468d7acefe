//! The endpoints of an account: the list with their health, registration (through the
//! service's [`register`], as the API's, so the same checks and the same challenge apply), and
//! each endpoint's actions (through the service too). A new secret is never in the answer to
//! the form that made it: the POST keeps it as the session's one-time message and redirects,
//! and the endpoint's page shows it once (a reload shows nothing, and never posts the form
//! again).

use axum::Form;
use axum::extract::{Path, State};
use axum::response::{Html, IntoResponse, Redirect, Response};
use kxp_api::{DEFAULT_CONFIRMATIONS, EndpointPatch, NewEndpoint, Patch, PayloadMode};

use super::error::ConsoleError;
use super::pages::{self, DeleteConfirm, EndpointForm, EndpointRow, FormFor, Frame, NewSecret};
use super::scope::{Checked, InAccount};
use super::sign_in::SIGNED_IN;
use crate::app::views::endpoint_details;
use crate::app::{self, AppState, DEFAULT_OVERLAP, Error, change, register};
use crate::model::{ConsoleAction, EndpointId, EndpointKey, Ingest, Ingested};
use crate::store::StoreError;
use crate::store::seal::{open_stored, to_stored};

/// The most endpoints the list shows (an account has at most [`MAX_ENDPOINTS`](crate::MAX_ENDPOINTS)).
const LISTED: i64 = 500;

impl InAccount {
    /// The frame of this account's pages.
    pub(crate) fn frame(&self) -> Frame<'_> {
        Frame {
            account_id: self.account.id.as_str(),
            account_name: &self.account.name,
            csrf_token: &self.signed.session.csrf_token,
            operator: self.by_operator(),
            may_change: self.may_change(),
        }
    }
}

/// `GET /console/a/{account}`: the endpoints and their health; the first time after a portal
/// link's sign-in, also which account the session is in.
pub(super) async fn list(
    State(state): State<AppState>,
    scope: InAccount,
) -> Result<Response, ConsoleError> {
    let account = &scope.account.id;
    let endpoints = state.db.endpoints(account, None, LISTED).await?;
    let mut rows = Vec::with_capacity(endpoints.len());
    for endpoint in endpoints {
        let health = state.db.endpoint_health(account, &endpoint.id).await?;
        rows.push(EndpointRow { endpoint, health });
    }
    let signed_in = match scope.by_operator() {
        true => false,
        false => (state.db.take_flash(&scope.signed.cookie, SIGNED_IN).await?).is_some(),
    };
    Ok(page(pages::endpoints(&scope.frame(), &rows, signed_in)))
}

/// `GET /console/a/{account}/endpoints/new`: the registration form.
pub(super) async fn new_form(
    State(state): State<AppState>,
    scope: InAccount,
) -> Result<Response, ConsoleError> {
    scope.signed.check_may_change()?;
    let known = known_types(&state, &scope).await?;
    let form = pages::register(&scope.frame(), &known, &EndpointForm::default(), None);
    Ok(page(form))
}

/// What the registration form posts (read from its fields: the event types' boxes repeat
/// `types`, which a struct of serde_urlencoded cannot take).
#[derive(Default)]
pub(super) struct RegisterForm {
    csrf_token: String,
    url: String,
    types: Vec<String>,
    other_types: String,
    description: String,
    timeout_ms: String,
    rate_limit: String,
    thin: bool,
}

/// `POST /console/a/{account}/endpoints`: registers, or shows the form again with why not.
pub(super) async fn create(
    State(state): State<AppState>,
    scope: InAccount,
    Form(fields): Form<Vec<(String, String)>>,
) -> Result<Response, ConsoleError> {
    let form = RegisterForm::from_pairs(fields);
    scope.check_form(&form.csrf_token)?;
    let refuse = |why: String, state: AppState, scope: InAccount, form: RegisterForm| async move {
        let known = known_types(&state, &scope).await?;
        let shown = form.shown();
        let page = pages::register(&scope.frame(), &known, &shown, Some(&why));
        Ok::<_, ConsoleError>(
            (
                axum::http::StatusCode::UNPROCESSABLE_ENTITY,
                Html(page.into_string()),
            )
                .into_response(),
        )
    };
    let (timeout_ms, rate_limit) = match (
        whole_number(&form.timeout_ms, "the timeout"),
        whole_number(&form.rate_limit, "the rate limit"),
    ) {
        (Ok(timeout), Ok(rate)) => (timeout, rate),
        (Err(why), _) | (_, Err(why)) => return refuse(why, state, scope, form).await,
    };
    let types = form.all_types();
    let mut new = NewEndpoint::new(form.url.trim());
    new.event_types = (!types.is_empty()).then_some(types);
    new.description = Some(form.description.clone());
    new.timeout_ms = timeout_ms;
    new.payload = form.thin.then_some(PayloadMode::Thin);
    new.rate_limit_per_second = match rate_limit.map(u32::try_from) {
        None => None,
        Some(Ok(n)) => Some(n),
        Some(Err(_)) => {
            return refuse("the rate limit is too large".to_owned(), state, scope, form).await;
        }
    };
    match register(&state, &scope.account, new).await {
        Ok(created) => {
            let id = &created.endpoint.id;
            tracing::info!(target: "kxp_sender", endpoint_id = %id, "endpoint registered from the console");
            // The console registers HMAC endpoints: there is always a secret to show.
            if let Some(secret) = &created.secret {
                let flash = format!("{id} {}", flash_secret(&state, id, secret.expose()));
                state.db.set_flash(&scope.signed.cookie, &flash).await?;
            }
            scope
                .audit(&state, ConsoleAction::EndpointCreate, Some(id.as_str()))
                .await;
            Ok(Redirect::to(&scope.url(&format!("/endpoints/{id}"))).into_response())
        }
        Err(refused) => {
            let why = refused.to_string();
            refuse(why, state, scope, form).await
        }
    }
}

impl RegisterForm {
    /// The form as it was typed, to show again.
    fn shown(self) -> EndpointForm {
        EndpointForm {
            url: self.url,
            types: self.types,
            other_types: self.other_types,
            description: self.description,
            timeout_ms: self.timeout_ms,
            rate_limit: self.rate_limit,
            thin: self.thin,
        }
    }

    /// Every event type the form names: the ticked boxes and the typed ones, each once.
    fn all_types(&self) -> Vec<String> {
        let mut types = self.types.clone();
        for typed in self.other_types.split(',').map(str::trim) {
            if !typed.is_empty() && !types.iter().any(|t| t == typed) {
                types.push(typed.to_owned());
            }
        }
        types
    }

    /// The change the edit form asks for: the URL, types (none: every type) and description
    /// as given; the timeout unless left empty; the rate limit, or none when left empty.
    fn patch(&self) -> Result<EndpointPatch, String> {
        let mut patch = EndpointPatch::default();
        patch.url = Some(self.url.trim().to_owned());
        let types = self.all_types();
        patch.event_types = Some(if types.is_empty() {
            vec!["*".to_owned()]
        } else {
            types
        });
        patch.description = Some(self.description.clone());
        patch.timeout_ms = whole_number(&self.timeout_ms, "the timeout")?;
        patch.payload = Some(if self.thin {
            PayloadMode::Thin
        } else {
            PayloadMode::Full
        });
        patch.rate_limit_per_second = match whole_number(&self.rate_limit, "the rate limit")? {
            None => Patch::Clear,
            Some(n) => Patch::Set(u32::try_from(n).map_err(|_| "the rate limit is too large")?),
        };
        Ok(patch)
    }

    /// The form from its fields (the event types' boxes repeat `types`).
    fn from_pairs(pairs: Vec<(String, String)>) -> RegisterForm {
        let mut form = RegisterForm::default();
        for (name, value) in pairs {
            match name.as_str() {
                "csrf_token" => form.csrf_token = value,
                "url" => form.url = value,
                "types" => form.types.push(value),
                "other_types" => form.other_types = value,
                "description" => form.description = value,
                "timeout_ms" => form.timeout_ms = value,
                "rate_limit" => form.rate_limit = value,
                "thin" => form.thin = true,
                _ => {}
            }
        }
        form
    }
}

/// A whole number typed in a form field: `None` when left empty.
fn whole_number(text: &str, name: &str) -> Result<Option<u64>, String> {
    let text = text.trim();
    match text.is_empty() {
        true => Ok(None),
        false => text
            .parse()
            .map(Some)
            .map_err(|_| format!("{name} must be a whole number")),
    }
}

/// The event types the form offers as boxes: those with a registered schema, and those the
/// account's endpoints subscribe to (wildcards left out).
async fn known_types(state: &AppState, scope: &InAccount) -> Result<Vec<String>, ConsoleError> {
    let account = &scope.account.id;
    let mut types: Vec<String> = state
        .db
        .schemas(account)
        .await?
        .into_iter()
        .map(|s| s.event_type)
        .collect();
    for endpoint in state.db.endpoints(account, None, LISTED).await? {
        types.extend(
            endpoint
                .types()
                .iter()
                .filter(|t| !t.contains('*'))
                .cloned(),
        );
    }
    types.sort();
    types.dedup();
    Ok(types)
}

/// A new secret as the session's one-time message keeps it: sealed like the stored secrets
/// when the server has a key ring (a sealed value holds no space), so a database dump taken
/// before the page is shown reveals it no more than the secrets table does.
fn flash_secret(state: &AppState, endpoint_id: &EndpointId, secret: &str) -> String {
    let ring = state.shared.config.secrets_key.as_ref();
    to_stored(ring, secret, &flash_context(endpoint_id)).to_string()
}

/// The secret [`flash_secret`] kept, opened (a message that does not open shows as such).
fn flashed_secret(state: &AppState, endpoint_id: &EndpointId, kept: &str) -> String {
    let ring = state.shared.config.secrets_key.as_ref();
    match open_stored(ring, kept, &flash_context(endpoint_id)) {
        Ok(secret) => String::from_utf8_lossy(&secret).into_owned(),
        Err(e) => format!("(the secret cannot be shown: {e})"),
    }
}

fn flash_context(endpoint_id: &EndpointId) -> Vec<u8> {
    format!("kxp/console-flash/{endpoint_id}").into_bytes()
}

/// `GET /console/a/{account}/endpoints/{endpoint}`: one endpoint, and its new secret once.
pub(super) async fn show(
    State(state): State<AppState>,
    scope: InAccount,
    Path((_, id)): Path<(String, EndpointId)>,
) -> Result<Response, ConsoleError> {
    let account = &scope.account.id;
    let endpoint = state.db.endpoint(account, &id).await.map_err(not_found)?;
    let health = state.db.endpoint_health(account, &id).await?;
    let ring = state.shared.config.secrets_key.as_ref();
    let secrets = state
        .db
        .live_secret_states(&EndpointKey::new(account, &id), ring)
        .await?;
    let flash = state
        .db
        .take_flash(&scope.signed.cookie, id.as_str())
        .await?;
    let secret = flash.as_deref().and_then(|flash| {
        let (for_endpoint, rest) = flash.split_once(' ')?;
        let (secret, expires) = match rest.split_once(' ') {
            Some((secret, expires)) => (secret, expires.parse().ok()),
            None => (rest, None),
        };
        (for_endpoint == id.as_str()).then(|| NewSecret {
            secret: flashed_secret(&state, &id, secret),
            previous_expire_at: expires,
        })
    });
    let details = endpoint_details(endpoint.clone(), &secrets);
    Ok(page(pages::endpoint(
        &scope.frame(),
        &endpoint,
        &health,
        &details,
        secret.as_ref(),
    )))
}

/// `GET …/endpoints/{endpoint}/edit`: the endpoint's settings in the form.
pub(super) async fn edit_form(
    State(state): State<AppState>,
    scope: InAccount,
    Path((_, id)): Path<(String, EndpointId)>,
) -> Result<Response, ConsoleError> {
    scope.signed.check_may_change()?;
    let endpoint = state
        .db
        .endpoint(&scope.account.id, &id)
        .await
        .map_err(not_found)?;
    let known = known_types(&state, &scope).await?;
    let types = endpoint.types().to_vec();
    let form = EndpointForm {
        url: endpoint.url.clone(),
        other_types: types
            .iter()
            .filter(|t| !known.contains(t) && t.as_str() != "*")
            .cloned()
            .collect::<Vec<_>>()
            .join(", "),
        types,
        description: endpoint.description.clone(),
        timeout_ms: endpoint.timeout_ms.to_string(),
        rate_limit: endpoint
            .rate_limit_per_second
            .map(|n| n.to_string())
            .unwrap_or_default(),
        thin: endpoint.payload_mode == PayloadMode::Thin,
    };
    let purpose = FormFor::Edit(&endpoint);
    Ok(page(pages::endpoint_form(
        &scope.frame(),
        &purpose,
        &known,
        &form,
        None,
    )))
}

/// `POST …/endpoints/{endpoint}/edit`: saves the settings through the service's [`change`],
/// as the API's (a new URL is challenged), or shows the form again with why not.
pub(super) async fn edit(
    State(state): State<AppState>,
    scope: InAccount,
    Path((_, id)): Path<(String, EndpointId)>,
    Form(fields): Form<Vec<(String, String)>>,
) -> Result<Response, ConsoleError> {
    let form = RegisterForm::from_pairs(fields);
    scope.check_form(&form.csrf_token)?;
    let account = &scope.account.id;
    let endpoint = state.db.endpoint(account, &id).await.map_err(not_found)?;
    let patch = match form.patch() {
        Ok(patch) => patch,
        Err(why) => return refuse_edit(&state, &scope, &endpoint, form, &why).await,
    };
    match change(&state, &scope.account, &id, patch).await {
        Ok(_) => {
            tracing::info!(target: "kxp_sender", endpoint_id = %id, "endpoint changed from the console");
            scope
                .audit(&state, ConsoleAction::EndpointEdit, Some(id.as_str()))
                .await;
            Ok(back_to(&scope, &id))
        }
        Err(refused) => {
            let why = refused.to_string();
            refuse_edit(&state, &scope, &endpoint, form, &why).await
        }
    }
}

/// The edit form again, with what was typed and why it was not saved (422).
async fn refuse_edit(
    state: &AppState,
    scope: &InAccount,
    endpoint: &crate::model::Endpoint,
    form: RegisterForm,
    why: &str,
) -> Result<Response, ConsoleError> {
    let known = known_types(state, scope).await?;
    let shown = form.shown();
    let purpose = FormFor::Edit(endpoint);
    let markup = pages::endpoint_form(&scope.frame(), &purpose, &known, &shown, Some(why));
    Ok((
        axum::http::StatusCode::UNPROCESSABLE_ENTITY,
        Html(markup.into_string()),
    )
        .into_response())
}

/// `POST …/endpoints/{endpoint}/pause`.
pub(super) async fn pause(
    State(state): State<AppState>,
    Checked { scope, id }: Checked<EndpointId>,
) -> Result<Response, ConsoleError> {
    let (_, held) = app::pause(&state, &scope.account, &id).await?;
    tracing::info!(target: "kxp_sender", endpoint_id = %id, held, "endpoint paused from the console");
    scope
        .audit(&state, ConsoleAction::EndpointPause, Some(id.as_str()))
        .await;
    Ok(back_to(&scope, &id))
}

/// `POST …/endpoints/{endpoint}/resume`.
pub(super) async fn resume(
    State(state): State<AppState>,
    Checked { scope, id }: Checked<EndpointId>,
) -> Result<Response, ConsoleError> {
    let (_, due) = app::resume(&state, &scope.account, &id).await?;
    tracing::info!(target: "kxp_sender", endpoint_id = %id, due, "endpoint resumed from the console");
    scope
        .audit(&state, ConsoleAction::EndpointResume, Some(id.as_str()))
        .await;
    Ok(back_to(&scope, &id))
}

/// `POST …/endpoints/{endpoint}/rotate`: a new secret, the old ones signing for the default
/// overlap; the new one is shown once on the endpoint's page.
pub(super) async fn rotate(
    State(state): State<AppState>,
    checked: Checked<EndpointId>,
) -> Result<Response, ConsoleError> {
    rotate_with(&state, checked, None).await
}

/// `POST …/endpoints/{endpoint}/rotate-when-confirmed`: [`rotate`], the old secrets stopping
/// as soon as the receiver has verified [`DEFAULT_CONFIRMATIONS`] deliveries in a row with the
/// new one (the default overlap still the upper bound).
pub(super) async fn rotate_when_confirmed(
    State(state): State<AppState>,
    checked: Checked<EndpointId>,
) -> Result<Response, ConsoleError> {
    rotate_with(&state, checked, Some(DEFAULT_CONFIRMATIONS)).await
}

/// Rotates through the service's [`rotate_secret`](app::rotate_secret); a refusal is shown
/// as a page.
async fn rotate_with(
    state: &AppState,
    Checked { scope, id }: Checked<EndpointId>,
    confirmations: Option<u32>,
) -> Result<Response, ConsoleError> {
    let rotated = match app::rotate_secret(
        state,
        &scope.account,
        &id,
        DEFAULT_OVERLAP,
        confirmations,
    )
    .await
    {
        Ok(rotated) => rotated,
        Err(Error::Conflict { message, .. }) => {
            return Ok(refused("The secret was not rotated", &message));
        }
        Err(e) => return Err(e.into()),
    };
    tracing::info!(target: "kxp_sender", endpoint_id = %id, "endpoint secret rotated from the console");
    // An endpoint that signs with Ed25519 only has no secret to show: its page lists the new
    // key's fingerprint, and the public key is public.
    if let Some(secret) = &rotated.secret {
        let flash = format!(
            "{id} {} {}",
            flash_secret(state, &id, secret.expose()),
            rotated.previous_expires_at
        );
        state.db.set_flash(&scope.signed.cookie, &flash).await?;
    }
    scope
        .audit(
            state,
            ConsoleAction::EndpointRotateSecret,
            Some(id.as_str()),
        )
        .await;
    Ok(back_to(&scope, &id))
}

/// The type of the console's test events: no endpoint subscribes to it by accident.
pub(super) const TEST_EVENT_TYPE: &str = "kxp.test";

/// `POST …/endpoints/{endpoint}/test`: sends a test event to this endpoint only (whatever it
/// subscribes to), signed and retried like any other, then shows it on its way.
pub(super) async fn test(
    State(state): State<AppState>,
    Checked { scope, id }: Checked<EndpointId>,
) -> Result<Response, ConsoleError> {
    let account = &scope.account;
    let endpoint = state
        .db
        .endpoint(&account.id, &id)
        .await
        .map_err(not_found)?;
    let data = serde_json::json!({
        "message": "A test event sent from the kxp console",
        "endpoint_id": endpoint.id,
    });
    let item = Ingest {
        account: account.clone(),
        event_type: TEST_EVENT_TYPE.to_owned(),
        api_version: endpoint
            .api_version
            .clone()
            .unwrap_or_else(|| account.default_api_version.clone()),
        data: serde_json::value::to_raw_value(&data).map_err(|e| {
            ConsoleError::Store(StoreError::Database(sqlx::Error::Encode(Box::new(e))))
        })?,
        idempotency: None,
        id: None,
        request_hash: String::new(),
        tags: Vec::new(),
        ordering_key: None,
        only: Some(endpoint.id.clone()),
        retention_days: None,
        trace: None,
    };
    let event = match state.shared.ingester.ingest(item).await? {
        Ingested::Created(event, due_to) => {
            state.shared.metrics.event_ingested();
            state.shared.wake_for(due_to);
            event
        }
        Ingested::Replayed(event) => event,
        Ingested::KeyReused => return Err(ConsoleError::NotFound),
    };
    tracing::info!(target: "kxp_sender", endpoint_id = %id, event_id = %event.id,
        "test event sent from the console");
    scope
        .audit(&state, ConsoleAction::EndpointTestEvent, Some(id.as_str()))
        .await;
    Ok(Redirect::to(&scope.url(&format!("/events/{}", event.id))).into_response())
}

/// `GET …/endpoints/{endpoint}/delete`: what the deletion would do, and the button.
pub(super) async fn delete_form(
    State(state): State<AppState>,
    scope: InAccount,
    Path((_, id)): Path<(String, EndpointId)>,
) -> Result<Response, ConsoleError> {
    scope.signed.check_may_change()?;
    let account = &scope.account.id;
    let endpoint = state.db.endpoint(account, &id).await.map_err(not_found)?;
    let health = state.db.endpoint_health(account, &id).await?;
    let confirm = DeleteConfirm {
        endpoint: &endpoint,
        unfinished: health.pending,
    };
    Ok(page(pages::delete_confirm(&scope.frame(), &confirm)))
}

/// `POST …/endpoints/{endpoint}/delete`.
pub(super) async fn delete(
    State(state): State<AppState>,
    Checked { scope, id }: Checked<EndpointId>,
) -> Result<Response, ConsoleError> {
    let ended = app::delete(&state, &scope.account, &id).await?;
    tracing::info!(target: "kxp_sender", endpoint_id = %id, dead_deliveries = ended,
        "endpoint deleted from the console");
    scope
        .audit(&state, ConsoleAction::EndpointDelete, Some(id.as_str()))
        .await;
    Ok(Redirect::to(&scope.url("")).into_response())
}

/// A store's "not found" as the console's 404 page.
pub(super) fn not_found(e: StoreError) -> ConsoleError {
    match e {
        StoreError::NotFound => ConsoleError::NotFound,
        other => ConsoleError::Store(other),
    }
}

/// Back to the endpoint's page after an action (303: the browser GETs it).
fn back_to(scope: &InAccount, id: &EndpointId) -> Response {
    Redirect::to(&scope.url(&format!("/endpoints/{id}"))).into_response()
}

/// A page that says an action was refused, and why (409).
pub(super) fn refused(title: &str, why: &str) -> Response {
    let page = pages::message(title, why);
    (axum::http::StatusCode::CONFLICT, Html(page.into_string())).into_response()
}

/// A page as the response.
pub(super) fn page(markup: maud::Markup) -> Response {
    Html(markup.into_string()).into_response()
}
