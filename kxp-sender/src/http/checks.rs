//! Checks of request fields shared by several resources: names, URLs (with the address
//! guard), timeouts, rate limits, event type patterns, times and durations.

use std::net::{IpAddr, Ipv6Addr};
use std::time::Duration;

use kxp_api::ErrorCode;

use super::{ApiError, MAX_OVERLAP, MAX_RATE_LIMIT, MAX_TIMEOUT, MIN_TIMEOUT};
use crate::engine::config::Shared;
use crate::engine::guard::Blocked;
use crate::model::parse_rfc3339;
use crate::policy::schedule::parse_duration;

pub(super) fn check_description(description: &str) -> Result<(), ApiError> {
    if description.len() > 512 {
        return Err(ApiError::invalid("description must be at most 512 bytes"));
    }
    Ok(())
}

pub(super) fn check_timeout(ms: u64) -> Result<Duration, ApiError> {
    let timeout = Duration::from_millis(ms);
    if (MIN_TIMEOUT..=MAX_TIMEOUT).contains(&timeout) {
        Ok(timeout)
    } else {
        Err(ApiError::invalid(format!(
            "timeout_ms must be between {} and {}",
            MIN_TIMEOUT.as_millis(),
            MAX_TIMEOUT.as_millis()
        )))
    }
}

pub(super) fn check_rate_limit(limit: i64) -> Result<(), ApiError> {
    if (1..=MAX_RATE_LIMIT).contains(&limit) {
        Ok(())
    } else {
        Err(ApiError::invalid(format!(
            "rate_limit_per_second must be between 1 and {MAX_RATE_LIMIT} (null for no limit)"
        )))
    }
}

/// Endpoint URLs: `https://` with a host, no credentials (`http://` only in development
/// mode); an IP-literal host must pass the address guard, and so must loopback names
/// (`localhost`, `*.localhost`). Other host names are checked when resolved, at every attempt:
/// what a name resolves to today says nothing about tomorrow.
pub(super) fn check_url(text: &str, shared: &Shared) -> Result<reqwest::Url, ApiError> {
    let url = reqwest::Url::parse(text).map_err(|e| ApiError::invalid(format!("url: {e}")))?;
    match url.scheme() {
        "https" => {}
        "http" if shared.config.dev => {}
        "http" => {
            return Err(ApiError::invalid(
                "url must be https:// (http:// is accepted only with `kxp serve --dev`)",
            ));
        }
        other => {
            return Err(ApiError::invalid(format!(
                "url scheme `{other}` is not http(s)"
            )));
        }
    }
    let Some(host) = url.host_str() else {
        return Err(ApiError::invalid("url has no host"));
    };
    if !url.username().is_empty() || url.password().is_some() {
        return Err(ApiError::invalid(
            "url must not carry credentials; authenticate with the signature",
        ));
    }
    let blocked = |blocked: Blocked| {
        ApiError::new(
            ErrorCode::BlockedAddress,
            format!(
                "url host {blocked}; deliveries never go there (an operator can allow a range \
                 with `kxp serve --allow-address CIDR`; `--dev` allows loopback)"
            ),
        )
    };
    shared.guard().check_url(&url).map_err(blocked)?;
    // Loopback names (RFC 6761) resolve to this machine wherever they are used: refuse them
    // now unless the guard lets loopback through, rather than fail every attempt later.
    let name = host.strip_suffix('.').unwrap_or(host);
    if name == "localhost" || name.ends_with(".localhost") {
        let v4 = shared.guard().check(IpAddr::from([127, 0, 0, 1]));
        let v6 = shared.guard().check(IpAddr::from(Ipv6Addr::LOCALHOST));
        if let (Err(refused), Err(_)) = (v4, v6) {
            return Err(ApiError::new(
                ErrorCode::BlockedAddress,
                format!(
                    "url host `{host}` is this machine ({}), accepted only with `kxp serve --dev` \
                     or an `--allow-address` covering it",
                    refused.range()
                ),
            ));
        }
    }
    Ok(url)
}

pub(super) fn check_event_types(types: &[String]) -> Result<(), ApiError> {
    if types.is_empty() {
        return Err(ApiError::invalid(
            "event_types must not be empty (use [\"*\"] for every type)",
        ));
    }
    for t in types {
        let body = t.strip_suffix('*').unwrap_or(t);
        let ok = t.len() <= 128
            && !t.is_empty()
            && body
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if !ok {
            return Err(ApiError::invalid(format!(
                "event type pattern `{t}` is not letters, digits, . _ - with an optional trailing *"
            )));
        }
    }
    Ok(())
}

pub(super) fn check_name(field: &str, value: &str, max: usize) -> Result<(), ApiError> {
    let ok = !value.is_empty()
        && value.len() <= max
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(format!(
            "{field} must be 1 to {max} letters, digits, . _ -"
        )))
    }
}

/// A rotation's `overlap`: a duration of at most [`MAX_OVERLAP`].
pub(super) fn parse_overlap(text: &str) -> Result<Duration, ApiError> {
    let overlap = parse_duration(text).map_err(|_| {
        ApiError::invalid(format!(
            "overlap `{text}` is not a duration such as 30m, 24h or 0s"
        ))
    })?;
    if overlap > MAX_OVERLAP {
        return Err(ApiError::invalid(
            "overlap must be at most 7d: a secret kept valid longer is not rotated",
        ));
    }
    Ok(overlap)
}

pub(super) fn parse_time(text: &str) -> Result<i64, ApiError> {
    parse_rfc3339(text).ok_or_else(|| {
        ApiError::invalid(format!(
            "`{text}` is not an RFC 3339 time such as 2026-11-30T01:02:03Z"
        ))
    })
}
