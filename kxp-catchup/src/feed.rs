//! The sender's catch-up feed, read with the endpoint's credential.

use std::time::Duration;

use kxp_api::{ErrorBody, FeedPage, FeedQuery};
use kxp_verify::{FEED_SIGNATURE_HEADER, Secret, Signer, feed_message};

/// What a receiver proves it is the endpoint's with.
#[derive(Clone)]
pub enum Credential {
    /// The endpoint's HMAC secret, as the receiver verifies deliveries with it: requests are
    /// signed with its [feed key](Secret::feed_key), which signs nothing else.
    Secret(Secret),
    /// A feed token (`kxpft_…`) the platform made for the endpoint: for receivers with no HMAC
    /// secret (Ed25519 endpoints).
    Token(String),
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credential::Secret(_) => f.write_str("Credential::Secret([redacted])"),
            Credential::Token(_) => f.write_str("Credential::Token([redacted])"),
        }
    }
}

/// Why a feed request brought no page. Never holds the credential.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FeedError {
    /// No answer (connection, timeout, TLS).
    #[error("transport: the feed did not answer: {0}")]
    Transport(String),
    /// The sender refused the credential (401): wrong secret or token, or no such endpoint.
    #[error("unauthorized: the sender refused this receiver's credential for the endpoint's feed")]
    Unauthorized,
    /// Too many feed requests (429); try after this long.
    #[error("rate_limited: the sender asks to wait {0:?}")]
    RateLimited(Duration),
    /// Another answer than the feed describes.
    #[error("unexpected: the feed answered {status}: {message}")]
    Unexpected {
        /// The HTTP status.
        status: u16,
        /// What the body said.
        message: String,
    },
}

impl FeedError {
    /// A stable name, for logs and metrics.
    pub fn code(&self) -> &'static str {
        match self {
            FeedError::Transport(_) => "transport",
            FeedError::Unauthorized => "unauthorized",
            FeedError::RateLimited(_) => "rate_limited",
            FeedError::Unexpected { .. } => "unexpected",
        }
    }
}

/// One answer of the feed.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// The next items.
    Page(FeedPage),
    /// Retention purged the numbers asked for; the feed resumes at `earliest`.
    Purged {
        /// The first number after the purged ones that the feed holds.
        earliest: u64,
    },
}

/// A client of one sender's feed.
#[derive(Debug, Clone)]
pub struct FeedClient {
    base: String,
    credential: Credential,
    http: reqwest::Client,
}

impl FeedClient {
    /// The feed of the sender at `base` (`https://webhooks.platform.example`), read with
    /// `credential`. Requests time out after 30 s.
    pub fn new(base: &str, credential: Credential) -> Result<FeedClient, FeedError> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .user_agent(concat!("kxp-catchup/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| FeedError::Transport(e.to_string()))?;
        Ok(FeedClient {
            base: base.trim_end_matches('/').to_owned(),
            credential,
            http,
        })
    }

    /// The endpoint's items after `after`, at most `limit`.
    pub async fn page(
        &self,
        endpoint_id: &str,
        after: u64,
        limit: u32,
    ) -> Result<Answer, FeedError> {
        // The request target is built here, as signed: the query in this order, nothing that
        // needs escaping (an endpoint id is `ep_` and hex; a forged one is refused first).
        if !endpoint_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return Err(FeedError::Unauthorized);
        }
        let query = FeedQuery::after(after, limit);
        let target = format!(
            "/v1/endpoints/{endpoint_id}/feed?after={}&limit={}",
            query.after.unwrap_or(0),
            query.limit.unwrap_or(limit)
        );
        let mut request = self.http.get(format!("{}{target}", self.base));
        request = match &self.credential {
            Credential::Secret(secret) => {
                let header = Signer::new(secret.feed_key()).sign_now(&feed_message("GET", &target));
                request.header(FEED_SIGNATURE_HEADER, header.to_string())
            }
            Credential::Token(token) => request.bearer_auth(token),
        };
        let response = request
            .send()
            .await
            .map_err(|e| FeedError::Transport(e.without_url().to_string()))?;
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok()?.trim().parse().ok())
            .map_or(Duration::from_secs(1), Duration::from_secs);
        let body = response
            .bytes()
            .await
            .map_err(|e| FeedError::Transport(e.without_url().to_string()))?;
        let unexpected = |message: String| FeedError::Unexpected { status, message };
        match status {
            200 => serde_json::from_slice(&body)
                .map(Answer::Page)
                .map_err(|e| unexpected(e.to_string())),
            401 => Err(FeedError::Unauthorized),
            429 => Err(FeedError::RateLimited(retry_after)),
            410 => match serde_json::from_slice::<ErrorBody>(&body) {
                Ok(ErrorBody {
                    earliest: Some(earliest),
                    ..
                }) => Ok(Answer::Purged { earliest }),
                _ => Err(unexpected("410 without `earliest`".to_owned())),
            },
            _ => Err(unexpected(
                serde_json::from_slice::<ErrorBody>(&body)
                    .map(|e| format!("{}: {}", e.error, e.message))
                    .unwrap_or_else(|_| String::from_utf8_lossy(&body).chars().take(200).collect()),
            )),
        }
    }
}
