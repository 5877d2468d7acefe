//! The endpoint challenge: `GET <path>?challenge=<token>` answers the token, proving to the
//! sender that whoever registered the URL controls it.

use crate::rejection::Rejection;

/// The longest token echoed back.
const MAX_TOKEN_LEN: usize = 256;

/// Reads the `challenge` parameter from a query string (without the `?`).
///
/// `None` when there is none (the request is not a challenge); otherwise the token to answer with,
/// or [`Rejection::InvalidChallenge`] when it is not 1 to 256 URL-safe characters — the token is
/// echoed, so nothing that could be markup or need decoding is reflected.
///
/// ```
/// use kxp_receiver::challenge_token;
///
/// assert_eq!(challenge_token(Some("challenge=3f9a_Zx-1")), Some(Ok("3f9a_Zx-1")));
/// assert_eq!(challenge_token(Some("a=1")), None);
/// assert!(challenge_token(Some("challenge=<script>")).unwrap().is_err());
/// ```
pub fn challenge_token(query: Option<&str>) -> Option<Result<&str, Rejection>> {
    let token = query?
        .split('&')
        .find_map(|pair| pair.strip_prefix("challenge="))?;
    let valid = (1..=MAX_TOKEN_LEN).contains(&token.len())
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    Some(if valid {
        Ok(token)
    } else {
        Err(Rejection::InvalidChallenge)
    })
}
