//! The console's two cookies, read from `Cookie` and written as `Set-Cookie` by hand (two
//! cookies do not need a crate). Both are `HttpOnly` (no script reads them) and
//! `SameSite=Strict` (no other site's page sends them), `Secure` unless `--dev`.

use axum::http::HeaderMap;
use axum::http::header::COOKIE;

/// The session cookie: names a row of `kxp_sessions` (by its hash), for every `/console` path.
pub(super) const SESSION: &str = "kxp_session";

/// The sign-in forms' CSRF cookie: the page sets it and its form carries the same value, so a
/// sign-in POST from another site (login CSRF, signing a victim into the attacker's session)
/// is refused. Sent only to the sign-in paths.
pub(super) const SIGN_IN: &str = "kxp_sign_in";

/// Where the sign-in cookie goes.
pub(super) const SIGN_IN_PATH: &str = "/console/sign-in";

/// The value of the cookie `name`, from any `Cookie` header of the request.
pub(super) fn get<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, value)| *key == name && !value.is_empty())
        .map(|(_, value)| value)
}

/// A `Set-Cookie` value: `value` for `max_age` seconds on `path` (0 removes the cookie).
pub(super) fn set(name: &str, value: &str, path: &str, max_age: i64, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!("{name}={value}; Path={path}; Max-Age={max_age}; HttpOnly; SameSite=Strict{secure}")
}

#[cfg(test)]
mod tests {
    use axum::http::{HeaderMap, HeaderValue};

    use super::{get, set};

    #[test]
    fn a_cookie_is_found_among_others_and_in_any_cookie_header() {
        let mut headers = HeaderMap::new();
        headers.append("cookie", HeaderValue::from_static("a=1; kxp_session=abc"));
        headers.append("cookie", HeaderValue::from_static("kxp_sign_in=def"));
        assert_eq!(get(&headers, "kxp_session"), Some("abc"));
        assert_eq!(get(&headers, "kxp_sign_in"), Some("def"));
        assert_eq!(get(&headers, "kxp"), None);
    }

    #[test]
    fn cookies_are_http_only_strict_and_secure_outside_dev() {
        assert_eq!(
            set("kxp_session", "v", "/console", 60, true),
            "kxp_session=v; Path=/console; Max-Age=60; HttpOnly; SameSite=Strict; Secure"
        );
        assert!(!set("kxp_session", "v", "/console", 60, false).contains("Secure"));
    }
}
