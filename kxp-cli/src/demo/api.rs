//! The demo's client of the sender's HTTP API: the calls a payment platform's own code makes,
//! over loopback with `Authorization: Bearer <api key>`.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use reqwest::{Client, Method, StatusCode};
use serde::Deserialize;
use serde_json::{Value, json};

/// A thin API client. `Debug` hides the key.
#[derive(Clone)]
pub(super) struct Api {
    base: String,
    key: String,
    client: Client,
}

impl fmt::Debug for Api {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Api")
            .field("base", &self.base)
            .field("key", &"[redacted]")
            .finish()
    }
}

/// One delivery as `GET /v1/deliveries` lists it (the fields the demo reads).
#[derive(Debug, Clone, Deserialize)]
pub(super) struct DeliveryRow {
    /// The delivery id.
    pub id: String,
    /// The event it delivers.
    pub event_id: String,
    /// Where to.
    pub endpoint_id: String,
    /// `pending`, `delivering`, `delivered` or `dead`.
    pub status: String,
    /// HTTP tries so far.
    pub attempts: u64,
    /// The delivery that replayed this one, if any.
    pub replayed_by: Option<String>,
}

/// A created endpoint: its id, and its signing secret (shown once, handed to the receiver,
/// never printed).
pub(super) struct NewEndpoint {
    /// The endpoint id.
    pub id: String,
    /// The signing secret.
    pub secret: String,
}

impl Api {
    /// A client of the sender listening on `addr`.
    pub(super) fn new(addr: SocketAddr, key: String) -> Result<Api, String> {
        let client = Client::builder()
            // Loopback only: a proxy from the environment must not see the demo's traffic.
            .no_proxy()
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        Ok(Api {
            base: format!("http://{addr}"),
            key,
            client,
        })
    }

    /// Where the API is.
    pub(super) fn base(&self) -> &str {
        &self.base
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        idempotency_key: Option<&str>,
    ) -> Result<(StatusCode, Value), String> {
        let mut request = self
            .client
            .request(method.clone(), format!("{}{path}", self.base))
            .bearer_auth(&self.key);
        if let Some(key) = idempotency_key {
            request = request.header("Idempotency-Key", key);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request
            .send()
            .await
            .map_err(|e| format!("{method} {path}: {}", e.without_url()))?;
        let status = response.status();
        let text = response
            .text()
            .await
            .map_err(|e| format!("{method} {path}: {}", e.without_url()))?;
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Ok((status, value))
    }

    /// Registers an endpoint for the event types matching `pattern`.
    pub(super) async fn create_endpoint(
        &self,
        url: &str,
        pattern: &str,
        description: &str,
        timeout: Duration,
    ) -> Result<NewEndpoint, String> {
        let body = json!({
            "url": url,
            "event_types": [pattern],
            "description": description,
            "timeout_ms": u64::try_from(timeout.as_millis()).unwrap_or(5000),
            // The demo's receiver is not listening yet (it needs the secret first), and its
            // routes take POSTs only.
            "skip_challenge": true,
        });
        let (status, created) = self
            .call(Method::POST, "/v1/endpoints", Some(&body), None)
            .await?;
        if status != StatusCode::CREATED {
            return Err(format!("POST /v1/endpoints answered {status}: {created}"));
        }
        let field = |name: &str| {
            created[name]
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("POST /v1/endpoints: the answer has no `{name}`"))
        };
        Ok(NewEndpoint {
            id: field("id")?,
            secret: field("secret")?,
        })
    }

    /// Emits one event with an `Idempotency-Key`; a try that fails in transit or with a 5xx is
    /// repeated with the same key, so the event exists once whatever happened to the answer.
    /// Returns the event id.
    pub(super) async fn emit(
        &self,
        idempotency_key: &str,
        event_type: &str,
        data: Value,
    ) -> Result<String, String> {
        let body = json!({"type": event_type, "data": data});
        let mut last_error = String::new();
        for _ in 0..3 {
            match self
                .call(
                    Method::POST,
                    "/v1/events",
                    Some(&body),
                    Some(idempotency_key),
                )
                .await
            {
                Ok((StatusCode::ACCEPTED, event)) => {
                    return event["id"]
                        .as_str()
                        .map(str::to_owned)
                        .ok_or_else(|| "POST /v1/events: the answer has no `id`".to_owned());
                }
                Ok((status, answer)) if !status.is_server_error() => {
                    return Err(format!("POST /v1/events answered {status}: {answer}"));
                }
                Ok((status, answer)) => {
                    last_error = format!("POST /v1/events answered {status}: {answer}");
                }
                Err(e) => last_error = e,
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(last_error)
    }

    /// Every delivery of the account, all pages, oldest first.
    pub(super) async fn deliveries(&self) -> Result<Vec<DeliveryRow>, String> {
        #[derive(Deserialize)]
        struct Page {
            data: Vec<DeliveryRow>,
            next_cursor: Option<String>,
        }
        let mut all = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let path = match &cursor {
                Some(c) => format!("/v1/deliveries?limit=500&cursor={c}"),
                None => "/v1/deliveries?limit=500".to_owned(),
            };
            let (status, page) = self.call(Method::GET, &path, None, None).await?;
            if status != StatusCode::OK {
                return Err(format!("GET /v1/deliveries answered {status}: {page}"));
            }
            let page: Page = serde_json::from_value(page)
                .map_err(|e| format!("GET /v1/deliveries: unexpected answer: {e}"))?;
            all.extend(page.data);
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => return Ok(all),
            }
        }
    }

    /// Points the account's operational webhooks at `url`; returns the ops secret they are
    /// signed with (shown only in this answer).
    pub(super) async fn set_ops_url(&self, url: &str) -> Result<String, String> {
        let body = json!({"ops_url": url});
        let (status, account) = self
            .call(Method::PATCH, "/v1/account", Some(&body), None)
            .await?;
        if status != StatusCode::OK {
            return Err(format!("PATCH /v1/account answered {status}: {account}"));
        }
        account["ops_secret"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| "PATCH /v1/account: the answer has no `ops_secret`".to_owned())
    }

    /// An endpoint's circuit breaker state (`closed`, `open`, `half_open`).
    pub(super) async fn circuit_state(&self, endpoint_id: &str) -> Result<String, String> {
        let path = format!("/v1/endpoints/{endpoint_id}");
        let (status, endpoint) = self.call(Method::GET, &path, None, None).await?;
        if status != StatusCode::OK {
            return Err(format!("GET {path} answered {status}: {endpoint}"));
        }
        endpoint["circuit_state"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("GET {path}: the answer has no `circuit_state`"))
    }

    /// Replays every dead delivery of an endpoint (`POST /v1/endpoints/{id}/replay`); returns
    /// how many were queued.
    pub(super) async fn replay_endpoint(&self, endpoint_id: &str) -> Result<u64, String> {
        let path = format!("/v1/endpoints/{endpoint_id}/replay");
        let (status, answer) = self
            .call(Method::POST, &path, Some(&json!({"status": "dead"})), None)
            .await?;
        if status != StatusCode::ACCEPTED {
            return Err(format!("POST {path} answered {status}: {answer}"));
        }
        answer["queued"]
            .as_u64()
            .ok_or_else(|| format!("POST {path}: the answer has no `queued`"))
    }
}
