//! What an admin operation can fail with. The API maps each variant to a status
//! (`crate::api::ApiError`); the CLI shows the API's answer.

use crate::store::StoreError;

/// Why an admin operation did not happen. Nothing was changed in any case: every operation is
/// one transaction, rolled back on error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpsError {
    /// The request is malformed, or names something that does not exist where it must (a
    /// tenant, a pool, an attestor this host does not run).
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// The object the request is about does not exist.
    #[error("not found")]
    NotFound,
    /// The object is not in a state that allows the action (a decision on a join request that
    /// is no longer pending, a second running workflow).
    #[error("conflict: {0}")]
    Conflict(String),
    /// The database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl OpsError {
    /// [`OpsError::InvalidInput`] with the message.
    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        OpsError::InvalidInput(message.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_say_what_went_wrong() {
        assert_eq!(
            OpsError::invalid("tenant acme does not exist").to_string(),
            "invalid input: tenant acme does not exist"
        );
        assert_eq!(OpsError::NotFound.to_string(), "not found");
        assert_eq!(
            OpsError::Conflict("the join request is denied, not pending".into()).to_string(),
            "conflict: the join request is denied, not pending"
        );
    }
}
