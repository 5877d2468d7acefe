//! A sender started in-process on a temporary SQLite database, and scripted receivers on
//! 127.0.0.1 that record what reaches them.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use kxp_sender::Protection;
use kxp_sender::{Config, Schedule, Server};
use serde_json::{Value, json};

/// A running sender and an API client holding its key.
pub struct Sender {
    pub server: Server,
    pub api: Api,
    pub database_url: String,
    _dir: tempfile::TempDir,
}

/// Starts a sender in development mode with `schedule` (jitter 0 unless the schedule says
/// otherwise) on a fresh SQLite file.
pub async fn sender(schedule: &str) -> Sender {
    sender_with(schedule, |_| {}).await
}

pub async fn sender_with(schedule: &str, tweak: impl FnOnce(&mut Config)) -> Sender {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config {
        database_url: format!("sqlite://{}", dir.path().join("kxp.db").display()),
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        dev: true,
        schedule: schedule
            .parse::<Schedule>()
            .unwrap()
            .with_jitter(0.0)
            .unwrap(),
        poll_interval: Duration::from_millis(20),
        api_key: Some("kxp_test_key".to_owned()),
        // Tests of retries and the dead-letter queue fail endpoints on purpose: the breaker
        // stays out of their way unless a test turns it on (tests/it/protection.rs).
        protection: Protection {
            breaker_failures: u32::MAX,
            ..Protection::default()
        },
        ..Config::default()
    };
    tweak(&mut config);
    let database_url = config.database_url.clone();
    let server = kxp_sender::start(config).await.unwrap();
    let api = Api {
        base: format!("http://{}", server.addr()),
        key: "kxp_test_key".to_owned(),
        client: reqwest::Client::new(),
    };
    Sender {
        server,
        api,
        database_url,
        _dir: dir,
    }
}

/// A thin client of the sender's API.
#[derive(Clone)]
pub struct Api {
    pub base: String,
    pub key: String,
    pub client: reqwest::Client,
}

impl Api {
    pub async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut request = self
            .client
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.key);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    /// Creates an endpoint for `url`; returns (id, secret). The scripted receivers do not
    /// answer the endpoint challenge, so it is skipped unless `extra` says
    /// `"skip_challenge": false`.
    pub async fn endpoint(&self, url: &str, extra: Value) -> (String, String) {
        let mut body = json!({"url": url, "skip_challenge": true});
        if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
            body.extend(extra.clone());
        }
        let (status, created) = self.call("POST", "/v1/endpoints", Some(body)).await;
        assert_eq!(status, 201, "{created}");
        (
            created["id"].as_str().unwrap().to_owned(),
            created["secret"].as_str().unwrap().to_owned(),
        )
    }

    /// Emits an event; returns its id.
    pub async fn emit(&self, event_type: &str, data: Value) -> String {
        let (status, event) = self
            .call(
                "POST",
                "/v1/events",
                Some(json!({"type": event_type, "data": data})),
            )
            .await;
        assert_eq!(status, 202, "{event}");
        event["id"].as_str().unwrap().to_owned()
    }

    /// The deliveries of an event.
    pub async fn deliveries_of(&self, event_id: &str) -> Vec<Value> {
        let (status, page) = self
            .call("GET", &format!("/v1/events/{event_id}/deliveries"), None)
            .await;
        assert_eq!(status, 200, "{page}");
        page["data"].as_array().unwrap().clone()
    }

    /// Polls until the event's latest delivery reaches `status`, for at most `within`.
    pub async fn wait_for(&self, event_id: &str, status: &str, within: Duration) -> Value {
        let start = Instant::now();
        loop {
            let deliveries = self.deliveries_of(event_id).await;
            if let Some(latest) = deliveries.last()
                && latest["status"] == status
            {
                return latest.clone();
            }
            assert!(
                start.elapsed() < within,
                "event {event_id} did not reach {status} within {within:?}: {deliveries:?}"
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    pub async fn attempts(&self, delivery_id: &str) -> Vec<Value> {
        let (status, page) = self
            .call(
                "GET",
                &format!("/v1/deliveries/{delivery_id}/attempts"),
                None,
            )
            .await;
        assert_eq!(status, 200, "{page}");
        page["data"].as_array().unwrap().clone()
    }
}

/// How a scripted receiver answers one request.
#[derive(Debug, Clone)]
pub enum Reply {
    Status(u16),
    RetryAfter(u16, u64),
    Redirect(u16, String),
    Hang(Duration),
}

/// One request as a receiver saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub headers: HeaderMap,
    pub body: Bytes,
    pub at: Instant,
}

impl Seen {
    pub fn header(&self, name: &str) -> String {
        self.headers
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default()
    }

    pub fn event_id(&self) -> String {
        serde_json::from_slice::<Value>(&self.body).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_owned()
    }
}

#[derive(Clone, Default)]
struct Script {
    replies: Arc<Mutex<VecDeque<Reply>>>,
    /// The status once the script runs out (200 unless changed).
    rest: Arc<Mutex<Option<u16>>>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

/// A receiver on 127.0.0.1 that answers from a script (then 200 once the script runs out, or
/// what [`Receiver::answer_rest_with`] says) and records every request.
#[derive(Clone)]
pub struct Receiver {
    pub url: String,
    script: Script,
}

impl Receiver {
    pub async fn start(replies: Vec<Reply>) -> Receiver {
        let script = Script {
            replies: Arc::new(Mutex::new(replies.into())),
            ..Script::default()
        };
        let app = Router::new().fallback(answer).with_state(script.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Receiver {
            url: format!("{base}/hook"),
            script,
        }
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.script.seen.lock().unwrap().clone()
    }

    /// Answers `status` to every request once the script has run out (an outage, or its end).
    pub fn answer_rest_with(&self, status: u16) {
        *self.script.rest.lock().unwrap() = Some(status);
    }
}

async fn answer(State(script): State<Script>, headers: HeaderMap, body: Bytes) -> Response {
    script.seen.lock().unwrap().push(Seen {
        headers,
        body,
        at: Instant::now(),
    });
    let reply = script
        .replies
        .lock()
        .unwrap()
        .pop_front()
        .unwrap_or_else(|| Reply::Status(script.rest.lock().unwrap().unwrap_or(200)));
    match reply {
        Reply::Status(code) => (StatusCode::from_u16(code).unwrap(), "answer").into_response(),
        Reply::RetryAfter(code, secs) => (
            StatusCode::from_u16(code).unwrap(),
            [("retry-after", secs.to_string())],
            "later",
        )
            .into_response(),
        Reply::Redirect(code, location) => (
            StatusCode::from_u16(code).unwrap(),
            [("location", location)],
            "",
        )
            .into_response(),
        Reply::Hang(d) => {
            tokio::time::sleep(d).await;
            (StatusCode::OK, "too late").into_response()
        }
    }
}

/// Verifies a request as a kxp receiver would, with `secret`.
pub fn verifies(seen: &Seen, secret: &str) -> bool {
    let verifier = kxp_verify::Verifier::from_secret_list(secret).unwrap();
    verifier
        .verify_now(&seen.header("x-kxp-signature"), &seen.body)
        .is_ok()
}
