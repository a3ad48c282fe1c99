//! Admin identities: a name and the SHA-256 of its key's secret, looked up by key id.

use sqlx::any::AnyRow;

use super::decode::Fields;
use super::{StoreError, Tx};

/// An `admins` row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminRow {
    /// The identity's name, what events name as the actor.
    pub name: String,
    /// The public part of its key, which a request's key is looked up by.
    pub key_id: String,
    /// SHA-256 of the key's secret; compare in constant time.
    pub key_sha256: [u8; 32],
    /// When it was made.
    pub created_at: i64,
    /// The identity that made it.
    pub created_by: String,
    /// When it was revoked.
    pub revoked_at: Option<i64>,
    /// The identity that revoked it.
    pub revoked_by: Option<String>,
}

const COLUMNS: &str = "name, key_id, key_sha256, created_at, created_by, revoked_at, revoked_by";

fn admin(row: &AnyRow) -> Result<AdminRow, StoreError> {
    let f = Fields::new(row, "admins");
    Ok(AdminRow {
        name: f.text("name")?,
        key_id: f.text("key_id")?,
        key_sha256: f.sha256("key_sha256")?,
        created_at: f.i64("created_at")?,
        created_by: f.text("created_by")?,
        revoked_at: f.opt_i64("revoked_at")?,
        revoked_by: f.opt_text("revoked_by")?,
    })
}

impl Tx {
    /// Adds an identity unless the name (or key id) is taken, revoked or not; whether it did.
    pub async fn insert_admin(&mut self, a: &AdminRow) -> Result<bool, StoreError> {
        let q = sqlx::query(
            "INSERT INTO admins (name, key_id, key_sha256, created_at, created_by) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
        )
        .bind(&a.name)
        .bind(&a.key_id)
        .bind(&a.key_sha256[..])
        .bind(a.created_at)
        .bind(&a.created_by);
        Ok(self.execute(q).await? == 1)
    }

    /// The identity whose key has this id.
    pub async fn admin_by_key_id(&mut self, key_id: &str) -> Result<Option<AdminRow>, StoreError> {
        let sql = format!("SELECT {COLUMNS} FROM admins WHERE key_id = $1");
        let row = self.fetch_optional(sqlx::query(&sql).bind(key_id)).await?;
        row.as_ref().map(admin).transpose()
    }

    /// The identity of this name.
    pub async fn admin(&mut self, name: &str) -> Result<Option<AdminRow>, StoreError> {
        let sql = format!("SELECT {COLUMNS} FROM admins WHERE name = $1");
        let row = self.fetch_optional(sqlx::query(&sql).bind(name)).await?;
        row.as_ref().map(admin).transpose()
    }

    /// At most `limit` identities after the name `after` (`""`: from the start), by name.
    pub async fn list_admins(
        &mut self,
        after: &str,
        limit: u32,
    ) -> Result<Vec<AdminRow>, StoreError> {
        let sql = format!("SELECT {COLUMNS} FROM admins WHERE name > $1 ORDER BY name LIMIT $2");
        let rows = self
            .fetch_all(sqlx::query(&sql).bind(after).bind(i64::from(limit)))
            .await?;
        rows.iter().map(admin).collect()
    }

    /// Revokes an identity that is not revoked yet; whether it did.
    pub async fn revoke_admin(
        &mut self,
        name: &str,
        at: i64,
        by: &str,
    ) -> Result<bool, StoreError> {
        let q = sqlx::query(
            "UPDATE admins SET revoked_at = $2, revoked_by = $3 \
             WHERE name = $1 AND revoked_at IS NULL",
        )
        .bind(name)
        .bind(at)
        .bind(by);
        Ok(self.execute(q).await? == 1)
    }
}
