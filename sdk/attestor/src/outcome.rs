//! Building outcomes: the [`refuse`] builder and conversions into [`Outcome`].

use crate::{AttestationResult, Deferral, NodeKeyAttestation, Outcome, Refusal, TxError, reason};
use alloc::string::String;
use alloc::vec::Vec;

/// A refusal with `reason` (one of the [`reason`] codes or a well-formed one of the
/// attestor's own) and nothing else known; add what is known with [`Refusal::token`],
/// [`Refusal::node`] and [`Refusal::tenant`], and return it with `.into()`.
pub fn refuse(reason: impl Into<String>) -> Refusal {
    Refusal {
        reason: reason.into(),
        token_id: None,
        node_id: None,
        tenant_id: None,
    }
}

impl Refusal {
    /// Names the token involved.
    pub fn token(mut self, id: impl Into<String>) -> Self {
        self.token_id = Some(id.into());
        self
    }

    /// Names the node involved.
    pub fn node(mut self, id: impl Into<String>) -> Self {
        self.node_id = Some(id.into());
        self
    }

    /// Names the tenant to attribute the refusal to.
    pub fn tenant(mut self, id: impl Into<String>) -> Self {
        self.tenant_id = Some(id.into());
        self
    }
}

/// A failed storage operation is a [`reason::STORAGE`] refusal: an attestor that cannot read
/// the database must not admit, so `?` on a [`crate::Tx`] call inside a function returning
/// `Result<_, Refusal>` does the right thing.
impl From<TxError> for Refusal {
    fn from(_: TxError) -> Self {
        refuse(reason::STORAGE)
    }
}

impl From<Refusal> for Outcome {
    fn from(refusal: Refusal) -> Self {
        Outcome::Refused(refusal)
    }
}

impl From<AttestationResult> for Outcome {
    fn from(result: AttestationResult) -> Self {
        Outcome::Admitted(result)
    }
}

impl From<Deferral> for Outcome {
    fn from(deferral: Deferral) -> Self {
        Outcome::Deferred(deferral)
    }
}

/// An admission that claims nothing: no node, tenant, pool, site, token, binding or subject,
/// and an unattested node key. Start from it with `..AttestationResult::default()`.
impl Default for AttestationResult {
    fn default() -> Self {
        AttestationResult {
            node_id: None,
            tenant_id: None,
            pool_id: None,
            site_id: None,
            token_id: None,
            bindings: Vec::new(),
            node_key: NodeKeyAttestation::Unattested,
            node_key_uri: None,
            cert_ttl_seconds: None,
            allowed_kinds: None,
            subject: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Approval, Refusal};

    #[test]
    fn builder_sets_what_is_known() {
        let refusal = refuse(reason::REVOKED).token("tok_1").tenant("ten_1");
        assert_eq!(
            refusal,
            Refusal {
                reason: "revoked".into(),
                token_id: Some("tok_1".into()),
                node_id: None,
                tenant_id: Some("ten_1".into()),
            }
        );
        assert_eq!(
            refuse("x").node("node_1").node_id.as_deref(),
            Some("node_1")
        );
    }

    #[test]
    fn storage_errors_refuse() {
        for error in [TxError::Storage, TxError::Invalid("not locked".into())] {
            assert_eq!(Refusal::from(error), refuse(reason::STORAGE));
        }
    }

    #[test]
    fn converts_into_outcomes() {
        assert_eq!(
            Outcome::from(refuse(reason::EXPIRED)),
            Outcome::Refused(refuse(reason::EXPIRED))
        );
        assert_eq!(
            Outcome::from(AttestationResult::default()),
            Outcome::Admitted(AttestationResult::default())
        );
        let approval = Deferral::Approval(Approval {
            request_id: "jr_1".into(),
            retry_after_seconds: 0,
        });
        assert_eq!(Outcome::from(approval.clone()), Outcome::Deferred(approval));
    }

    #[test]
    fn default_result_claims_nothing() {
        let result = AttestationResult::default();
        assert_eq!(result.node_key, NodeKeyAttestation::Unattested);
        assert!(result.tenant_id.is_none() && result.token_id.is_none());
        assert!(result.bindings.is_empty() && result.subject.is_none());
    }
}
