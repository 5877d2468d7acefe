//! Thin events, on the receiver's side: a thin delivery (`{"id","type","api_version",
//! "created_at","thin":true}`, signed like any) is verified by the middleware as usual; then
//! [`ThinEvents::resolve`] fetches the full envelope from the sender with the endpoint's feed
//! credential and verifies it with the same [`Receiver`], so the handler gets the full,
//! verified event whether the endpoint is thin or full.

use kxp_api::GoneReason;
use kxp_receiver::{Accepted, Receiver, Rejection};

use crate::feed::{FeedClient, FeedError};

/// What a thin delivery turned into.
#[derive(Debug)]
pub enum Resolved<B> {
    /// The full event, verified by the receiver's own checks: hand it to the handler.
    Full(Accepted<B>),
    /// The sender no longer holds the payload (erased, or past its retention): there is
    /// nothing to handle, now or at a retry; answer 2xx without the handler.
    Gone(GoneReason),
}

/// Fetches the full event of thin deliveries from the sender's API, with the endpoint's feed
/// credential (its HMAC secret, or a feed token), through a [`FeedClient`].
#[derive(Debug, Clone)]
pub struct ThinEvents {
    feed: FeedClient,
}

impl ThinEvents {
    /// Thin events fetched through `feed` (the sender's base URL and the endpoint's
    /// credential).
    pub fn new(feed: FeedClient) -> ThinEvents {
        ThinEvents { feed }
    }

    /// `None` when the verified delivery `notice` is not a thin notice (a full delivery
    /// passes as it is); else the full event of it, fetched for the endpoint `endpoint_id`
    /// (the delivery's `X-Kxp-Endpoint-Id`) and verified by `receiver` exactly as a delivery
    /// is. The fetched event must be the notice's own (same id) and not thin itself, or it is
    /// refused ([`Rejection::ThinUnverified`]); a fetch that fails is
    /// [`Rejection::ThinFetchFailed`] (503: the sender retries the delivery).
    pub async fn resolve<B: AsRef<[u8]> + From<Vec<u8>>>(
        &self,
        receiver: &Receiver,
        endpoint_id: Option<&str>,
        notice: &Accepted<B>,
    ) -> Result<Option<Resolved<B>>, Rejection> {
        if !is_thin(notice.verified().body()) {
            return Ok(None);
        }
        let Some(endpoint_id) = endpoint_id else {
            return Err(Rejection::ThinFetchFailed(
                "the delivery names no endpoint (x-kxp-endpoint-id)".to_owned(),
            ));
        };
        let fetched = match self.feed.event(endpoint_id, notice.event_id()).await {
            Ok(fetched) => fetched,
            Err(FeedError::Gone(reason)) => return Ok(Some(Resolved::Gone(reason))),
            Err(e) => return Err(Rejection::ThinFetchFailed(e.to_string())),
        };
        let full = receiver
            .check_request(|name| fetched.header(name), B::from(fetched.body.clone()))
            .map_err(|rejection| Rejection::ThinUnverified(rejection.code().to_owned()))?;
        if full.event_id() != notice.event_id() {
            return Err(Rejection::ThinUnverified(
                "the sender answered another event".to_owned(),
            ));
        }
        if is_thin(full.verified().body()) {
            return Err(Rejection::ThinUnverified(
                "the sender answered a thin notice again".to_owned(),
            ));
        }
        Ok(Some(Resolved::Full(full)))
    }
}

/// Whether a verified body is a thin notice: an object whose `thin` is `true`.
pub fn is_thin(body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Mark {
        #[serde(default)]
        thin: bool,
    }
    // An object only: serde would read a struct from an array too.
    body.trim_ascii_start().first() == Some(&b'{')
        && serde_json::from_slice::<Mark>(body).is_ok_and(|mark| mark.thin)
}

#[cfg(test)]
mod tests {
    use super::is_thin;

    #[test]
    fn only_an_object_whose_thin_is_true_is_a_thin_notice() {
        assert!(is_thin(br#"{"id":"e","type":"t","thin":true}"#));
        for body in [
            &br#"{"id":"e","type":"t","data":{"thin":true}}"#[..],
            br#"{"thin":false}"#,
            br#"{"thin":"true"}"#,
            br#"[true]"#,
            b"",
        ] {
            assert!(!is_thin(body), "{}", String::from_utf8_lossy(body));
        }
    }
}
