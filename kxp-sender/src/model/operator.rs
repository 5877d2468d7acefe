//! Operators: the platform's own people. An operator owns no rows; its key creates and lists
//! accounts and acts for any one of them, named per request.

use sqlx::FromRow;

use super::ids::OperatorId;

/// An operator (`kxp operators create`). Its key is stored only as a hash, and never read back.
#[derive(Debug, Clone, FromRow)]
pub struct Operator {
    /// `op_…`
    pub id: OperatorId,
    /// A human name: who holds the key.
    pub name: String,
    /// Unix ms.
    pub created_at: i64,
}
