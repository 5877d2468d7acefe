//! One request to the endpoint and its answer, recorded for the report: the request as the
//! sender would make it (marked as a test), the answer read up to a few KiB however much the
//! endpoint sends, and a failure described without the URL (which may carry credentials).

use std::collections::BTreeMap;
use std::time::Instant;

use reqwest::header::{CONNECTION, CONTENT_TYPE, LOCATION};
use reqwest::{Method, StatusCode};

use crate::event::TestEvent;
use crate::report::{Received, Sent};
use crate::target::{Target, root_cause};

/// How much of an answer is read: enough for any challenge token or error body. The rest is
/// never read, so an endpoint cannot make a check hold much in memory.
const KEPT_BODY_BYTES: usize = 4096;

/// How much of a body a report shows.
const SHOWN_CHARS: usize = 200;

/// A request to make.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    method: Method,
    query: Option<(&'static str, String)>,
    signature: Option<String>,
    event_id: Option<String>,
    attempt: u32,
    body: Vec<u8>,
    keep_alive: bool,
}

impl Request {
    /// A delivery of `event` with `signature` in `X-Kxp-Signature` (none when `None`).
    pub(crate) fn event(event: &TestEvent, signature: Option<String>) -> Request {
        Request {
            event_id: Some(event.id.clone()),
            ..Request::body(event.body.clone(), signature)
        }
    }

    /// A delivery of a body that is not an event.
    pub(crate) fn body(body: Vec<u8>, signature: Option<String>) -> Request {
        Request {
            method: Method::POST,
            query: None,
            signature,
            event_id: None,
            attempt: 1,
            body,
            keep_alive: false,
        }
    }

    /// The endpoint challenge: `GET <url>?challenge=<token>`.
    pub(crate) fn challenge(token: String) -> Request {
        Request {
            method: Method::GET,
            query: Some(("challenge", token)),
            ..Request::body(Vec::new(), None)
        }
    }

    /// Lets the request go over a connection kept from an earlier one, as a sender's bursts do.
    /// Otherwise it gets a connection of its own (`Connection: close`): an endpoint that closes
    /// the connection after its answer (on an oversized body, say) cannot make the next check
    /// fail on a connection it was about to close.
    pub(crate) fn keep_alive(self) -> Request {
        Request {
            keep_alive: true,
            ..self
        }
    }

    /// Which delivery attempt of its event this is (`X-Kxp-Attempt`).
    pub(crate) fn attempt(self, attempt: u32) -> Request {
        Request { attempt, ..self }
    }
}

/// A request made and what came of it.
#[derive(Debug, Clone)]
pub(crate) struct Exchange {
    pub(crate) sent: Sent,
    pub(crate) received: Received,
    /// The answer's body as read (up to [`KEPT_BODY_BYTES`]), for the challenge.
    pub(crate) body: String,
    /// No answer within the timeout.
    pub(crate) timed_out: bool,
}

impl Exchange {
    /// The status, when an answer came.
    pub(crate) fn status(&self) -> Option<StatusCode> {
        self.received
            .status
            .and_then(|s| StatusCode::from_u16(s).ok())
    }
}

/// Sends `request` to the target's URL and records both sides.
pub(crate) async fn send(target: &Target, request: Request) -> Exchange {
    let mut url = target.url().clone();
    if let Some((name, value)) = &request.query {
        url.query_pairs_mut().append_pair(name, value);
    }
    let mut builder = target
        .client
        .request(request.method.clone(), url)
        .header("X-Kxp-Test", "true");
    if !request.keep_alive {
        builder = builder.header(CONNECTION, "close");
    }
    if request.method == Method::POST {
        builder = builder
            .header(CONTENT_TYPE, "application/json")
            .header("X-Kxp-Event-Type", target.event_type())
            .header("X-Kxp-Delivery-Id", uuid::Uuid::new_v4().to_string())
            .header("X-Kxp-Attempt", request.attempt.to_string())
            .body(request.body.clone());
    }
    if let Some(signature) = &request.signature {
        builder = builder.header("X-Kxp-Signature", signature);
    }
    if let Some(id) = &request.event_id {
        builder = builder.header("X-Kxp-Event-Id", id);
    }
    let sent = describe_request(&request);

    let started = Instant::now();
    let answer = read_answer(builder).await;
    let latency = started.elapsed();
    match answer {
        Ok((status, location, kept, read)) => Exchange {
            sent,
            received: Received {
                status: Some(status.as_u16()),
                location,
                body: one_line(&kept),
                body_bytes: read,
                latency,
                error: None,
            },
            body: kept,
            timed_out: false,
        },
        Err(error) => {
            let timed_out = error.is_timeout();
            let error = if timed_out {
                format!("no answer within {} s", target.timeout().as_secs_f64())
            } else if error.is_connect() {
                format!("cannot connect: {}", root_cause(&error))
            } else {
                format!("no answer: {}", root_cause(&error))
            };
            Exchange {
                sent,
                received: Received {
                    status: None,
                    location: None,
                    body: String::new(),
                    body_bytes: 0,
                    latency,
                    error: Some(error),
                },
                body: String::new(),
                timed_out,
            }
        }
    }
}

/// The status, the `Location` of a redirect, the first [`KEPT_BODY_BYTES`] of the body as text,
/// and how many bytes were read.
async fn read_answer(
    request: reqwest::RequestBuilder,
) -> reqwest::Result<(StatusCode, Option<String>, String, usize)> {
    let mut response = request.send().await?;
    let status = response.status();
    let location = status
        .is_redirection()
        .then(|| response.headers().get(LOCATION))
        .flatten()
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let mut kept = Vec::new();
    while kept.len() < KEPT_BODY_BYTES {
        let Some(chunk) = response.chunk().await? else {
            break;
        };
        kept.extend_from_slice(&chunk);
    }
    let read = kept.len();
    kept.truncate(KEPT_BODY_BYTES);
    Ok((
        status,
        location,
        String::from_utf8_lossy(&kept).into_owned(),
        read,
    ))
}

/// The report's view of a request: the headers that tell the checks apart, the body's start.
fn describe_request(request: &Request) -> Sent {
    let mut headers = BTreeMap::new();
    if let Some(signature) = &request.signature {
        headers.insert("X-Kxp-Signature", abbreviate(signature));
    }
    if let Some(id) = &request.event_id {
        headers.insert("X-Kxp-Event-Id", id.clone());
    }
    headers.insert("X-Kxp-Test", "true".to_owned());
    Sent {
        method: if request.method == Method::GET {
            "GET"
        } else {
            "POST"
        },
        query: request
            .query
            .as_ref()
            .map(|(name, value)| format!("{name}={value}")),
        headers,
        body_bytes: request.body.len(),
        body: one_line(&String::from_utf8_lossy(
            &request.body[..request.body.len().min(SHOWN_CHARS * 4)],
        )),
    }
}

/// `t=1764464523,v1=133e145e…`: the shape of the header without a usable signature.
fn abbreviate(signature: &str) -> String {
    signature
        .split(',')
        .map(|item| match item.strip_prefix("v1=") {
            Some(v1) if v1.len() == 64 => format!("v1={}…", &v1[..8]),
            _ => item.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The first [`SHOWN_CHARS`] characters, control characters escaped so the text stays on its
/// line, `…` when cut.
fn one_line(text: &str) -> String {
    let mut shown: String = text
        .chars()
        .take(SHOWN_CHARS)
        .flat_map(|c| {
            if c.is_control() {
                c.escape_default().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect();
    if text.chars().nth(SHOWN_CHARS).is_some() {
        shown.push('…');
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_are_shown_by_shape_only() {
        let v1 = "a".repeat(64);
        assert_eq!(
            abbreviate(&format!("t=17,v1={v1},v1={v1}")),
            "t=17,v1=aaaaaaaa…,v1=aaaaaaaa…"
        );
        assert_eq!(
            abbreviate("t=17,v1=not-a-signature"),
            "t=17,v1=not-a-signature"
        );
    }

    #[test]
    fn bodies_are_shown_on_one_line_and_cut() {
        assert_eq!(one_line("{\n\"a\":1}\r\n"), "{\\n\"a\":1}\\r\\n");
        let long = "é".repeat(SHOWN_CHARS + 1);
        assert_eq!(one_line(&long), format!("{}…", "é".repeat(SHOWN_CHARS)));
    }
}
