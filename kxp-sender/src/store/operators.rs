//! `kxp_operators`: the platform's operators and their keys (stored hashed, like accounts').

use crate::model::{KeyKind, Operator, OperatorId, new_id, now_ms, sha256_hex};
use crate::store::{Db, StoreError, on_db};

const OPERATOR_COLUMNS: &str = "id, name, created_at";

impl Db {
    /// Creates an operator and returns it with its key (`kxp_op_…`), which is shown once and
    /// stored only as a hash.
    #[cfg_attr(
        not(feature = "test-util"),
        expect(unreachable_pub, reason = "public with feature test-util only")
    )]
    pub async fn create_operator(&self, name: &str) -> Result<(Operator, String), StoreError> {
        let key = KeyKind::Operator.new_key();
        let operator = Operator {
            id: OperatorId::from(new_id("op")),
            name: name.to_owned(),
            created_at: now_ms(),
        };
        on_db!(self, |pool| {
            sqlx::query(
                "INSERT INTO kxp_operators (id, name, key_hash, created_at) VALUES ($1, $2, $3, $4)",
            )
            .bind(&operator.id)
            .bind(&operator.name)
            .bind(sha256_hex(key.as_bytes()))
            .bind(operator.created_at)
            .execute(pool)
            .await?;
        });
        Ok((operator, key))
    }

    /// The operator a key belongs to.
    pub(crate) async fn operator_by_key(&self, key: &str) -> Result<Option<Operator>, StoreError> {
        let hash = sha256_hex(key.as_bytes());
        let sql = format!("SELECT {OPERATOR_COLUMNS} FROM kxp_operators WHERE key_hash = $1");
        Ok(on_db!(self, |pool| {
            sqlx::query_as::<_, Operator>(&sql)
                .bind(hash)
                .fetch_optional(pool)
                .await?
        }))
    }

    /// The operator with this id: the one a console session belongs to.
    pub(crate) async fn operator(&self, id: &OperatorId) -> Result<Option<Operator>, StoreError> {
        let sql = format!("SELECT {OPERATOR_COLUMNS} FROM kxp_operators WHERE id = $1");
        Ok(on_db!(self, |pool| {
            sqlx::query_as::<_, Operator>(&sql)
                .bind(id)
                .fetch_optional(pool)
                .await?
        }))
    }

    /// Deletes an operator and ends its console sessions, in one transaction: its key stops
    /// working at once, and so does every browser signed in with it. Returns the operator and
    /// how many sessions ended; `None` when there is no such operator.
    pub(crate) async fn delete_operator(
        &self,
        id: &OperatorId,
    ) -> Result<Option<(Operator, u64)>, StoreError> {
        let Some(operator) = self.operator(id).await? else {
            return Ok(None);
        };
        let ended = on_db!(self, |pool, DB| {
            let mut tx = pool.begin_with(DB::BEGIN).await?;
            let ended = sqlx::query("DELETE FROM kxp_sessions WHERE operator_id = $1")
                .bind(id)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            sqlx::query("DELETE FROM kxp_operators WHERE id = $1")
                .bind(id)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            ended
        });
        Ok(Some((operator, ended)))
    }

    /// Every operator, oldest first (`kxp operators list`). Key hashes are not read.
    pub(crate) async fn operators(&self) -> Result<Vec<Operator>, StoreError> {
        let sql = format!("SELECT {OPERATOR_COLUMNS} FROM kxp_operators ORDER BY id");
        Ok(on_db!(self, |pool| {
            sqlx::query_as::<_, Operator>(&sql).fetch_all(pool).await?
        }))
    }
}
