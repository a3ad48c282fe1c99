//! Every reason JoinService itself refuses a join for: one enum, so a code is spelled once and
//! the audit, the event and the log agree. An attestor's own refusal keeps the (validated)
//! code the attestor chose; everything here is the host's.

use crate::runtime::Fault;

/// Why JoinService refused a join round. Each becomes the `reason` of the audit row and the
/// `security.join.refused` event; the agent sees only ACCESS_DENIED.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    // Before the attestor runs.
    /// The request's `attestor` is not a valid id (empty is the default): at most 64 bytes of
    /// lowercase letters, digits and single hyphens. The audit row names it `<invalid>`.
    #[error("bad-attestor-id")]
    BadAttestorId,
    /// The CSR does not parse or verify, or its key is not P-256.
    #[error("bad-csr")]
    BadCsr,
    /// The sealed token does not open with the host's key for this CSR.
    #[error("token-unsealable")]
    TokenUnsealable,
    /// The sealed token was sealed to a join encryption key whose rotation window is over
    /// (`gatehouse pki rotate`): the agent pins an outdated trust file.
    #[error("retired-encryption-key")]
    RetiredEncryptionKey,
    /// No attestor with the requested id is loaded.
    #[error("unknown-attestor")]
    UnknownAttestor,
    /// The hardware claims are malformed: too many MACs, a MAC that is not six octets, a
    /// product UUID that is not a UUID, or a control character or NUL anywhere.
    #[error("bad-claims")]
    BadClaims,

    // The call itself.
    /// The attestor trapped, ran out of time or memory, returned a malformed outcome, or
    /// deferred after spending something (a token use, single-use evidence, a join request).
    #[error("attestor-fault")]
    AttestorFault,
    /// A storage operation failed during the call.
    #[error("storage-error")]
    StorageError,
    /// As many calls of this attestor as it may have at once were running, and none ended in
    /// time: one attestor's load never delays joins through the others.
    #[error("attestor-busy")]
    AttestorBusy,
    /// The attestor met a per-call write limit (key/value or ledger writes, in count or bytes)
    /// and still admitted or deferred; none of its writes were applied.
    #[error("write-limit")]
    WriteLimit,
    /// What the attestor's decision read kept changing before the locked phase could confirm
    /// it (the round was run again, up to its limit).
    #[error("join-conflict")]
    JoinConflict,

    // The policy, after an admission (`policy::check`).
    /// The attestor spent a token but named another (or none) in its result, spent more than
    /// one use, or spent one that is not the request's.
    #[error("token-accounting")]
    TokenAccounting,
    /// The result names a token the attestor did not spend.
    #[error("token-not-consumed")]
    TokenNotConsumed,
    /// The request's opened secret is not the token's (or the request carried no secret).
    #[error("token-secret")]
    TokenSecret,
    /// The token had no use left when the attestor locked it.
    #[error("no-uses-left")]
    NoUsesLeft,
    /// A provisioned or discovery token did not have exactly one use left.
    #[error("not-single-use")]
    NotSingleUse,
    /// The token is revoked.
    #[error("revoked")]
    Revoked,
    /// The token expired (database time).
    #[error("expired")]
    Expired,
    /// The token's role does not admit the requested role, or the node to re-key has
    /// another role.
    #[error("wrong-role")]
    WrongRole,
    /// The machine's product UUID is not the token's `expect.productUuid`.
    #[error("expect-product-uuid")]
    ExpectProductUuid,
    /// The machine does not claim the token's `expect.mac`.
    #[error("expect-mac")]
    ExpectMac,
    /// The join does not re-key the token's `expect.nodeId`.
    #[error("expect-node")]
    ExpectNode,
    /// The result's tenant differs from the token's or the node's.
    #[error("tenant-mismatch")]
    TenantMismatch,
    /// The result's pool or site differs from the token's.
    #[error("placement-mismatch")]
    PlacementMismatch,
    /// No tenant could be determined (no token, no node, none in the result).
    #[error("no-tenant")]
    NoTenant,
    /// The result names a node that does not exist.
    #[error("unknown-node")]
    UnknownNode,
    /// The node is retired.
    #[error("retired")]
    Retired,
    /// A token join would re-key an existing node without the token allowing it (`reclaim`,
    /// `expect.nodeId`, or a provisioning workflow's own node), or the machine's trusted
    /// hardware key is held by another live node the token does not allow to reclaim.
    #[error("reclaim")]
    Reclaim,
    /// A join without a token re-keys an existing node, and the attestor neither owns a
    /// binding of that node nor was granted reclaim by the operator.
    #[error("reclaim-not-allowed")]
    ReclaimNotAllowed,
    /// The result binds a kind of hardware identity the attestor does not own.
    #[error("binding-kind")]
    BindingKind,
    /// The node's live certificate carries a TPM AK statement and the result does not prove
    /// a TPM-held key again.
    #[error("node-key-downgrade")]
    NodeKeyDowngrade,
    /// The result asks for a certificate statement renewal cannot prove again, or claims a
    /// TPM-held key the call did not prove to the host.
    #[error("node-key-statement")]
    NodeKeyStatement,
    /// The result carries command kinds for a role other than ramdisk, kinds that are not a
    /// valid list (`gatehouse_proto::kinds`), or none for a ramdisk: a ramdisk certificate is
    /// always restricted, and only a ramdisk certificate is.
    #[error("allowed-kinds")]
    AllowedKinds,
    /// The attestor consumed an approved join request, and the round's CSR is not the
    /// request's or the admitted placement is not the one the operator chose.
    #[error("approval-mismatch")]
    ApprovalMismatch,

    // Placement.
    /// The admitted pool does not exist in the tenant.
    #[error("unknown-pool")]
    UnknownPool,
    /// The machine's pool lists the attestors that may admit into it (`joinAttestors`), and
    /// the round's attestor is not one of them.
    #[error("pool-attestor")]
    PoolAttestor,
    /// A hardware identity in the result is bound to another node.
    #[error("bound-elsewhere")]
    BoundElsewhere,
    /// Another reclaim of the same node committed first, or the node was retired meanwhile.
    #[error("reclaim-race")]
    ReclaimRace,
    /// The node was issued a certificate less than the per-node interval ago
    /// (`[limits] node_issue_interval_seconds`): nothing is spent, the machine is answered 429
    /// with Retry-After and may try again then.
    #[error("rate-limited")]
    RateLimited,
}

impl Refusal {
    /// The stable reason code.
    pub fn reason(self) -> String {
        self.to_string()
    }

    /// Whether JoinService's policy overrode an attestor's admission (the event then carries
    /// `qualifiedReason: join:<reason>`, as the seed names it), rather than a request or a
    /// call that never got as far as an admission.
    pub fn overrides_admission(self) -> bool {
        !matches!(
            self,
            Refusal::BadAttestorId
                | Refusal::BadCsr
                | Refusal::TokenUnsealable
                | Refusal::RetiredEncryptionKey
                | Refusal::UnknownAttestor
                | Refusal::BadClaims
                | Refusal::AttestorFault
                | Refusal::StorageError
                | Refusal::AttestorBusy
                | Refusal::WriteLimit
                | Refusal::JoinConflict
                | Refusal::BoundElsewhere
        )
    }

    /// The refusal a call's fault becomes.
    pub fn of_fault(fault: &Fault) -> Self {
        match fault {
            Fault::Storage => Refusal::StorageError,
            Fault::UnknownAttestor => Refusal::UnknownAttestor,
            Fault::Busy => Refusal::AttestorBusy,
            Fault::WriteLimit(_) => Refusal::WriteLimit,
            _ => Refusal::AttestorFault,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_stable_and_the_faults_map_to_them() {
        assert_eq!(Refusal::ReclaimNotAllowed.reason(), "reclaim-not-allowed");
        assert_eq!(
            Refusal::RetiredEncryptionKey.reason(),
            "retired-encryption-key"
        );
        assert_eq!(Refusal::NodeKeyDowngrade.reason(), "node-key-downgrade");
        assert_eq!(Refusal::UnknownPool.reason(), "unknown-pool");
        assert_eq!(Refusal::of_fault(&Fault::Storage), Refusal::StorageError);
        assert_eq!(Refusal::of_fault(&Fault::Timeout), Refusal::AttestorFault);
        assert_eq!(Refusal::of_fault(&Fault::Busy).reason(), "attestor-busy");
        assert_eq!(
            Refusal::of_fault(&Fault::WriteLimit("kv")).reason(),
            "write-limit"
        );
        assert_eq!(
            Refusal::of_fault(&Fault::Timeout).reason(),
            "attestor-fault"
        );
        assert_eq!(Refusal::of_fault(&Fault::Storage).reason(), "storage-error");
        assert!(Refusal::PoolAttestor.overrides_admission());
        assert!(!Refusal::BadCsr.overrides_admission());
    }
}
