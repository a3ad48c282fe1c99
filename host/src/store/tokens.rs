//! Join tokens: minting, locking for a join, spending a use, revoking.

use sqlx::any::AnyRow;

use super::decode::{Fields, flag};
use super::{NewToken, StoreError, TokenExpect, TokenRow, Tx};

pub(super) fn token(row: &AnyRow) -> Result<TokenRow, StoreError> {
    let f = Fields::new(row, "join_tokens");
    Ok(TokenRow {
        id: f.text("id")?,
        role: f.parse("role")?,
        secret_sha256: f.sha256("secret_sha256")?,
        tenant_id: f.text("tenant_id")?,
        pool_id: f.opt_text("pool_id")?,
        site_id: f.opt_text("site_id")?,
        expires_at: f.i64("expires_at")?,
        revoked: f.bool("revoked")?,
        uses_total: f.u32("uses_total")?,
        uses_left: f.u32("uses_left")?,
        expect: TokenExpect {
            product_uuid: f.opt_text("expect_product_uuid")?,
            mac: f.opt_text("expect_mac")?,
            node_id: f.opt_text("expect_node_id")?,
        },
        reclaim: f.bool("reclaim")?,
        created_at: f.i64("created_at")?,
    })
}

impl Tx {
    /// Mints a token with all its uses left.
    pub async fn insert_token(&mut self, t: &NewToken) -> Result<(), StoreError> {
        let q = sqlx::query(
            "INSERT INTO join_tokens (id, role, secret_sha256, tenant_id, pool_id, site_id, \
             expires_at, revoked, uses_total, uses_left, expect_product_uuid, expect_mac, \
             expect_node_id, reclaim, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, 0, $8, $8, $9, $10, $11, $12, $13)",
        )
        .bind(&t.id)
        .bind(t.role.as_str())
        .bind(&t.secret_sha256[..])
        .bind(&t.tenant_id)
        .bind(&t.pool_id)
        .bind(&t.site_id)
        .bind(t.expires_at)
        .bind(i64::from(t.uses))
        .bind(&t.expect.product_uuid)
        .bind(&t.expect.mac)
        .bind(&t.expect.node_id)
        .bind(flag(t.reclaim))
        .bind(t.created_at);
        self.execute(q).await.map(drop)
    }

    /// Reads a token and locks its row until this transaction ends (`FOR UPDATE` on
    /// Postgres; SQLite's `BEGIN IMMEDIATE` already excludes other writers). `None` if there
    /// is no such id.
    pub async fn lock_token(&mut self, id: &str) -> Result<Option<TokenRow>, StoreError> {
        if self.backend() == super::Backend::Sqlite {
            return self.read_token(id).await;
        }
        let sql = concat!(
            "SELECT ",
            token_columns!(),
            " FROM join_tokens WHERE id = $1 FOR UPDATE"
        );
        let row = self.fetch_optional(sqlx::query(sql).bind(id)).await?;
        row.as_ref().map(token).transpose()
    }

    /// Reads a token as committed, without locking it or waiting for a lock on it.
    pub async fn read_token(&mut self, id: &str) -> Result<Option<TokenRow>, StoreError> {
        let sql = concat!(
            "SELECT ",
            token_columns!(),
            " FROM join_tokens WHERE id = $1"
        );
        let row = self.fetch_optional(sqlx::query(sql).bind(id)).await?;
        row.as_ref().map(token).transpose()
    }

    /// Spends one use; the row as spent. [`StoreError::NoUsesLeft`] when it had none (or does
    /// not exist): the count never goes below zero, even under concurrency. On Postgres the
    /// update takes the row's lock (waiting for another transaction's spend to commit, then
    /// judging the row it committed).
    pub async fn spend_token(&mut self, id: &str) -> Result<TokenRow, StoreError> {
        let sql = concat!(
            "UPDATE join_tokens SET uses_left = uses_left - 1 WHERE id = $1 AND uses_left > 0 \
             RETURNING ",
            token_columns!()
        );
        match self.fetch_optional(sqlx::query(sql).bind(id)).await? {
            Some(row) => token(&row),
            None => Err(StoreError::NoUsesLeft),
        }
    }

    /// Spends one use ([`Tx::spend_token`]); the uses left.
    pub async fn consume_token(&mut self, id: &str) -> Result<u32, StoreError> {
        Ok(self.spend_token(id).await?.uses_left)
    }

    /// Every token, oldest first.
    pub async fn list_tokens(&mut self) -> Result<Vec<TokenRow>, StoreError> {
        let sql = concat!(
            "SELECT ",
            token_columns!(),
            " FROM join_tokens ORDER BY created_at, id"
        );
        let rows = self.fetch_all(sqlx::query(sql)).await?;
        rows.iter().map(token).collect()
    }

    /// At most `limit` tokens after `after`, in the order of [`Tx::list_tokens`]: one page,
    /// so that a long list never holds a connection for long.
    pub async fn list_tokens_page(
        &mut self,
        after: &super::Cursor,
        limit: u32,
    ) -> Result<Vec<TokenRow>, StoreError> {
        let sql = concat!(
            "SELECT ",
            token_columns!(),
            " FROM join_tokens WHERE created_at > $1 OR (created_at = $1 AND id > $2) \
             ORDER BY created_at, id LIMIT $3"
        );
        let q = sqlx::query(sql)
            .bind(after.created_at)
            .bind(after.id.as_str())
            .bind(i64::from(limit));
        let rows = self.fetch_all(q).await?;
        rows.iter().map(token).collect()
    }

    /// Revokes a token; false if there is no such id. Revoking twice is harmless.
    pub async fn revoke_token(&mut self, id: &str) -> Result<bool, StoreError> {
        let q = sqlx::query("UPDATE join_tokens SET revoked = 1 WHERE id = $1").bind(id);
        Ok(self.execute(q).await? > 0)
    }
}
