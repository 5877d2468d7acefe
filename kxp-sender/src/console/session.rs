//! The signed-in browser: [`Signed`] finds the live session its cookie names (or sends it to
//! sign in), and checks what a form may do: the right CSRF token, and a scope that may change
//! things.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use serde::Deserialize;
use subtle::ConstantTimeEq;

use super::cookies;
use super::error::ConsoleError;
use crate::app::AppState;
use crate::model::Session;

/// A request with a live session: without one, the handler is not run and the browser is sent
/// to `/console/sign-in` (303).
pub(crate) struct Signed {
    /// The session.
    pub session: Session,
    /// The cookie's value, which names it (to end it).
    pub cookie: String,
}

/// A form that carries only its CSRF token (the sign-out buttons).
#[derive(Deserialize)]
pub(crate) struct CsrfForm {
    /// Must be the session's token.
    #[serde(default)]
    pub csrf_token: String,
}

impl FromRequestParts<AppState> for Signed {
    type Rejection = ConsoleError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ConsoleError> {
        let cookie = cookies::get(&parts.headers, cookies::SESSION)
            .ok_or(ConsoleError::SignInRequired)?
            .to_owned();
        let session = state
            .db
            .session(&cookie)
            .await?
            .ok_or(ConsoleError::SignInRequired)?;
        Ok(Signed { session, cookie })
    }
}

impl Signed {
    /// Refuses (403) a form whose `csrf_token` is not this session's.
    pub(crate) fn check_csrf(&self, sent: &str) -> Result<(), ConsoleError> {
        match same_secret(sent, &self.session.csrf_token) {
            true => Ok(()),
            false => Err(ConsoleError::CsrfMismatch),
        }
    }

    /// Refuses (403) a change asked by a session that may not change anything.
    pub(crate) fn check_may_change(&self) -> Result<(), ConsoleError> {
        match self.session.who.may_change() {
            true => Ok(()),
            false => Err(ConsoleError::ReadOnly),
        }
    }
}

/// Whether `sent` is `expected`, compared in constant time (an empty one never is).
pub(super) fn same_secret(sent: &str, expected: &str) -> bool {
    !expected.is_empty() && bool::from(sent.as_bytes().ct_eq(expected.as_bytes()))
}
