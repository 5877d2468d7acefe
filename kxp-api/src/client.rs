//! The typed client: one method per route, errors decoded into [`ClientError`].

use core::fmt;
use std::time::Duration;

use reqwest::{Method, RequestBuilder, StatusCode, Url};
use serde::de::DeserializeOwned;

use crate::{
    ACCOUNT_HEADER, Account, AccountCreated, AccountId, AccountPatch, AccountUpdated, Attempt,
    BulkReplay, Delivery, DeliveryId, DeliveryQuery, Endpoint, EndpointCreated, EndpointDeleted,
    EndpointDetails, EndpointHealth, EndpointId, EndpointPatch, EndpointUpdated, ErrorBody,
    ErrorCode, Event, EventId, EventQuery, EventSummary, FeedToken, FilterTested, IDEMPOTENCY_KEY,
    NewAccount, NewEndpoint, NewEvent, NewPortalLink, Notification, Page, PageQuery, PortalLink,
    Probe, PublicKeys, ReplayQueued, RotateSecret, Schema, SchemaDeleted, SecretRotated,
    ServiceHealth, TRACEPARENT, TRACESTATE, TestFilter, TraceContext,
};

/// How much of an undecodable body a [`ClientError::Decode`] keeps.
const SNIPPET: usize = 512;

/// A failed call.
#[derive(Debug)]
#[non_exhaustive]
pub enum ClientError {
    /// The server answered with an error body (`{"error", "message"}`).
    Api {
        /// The HTTP status.
        status: u16,
        /// The stable code; [`ErrorCode::Unknown`] for one this crate does not know.
        code: ErrorCode,
        /// What is wrong, for people.
        message: String,
        /// With `schema_violation`: a JSON Pointer into the event's `data`.
        path: Option<String>,
        /// The `Retry-After` header in seconds, when the server sent one.
        retry_after: Option<Duration>,
    },
    /// The request did not get an answer (connection, timeout, TLS).
    Transport(reqwest::Error),
    /// The answer is not what the API describes: not JSON, or another shape.
    Decode {
        /// The HTTP status.
        status: u16,
        /// The start of the body (at most 512 bytes).
        body: String,
        /// Why it did not decode.
        source: serde_json::Error,
    },
    /// The base URL given to [`Client::new`] cannot carry API paths.
    BaseUrl(String),
}

impl ClientError {
    /// The API's code, for an [`ClientError::Api`].
    pub fn code(&self) -> Option<&ErrorCode> {
        match self {
            ClientError::Api { code, .. } => Some(code),
            _ => None,
        }
    }

    /// The HTTP status, when an answer came back.
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Api { status, .. } | ClientError::Decode { status, .. } => Some(*status),
            ClientError::Transport(e) => e.status().map(|s| s.as_u16()),
            ClientError::BaseUrl(_) => None,
        }
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Api {
                status,
                code,
                message,
                ..
            } => write!(f, "{status} {code}: {message}"),
            ClientError::Transport(e) => write!(f, "no answer from the kxp API: {e}"),
            ClientError::Decode { status, body, .. } => {
                write!(f, "unexpected answer from the kxp API ({status}): {body}")
            }
            ClientError::BaseUrl(reason) => write!(f, "invalid kxp API base URL: {reason}"),
        }
    }
}

impl std::error::Error for ClientError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ClientError::Transport(e) => Some(e),
            ClientError::Decode { source, .. } => Some(source),
            ClientError::Api { .. } | ClientError::BaseUrl(_) => None,
        }
    }
}

impl From<reqwest::Error> for ClientError {
    fn from(e: reqwest::Error) -> ClientError {
        ClientError::Transport(e)
    }
}

/// A client of one account's API (`Authorization: Bearer <api key>`), or of an operator's
/// (an operator key: [`Client::for_account`] picks the account it acts for). Cheap to clone
/// (the connection pool is shared). `Debug` shows the base URL and the account, never the key.
#[derive(Clone)]
pub struct Client {
    base: Url,
    key: String,
    /// Sent as `X-Kxp-Account` on every call.
    account: Option<AccountId>,
    http: reqwest::Client,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base.as_str())
            .field("api_key", &"[redacted]")
            .field("account", &self.account)
            .finish()
    }
}

impl Client {
    /// A client of the server at `base_url` (`http://127.0.0.1:8080`; a path prefix is kept),
    /// calling with `api_key`.
    pub fn new(base_url: &str, api_key: impl Into<String>) -> Result<Client, ClientError> {
        let base = Url::parse(base_url).map_err(|e| ClientError::BaseUrl(e.to_string()))?;
        if base.cannot_be_a_base() || !matches!(base.scheme(), "http" | "https") {
            return Err(ClientError::BaseUrl(format!(
                "`{base}` is not an http(s) URL"
            )));
        }
        Ok(Client {
            base,
            key: api_key.into(),
            account: None,
            http: reqwest::Client::new(),
        })
    }

    /// The same client acting for `account` (`X-Kxp-Account` on every call): how an operator
    /// key reaches one account's routes. With an account key it must name the key's own
    /// account; any other answers 404.
    pub fn for_account(self, account: AccountId) -> Client {
        Client {
            account: Some(account),
            ..self
        }
    }

    /// The same client on `http` (timeouts, proxies, TLS roots are the caller's choice).
    pub fn with_http(self, http: reqwest::Client) -> Client {
        Client { http, ..self }
    }

    /// Where the API is.
    pub fn base_url(&self) -> &Url {
        &self.base
    }

    // ---- endpoints ----

    /// `POST /v1/endpoints`: registers an endpoint (after its challenge, unless skipped). The
    /// answer holds its signing secret, which no other answer shows.
    pub async fn create_endpoint(&self, new: &NewEndpoint) -> Result<EndpointCreated, ClientError> {
        self.call(Method::POST, &["v1", "endpoints"], |r| r.json(new))
            .await
    }

    /// `GET /v1/endpoints`: one page of endpoints.
    pub async fn list_endpoints(&self, query: &PageQuery) -> Result<Page<Endpoint>, ClientError> {
        self.call(Method::GET, &["v1", "endpoints"], |r| r.query(query))
            .await
    }

    /// Every endpoint, following `next_cursor` to the end.
    pub async fn all_endpoints(&self) -> Result<Vec<Endpoint>, ClientError> {
        let first = PageQuery::limit(500);
        self.all(&first, PageQuery::after, async |q| {
            self.list_endpoints(q).await
        })
        .await
    }

    /// `GET /v1/endpoints/{id}`: the endpoint, its live secrets and the rotation under way.
    pub async fn endpoint(&self, id: &EndpointId) -> Result<EndpointDetails, ClientError> {
        self.call(Method::GET, &["v1", "endpoints", id.as_str()], |r| r)
            .await
    }

    /// `PATCH /v1/endpoints/{id}`: changes the fields the patch gives.
    pub async fn update_endpoint(
        &self,
        id: &EndpointId,
        patch: &EndpointPatch,
    ) -> Result<EndpointUpdated, ClientError> {
        self.call(Method::PATCH, &["v1", "endpoints", id.as_str()], |r| {
            r.json(patch)
        })
        .await
    }

    /// `DELETE /v1/endpoints/{id}`: its pending deliveries become dead.
    pub async fn delete_endpoint(&self, id: &EndpointId) -> Result<EndpointDeleted, ClientError> {
        self.call(Method::DELETE, &["v1", "endpoints", id.as_str()], |r| r)
            .await
    }

    /// `POST /v1/endpoints/{id}/pause`: holds its deliveries.
    pub async fn pause_endpoint(&self, id: &EndpointId) -> Result<Endpoint, ClientError> {
        self.call(
            Method::POST,
            &["v1", "endpoints", id.as_str(), "pause"],
            |r| r,
        )
        .await
    }

    /// `POST /v1/endpoints/{id}/resume`: releases held deliveries, re-enables, closes the
    /// circuit.
    pub async fn resume_endpoint(&self, id: &EndpointId) -> Result<Endpoint, ClientError> {
        self.call(
            Method::POST,
            &["v1", "endpoints", id.as_str(), "resume"],
            |r| r,
        )
        .await
    }

    /// `POST /v1/endpoints/{id}/rotate-secret`.
    pub async fn rotate_secret(
        &self,
        id: &EndpointId,
        rotation: &RotateSecret,
    ) -> Result<SecretRotated, ClientError> {
        self.call(
            Method::POST,
            &["v1", "endpoints", id.as_str(), "rotate-secret"],
            |r| r.json(rotation),
        )
        .await
    }

    /// `GET /v1/endpoints/{id}/health`.
    pub async fn endpoint_health(&self, id: &EndpointId) -> Result<EndpointHealth, ClientError> {
        self.call(
            Method::GET,
            &["v1", "endpoints", id.as_str(), "health"],
            |r| r,
        )
        .await
    }

    /// `POST /v1/listen-tokens`: a token for `kxp listen --token`, shown once.
    pub async fn create_listen_token(
        &self,
        new: &crate::NewListenToken,
    ) -> Result<crate::ListenToken, ClientError> {
        let request = self
            .request(Method::POST, self.url(&["v1", "listen-tokens"]))
            .json(new);
        Ok(self.send(request).await?.1)
    }

    /// `POST /v1/endpoints/{id}/feed-token`: a new token for the endpoint's catch-up feed, in
    /// place of any before. Shown once: hand it to the merchant for their receiver (it reads the
    /// feed, and nothing else, with it).
    pub async fn create_feed_token(&self, id: &EndpointId) -> Result<FeedToken, ClientError> {
        self.call(
            Method::POST,
            &["v1", "endpoints", id.as_str(), "feed-token"],
            |r| r,
        )
        .await
    }

    /// `GET /v1/endpoints/{id}/public-key`: the public keys of an endpoint that signs with
    /// Ed25519.
    pub async fn public_key(&self, id: &EndpointId) -> Result<PublicKeys, ClientError> {
        self.call(
            Method::GET,
            &["v1", "endpoints", id.as_str(), "public-key"],
            |r| r,
        )
        .await
    }

    /// `POST /v1/endpoints/{id}/replay`: replays the endpoint's dead (or delivered)
    /// deliveries.
    pub async fn replay_endpoint(
        &self,
        id: &EndpointId,
        replay: &BulkReplay,
    ) -> Result<ReplayQueued, ClientError> {
        self.call(
            Method::POST,
            &["v1", "endpoints", id.as_str(), "replay"],
            |r| r.json(replay),
        )
        .await
    }

    /// `POST /v1/endpoints/{id}/test-filter`: which of the account's newest events a filter
    /// (the endpoint's own, unless the request gives one) takes. Changes nothing.
    pub async fn test_filter(
        &self,
        id: &EndpointId,
        test: &TestFilter,
    ) -> Result<FilterTested, ClientError> {
        self.call(
            Method::POST,
            &["v1", "endpoints", id.as_str(), "test-filter"],
            |r| r.json(test),
        )
        .await
    }

    // ---- events ----

    /// `POST /v1/events`. With an `idempotency_key`, retrying after a lost answer (or a 5xx)
    /// returns the original event instead of emitting it twice.
    pub async fn create_event(
        &self,
        event: &NewEvent,
        idempotency_key: Option<&str>,
    ) -> Result<Event, ClientError> {
        self.call(Method::POST, &["v1", "events"], |r| {
            let r = r.json(event);
            match idempotency_key {
                Some(key) => r.header(IDEMPOTENCY_KEY, key),
                None => r,
            }
        })
        .await
    }

    /// [`create_event`](Client::create_event) as part of the producer's trace: the request
    /// carries `trace`'s `traceparent` (and `tracestate`), which the sender stores with the
    /// event; its spans and the merchant's handler join that trace.
    pub async fn create_event_in_trace(
        &self,
        event: &NewEvent,
        idempotency_key: Option<&str>,
        trace: &TraceContext,
    ) -> Result<Event, ClientError> {
        self.call(Method::POST, &["v1", "events"], |r| {
            let mut r = r.json(event).header(TRACEPARENT, &trace.traceparent);
            if let Some(state) = &trace.tracestate {
                r = r.header(TRACESTATE, state);
            }
            match idempotency_key {
                Some(key) => r.header(IDEMPOTENCY_KEY, key),
                None => r,
            }
        })
        .await
    }

    /// `GET /v1/events`: one page of the events `query` selects, newest first.
    pub async fn events(&self, query: &EventQuery) -> Result<Page<EventSummary>, ClientError> {
        self.call(Method::GET, &["v1", "events"], |r| r.query(query))
            .await
    }

    /// Every event `query` selects, newest first, following `next_cursor` from `query`'s
    /// cursor on.
    pub async fn all_events(&self, query: &EventQuery) -> Result<Vec<EventSummary>, ClientError> {
        self.all(query, EventQuery::after, async |q| self.events(q).await)
            .await
    }

    /// `GET /v1/events/{id}`: the envelope, exactly as receivers get it.
    pub async fn event(&self, id: &EventId) -> Result<Event, ClientError> {
        self.call(Method::GET, &["v1", "events", id.as_str()], |r| r)
            .await
    }

    /// `POST /v1/erasures`: erases the payloads of the account's events carrying `tag`
    /// (answered `running`; poll [`Client::erasure`] for `done`).
    pub async fn create_erasure(&self, tag: &str) -> Result<crate::Erasure, ClientError> {
        let request = self
            .request(Method::POST, self.url(&["v1", "erasures"]))
            .json(&crate::NewErasure {
                tag: tag.to_owned(),
            });
        Ok(self.send(request).await?.1)
    }

    /// `GET /v1/erasures/{id}`: how far an erasure is.
    pub async fn erasure(&self, id: &crate::ErasureId) -> Result<crate::Erasure, ClientError> {
        self.call(Method::GET, &["v1", "erasures", id.as_str()], |r| r)
            .await
    }

    /// `GET /v1/events/{id}/deliveries`: every delivery of the event, replays included (one
    /// page).
    pub async fn event_deliveries(&self, id: &EventId) -> Result<Page<Delivery>, ClientError> {
        self.call(
            Method::GET,
            &["v1", "events", id.as_str(), "deliveries"],
            |r| r,
        )
        .await
    }

    // ---- deliveries ----

    /// `GET /v1/deliveries`: one page of the deliveries `query` selects.
    pub async fn deliveries(&self, query: &DeliveryQuery) -> Result<Page<Delivery>, ClientError> {
        self.call(Method::GET, &["v1", "deliveries"], |r| r.query(query))
            .await
    }

    /// Every delivery `query` selects, following `next_cursor` from `query`'s cursor on.
    pub async fn all_deliveries(
        &self,
        query: &DeliveryQuery,
    ) -> Result<Vec<Delivery>, ClientError> {
        self.all(query, DeliveryQuery::after, async |q| {
            self.deliveries(q).await
        })
        .await
    }

    /// `GET /v1/deliveries/{id}/attempts` (one page).
    pub async fn delivery_attempts(&self, id: &DeliveryId) -> Result<Page<Attempt>, ClientError> {
        self.call(
            Method::GET,
            &["v1", "deliveries", id.as_str(), "attempts"],
            |r| r,
        )
        .await
    }

    /// `POST /v1/deliveries/{id}/replay`: the new delivery.
    pub async fn replay_delivery(&self, id: &DeliveryId) -> Result<Delivery, ClientError> {
        self.call(
            Method::POST,
            &["v1", "deliveries", id.as_str(), "replay"],
            |r| r,
        )
        .await
    }

    // ---- account ----

    /// `GET /v1/account`.
    pub async fn account(&self) -> Result<Account, ClientError> {
        self.call(Method::GET, &["v1", "account"], |r| r).await
    }

    /// `PATCH /v1/account`; setting `ops_url` answers the ops secret, once.
    pub async fn update_account(
        &self,
        patch: &AccountPatch,
    ) -> Result<AccountUpdated, ClientError> {
        self.call(Method::PATCH, &["v1", "account"], |r| r.json(patch))
            .await
    }

    /// `POST /v1/accounts` (operator keys): creates an account. The answer holds its API key,
    /// which no other answer shows.
    pub async fn create_account(&self, new: &NewAccount) -> Result<AccountCreated, ClientError> {
        self.call(Method::POST, &["v1", "accounts"], |r| r.json(new))
            .await
    }

    /// `GET /v1/accounts` (operator keys): one page of accounts, oldest first.
    pub async fn accounts(&self, query: &PageQuery) -> Result<Page<Account>, ClientError> {
        self.call(Method::GET, &["v1", "accounts"], |r| r.query(query))
            .await
    }

    /// `POST /v1/portal-links`: a one-time console sign-in URL for the client's account (or,
    /// with an operator key, the account it acts for), to hand to the merchant.
    pub async fn create_portal_link(&self, new: &NewPortalLink) -> Result<PortalLink, ClientError> {
        self.call(Method::POST, &["v1", "portal-links"], |r| r.json(new))
            .await
    }

    /// `GET /v1/notifications`: one page.
    pub async fn notifications(
        &self,
        query: &PageQuery,
    ) -> Result<Page<Notification>, ClientError> {
        self.call(Method::GET, &["v1", "notifications"], |r| r.query(query))
            .await
    }

    /// Every notification, following `next_cursor` to the end.
    pub async fn all_notifications(&self) -> Result<Vec<Notification>, ClientError> {
        let first = PageQuery::limit(500);
        self.all(&first, PageQuery::after, async |q| {
            self.notifications(q).await
        })
        .await
    }

    // ---- schemas ----

    /// `GET /v1/schemas`: every schema of the account (one page).
    pub async fn schemas(&self) -> Result<Page<Schema>, ClientError> {
        self.call(Method::GET, &["v1", "schemas"], |r| r).await
    }

    /// `GET /v1/schemas/{type}/{api_version}`.
    pub async fn schema(&self, event_type: &str, api_version: &str) -> Result<Schema, ClientError> {
        self.call(
            Method::GET,
            &["v1", "schemas", event_type, api_version],
            |r| r,
        )
        .await
    }

    /// `PUT /v1/schemas/{type}/{api_version}` with the JSON Schema `document` as the body. The
    /// `bool` is true when the schema is new (201), false when it replaced one (200).
    pub async fn put_schema(
        &self,
        event_type: &str,
        api_version: &str,
        document: &serde_json::Value,
    ) -> Result<(Schema, bool), ClientError> {
        let url = self.url(&["v1", "schemas", event_type, api_version]);
        let request = self.request(Method::PUT, url).json(document);
        let (status, schema) = self.send(request).await?;
        Ok((schema, status == StatusCode::CREATED))
    }

    /// `DELETE /v1/schemas/{type}/{api_version}`.
    pub async fn delete_schema(
        &self,
        event_type: &str,
        api_version: &str,
    ) -> Result<SchemaDeleted, ClientError> {
        self.call(
            Method::DELETE,
            &["v1", "schemas", event_type, api_version],
            |r| r,
        )
        .await
    }

    // ---- operations ----

    /// `GET /healthz`.
    pub async fn healthz(&self) -> Result<ServiceHealth, ClientError> {
        self.call(Method::GET, &["healthz"], |r| r).await
    }

    /// `GET /livez`: whether the process runs.
    pub async fn livez(&self) -> Result<Probe, ClientError> {
        self.call(Method::GET, &["livez"], |r| r).await
    }

    /// `GET /readyz`: whether the server should be sent traffic; a [`ClientError::Api`] with
    /// the reason's code when it should not.
    pub async fn readyz(&self) -> Result<Probe, ClientError> {
        self.call(Method::GET, &["readyz"], |r| r).await
    }

    /// `GET /metrics`: the Prometheus text.
    pub async fn metrics(&self) -> Result<String, ClientError> {
        let response = self
            .request(Method::GET, self.url(&["metrics"]))
            .send()
            .await?;
        let status = response.status();
        let retry_after = retry_after(&response);
        let body = response.bytes().await?;
        if status.is_success() {
            Ok(String::from_utf8_lossy(&body).into_owned())
        } else {
            Err(error(status, retry_after, &body))
        }
    }

    // ---- plumbing ----

    /// `base` + `segments`, each percent-encoded as one path segment (an id with a `/` stays
    /// one segment).
    fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        url
    }

    fn request(&self, method: Method, url: Url) -> RequestBuilder {
        let request = self.http.request(method, url).bearer_auth(&self.key);
        match &self.account {
            Some(account) => request.header(ACCOUNT_HEADER, account.as_str()),
            None => request,
        }
    }

    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        segments: &[&str],
        build: impl FnOnce(RequestBuilder) -> RequestBuilder,
    ) -> Result<T, ClientError> {
        let request = build(self.request(method, self.url(segments)));
        self.send(request).await.map(|(_, value)| value)
    }

    async fn send<T: DeserializeOwned>(
        &self,
        request: RequestBuilder,
    ) -> Result<(StatusCode, T), ClientError> {
        let response = request.send().await?;
        let status = response.status();
        let retry_after = retry_after(&response);
        let body = response.bytes().await?;
        if !status.is_success() {
            return Err(error(status, retry_after, &body));
        }
        match serde_json::from_slice(&body) {
            Ok(value) => Ok((status, value)),
            Err(source) => Err(decode(status, &body, source)),
        }
    }

    /// Follows `next_cursor` from `first` until a page has none.
    async fn all<Q, T>(
        &self,
        first: &Q,
        after: impl Fn(&Q, Option<crate::Cursor>) -> Q,
        fetch: impl AsyncFn(&Q) -> Result<Page<T>, ClientError>,
    ) -> Result<Vec<T>, ClientError> {
        let mut items = Vec::new();
        let mut page = fetch(first).await?;
        loop {
            items.append(&mut page.data);
            match page.next_cursor.take() {
                None => return Ok(items),
                Some(cursor) => page = fetch(&after(first, Some(cursor))).await?,
            }
        }
    }
}

fn retry_after(response: &reqwest::Response) -> Option<Duration> {
    let value = response.headers().get(reqwest::header::RETRY_AFTER)?;
    let seconds: u64 = value.to_str().ok()?.trim().parse().ok()?;
    Some(Duration::from_secs(seconds))
}

/// An error answer: the API's body when it is one, else what came back.
fn error(status: StatusCode, retry_after: Option<Duration>, body: &[u8]) -> ClientError {
    match serde_json::from_slice::<ErrorBody>(body) {
        Ok(ErrorBody {
            error,
            message,
            path,
            ..
        }) => ClientError::Api {
            status: status.as_u16(),
            code: error,
            message,
            path,
            retry_after,
        },
        Err(source) => decode(status, body, source),
    }
}

fn decode(status: StatusCode, body: &[u8], source: serde_json::Error) -> ClientError {
    let text = String::from_utf8_lossy(body);
    let mut end = text.len().min(SNIPPET);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    ClientError::Decode {
        status: status.as_u16(),
        body: text[..end].to_owned(),
        source,
    }
}
