//! Which signature headers a receiver reads: kxp's own, or Standard Webhooks'.

use kxp_verify::{
    SIGNATURE_HEADER, WEBHOOK_ID_HEADER, WEBHOOK_SIGNATURE_HEADER, WEBHOOK_TIMESTAMP_HEADER,
};

/// The wire format a [`Receiver`](crate::Receiver) verifies, chosen per endpoint on the sender
/// (`"format"` at registration) and so per route here.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Format {
    /// `X-Kxp-Signature: t=<ts>,v1=<hex>[,v1a=<base64>]` (the default).
    #[default]
    Kxp,
    /// Standard Webhooks 1.0: `webhook-id`, `webhook-timestamp` and `webhook-signature`
    /// (`v1,<base64>` / `v1a,<base64>`, space-separated), over `<id>.<timestamp>.<body>`, with
    /// `whsec_` secrets ([`Secret::from_whsec`](kxp_verify::Secret::from_whsec)) or `whpk_`
    /// public keys. What a receiver written for Svix or a `standardwebhooks` library expects.
    StandardWebhooks,
}

impl Format {
    /// The headers this format reads, lowercase as `http::HeaderName` wants them.
    pub fn headers(self) -> &'static [&'static str] {
        match self {
            Format::Kxp => &[SIGNATURE_HEADER],
            Format::StandardWebhooks => &[
                WEBHOOK_ID_HEADER,
                WEBHOOK_TIMESTAMP_HEADER,
                WEBHOOK_SIGNATURE_HEADER,
            ],
        }
    }
}
