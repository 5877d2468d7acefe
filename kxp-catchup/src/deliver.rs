//! How a recovered event reaches the receiver's own handler: as the request a delivery would
//! have been, so it passes the same verifier, the same handler and the same dedup.

use std::future::Future;
use std::pin::Pin;

use kxp_api::FeedItem;

/// A boxed future, so [`Deliver`] stays object-safe.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Hands one feed item to the receiver's webhook handler and says what it answered: the HTTP
/// status (2xx: processed, or processed before). kxp-axum's `CatchUpLayer` calls the route's own
/// service; [`Loopback`] posts to the receiver's URL, for any framework.
pub trait Deliver: Send + Sync + 'static {
    /// Delivers `request` (the item's headers and body, as a delivery sends them).
    fn deliver(&self, request: Request) -> BoxFuture<'_, Result<u16, String>>;
}

/// A feed item as the request a delivery makes: the signature headers the feed signed it with,
/// the event id and type, the hints, and the body byte for byte.
#[derive(Debug, Clone)]
pub struct Request {
    /// Header names (lowercase) and values.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: String,
}

impl Request {
    /// The request for `item` of `endpoint_id`'s feed, marked with `mark` (the catch-up's own
    /// [`CATCH_UP_HEADER`] value).
    pub fn of(endpoint_id: &str, item: &FeedItem, mark: &str) -> Request {
        let mut headers: Vec<(String, String)> = item
            .headers
            .iter()
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect();
        headers.extend([
            ("content-type".to_owned(), "application/json".to_owned()),
            ("x-kxp-event-id".to_owned(), item.event_id.to_string()),
            ("x-kxp-event-type".to_owned(), item.event_type.clone()),
            (
                kxp_verify::ENDPOINT_ID_HEADER.to_owned(),
                endpoint_id.to_owned(),
            ),
            (
                kxp_verify::SEQUENCE_HEADER.to_owned(),
                item.sequence.to_string(),
            ),
            (CATCH_UP_HEADER.to_owned(), mark.to_owned()),
        ]);
        Request {
            headers,
            body: item.body.clone(),
        }
    }
}

/// A delivery's hints, `(endpoint id, sequence)`, read with `header` (a header's value by
/// lowercase name); `None` for a request without both, or one the catch-up made itself
/// ([`CATCH_UP_HEADER`]): what a framework's middleware hands to
/// [`CatchUp::observe`](crate::CatchUp::observe) once the request is answered 2xx.
pub fn hint<'h>(header: impl Fn(&str) -> Option<&'h str>) -> Option<(String, u64)> {
    if header(CATCH_UP_HEADER).is_some() {
        return None;
    }
    let endpoint_id = header(kxp_verify::ENDPOINT_ID_HEADER)?.to_owned();
    let sequence = header(kxp_verify::SEQUENCE_HEADER)?.parse().ok()?;
    Some((endpoint_id, sequence))
}

/// Marks a request the catch-up made (not the sender): handlers may log it; the hints it
/// carries are not observed again. Its value is random, one per [`CatchUp`](crate::CatchUp):
/// ordered mode lets only its own through to the handler.
pub const CATCH_UP_HEADER: &str = "x-kxp-catch-up";

/// Delivers by `POST`ing to the receiver's own webhook URL (`http://127.0.0.1:8080/webhooks`):
/// works with any framework, at the cost of a loopback request per recovered event.
#[derive(Debug, Clone)]
pub struct Loopback {
    url: String,
    http: reqwest::Client,
}

impl Loopback {
    /// Delivers to `url`.
    pub fn new(url: &str) -> Loopback {
        Loopback {
            url: url.to_owned(),
            http: reqwest::Client::new(),
        }
    }
}

impl Deliver for Loopback {
    fn deliver(&self, request: Request) -> BoxFuture<'_, Result<u16, String>> {
        Box::pin(async move {
            let mut post = self.http.post(&self.url).body(request.body);
            for (name, value) in &request.headers {
                post = post.header(name, value);
            }
            post.send()
                .await
                .map(|response| response.status().as_u16())
                .map_err(|e| e.to_string())
        })
    }
}
