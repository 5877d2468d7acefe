//! What an endpoint presents beside its signature: custom headers and `auth`. Stored as two
//! documents ([`Credentials`] sealed, [`CredentialsView`] in the clear), so that answers never
//! need to open what only an attempt may read.

use std::collections::BTreeMap;

use kxp_api::{Credential, EndpointAuth, EndpointAuthView, EndpointTls, EndpointTlsView};
use serde::{Deserialize, Serialize};

/// An endpoint's credentials, opened: the custom headers' values and `auth` with its secrets.
/// `Debug` shows none of them ([`Credential`]'s is redacted).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Credentials {
    /// Custom headers, by name as given.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, Credential>,
    /// How the sender authenticates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<EndpointAuth>,
    /// Its client certificate and key, and its private CA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<EndpointTls>,
}

impl Credentials {
    /// Whether there is nothing to present (stored as no credentials at all).
    pub(crate) fn is_empty(&self) -> bool {
        self.headers.is_empty() && self.auth.is_none() && self.tls.is_none()
    }

    /// What answers show of them, with `tls` as the certificates' checks described it.
    pub(crate) fn view(&self, tls: Option<EndpointTlsView>) -> CredentialsView {
        CredentialsView {
            headers: self.headers.keys().cloned().collect(),
            auth: self.auth.as_ref().map(EndpointAuth::view),
            tls,
        }
    }
}

/// What answers, the console and the audit show of an endpoint's credentials: header names,
/// `auth`'s type and non-secret fields.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct CredentialsView {
    /// Custom header names.
    #[serde(default)]
    pub headers: Vec<String>,
    /// `auth`, its credentials `"redacted"`.
    #[serde(default)]
    pub auth: Option<EndpointAuthView>,
    /// `tls`, as its certificates read (the key left out).
    #[serde(default)]
    pub tls: Option<EndpointTlsView>,
}

impl CredentialsView {
    /// The view a row stores (`credentials_view`); a row without one, or with one that does not
    /// read (altered by hand), shows none.
    pub(crate) fn of_row(stored: Option<&str>) -> CredentialsView {
        stored
            .and_then(|json| serde_json::from_str(json).ok())
            .unwrap_or_default()
    }
}

/// An endpoint's credentials as the claim reads them: its row's `credentials`, sealed (or in the
/// clear on a server without `KXP_SECRETS_KEY`); `None` for an endpoint without any. `Debug`
/// shows only whether there are some.
#[derive(Clone, Default, PartialEq, Eq)]
pub(crate) struct StoredCredentials(pub Option<String>);

impl From<String> for StoredCredentials {
    /// The claim selects `COALESCE(credentials, '')`: empty is none.
    fn from(stored: String) -> StoredCredentials {
        StoredCredentials((!stored.is_empty()).then_some(stored))
    }
}

impl std::fmt::Debug for StoredCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(_) => f.write_str("StoredCredentials([redacted])"),
            None => f.write_str("StoredCredentials(None)"),
        }
    }
}

/// New credentials as the store writes them: `stored` sealed for the endpoint, `view` the JSON
/// of their [`CredentialsView`]. `None` in both: the endpoint has none.
#[derive(Clone, Default, PartialEq, Eq)]
pub(crate) struct SealedCredentials {
    /// The `credentials` column.
    pub stored: Option<String>,
    /// The `credentials_view` column.
    pub view: Option<String>,
}

impl std::fmt::Debug for SealedCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SealedCredentials")
            .field("view", &self.view)
            .finish_non_exhaustive()
    }
}
