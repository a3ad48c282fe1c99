//! The one error type of the store.

/// A store operation failed.
///
/// Only [`StoreError::Query`] and [`StoreError::Aborted`] mean the database itself failed; the
/// others are outcomes a caller decides on ([`StoreError::NoUsesLeft`],
/// [`StoreError::BoundElsewhere`]) or refusals of bad arguments and bad rows. After a
/// `Query` error inside a [`super::Tx`], the transaction can only be rolled back or dropped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The database URL names no backend this host supports (`sqlite:` or `postgres:`).
    #[error("unsupported database URL (expected sqlite: or postgres:): {0}")]
    UnsupportedUrl(String),
    /// A Postgres write pool was asked for a size outside 1 to
    /// [`super::db::MAX_POSTGRES_CONNECTIONS`].
    #[error("a PostgreSQL write pool of {0} connections (it may have 1 to {max})", max = super::db::MAX_POSTGRES_CONNECTIONS)]
    PoolSize(u32),
    /// A SQLite database path is not valid UTF-8, so it cannot be written as a URL.
    #[error("database path is not valid UTF-8: {0}")]
    PathNotUtf8(std::path::PathBuf),
    /// Opening the connection pool failed.
    #[error("cannot connect to the database: {0}")]
    Connect(#[source] sqlx::Error),
    /// Applying the embedded migrations failed.
    #[error("cannot migrate the database: {0}")]
    Migrate(#[source] sqlx::migrate::MigrateError),
    /// A statement failed or timed out.
    #[error("database query failed: {0}")]
    Query(#[from] sqlx::Error),
    /// A statement of this transaction failed earlier, so it was rolled back instead of
    /// committed.
    #[error("transaction rolled back: an earlier statement failed")]
    Aborted,
    /// On SQLite, the batch this transaction committed into was rolled back before it
    /// committed ([`super::group`]): none of this transaction's writes took effect.
    #[error("the commit batch was lost: {0}")]
    BatchLost(String),
    /// The token has no use left (or does not exist): nothing was spent.
    #[error("the token has no use left")]
    NoUsesLeft,
    /// The hardware identity is already bound to another node (named here).
    #[error("the hardware identity is bound to node {0}")]
    BoundElsewhere(String),
    /// A value is larger than the store accepts.
    #[error("{what} is {len} bytes, more than the {max} allowed")]
    TooLarge {
        /// What was too large.
        what: &'static str,
        /// Its length in bytes.
        len: usize,
        /// The limit in bytes.
        max: usize,
    },
    /// A number does not fit the database's signed 64-bit integers.
    #[error("{0} is out of range for the database")]
    OutOfRange(&'static str),
    /// A value that must be JSON is not.
    #[error("{what} is not valid JSON: {source}")]
    InvalidJson {
        /// What was not JSON.
        what: &'static str,
        /// Why it did not parse.
        #[source]
        source: serde_json::Error,
    },
    /// A row read from the database does not decode (a wrong type, an unknown role, bad
    /// JSON): the database holds something this host did not write.
    #[error("corrupt row: {0}")]
    Corrupt(String),
}

impl StoreError {
    /// Whether this is the database giving up on a transaction because of another one (a
    /// deadlock, a lock wait past `lock_timeout`, a serialization failure, SQLite busy past
    /// its timeout): the same work may succeed when run again.
    pub fn is_contention(&self) -> bool {
        let StoreError::Query(sqlx::Error::Database(e)) = self else {
            return false;
        };
        match e.code().as_deref() {
            // Postgres: serialization_failure, deadlock_detected, lock_not_available.
            Some("40001" | "40P01" | "55P03") => true,
            // SQLite: SQLITE_BUSY (5) and SQLITE_LOCKED (6), with their extended codes.
            Some(code) => code.parse::<u32>().is_ok_and(|c| matches!(c & 0xff, 5 | 6)),
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::StoreError;

    #[test]
    fn display() {
        let cases: Vec<(StoreError, &str)> = vec![
            (
                StoreError::PoolSize(0),
                "a PostgreSQL write pool of 0 connections (it may have 1 to 100)",
            ),
            (
                StoreError::UnsupportedUrl("mysql://x".into()),
                "unsupported database URL (expected sqlite: or postgres:): mysql://x",
            ),
            (
                StoreError::PathNotUtf8("a".into()),
                "database path is not valid UTF-8: a",
            ),
            (
                StoreError::Connect(sqlx::Error::PoolTimedOut),
                "cannot connect to the database: pool timed out while waiting for an open connection",
            ),
            (
                StoreError::Migrate(sqlx::migrate::MigrateError::VersionMismatch(3)),
                "cannot migrate the database: migration 3 was previously applied but has been modified",
            ),
            (
                StoreError::Query(sqlx::Error::RowNotFound),
                "database query failed: no rows returned by a query that expected to return at least one row",
            ),
            (
                StoreError::Aborted,
                "transaction rolled back: an earlier statement failed",
            ),
            (
                StoreError::BatchLost("COMMIT failed: disk full".into()),
                "the commit batch was lost: COMMIT failed: disk full",
            ),
            (StoreError::NoUsesLeft, "the token has no use left"),
            (
                StoreError::BoundElsewhere("node_1".into()),
                "the hardware identity is bound to node node_1",
            ),
            (
                StoreError::TooLarge {
                    what: "kv value",
                    len: 70000,
                    max: 65536,
                },
                "kv value is 70000 bytes, more than the 65536 allowed",
            ),
            (
                StoreError::OutOfRange("lease epoch"),
                "lease epoch is out of range for the database",
            ),
            (
                StoreError::InvalidJson {
                    what: "details",
                    source: serde_json::from_str::<serde_json::Value>("{").unwrap_err(),
                },
                "details is not valid JSON: EOF while parsing an object at line 1 column 1",
            ),
            (
                StoreError::Corrupt("nodes.role: unknown node role `x`".into()),
                "corrupt row: nodes.role: unknown node role `x`",
            ),
        ];
        for (error, want) in cases {
            assert_eq!(error.to_string(), want);
        }
    }
}
