//! Console sessions: who a signed-in browser is, and what it may do. The cookie's value and
//! the portal link's token are credentials, never held here: only the store sees them, to hash.

pub(crate) use kxp_api::PortalScope;

use super::ids::{AccountId, OperatorId};

/// Who a console session belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SignedIn {
    /// A merchant, through a portal link: one account, with the link's scope.
    Account {
        /// The account.
        account: AccountId,
        /// What the session may do.
        scope: PortalScope,
    },
    /// An operator, with its operator key: may change what it sees.
    Operator(OperatorId),
}

impl SignedIn {
    /// Whether the session may change anything: an operator's, or a `manage` portal session.
    /// A `read` one may not, nor one whose scope this version does not know.
    pub(crate) fn may_change(&self) -> bool {
        matches!(
            self,
            SignedIn::Operator(_)
                | SignedIn::Account {
                    scope: PortalScope::Manage,
                    ..
                }
        )
    }
}

/// A live console session, as the store returns it after checking its expiries.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    /// Whose it is.
    pub who: SignedIn,
    /// The token every state-changing form of this session carries (`csrf_token`).
    pub csrf_token: String,
}
