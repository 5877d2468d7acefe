//! What an endpoint presents beside its signature: headers an API gateway asks for, and
//! authentication (Basic, a bearer token, or an OAuth2 access token the sender fetches).
//!
//! Credentials are write-only. A request sets them ([`EndpointAuth`], and header values as
//! [`Credential`]s); every answer shows what they are without what they hold
//! ([`EndpointAuthView`], header names only), so an API key that can read an endpoint cannot
//! read the merchant's gateway key or client secret.

use core::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use utoipa::ToSchema;

use crate::timestamp::Timestamp;

/// A credential's text (a header value, a password, a token, a client secret): `Debug` prints
/// `[redacted]` and there is no `Display`, so it reaches a log only through
/// [`Credential::expose`].
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Credential(String);

impl Credential {
    /// The text, to send.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl From<String> for Credential {
    fn from(text: String) -> Credential {
        Credential(text)
    }
}

impl From<&str> for Credential {
    fn from(text: &str) -> Credential {
        Credential(text.to_owned())
    }
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl utoipa::PartialSchema for Credential {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::schema::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .description(Some(
                "A credential: stored sealed, sent to the endpoint, never shown again (answers \
                 say \"redacted\").",
            ))
            .into()
    }
}

impl utoipa::ToSchema for Credential {}

/// Where a credential was in a request: every answer says `"redacted"` instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Redacted;

impl Serialize for Redacted {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str("redacted")
    }
}

impl<'de> Deserialize<'de> for Redacted {
    /// Any string: what a server shows in place of a credential is not the client's concern.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Redacted, D::Error> {
        String::deserialize(deserializer).map(|_| Redacted)
    }
}

impl utoipa::PartialSchema for Redacted {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::schema::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .description(Some("Always \"redacted\": the credential is write-only."))
            .enum_values(Some(["redacted"]))
            .into()
    }
}

impl utoipa::ToSchema for Redacted {}

string_enum! {
    /// How the sender presents its client id and secret to an OAuth2 token endpoint
    /// (RFC 6749 §2.3.1).
    pub enum ClientAuth {
        /// HTTP Basic with the form-encoded id and secret (`client_secret_basic`, the default).
        Basic = "basic",
        /// `client_id` and `client_secret` in the form body (`client_secret_post`).
        Post = "post",
    }
}

/// `basic`: what a token endpoint must accept (RFC 6749 §2.3.1).
impl Default for ClientAuth {
    fn default() -> ClientAuth {
        ClientAuth::Basic
    }
}

/// How the sender authenticates to an endpoint, beside the signature: `auth` of `POST` and
/// `PATCH /v1/endpoints`. Sealed at rest, never shown again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
#[non_exhaustive]
pub enum EndpointAuth {
    /// `Authorization: Basic` with these.
    Basic {
        /// The user name (no `:`).
        username: String,
        /// The password.
        password: Credential,
    },
    /// `Authorization: Bearer <token>`.
    Bearer {
        /// The token (visible ASCII).
        token: Credential,
    },
    /// `Authorization: Bearer <access token>`, the token fetched from `token_url` with the
    /// client credentials grant (RFC 6749 §4.4), cached until shortly before it expires, and
    /// fetched anew after the endpoint answers 401.
    Oauth2ClientCredentials {
        /// The token endpoint: `https://` (`http://` on a server in development mode), through
        /// the same address guard as endpoint URLs.
        token_url: String,
        /// The client id.
        client_id: String,
        /// The client secret.
        client_secret: Credential,
        /// `scope`, sent when given.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        scope: Option<String>,
        /// `audience` (Auth0, Okta and others ask for it), sent when given.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        audience: Option<String>,
        /// How the client authenticates to the token endpoint; default `basic`.
        #[serde(default)]
        client_auth: ClientAuth,
    },
}

impl EndpointAuth {
    /// What answers show of it: everything but the credentials.
    pub fn view(&self) -> EndpointAuthView {
        match self {
            EndpointAuth::Basic { username, .. } => EndpointAuthView::Basic {
                username: username.clone(),
                password: Redacted,
            },
            EndpointAuth::Bearer { .. } => EndpointAuthView::Bearer { token: Redacted },
            EndpointAuth::Oauth2ClientCredentials {
                token_url,
                client_id,
                scope,
                audience,
                client_auth,
                ..
            } => EndpointAuthView::Oauth2ClientCredentials {
                token_url: token_url.clone(),
                client_id: client_id.clone(),
                client_secret: Redacted,
                scope: scope.clone(),
                audience: audience.clone(),
                client_auth: client_auth.clone(),
            },
        }
    }
}

/// An endpoint's `auth` as answers show it: its type and non-secret fields, `"redacted"` for
/// the rest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum EndpointAuthView {
    /// `Authorization: Basic`.
    Basic {
        /// The user name.
        username: String,
        /// `"redacted"`.
        password: Redacted,
    },
    /// `Authorization: Bearer` with a fixed token.
    Bearer {
        /// `"redacted"`.
        token: Redacted,
    },
    /// `Authorization: Bearer` with a token from an OAuth2 token endpoint.
    Oauth2ClientCredentials {
        /// The token endpoint.
        token_url: String,
        /// The client id.
        client_id: String,
        /// `"redacted"`.
        client_secret: Redacted,
        /// `scope`, if any.
        #[serde(default)]
        scope: Option<String>,
        /// `audience`, if any.
        #[serde(default)]
        audience: Option<String>,
        /// How the client authenticates to the token endpoint.
        client_auth: ClientAuth,
    },
}

impl EndpointAuthView {
    /// Its `type`, as the API writes it.
    pub fn kind(&self) -> &'static str {
        match self {
            EndpointAuthView::Basic { .. } => "basic",
            EndpointAuthView::Bearer { .. } => "bearer",
            EndpointAuthView::Oauth2ClientCredentials { .. } => "oauth2_client_credentials",
        }
    }
}

/// Mutual TLS and a private CA for one endpoint (`tls` of `POST` and `PATCH /v1/endpoints`),
/// each part optional. Sealed at rest; answers show what the certificates are
/// ([`EndpointTlsView`]), never the key.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct EndpointTls {
    /// The client certificate presented on every attempt to the endpoint (PEM; the chain to
    /// its CA may follow it). Requires `client_key`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_certificate: Option<String>,
    /// The certificate's private key (PEM: PKCS#8, PKCS#1 or SEC1), matching it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_key: Option<Credential>,
    /// The CA certificates (PEM) the endpoint's server certificate must chain to: they replace
    /// the public roots for this endpoint only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_certificates: Option<String>,
}

impl EndpointTls {
    /// A client certificate and its key, and no CA of its own.
    pub fn client(certificate: impl Into<String>, key: impl Into<Credential>) -> EndpointTls {
        EndpointTls {
            client_certificate: Some(certificate.into()),
            client_key: Some(key.into()),
            ca_certificates: None,
        }
    }

    /// The CA certificates (PEM) the endpoint's server certificate must chain to.
    pub fn with_ca_certificates(mut self, pem: impl Into<String>) -> EndpointTls {
        self.ca_certificates = Some(pem.into());
        self
    }
}

/// A certificate as answers show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CertificateInfo {
    /// Its subject (RFC 4514).
    pub subject: String,
    /// Its issuer (RFC 4514).
    pub issuer: String,
    /// When it expires (`notAfter`).
    pub not_after: Timestamp,
    /// The SHA-256 of its DER, in hex.
    pub sha256: String,
}

/// An endpoint's `tls` as answers show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct EndpointTlsView {
    /// The client certificate presented on every attempt; `null`: none. Its key is write-only.
    #[schema(required = true)]
    pub client_certificate: Option<CertificateInfo>,
    /// The CA certificates that replace the public roots for this endpoint; empty: the public
    /// roots.
    pub ca_certificates: Vec<CertificateInfo>,
}

/// What the sender saw of the endpoint's own TLS certificate, at a recent handshake.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ServerCertificate {
    /// The leaf certificate's issuer (RFC 4514).
    pub issuer: String,
    /// When the leaf certificate expires (`notAfter`): the account is notified 14 and 3 days
    /// before.
    pub not_after: Timestamp,
    /// When the sender saw it (recorded again at least hourly while deliveries flow).
    pub seen_at: Timestamp,
}

string_enum! {
    /// Which of an endpoint's certificates.
    pub enum CertificateRole {
        /// The client certificate the sender presents (`tls.client_certificate`).
        Client = "client",
        /// The endpoint's own server certificate.
        Server = "server",
    }
}

/// A certificate of the endpoint that expires soon: the client certificate within 30 days, the
/// server certificate within 14.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ExpiringCertificate {
    /// Which certificate.
    pub certificate: CertificateRole,
    /// When it expires.
    pub not_after: Timestamp,
    /// Whole days left (0 on its last day; negative once expired).
    pub days_left: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_never_show_in_debug_or_views() {
        let auth: EndpointAuth = serde_json::from_value(serde_json::json!({
            "type": "oauth2_client_credentials",
            "token_url": "https://auth.example/token",
            "client_id": "kxp",
            "client_secret": "s3cr3t-value",
        }))
        .unwrap();
        assert!(!format!("{auth:?}").contains("s3cr3t-value"));
        let view = serde_json::to_value(auth.view()).unwrap();
        assert_eq!(view["client_secret"], "redacted");
        assert_eq!(view["client_auth"], "basic");
        assert!(!view.to_string().contains("s3cr3t-value"));
    }

    #[test]
    fn unknown_fields_and_types_are_refused() {
        for body in [
            serde_json::json!({"type": "bearer", "token": "t", "extra": 1}),
            serde_json::json!({"type": "digest", "username": "u"}),
            serde_json::json!({"token": "t"}),
        ] {
            assert!(serde_json::from_value::<EndpointAuth>(body).is_err());
        }
    }
}
