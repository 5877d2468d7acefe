//! Checks of what a use case is given, shared by the use cases and the API's other handlers:
//! JSON bodies, names, URLs (with the address guard), timeouts, rate limits, event type
//! patterns, times and durations. Each refuses with the service's [`Error`], in words for
//! people that name the field.

use std::net::{IpAddr, Ipv6Addr};
use std::time::Duration;

use serde::Deserialize;

use super::{
    Error, MAX_DESCRIPTION, MAX_EVENT_TYPES, MAX_OVERLAP, MAX_RATE_LIMIT, MAX_TIMEOUT, MAX_URL,
    MIN_TIMEOUT,
};
use crate::engine::config::Shared;
use crate::engine::guard::Blocked;
use crate::model::parse_rfc3339;
use crate::policy::schedule::parse_duration;

/// Reads a JSON body: [`Error::InvalidJson`] when it is not JSON, [`Error::Invalid`] when it
/// is JSON of the wrong shape (the message says where).
pub(crate) fn parse<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, Error> {
    serde_json::from_slice(body).map_err(|e| match e.is_data() {
        true => Error::Invalid(e.to_string()),
        false => Error::InvalidJson(e.to_string()),
    })
}

/// An account's name: 1 to 256 bytes (a new account's, or a changed one).
pub(crate) fn check_account_name(name: &str) -> Result<(), Error> {
    if name.is_empty() || name.len() > 256 {
        return Err(Error::invalid("name must be 1 to 256 bytes"));
    }
    Ok(())
}

pub(crate) fn check_description(description: &str) -> Result<(), Error> {
    if description.len() > MAX_DESCRIPTION {
        return Err(Error::invalid(format!(
            "description must be at most {MAX_DESCRIPTION} bytes"
        )));
    }
    Ok(())
}

pub(crate) fn check_timeout(ms: u64) -> Result<Duration, Error> {
    let timeout = Duration::from_millis(ms);
    if (MIN_TIMEOUT..=MAX_TIMEOUT).contains(&timeout) {
        Ok(timeout)
    } else {
        Err(Error::invalid(format!(
            "timeout_ms must be between {} and {}",
            MIN_TIMEOUT.as_millis(),
            MAX_TIMEOUT.as_millis()
        )))
    }
}

/// A merchant's `encryption_jwk`, checked by kxp-jwe (a public P-256 or X25519 key for
/// `ECDH-ES+A256KW`), as the endpoint stores it: normalized.
pub(crate) fn check_encryption_jwk(jwk: &serde_json::Value) -> Result<String, Error> {
    kxp_jwe::EncryptionKey::from_jwk(&jwk.to_string())
        .map(|key| key.to_jwk().to_string())
        .map_err(|e| Error::invalid(format!("encryption_jwk ({}): {e}", e.code())))
}

/// A content filter, checked by kxp-filter, as the endpoint stores it: compact JSON, `None`
/// for one that takes every event (`{}`). A fault is refused naming its place in the filter.
pub(crate) fn check_filter(filter: &serde_json::Value) -> Result<Option<String>, Error> {
    let filter =
        kxp_filter::Filter::from_value(filter).map_err(|e| Error::invalid(e.to_string()))?;
    Ok((!filter.is_empty()).then(|| filter.to_json()))
}

/// `signing` and `format` name values this server knows (they parse to `Unknown` otherwise,
/// so that answers from a newer server still read).
pub(crate) fn check_choices(
    signing: Option<&kxp_api::Signing>,
    format: Option<&kxp_api::Format>,
) -> Result<(), Error> {
    if signing.is_some_and(|s| !s.is_known()) {
        return Err(Error::invalid(
            "signing is \"hmac\", \"ed25519\" or \"both\"",
        ));
    }
    if format.is_some_and(|f| !f.is_known()) {
        return Err(Error::invalid("format is \"kxp\" or \"standard-webhooks\""));
    }
    Ok(())
}

pub(crate) fn check_rate_limit(limit: i64) -> Result<(), Error> {
    if (1..=MAX_RATE_LIMIT).contains(&limit) {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "rate_limit_per_second must be between 1 and {MAX_RATE_LIMIT} (null for no limit)"
        )))
    }
}

/// Endpoint URLs: `https://` with a host, no credentials (`http://` only in development
/// mode); an IP-literal host must pass the address guard, and so must loopback names
/// (`localhost`, `*.localhost`). Other host names are checked when resolved, at every attempt:
/// what a name resolves to today says nothing about tomorrow.
pub(crate) fn check_url(text: &str, shared: &Shared) -> Result<reqwest::Url, Error> {
    if text.len() > MAX_URL {
        return Err(Error::invalid(format!(
            "url must be at most {MAX_URL} bytes"
        )));
    }
    let url = reqwest::Url::parse(text).map_err(|e| Error::invalid(format!("url: {e}")))?;
    match url.scheme() {
        "https" => {}
        "http" if shared.config.dev => {}
        "http" => {
            return Err(Error::invalid(
                "url must be https:// (http:// is accepted only with `kxp serve --dev`)",
            ));
        }
        other => {
            return Err(Error::invalid(format!(
                "url scheme `{other}` is not http(s)"
            )));
        }
    }
    let Some(host) = url.host_str() else {
        return Err(Error::invalid("url has no host"));
    };
    if !url.username().is_empty() || url.password().is_some() {
        return Err(Error::invalid(
            "url must not carry credentials; authenticate with the signature",
        ));
    }
    let blocked = |blocked: Blocked| {
        Error::BlockedAddress(format!(
            "url host {blocked}; deliveries never go there (an operator can allow a range \
                 with `kxp serve --allow-address CIDR`; `--dev` allows loopback)"
        ))
    };
    shared.guard().check_url(&url).map_err(blocked)?;
    // Loopback names (RFC 6761) resolve to this machine wherever they are used: refuse them
    // now unless the guard lets loopback through, rather than fail every attempt later.
    let name = host.strip_suffix('.').unwrap_or(host);
    if name == "localhost" || name.ends_with(".localhost") {
        let v4 = shared.guard().check(IpAddr::from([127, 0, 0, 1]));
        let v6 = shared.guard().check(IpAddr::from(Ipv6Addr::LOCALHOST));
        if let (Err(refused), Err(_)) = (v4, v6) {
            return Err(Error::BlockedAddress(format!(
                "url host `{host}` is this machine ({}), accepted only with `kxp serve --dev` \
                     or an `--allow-address` covering it",
                refused.range()
            )));
        }
    }
    Ok(url)
}

pub(crate) fn check_event_types(types: &[String]) -> Result<(), Error> {
    if types.is_empty() {
        return Err(Error::invalid(
            "event_types must not be empty (use [\"*\"] for every type)",
        ));
    }
    if types.len() > MAX_EVENT_TYPES {
        return Err(Error::invalid(format!(
            "event_types holds at most {MAX_EVENT_TYPES} patterns (`payment.*` covers a family)"
        )));
    }
    for t in types {
        let body = t.strip_suffix('*').unwrap_or(t);
        let ok = t.len() <= 128
            && !t.is_empty()
            && body
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if !ok {
            return Err(Error::invalid(format!(
                "event type pattern `{t}` is not letters, digits, . _ - with an optional trailing *"
            )));
        }
    }
    Ok(())
}

pub(crate) fn check_name(field: &str, value: &str, max: usize) -> Result<(), Error> {
    let ok = !value.is_empty()
        && value.len() <= max
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "{field} must be 1 to {max} letters, digits, . _ -"
        )))
    }
}

/// A rotation's `overlap`: a duration of at most [`MAX_OVERLAP`].
pub(crate) fn parse_overlap(text: &str) -> Result<Duration, Error> {
    let overlap = parse_duration(text).map_err(|_| {
        Error::invalid(format!(
            "overlap `{text}` is not a duration such as 30m, 24h or 0s"
        ))
    })?;
    if overlap > MAX_OVERLAP {
        return Err(Error::invalid(
            "overlap must be at most 7d: a secret kept valid longer is not rotated",
        ));
    }
    Ok(overlap)
}

pub(crate) fn parse_time(text: &str) -> Result<i64, Error> {
    parse_rfc3339(text).ok_or_else(|| {
        Error::invalid(format!(
            "`{text}` is not an RFC 3339 time such as 2026-11-30T01:02:03Z"
        ))
    })
}

/// Refuses JSON whose strings hold a lone UTF-16 surrogate escape (`"\\ud800"` without its pair):
/// valid JSON syntax, but no character, so every receiver's parser refuses the event later and
/// its deliveries would only die. `json` must already be valid JSON (a `RawValue`).
pub(crate) fn check_unicode(field: &str, json: &str) -> Result<(), Error> {
    let refused = || {
        Error::invalid(format!(
            "{field} holds a lone surrogate escape (\\ud800-\\udfff without its pair): not a \
             character, and receivers refuse it"
        ))
    };
    let bytes = json.as_bytes();
    let mut i = 0;
    // Only string contents have backslashes in valid JSON; each escape is consumed whole, so
    // an escaped backslash followed by `u` is not mistaken for an escape.
    while let Some(offset) = bytes
        .get(i..)
        .and_then(|rest| rest.iter().position(|&b| b == b'\\'))
    {
        let at = i + offset;
        match bytes.get(at + 1) {
            Some(b'u') => {
                let unit = hex_unit(bytes, at + 2).ok_or_else(refused)?;
                if (0xDC00..=0xDFFF).contains(&unit) {
                    return Err(refused());
                }
                if (0xD800..=0xDBFF).contains(&unit) {
                    let low = (bytes.get(at + 6) == Some(&b'\\')
                        && bytes.get(at + 7) == Some(&b'u'))
                    .then(|| hex_unit(bytes, at + 8))
                    .flatten();
                    if !low.is_some_and(|low| (0xDC00..=0xDFFF).contains(&low)) {
                        return Err(refused());
                    }
                    i = at + 12;
                } else {
                    i = at + 6;
                }
            }
            _ => i = at + 2,
        }
    }
    Ok(())
}

fn hex_unit(bytes: &[u8], at: usize) -> Option<u32> {
    let digits = std::str::from_utf8(bytes.get(at..at + 4)?).ok()?;
    u32::from_str_radix(digits, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::check_unicode;

    #[test]
    fn lone_surrogates_are_refused_and_pairs_and_escaped_backslashes_are_not() {
        for ok in [
            r#"{"a":"plain"}"#,
            r#"{"a":"\ud83d\ude00"}"#,
            r#"{"a":"\u00e9\n\"\\"}"#,
            r#"{"a":"\\ud800"}"#,
            r#"["\\\\ud800"]"#,
        ] {
            assert!(check_unicode("data", ok).is_ok(), "{ok}");
        }
        for bad in [
            r#"{"a":"\ud800"}"#,
            r#"{"a":"\udc00"}"#,
            r#"{"a":"\ud800x"}"#,
            r#"{"a":"\ud800\u0041"}"#,
            r#"{"\udfff":1}"#,
            r#"{"a":"\\\ud800"}"#,
        ] {
            assert!(check_unicode("data", bad).is_err(), "{bad}");
        }
    }
}
