//! Which account a page is about. Every account page lives under `/console/a/<account id>/…`,
//! so a merchant and an operator look at the same URLs; [`InAccount`] lets a merchant's
//! session in only under its own account and an operator's under any, and answers 404 (like
//! an id that does not exist) to anything else, before the handler runs.

use axum::Form;
use axum::extract::{FromRequest, FromRequestParts, RawPathParams, Request};
use axum::http::request::Parts;

use super::error::ConsoleError;
use super::session::{CsrfForm, Signed};
use crate::app::AppState;
use crate::model::{Account, AccountId, Actor, AuditAction, ConsoleAction, NewAudit, SignedIn};

/// A signed-in request about one account the session may see.
pub(crate) struct InAccount {
    /// The session.
    pub signed: Signed,
    /// The account named by the path.
    pub account: Account,
}

impl FromRequestParts<AppState> for InAccount {
    type Rejection = ConsoleError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ConsoleError> {
        let signed = Signed::from_request_parts(parts, state).await?;
        let params = RawPathParams::from_request_parts(parts, state)
            .await
            .map_err(|_| ConsoleError::NotFound)?;
        let id = params
            .iter()
            .find(|(name, _)| *name == "account")
            .map(|(_, value)| value.to_owned())
            .ok_or(ConsoleError::NotFound)?;
        let allowed = match &signed.session.who {
            SignedIn::Account { account, .. } => account.as_str() == id,
            SignedIn::Operator(_) => true,
        };
        if !allowed {
            return Err(ConsoleError::NotFound);
        }
        let account = state
            .db
            .account(&AccountId::from(id))
            .await?
            .ok_or(ConsoleError::NotFound)?;
        Ok(InAccount { signed, account })
    }
}

/// A button's form about one object of the account (an endpoint, a delivery), checked: the
/// session may see the account, the form carries its CSRF token, and the session may change
/// things. `id` is the path's last parameter (the object), as the id type `Id` it is.
pub(crate) struct Checked<Id> {
    /// The account and the session.
    pub scope: InAccount,
    /// The object the button acts on.
    pub id: Id,
}

impl<Id: From<String> + Send> FromRequest<AppState> for Checked<Id> {
    type Rejection = ConsoleError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, ConsoleError> {
        let (mut parts, body) = request.into_parts();
        let scope = InAccount::from_request_parts(&mut parts, state).await?;
        let params = RawPathParams::from_request_parts(&mut parts, state)
            .await
            .map_err(|_| ConsoleError::NotFound)?;
        let id = params
            .iter()
            .last()
            .map(|(_, value)| Id::from(value.to_owned()))
            .ok_or(ConsoleError::NotFound)?;
        let request = Request::from_parts(parts, body);
        let Form(form) = Form::<CsrfForm>::from_request(request, state)
            .await
            .map_err(|_| ConsoleError::CsrfMismatch)?;
        scope.check_form(&form.csrf_token)?;
        Ok(Checked { scope, id })
    }
}

impl InAccount {
    /// `/console/a/<account id>` followed by `rest` (which starts with `/`, or is empty).
    pub(crate) fn url(&self, rest: &str) -> String {
        format!("/console/a/{}{rest}", self.account.id)
    }

    /// Checks a form: the session's CSRF token (403 without it) and a session that may change
    /// things (403 for a `read` one). Nothing is changed before both pass.
    pub(crate) fn check_form(&self, csrf_token: &str) -> Result<(), ConsoleError> {
        self.signed.check_csrf(csrf_token)?;
        self.signed.check_may_change()
    }

    /// Whether the session may change things (the pages leave out the forms otherwise).
    pub(crate) fn may_change(&self) -> bool {
        self.signed.session.who.may_change()
    }

    /// Records a change this session made to the account, in the audit log. Called once the
    /// change is committed, so a failure to record it is logged, not answered: the change
    /// stands (and a secret it made must still be shown once).
    pub(crate) async fn audit(
        &self,
        state: &AppState,
        action: ConsoleAction,
        target: Option<&str>,
    ) {
        let actor = self.actor(state).await;
        let action = AuditAction::Console(action);
        let entry = NewAudit {
            actor: &actor,
            account_id: Some(&self.account.id),
            action: &action,
            target,
        };
        if let Err(e) = state.db.audit(&entry).await {
            tracing::error!(target: "kxp_sender", error = %e, action = %action.text(),
                "could not record a console change in the audit log");
        }
    }

    /// Who this session is, with their name now.
    pub(crate) async fn actor(&self, state: &AppState) -> Actor {
        match &self.signed.session.who {
            SignedIn::Operator(id) => match state.db.operator(id).await {
                Ok(Some(operator)) => Actor::Operator {
                    id: id.clone(),
                    name: operator.name,
                },
                // Deleted since: its name is gone with it.
                Ok(None) | Err(_) => Actor::Operator {
                    id: id.clone(),
                    name: String::new(),
                },
            },
            SignedIn::Account { .. } => Actor::Account {
                id: self.account.id.clone(),
                name: self.account.name.clone(),
            },
        }
    }

    /// Whether an operator is looking (the pages link back to the accounts list).
    pub(crate) fn by_operator(&self) -> bool {
        matches!(self.signed.session.who, SignedIn::Operator(_))
    }
}
