//! The key/value space private to each attestor (`attestor_kv`). The caller supplies the
//! attestor id; a guest never names another attestor.

use super::decode::Fields;
use super::{StoreError, Tx};

/// The largest value an attestor may store.
pub const KV_VALUE_MAX: usize = 64 * 1024;

impl Tx {
    /// Reads `key` from `attestor`'s space.
    pub async fn kv_get(
        &mut self,
        attestor: &str,
        key: &str,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let q = sqlx::query("SELECT value FROM attestor_kv WHERE attestor = $1 AND key = $2")
            .bind(attestor)
            .bind(key);
        let row = self.fetch_optional(q).await?;
        row.map(|r| Fields::new(&r, "attestor_kv").bytes("value"))
            .transpose()
    }

    /// Writes `key` in `attestor`'s space, replacing any value. [`StoreError::TooLarge`]
    /// above [`KV_VALUE_MAX`].
    pub async fn kv_put(
        &mut self,
        attestor: &str,
        key: &str,
        value: &[u8],
    ) -> Result<(), StoreError> {
        if value.len() > KV_VALUE_MAX {
            return Err(StoreError::TooLarge {
                what: "kv value",
                len: value.len(),
                max: KV_VALUE_MAX,
            });
        }
        let q = sqlx::query(
            "INSERT INTO attestor_kv (attestor, key, value) VALUES ($1, $2, $3) \
             ON CONFLICT (attestor, key) DO UPDATE SET value = excluded.value",
        )
        .bind(attestor)
        .bind(key)
        .bind(value);
        self.execute(q).await.map(drop)
    }

    /// Deletes `key` from `attestor`'s space; deleting a missing key is a no-op.
    pub async fn kv_delete(&mut self, attestor: &str, key: &str) -> Result<(), StoreError> {
        let q = sqlx::query("DELETE FROM attestor_kv WHERE attestor = $1 AND key = $2")
            .bind(attestor)
            .bind(key);
        self.execute(q).await.map(drop)
    }
}
