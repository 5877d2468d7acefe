//! Checks of an endpoint's custom headers and `auth`, as `POST` and `PATCH /v1/endpoints` and
//! the console's form give them. Each refusal names the header or field, never its value.

use std::collections::BTreeMap;

use kxp_api::{ClientAuth, Credential, EndpointAuth, EndpointTls, EndpointTlsView};

use super::Error;
use super::checks::check_url;
use crate::engine::config::Shared;
use crate::engine::tls;
use crate::model::{Credentials, CredentialsView, now_ms};

/// The most custom headers an endpoint has.
pub(crate) const MAX_HEADERS: usize = 20;

/// The longest custom header value, password, token or client secret, in bytes.
pub(crate) const MAX_CREDENTIAL: usize = 4096;

/// The longest user name, client id, scope or audience, in bytes.
const MAX_FIELD: usize = 512;

/// Names the sender sets itself, or that describe the connection or the body rather than the
/// request: a custom header must not replace or contradict them.
const RESERVED: &[&str] = &[
    "host",
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "expect",
    "traceparent",
    "tracestate",
];

/// Why a custom header name is refused, if it is.
fn reserved(name: &str) -> Option<&'static str> {
    let lower = name.to_ascii_lowercase();
    if RESERVED.contains(&lower.as_str()) {
        Some("the sender or the connection sets it")
    } else if lower.starts_with("content-") {
        Some("it describes the body, which the sender sets")
    } else if lower.starts_with("x-kxp-") || lower.starts_with("webhook-") {
        Some("the signature and delivery headers are the sender's own")
    } else {
        None
    }
}

/// RFC 9110's `tchar`s.
fn is_token(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Visible ASCII, spaces and tabs inside: what a header value may hold (no line breaks).
fn is_value(value: &str) -> bool {
    value
        .bytes()
        .all(|b| b.is_ascii_graphic() || b == b' ' || b == b'\t')
        && !value.starts_with([' ', '\t'])
        && !value.ends_with([' ', '\t'])
}

fn check_credential(field: &str, value: &Credential) -> Result<(), Error> {
    let text = value.expose();
    if text.is_empty() || text.len() > MAX_CREDENTIAL {
        return Err(Error::invalid(format!(
            "{field} must be 1 to {MAX_CREDENTIAL} bytes"
        )));
    }
    if !is_value(text) {
        return Err(Error::invalid(format!(
            "{field} must be visible ASCII (spaces inside allowed), as a header value is"
        )));
    }
    Ok(())
}

fn check_field(field: &str, value: &str) -> Result<(), Error> {
    if value.is_empty() || value.len() > MAX_FIELD || !is_value(value) {
        return Err(Error::invalid(format!(
            "{field} must be 1 to {MAX_FIELD} bytes of visible ASCII"
        )));
    }
    Ok(())
}

/// Custom headers: at most [`MAX_HEADERS`], names HTTP tokens that are not the sender's own
/// (nor `Authorization` when `auth` is set), one of each name whatever its case.
pub(crate) fn check_headers(
    headers: &BTreeMap<String, Credential>,
    with_auth: bool,
) -> Result<(), Error> {
    if headers.len() > MAX_HEADERS {
        return Err(Error::invalid(format!(
            "headers: at most {MAX_HEADERS} custom headers"
        )));
    }
    let mut seen = std::collections::BTreeSet::new();
    for (name, value) in headers {
        if !is_token(name) || name.len() > 128 {
            return Err(Error::invalid(format!(
                "headers: `{}` is not a header name (letters, digits and !#$%&'*+-.^_`|~, at most 128)",
                name.escape_debug()
            )));
        }
        if let Some(why) = reserved(name) {
            return Err(Error::invalid(format!(
                "headers: `{name}` cannot be set: {why}"
            )));
        }
        if with_auth && name.eq_ignore_ascii_case("authorization") {
            return Err(Error::invalid(format!(
                "headers: `{name}` cannot be set beside `auth`, which sends its own"
            )));
        }
        if !seen.insert(name.to_ascii_lowercase()) {
            return Err(Error::invalid(format!(
                "headers: `{name}` is given twice (names are case-insensitive)"
            )));
        }
        check_credential(&format!("headers.{name}"), value)?;
    }
    Ok(())
}

/// `auth`: every field present and in bounds, and an OAuth2 token URL that the endpoint URL's
/// checks pass (https, no credentials in it, not a blocked address).
pub(crate) fn check_auth(auth: &EndpointAuth, shared: &Shared) -> Result<(), Error> {
    match auth {
        EndpointAuth::Basic { username, password } => {
            check_field("auth.username", username)?;
            if username.contains(':') {
                return Err(Error::invalid(
                    "auth.username must not contain `:` (HTTP Basic joins it to the password with one)",
                ));
            }
            check_credential("auth.password", password)
        }
        EndpointAuth::Bearer { token } => check_credential("auth.token", token),
        EndpointAuth::Oauth2ClientCredentials {
            token_url,
            client_id,
            client_secret,
            scope,
            audience,
            client_auth,
        } => {
            check_url(token_url, shared).map_err(|e| match e {
                Error::Invalid(why) => Error::Invalid(format!("auth.token_url: {why}")),
                Error::BlockedAddress(why) => {
                    Error::BlockedAddress(format!("auth.token_url: {why}"))
                }
                other => other,
            })?;
            check_field("auth.client_id", client_id)?;
            check_credential("auth.client_secret", client_secret)?;
            if let Some(scope) = scope {
                check_field("auth.scope", scope)?;
            }
            if let Some(audience) = audience {
                check_field("auth.audience", audience)?;
            }
            if !client_auth.is_known() {
                return Err(Error::invalid(format!(
                    "auth.client_auth must be one of {}",
                    ClientAuth::KNOWN
                        .iter()
                        .map(ClientAuth::as_str)
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
            Ok(())
        }
        _ => Err(Error::invalid("auth: this type is not supported")),
    }
}

/// Checks a new endpoint's headers, `auth` and `tls` together; `None` when it has none.
pub(crate) fn check_new(
    headers: Option<BTreeMap<String, Credential>>,
    auth: Option<EndpointAuth>,
    tls: Option<EndpointTls>,
    shared: &Shared,
) -> Result<Option<(Credentials, CredentialsView)>, Error> {
    let credentials = Credentials {
        headers: headers.unwrap_or_default(),
        auth,
        tls: tls.filter(|tls| *tls != EndpointTls::default()),
    };
    let view = check(&credentials, shared)?;
    Ok((!credentials.is_empty()).then_some((credentials, view)))
}

/// Checks credentials as a whole (the headers against the `auth` beside them, the
/// certificates now) and says what answers show of them.
pub(crate) fn check(credentials: &Credentials, shared: &Shared) -> Result<CredentialsView, Error> {
    let tls = credentials
        .tls
        .as_ref()
        .map(|tls| tls::describe(tls, now_ms()))
        .transpose()
        .map_err(Error::Invalid)?;
    check_keeping(credentials, shared, tls)
}

/// [`check`] of a change that leaves `tls` as it was: its certificates are not checked again
/// (one that has expired since must not stop a change of the headers or the URL), and `tls`
/// shows as it did.
pub(crate) fn check_keeping(
    credentials: &Credentials,
    shared: &Shared,
    tls: Option<EndpointTlsView>,
) -> Result<CredentialsView, Error> {
    check_headers(&credentials.headers, credentials.auth.is_some())?;
    if let Some(auth) = &credentials.auth {
        check_auth(auth, shared)?;
    }
    Ok(credentials.view(tls))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> BTreeMap<String, Credential> {
        pairs
            .iter()
            .map(|(n, v)| ((*n).to_owned(), Credential::from(*v)))
            .collect()
    }

    #[test]
    fn reserved_names_are_refused_by_name_and_never_quote_the_value() {
        for name in [
            "Host",
            "content-type",
            "Content-Length",
            "Transfer-Encoding",
            "Connection",
            "X-Kxp-Signature",
            "x-kxp-event-id",
            "webhook-signature",
            "traceparent",
            "Proxy-Authorization",
        ] {
            let e = check_headers(&headers(&[(name, "secret-value")]), false).unwrap_err();
            let text = e.to_string();
            assert!(text.contains(name), "{text}");
            assert!(!text.contains("secret-value"), "{text}");
        }
        let e = check_headers(&headers(&[("Authorization", "Basic x")]), true).unwrap_err();
        assert!(e.to_string().contains("beside `auth`"), "{e}");
        check_headers(&headers(&[("Authorization", "Custom x")]), false).unwrap();
    }

    #[test]
    fn names_values_and_counts_are_bounded() {
        check_headers(&headers(&[("X-Gateway-Key", "k-1 2")]), false).unwrap();
        for bad in [
            headers(&[("X Gateway", "v")]),
            headers(&[("", "v")]),
            headers(&[("X-A", "line\r\nbreak")]),
            headers(&[("X-A", "")]),
            headers(&[("X-A", " padded")]),
            headers(&[("X-A", "v"), ("x-a", "w")]),
        ] {
            assert!(check_headers(&bad, false).is_err(), "{:?}", bad.keys());
        }
        let many: BTreeMap<_, _> = (0..=MAX_HEADERS)
            .map(|i| (format!("X-H{i}"), Credential::from("v")))
            .collect();
        assert!(check_headers(&many, false).is_err());
    }
}
