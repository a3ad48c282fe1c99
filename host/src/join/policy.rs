//! What JoinService enforces after an attestor admits a machine, whichever attestor it is.
//!
//! The attestor decides *who* the machine is; this module decides whether that answer may
//! stand, against what the call actually did ([`Effects`]) and what JoinService itself read in
//! the transaction. The rules, each with its own [`Refusal`]:
//!
//! - **Tokens are the host's to judge**: a result names a token exactly when the attestor spent
//!   one use of it, it is the request's token, the request's opened secret matches the row's
//!   hash (constant time), and the row as locked was unrevoked, unexpired (database time), had
//!   a use left (exactly one for provisioned and discovery tokens) and a role that admits the
//!   requested role; then the token's `expect` binding.
//! - **Node-key statements**: `node-key: tpm` and a `urn:bc:tpm-ak:` statement stand only when
//!   the host itself verified, during the call, a TPM2_Certify of the CSR's key (by the AK the
//!   statement names).
//! - **Binding kinds belong to an attestor**: `tpm-ek` to `tpm`; any other kind is
//!   `<attestor>:<kind>` of the attestor writing it.
//! - **Re-keying an existing node needs proof the host can see**: a token that allows it
//!   (`reclaim`, `expect.nodeId`, or a provisioned token its running workflow minted for that
//!   node), or, without a token, a binding of the node the attestor owns or the operator's
//!   reclaim grant (`[attestors.<id>] reclaim`). No reclaim of a node whose live certificate
//!   names a TPM AK unless the result proves a TPM-held key again.
//! - **Placement**: tenant, pool and site agree between the token, the node and the result;
//!   an approval the attestor consumed was opened for this CSR and its operator's choices hold.
//! - **One machine, one node** ([`trusted_hardware_key`], [`hardware_key_admits`]).
//! - The pool's `joinAttestors` ([`pool_admits`]).
//!
//! Everything here is a pure function of the data JoinService read in the transaction, so each
//! rule is tested on its own.

use gatehouse_proto::{Claims, Role};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::refusal::Refusal;
use super::types::{Admission, LockedToken, NodeKey};
use crate::imports::TpmCertified;
use crate::store::{JoinRequestRow, NodeRole, NodeRow, PoolRow, TokenRole};

/// The binding kind of a TPM's endorsement key, which only the `tpm` attestor writes.
pub const TPM_EK_BINDING: &str = "tpm-ek";
/// The attestor that owns [`TPM_EK_BINDING`].
const TPM_ATTESTOR: &str = "tpm";
/// The certificate statement that names a TPM attestation key.
const TPM_AK_PREFIX: &str = gatehouse_proto::tpm::TPM_AK_STATEMENT_PREFIX;

/// The opened token the request carried.
#[derive(Debug, Clone, Copy)]
pub struct RequestToken<'a> {
    /// The token id.
    pub id: &'a str,
    /// The secret the agent sealed.
    pub secret: &'a [u8],
}

/// What JoinService read about the node a result names, besides its row.
#[derive(Debug, Clone, Default)]
pub struct NodeState {
    /// The kinds of the hardware identities bound to it.
    pub binding_kinds: Vec<String>,
    /// Whether one of its live certificates (current generation, neither revoked nor expired)
    /// carries a `urn:bc:tpm-ak:` statement: its key is TPM-held.
    pub tpm_bound: bool,
}

/// Everything the policy looks at.
pub struct Facts<'a> {
    /// The attestor that answered.
    pub attestor: &'a str,
    /// Its admission.
    pub result: &'a Admission,
    /// Tokens it locked, as read (before any use was spent).
    pub locked_tokens: &'a [LockedToken],
    /// Tokens it spent a use of, in order.
    pub consumed_tokens: &'a [String],
    /// TPM2_Certify verifications the host ran for it.
    pub tpm_certified: &'a [TpmCertified],
    /// The request's opened token, if it had one.
    pub request_token: Option<RequestToken<'a>>,
    /// The requested role.
    pub role: Role,
    /// The machine's claims (validated and normalised).
    pub claims: &'a Claims,
    /// SHA-256 of the round's CSR.
    pub csr_sha256: &'a [u8; 32],
    /// SHA-256 of the CSR's SubjectPublicKeyInfo.
    pub csr_spki_sha256: &'a [u8; 32],
    /// Database time of the round.
    pub now: i64,
    /// The node the result names, as read in the transaction (None if it names none, or if it
    /// names one that does not exist), and what else was read about it.
    pub node: Option<(&'a NodeRow, &'a NodeState)>,
    /// For a spent `provisioned` token: the node of the running workflow whose
    /// `userdata.render` step minted it, as JoinService read it in the transaction (never as
    /// the attestor said).
    pub minted_for: Option<&'a str>,
    /// Whether the operator's configuration (or a built-in's default) grants this attestor
    /// reclaim of nodes without a token.
    pub reclaim_granted: bool,
    /// The join requests the attestor consumed, as read after the call.
    pub approvals: &'a [JoinRequestRow],
}

/// Where the machine joins, once the policy accepts the result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// An existing node to re-key, or None for a new node.
    pub node_id: Option<String>,
    /// Its tenant.
    pub tenant_id: String,
    /// Its pool.
    pub pool_id: Option<String>,
    /// Its site.
    pub site_id: Option<String>,
    /// The token spent, if any.
    pub token_id: Option<String>,
}

/// Whether the attestor owns binding `kind`: `tpm-ek` is the `tpm` attestor's; every other
/// kind is namespaced `<attestor>:<kind>` by the attestor that writes it, so no attestor can
/// claim, or collide with, another's hardware identities.
pub fn owns_binding_kind(attestor: &str, kind: &str) -> bool {
    if kind == TPM_EK_BINDING {
        return attestor == TPM_ATTESTOR;
    }
    kind.strip_prefix(attestor)
        .and_then(|rest| rest.strip_prefix(':'))
        .is_some_and(|own| !own.is_empty())
}

/// Whether the call proved to the host that the CSR's key is TPM-held: a TPM2_Certify of that
/// key the host verified, by the AK the statement names when there is one.
fn proves_tpm_key(f: &Facts<'_>) -> bool {
    let ak = f
        .result
        .node_key_uri
        .as_deref()
        .map(gatehouse_proto::tpm::ak_name_from_statement);
    f.result.node_key == NodeKey::Tpm
        && f.tpm_certified.iter().any(|c| {
            c.key_spki_sha256 == *f.csr_spki_sha256
                && match &ak {
                    None => true,
                    Some(None) => false,
                    Some(Some(name)) => *name == c.ak_name,
                }
        })
}

/// Applies every rule; the first that fails refuses the join.
pub fn check(f: &Facts<'_>) -> Result<Placement, Refusal> {
    let result = f.result;
    let token = spent_token(f)?;

    // A statement renewal could not prove again, or a TPM-held key the host did not see
    // certified, never reaches a certificate or the audit.
    if let Some(uri) = &result.node_key_uri
        && gatehouse_proto::tpm::ak_name_from_statement(uri).is_none()
    {
        return Err(Refusal::NodeKeyStatement);
    }
    if (result.node_key == NodeKey::Tpm || result.node_key_uri.is_some()) && !proves_tpm_key(f) {
        return Err(Refusal::NodeKeyStatement);
    }
    if !result
        .bindings
        .iter()
        .all(|b| owns_binding_kind(f.attestor, &b.kind))
    {
        return Err(Refusal::BindingKind);
    }
    kinds_statement(result, f.role)?;

    if let Some(token) = token {
        if token.revoked {
            return Err(Refusal::Revoked);
        }
        if f.now >= token.expires_at {
            return Err(Refusal::Expired);
        }
        if !token_admits(token.role, f.role) {
            return Err(Refusal::WrongRole);
        }
        check_expect(token, result, f.claims)?;
    }

    let node = match (&result.node_id, f.node) {
        (Some(id), Some((node, state))) if node.id == *id => Some((node, state)),
        (Some(_), _) => return Err(Refusal::UnknownNode),
        (None, _) => None,
    };
    if let Some((node, state)) = node {
        if node.retired {
            return Err(Refusal::Retired);
        }
        if !same_role(node.role, f.role) {
            // A node keeps its role for life: a site never re-joins as a node, nor the reverse.
            return Err(Refusal::WrongRole);
        }
        match token {
            Some(token) => {
                if !token_reclaims(token, &node.id, f.minted_for) {
                    return Err(Refusal::Reclaim);
                }
            }
            None => {
                let owns_binding = state
                    .binding_kinds
                    .iter()
                    .any(|k| owns_binding_kind(f.attestor, k));
                if !owns_binding && !f.reclaim_granted {
                    return Err(Refusal::ReclaimNotAllowed);
                }
            }
        }
        if state.tpm_bound && !(proves_tpm_key(f) && result.node_key_uri.is_some()) {
            return Err(Refusal::NodeKeyDowngrade);
        }
    }

    let node = node.map(|(n, _)| n);
    let tenant_id = resolve(
        result.tenant_id.as_deref(),
        token.map(|t| t.tenant_id.as_str()),
        node.map(|n| n.tenant_id.as_str()),
    )
    .map_err(|()| Refusal::TenantMismatch)?
    .ok_or(Refusal::NoTenant)?;
    let pool_id = resolve(
        result.pool_id.as_deref(),
        token.and_then(|t| t.pool_id.as_deref()),
        node.and_then(|n| n.pool_id.as_deref()),
    )
    .map_err(|()| Refusal::PlacementMismatch)?;
    let site_id = resolve(
        result.site_id.as_deref(),
        token.and_then(|t| t.site_id.as_deref()),
        node.and_then(|n| n.site_id.as_deref()),
    )
    .map_err(|()| Refusal::PlacementMismatch)?;
    let placement = Placement {
        node_id: node.map(|n| n.id.clone()),
        tenant_id,
        pool_id,
        site_id,
        token_id: token.map(|t| t.id.clone()),
    };
    for approval in f.approvals {
        check_approval(approval, f.csr_sha256, &placement)?;
    }
    Ok(placement)
}

/// An approval admits only the CSR it was opened for, into what the operator chose: the
/// tenant always, the pool and the site where the operator set them.
fn check_approval(
    approval: &JoinRequestRow,
    csr_sha256: &[u8; 32],
    placement: &Placement,
) -> Result<(), Refusal> {
    let chosen = |operator: &Option<String>, placed: &Option<String>| {
        operator.is_none() || operator == placed
    };
    if approval.csr_sha256 != *csr_sha256
        || approval.tenant_id.as_deref() != Some(placement.tenant_id.as_str())
        || !chosen(&approval.pool_id, &placement.pool_id)
        || !chosen(&approval.site_id, &placement.site_id)
    {
        return Err(Refusal::ApprovalMismatch);
    }
    Ok(())
}

/// Whether a token lets its join re-key `node_id`: its `reclaim` flag, its `expect.nodeId`,
/// or, for a provisioned token (minted without `reclaim` by the workflow that deploys this
/// very node, seed: provisioned), that JoinService read the running workflow minted it for
/// that node, so an attestor cannot point a provisioned token at a node of its choosing.
pub fn token_reclaims(token: &LockedToken, node_id: &str, minted_for: Option<&str>) -> bool {
    token.reclaim
        || token.expect.node_id.as_deref() == Some(node_id)
        || (token.role == TokenRole::Provisioned && minted_for == Some(node_id))
}

/// The machine's trusted hardware key (seed: "one machine, one node"), or none. Only what
/// evidence backs counts, never a bare claim: `uuid:<product uuid>` when the spent token's
/// `expect.productUuid` bound the join to that machine (the operator's word, which [`check`]
/// has compared with the claim). A TPM's EK is not a key here: its `tpm-ek` binding already
/// admits one node only (`bound-elsewhere`).
///
/// A node keeps the key it first joined with; a reclaim of it fills the key in when it had
/// none. A ramdisk holds none: it is a short-lived, restricted identity of a machine that is
/// (or becomes) a node, and boots again as a new ramdisk.
pub fn trusted_hardware_key(token: Option<&LockedToken>, role: Role) -> Option<String> {
    if role == Role::Ramdisk {
        return None;
    }
    token
        .and_then(|t| t.expect.product_uuid.as_deref())
        .map(|uuid| format!("uuid:{}", uuid.to_ascii_lowercase()))
}

/// What to do about the live node that holds the machine's hardware key, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HardwareKey {
    /// Nobody else holds it: proceed as placed.
    Free,
    /// A join that named no node, of a machine another node holds the key of, with a token
    /// that allows reclaiming that node: re-key that node instead of creating another.
    ReclaimHolder(String),
}

/// One machine, one node: a join whose trusted hardware key another live node holds is
/// refused (`reclaim`) unless the token allows reclaiming that node.
pub fn hardware_key_admits(
    holder: Option<&str>,
    placement: &Placement,
    token: Option<&LockedToken>,
    minted_for: Option<&str>,
) -> Result<HardwareKey, Refusal> {
    match (holder, placement.node_id.as_deref()) {
        (None, _) => Ok(HardwareKey::Free),
        (Some(holder), Some(node)) if holder == node => Ok(HardwareKey::Free),
        (Some(holder), None) if token.is_some_and(|t| token_reclaims(t, holder, minted_for)) => {
            Ok(HardwareKey::ReclaimHolder(holder.to_owned()))
        }
        (Some(_), _) => Err(Refusal::Reclaim),
    }
}

/// The `urn:bc:kinds:` statement the certificate carries (seed: discovery): exactly a ramdisk
/// gets one, from the result's `allowed-kinds`, which must be a valid list. Renewal copies it
/// from the old certificate, so the restriction lasts as long as the identity.
pub fn kinds_statement(result: &Admission, role: Role) -> Result<Option<String>, Refusal> {
    match (&result.allowed_kinds, role) {
        (None, Role::Node | Role::Site) => Ok(None),
        (Some(kinds), Role::Ramdisk) => gatehouse_proto::kinds::statement(kinds)
            .map(Some)
            .ok_or(Refusal::AllowedKinds),
        _ => Err(Refusal::AllowedKinds),
    }
}

/// Whether a node's statements say its key is TPM-held.
pub fn names_tpm_ak(statements: &[String]) -> bool {
    statements.iter().any(|s| s.starts_with(TPM_AK_PREFIX))
}

/// The pool's `joinAttestors`: a pool that lists attestors admits only machines one of them
/// admitted; a pool without the list admits whichever attestor did; a pool that does not
/// exist admits nothing (`unknown-pool`). Checked after [`check`] placed the machine into a
/// pool, before any reclaim, binding or insert.
pub fn pool_admits(pool: Option<&PoolRow>, attestor: &str) -> Result<(), Refusal> {
    let pool = pool.ok_or(Refusal::UnknownPool)?;
    match pool.join_attestors.as_deref() {
        Some(listed) if !listed.iter().any(|a| a == attestor) => Err(Refusal::PoolAttestor),
        _ => Ok(()),
    }
}

/// The token this join spent, after checking the attestor's accounting and the token itself:
/// the result names a token exactly when the attestor spent one use of it, it is the request's
/// token, the request's secret opens it, and it had a use to spend (exactly one for the
/// single-use roles) when the attestor locked it.
fn spent_token<'a>(f: &Facts<'a>) -> Result<Option<&'a LockedToken>, Refusal> {
    let named = match (&f.result.token_id, f.consumed_tokens) {
        (None, []) => return Ok(None),
        (None, _) => return Err(Refusal::TokenAccounting),
        (Some(_), []) => return Err(Refusal::TokenNotConsumed),
        (Some(named), [spent]) if named == spent => named,
        (Some(_), _) => return Err(Refusal::TokenAccounting),
    };
    let request = f
        .request_token
        .filter(|t| t.id == named)
        .ok_or(Refusal::TokenAccounting)?;
    let token = f
        .locked_tokens
        .iter()
        .find(|t| t.id == *named)
        .ok_or(Refusal::TokenAccounting)?;
    if !opens(token, request.secret) {
        return Err(Refusal::TokenSecret);
    }
    if token.uses_left == 0 {
        return Err(Refusal::NoUsesLeft);
    }
    if matches!(token.role, TokenRole::Provisioned | TokenRole::Discovery) && token.uses_left != 1 {
        return Err(Refusal::NotSingleUse);
    }
    Ok(Some(token))
}

/// Whether the SHA-256 of `secret` is what the token's row holds, compared in constant time.
fn opens(token: &LockedToken, secret: &[u8]) -> bool {
    let secret: [u8; 32] = Sha256::digest(secret).into();
    token
        .secret_sha256
        .is_some_and(|stored| bool::from(stored.ct_eq(&secret)))
}

/// The token a round would spend, as far as the attestor's accounting and the request's secret
/// tell before the locked phase: the one token the attestor spent, when it is the request's own
/// and the request's secret opens it as the attestor read it. A round that spent anything else
/// is refused by [`check`] ([`spent_token`]) and spends nothing, so this is the only token whose
/// spends JoinService queues (`super::spend_gate`): no attestor, and no request that does not
/// hold a token's secret, can make a join wait in that token's queue.
pub fn token_to_spend<'a>(
    consumed: &'a [String],
    request: Option<RequestToken<'_>>,
    read: impl IntoIterator<Item = LockedToken>,
) -> Option<&'a str> {
    let [spent] = consumed else { return None };
    let request = request.filter(|t| t.id == spent)?;
    read.into_iter()
        .find(|t| t.id == *spent)
        .filter(|t| opens(t, request.secret))?;
    Some(spent)
}

/// Whether a node of `node` role may join as `role` (a lessee's node-tenant node re-joins as
/// `node`).
fn same_role(node: NodeRole, role: Role) -> bool {
    matches!(
        (node, role),
        (NodeRole::Node | NodeRole::NodeTenant, Role::Node)
            | (NodeRole::Site, Role::Site)
            | (NodeRole::Ramdisk, Role::Ramdisk)
    )
}

/// Which join roles a token role admits (seed: node tokens admit node, site tokens admit site;
/// provisioned tokens admit the installed node; discovery tokens admit the ramdisk).
fn token_admits(token: TokenRole, role: Role) -> bool {
    matches!(
        (token, role),
        (TokenRole::Node, Role::Node)
            | (TokenRole::Site, Role::Site)
            | (TokenRole::Provisioned, Role::Node)
            | (TokenRole::Discovery, Role::Ramdisk)
    )
}

fn check_expect(token: &LockedToken, result: &Admission, claims: &Claims) -> Result<(), Refusal> {
    let expect = &token.expect;
    if let Some(uuid) = &expect.product_uuid
        && claims.product_uuid.as_deref().map(str::to_ascii_lowercase)
            != Some(uuid.to_ascii_lowercase())
    {
        return Err(Refusal::ExpectProductUuid);
    }
    if let Some(mac) = &expect.mac
        && !claims.macs.iter().any(|m| m.eq_ignore_ascii_case(mac))
    {
        return Err(Refusal::ExpectMac);
    }
    if let Some(node) = &expect.node_id
        && result.node_id.as_deref() != Some(node.as_str())
    {
        return Err(Refusal::ExpectNode);
    }
    Ok(())
}

/// One placement field: every source that has a value must agree; the result is that value.
fn resolve(
    result: Option<&str>,
    token: Option<&str>,
    node: Option<&str>,
) -> Result<Option<String>, ()> {
    let mut value: Option<&str> = None;
    for v in [token, node, result].into_iter().flatten() {
        match value {
            Some(existing) if existing != v => return Err(()),
            _ => value = Some(v),
        }
    }
    Ok(value.map(str::to_owned))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::join::types::Binding;
    use crate::store::{JoinRequestState, TokenExpect};

    const SECRET: &[u8] = b"the token's secret";
    const CSR: [u8; 32] = [7; 32];
    const SPKI: [u8; 32] = [9; 32];
    const AK: &str =
        "urn:bc:tpm-ak:sha256:abababababababababababababababababababababababababababababababab";

    fn token() -> LockedToken {
        LockedToken {
            id: "tok_a".into(),
            role: TokenRole::Node,
            secret_sha256: Some(Sha256::digest(SECRET).into()),
            tenant_id: "root".into(),
            pool_id: None,
            site_id: None,
            expires_at: 2_000,
            revoked: false,
            uses_left: 1,
            expect: TokenExpect::default(),
            reclaim: false,
        }
    }

    fn result() -> Admission {
        Admission {
            token_id: Some("tok_a".into()),
            ..Admission::default()
        }
    }

    fn node(tenant: &str) -> NodeRow {
        NodeRow {
            id: "node_x".into(),
            tenant_id: tenant.into(),
            pool_id: None,
            site_id: None,
            role: NodeRole::Node,
            retired: false,
            cordoned: false,
            identity_generation: 1,
            hardware_key: None,
            created_at: 0,
            updated_at: 0,
            deleted_at: None,
        }
    }

    /// The facts of a clean join by attestor `join-token` with the request's token `tok_a`.
    struct World {
        attestor: &'static str,
        result: Admission,
        tokens: Vec<LockedToken>,
        consumed: Vec<String>,
        certified: Vec<TpmCertified>,
        request_token: Option<(&'static str, &'static [u8])>,
        claims: Claims,
        node: Option<(NodeRow, NodeState)>,
        minted_for: Option<&'static str>,
        reclaim_granted: bool,
        approvals: Vec<JoinRequestRow>,
        role: Role,
    }

    impl World {
        fn new() -> Self {
            Self {
                attestor: "join-token",
                result: result(),
                tokens: vec![token()],
                consumed: vec!["tok_a".into()],
                certified: vec![],
                request_token: Some(("tok_a", SECRET)),
                claims: Claims::default(),
                node: None,
                minted_for: None,
                reclaim_granted: false,
                approvals: vec![],
                role: Role::Node,
            }
        }

        /// The token [`token_to_spend`] would queue this round's spend for.
        fn to_spend(&self) -> Option<&str> {
            token_to_spend(
                &self.consumed,
                self.request_token
                    .map(|(id, secret)| RequestToken { id, secret }),
                self.tokens.iter().cloned(),
            )
        }

        fn tokenless(attestor: &'static str) -> Self {
            Self {
                attestor,
                result: Admission {
                    tenant_id: Some("root".into()),
                    ..Admission::default()
                },
                tokens: vec![],
                consumed: vec![],
                request_token: None,
                ..Self::new()
            }
        }

        fn check(&self) -> Result<Placement, Refusal> {
            check(&Facts {
                attestor: self.attestor,
                result: &self.result,
                locked_tokens: &self.tokens,
                consumed_tokens: &self.consumed,
                tpm_certified: &self.certified,
                request_token: self
                    .request_token
                    .map(|(id, secret)| RequestToken { id, secret }),
                role: self.role,
                claims: &self.claims,
                csr_sha256: &CSR,
                csr_spki_sha256: &SPKI,
                now: 1_000,
                node: self.node.as_ref().map(|(n, s)| (n, s)),
                minted_for: self.minted_for,
                reclaim_granted: self.reclaim_granted,
                approvals: &self.approvals,
            })
        }

        fn token(mut self, f: impl FnOnce(&mut LockedToken)) -> Self {
            f(&mut self.tokens[0]);
            self
        }

        fn naming(mut self, node: NodeRow, state: NodeState) -> Self {
            self.result.node_id = Some(node.id.clone());
            self.node = Some((node, state));
            self
        }
    }

    fn certified() -> TpmCertified {
        TpmCertified {
            ak_name: gatehouse_proto::tpm::ak_name_from_statement(AK).unwrap(),
            key_spki_sha256: SPKI,
        }
    }

    #[test]
    fn a_clean_token_join_is_placed_in_the_tokens_tenant() {
        assert_eq!(
            World::new().check().unwrap(),
            Placement {
                node_id: None,
                tenant_id: "root".into(),
                pool_id: None,
                site_id: None,
                token_id: Some("tok_a".into())
            }
        );
    }

    #[test]
    fn token_accounting() {
        let mut unspent = World::new();
        unspent.consumed.clear();
        assert_eq!(unspent.check(), Err(Refusal::TokenNotConsumed));
        let mut silent = World::new();
        silent.result.token_id = None;
        assert_eq!(silent.check(), Err(Refusal::TokenAccounting));
        let mut twice = World::new();
        twice.consumed.push("tok_a".into());
        assert_eq!(twice.check(), Err(Refusal::TokenAccounting));
        let mut other = World::new();
        other.request_token = Some(("tok_b", SECRET));
        assert_eq!(other.check(), Err(Refusal::TokenAccounting));
        let mut none = World::new();
        none.request_token = None;
        assert_eq!(none.check(), Err(Refusal::TokenAccounting));
    }

    /// A join queues for a token's spend (`spend_gate`) only when the policy's token checks
    /// could pass: an attestor spending another token, two, or none, and a request naming a
    /// token without its secret, take no pass of it.
    #[test]
    fn only_a_spend_the_policy_could_admit_waits_in_its_tokens_queue() {
        let honest = World::new();
        assert_eq!(honest.to_spend(), Some("tok_a"));
        assert!(honest.check().is_ok());
        let mut another = World::new();
        another.consumed = vec!["tok_b".into()];
        let mut two = World::new();
        two.consumed.push("tok_b".into());
        let mut none = World::new();
        none.consumed.clear();
        let mut guessed = World::new();
        guessed.request_token = Some(("tok_a", b"guessed"));
        let mut no_request_token = World::new();
        no_request_token.request_token = None;
        let unread = World {
            tokens: vec![],
            ..World::new()
        };
        let corrupt = World::new().token(|t| t.secret_sha256 = None);
        for (what, world) in [
            ("another token", another),
            ("two tokens", two),
            ("none", none),
            ("a guessed secret", guessed),
            ("no token in the request", no_request_token),
            ("a token the attestor did not read", unread),
            ("a row without a secret", corrupt),
        ] {
            assert_eq!(world.to_spend(), None, "{what}");
            assert!(world.check().is_err(), "{what}");
        }
    }

    #[test]
    fn the_host_checks_the_secret_and_the_uses_whatever_the_attestor_said() {
        // Admitting on a token id alone (ids are in events, audits and `token list`).
        let mut by_id = World::new();
        by_id.request_token = Some(("tok_a", b"guessed"));
        assert_eq!(by_id.check(), Err(Refusal::TokenSecret));
        let corrupt = World::new().token(|t| t.secret_sha256 = None);
        assert_eq!(corrupt.check(), Err(Refusal::TokenSecret));
        let spent = World::new().token(|t| t.uses_left = 0);
        assert_eq!(spent.check(), Err(Refusal::NoUsesLeft));
        for role in [TokenRole::Provisioned, TokenRole::Discovery] {
            let multi = World::new().token(|t| {
                t.role = role;
                t.uses_left = 2;
            });
            assert_eq!(multi.check(), Err(Refusal::NotSingleUse), "{role}");
        }
        assert!(World::new().token(|t| t.uses_left = 5).check().is_ok());
    }

    #[test]
    fn token_state_is_enforced_whatever_the_attestor_said() {
        let revoked = World::new().token(|t| t.revoked = true);
        assert_eq!(revoked.check(), Err(Refusal::Revoked));
        let expired = World::new().token(|t| t.expires_at = 1_000);
        assert_eq!(expired.check(), Err(Refusal::Expired));
        let site = World::new().token(|t| t.role = TokenRole::Site);
        assert_eq!(site.check(), Err(Refusal::WrongRole));
    }

    #[test]
    fn expect_binding() {
        let bound = || {
            let mut w = World::new().token(|t| {
                t.expect.product_uuid = Some("AA-BB".into());
                t.expect.mac = Some("aa:bb:cc:dd:ee:ff".into());
            });
            w.claims = Claims {
                macs: vec!["AA:BB:CC:DD:EE:FF".into()],
                product_uuid: Some("aa-bb".into()),
            };
            w
        };
        assert!(bound().check().is_ok());
        let mut wrong_uuid = bound();
        wrong_uuid.claims.product_uuid = Some("cc".into());
        assert_eq!(wrong_uuid.check(), Err(Refusal::ExpectProductUuid));
        let mut no_mac = bound();
        no_mac.claims.macs.clear();
        assert_eq!(no_mac.check(), Err(Refusal::ExpectMac));
        let elsewhere = bound().token(|t| t.expect.node_id = Some("node_x".into()));
        assert_eq!(elsewhere.check(), Err(Refusal::ExpectNode));
    }

    #[test]
    fn another_tenants_admission_is_refused() {
        let mut w = World::new();
        w.result.tenant_id = Some("other-tenant".into());
        assert_eq!(w.check(), Err(Refusal::TenantMismatch));
        let w = World::new()
            .token(|t| t.reclaim = true)
            .naming(node("other"), NodeState::default());
        assert_eq!(w.check(), Err(Refusal::TenantMismatch));
    }

    #[test]
    fn re_keying_a_node_needs_reclaim_and_a_live_node() {
        let w = World::new().naming(node("root"), NodeState::default());
        assert_eq!(w.check(), Err(Refusal::Reclaim));
        let mut missing = World::new();
        missing.result.node_id = Some("node_x".into());
        assert_eq!(missing.check(), Err(Refusal::UnknownNode));
        let reclaim = || {
            World::new()
                .token(|t| t.reclaim = true)
                .naming(node("root"), NodeState::default())
        };
        assert_eq!(
            reclaim().check().unwrap().node_id.as_deref(),
            Some("node_x")
        );
        let mut retired = reclaim();
        if let Some((n, _)) = retired.node.as_mut() {
            n.retired = true;
        }
        assert_eq!(retired.check(), Err(Refusal::Retired));
        // A site is never re-keyed as a node.
        let mut site = reclaim();
        if let Some((n, _)) = site.node.as_mut() {
            n.role = NodeRole::Site;
        }
        assert_eq!(site.check(), Err(Refusal::WrongRole));
        // A lessee's node-tenant node re-joins as a node.
        let mut lessee = reclaim();
        if let Some((n, _)) = lessee.node.as_mut() {
            n.role = NodeRole::NodeTenant;
        }
        assert!(lessee.check().is_ok());
    }

    #[test]
    fn a_tokenless_reclaim_needs_an_owned_binding_or_the_operators_grant() {
        let any = World::tokenless("hostile").naming(node("root"), NodeState::default());
        assert_eq!(any.check(), Err(Refusal::ReclaimNotAllowed));
        let mut granted = World::tokenless("hostile").naming(node("root"), NodeState::default());
        granted.reclaim_granted = true;
        assert!(granted.check().is_ok());
        let own = NodeState {
            binding_kinds: vec!["hostile:serial".into()],
            tpm_bound: false,
        };
        assert!(
            World::tokenless("hostile")
                .naming(node("root"), own.clone())
                .check()
                .is_ok()
        );
        // Another attestor's binding is no proof.
        assert_eq!(
            World::tokenless("other").naming(node("root"), own).check(),
            Err(Refusal::ReclaimNotAllowed)
        );
        let ek = NodeState {
            binding_kinds: vec![TPM_EK_BINDING.into()],
            tpm_bound: false,
        };
        assert!(
            World::tokenless("tpm")
                .naming(node("root"), ek.clone())
                .check()
                .is_ok()
        );
        assert_eq!(
            World::tokenless("hostile").naming(node("root"), ek).check(),
            Err(Refusal::ReclaimNotAllowed)
        );
    }

    #[test]
    fn binding_kinds_belong_to_their_attestor() {
        assert!(owns_binding_kind("tpm", "tpm-ek"));
        assert!(!owns_binding_kind("hostile", "tpm-ek"));
        assert!(owns_binding_kind("hostile", "hostile:serial"));
        assert!(!owns_binding_kind("hostile", "hostile:"));
        assert!(!owns_binding_kind("hostile", "hostile-2:serial"));
        assert!(!owns_binding_kind("hostile", "serial"));
        assert!(!owns_binding_kind("tpm", "x509pop:serial"));
        let mut w = World::tokenless("hostile");
        w.result.bindings = vec![Binding {
            kind: "tpm-ek".into(),
            value: "ab".into(),
        }];
        assert_eq!(w.check(), Err(Refusal::BindingKind));
        w.result.bindings[0].kind = "hostile:ek".into();
        assert!(w.check().is_ok());
    }

    #[test]
    fn a_tpm_bound_node_is_re_keyed_only_by_a_proved_tpm_key() {
        let bound = NodeState {
            binding_kinds: vec![TPM_EK_BINDING.into()],
            tpm_bound: true,
        };
        let mut unattested = World::tokenless("tpm").naming(node("root"), bound.clone());
        assert_eq!(unattested.check(), Err(Refusal::NodeKeyDowngrade));
        // A token reclaim is no way around it either.
        let token = World::new()
            .token(|t| t.reclaim = true)
            .naming(node("root"), bound.clone());
        assert_eq!(token.check(), Err(Refusal::NodeKeyDowngrade));
        unattested.result.node_key = NodeKey::Tpm;
        unattested.result.node_key_uri = Some(AK.into());
        unattested.certified = vec![certified()];
        assert!(unattested.check().is_ok());
    }

    #[test]
    fn a_tpm_key_needs_a_certification_the_host_verified() {
        let mut w = World::tokenless("tpm");
        w.result.node_key = NodeKey::Tpm;
        w.result.node_key_uri = Some(AK.into());
        // The attestor's word alone.
        assert_eq!(w.check(), Err(Refusal::NodeKeyStatement));
        // Certified, but another key than the CSR's.
        w.certified = vec![TpmCertified {
            key_spki_sha256: [1; 32],
            ..certified()
        }];
        assert_eq!(w.check(), Err(Refusal::NodeKeyStatement));
        // The CSR's key, but by another AK than the statement names.
        w.certified = vec![TpmCertified {
            ak_name: vec![0, 0x0b, 1],
            ..certified()
        }];
        assert_eq!(w.check(), Err(Refusal::NodeKeyStatement));
        w.certified = vec![certified()];
        assert!(w.check().is_ok());
        // A statement without `node-key: tpm`.
        w.result.node_key = NodeKey::Unattested;
        assert_eq!(w.check(), Err(Refusal::NodeKeyStatement));
    }

    #[test]
    fn only_well_formed_tpm_ak_statements_pass() {
        let mut w = World::tokenless("tpm");
        w.result.node_key = NodeKey::Tpm;
        w.certified = vec![certified()];
        for bad in [
            format!("urn:bc:tpm-ak:sha256:{}", "AB".repeat(32)),
            format!("urn:bc:tpm-ak:sha1:{}", "ab".repeat(20)),
            "urn:bc:tpm-ak:sha256:ab".to_owned(),
            "urn:bc:other:x".to_owned(),
            format!("{AK}:extra"),
        ] {
            w.result.node_key_uri = Some(bad.clone());
            assert_eq!(w.check(), Err(Refusal::NodeKeyStatement), "{bad}");
        }
    }

    #[test]
    fn a_provisioned_token_re_keys_only_the_node_its_running_workflow_provisions() {
        let provisioned = |minted_for| {
            let mut w = World::new()
                .token(|t| t.role = TokenRole::Provisioned)
                .naming(node("root"), NodeState::default());
            w.minted_for = minted_for;
            w
        };
        assert_eq!(
            provisioned(Some("node_x"))
                .check()
                .unwrap()
                .node_id
                .as_deref(),
            Some("node_x")
        );
        assert_eq!(provisioned(None).check(), Err(Refusal::Reclaim));
        assert_eq!(provisioned(Some("node_y")).check(), Err(Refusal::Reclaim));
        let mut node_token = World::new().naming(node("root"), NodeState::default());
        node_token.minted_for = Some("node_x");
        assert_eq!(node_token.check(), Err(Refusal::Reclaim));
    }

    fn approval() -> JoinRequestRow {
        JoinRequestRow {
            id: "jr_1".into(),
            attestor: "approval".into(),
            subject: "uuid:1".into(),
            csr_sha256: CSR,
            details: "{}".into(),
            state: JoinRequestState::Used,
            tenant_id: Some("root".into()),
            pool_id: Some("gpu".into()),
            site_id: None,
            created_at: 0,
            decided_at: Some(0),
            expires_at: 10_000,
        }
    }

    #[test]
    fn an_approval_admits_its_csr_into_the_operators_placement() {
        let mut w = World::new().token(|t| t.pool_id = Some("gpu".into()));
        w.approvals = vec![approval()];
        assert!(w.check().is_ok());
        w.approvals[0].csr_sha256 = [8; 32];
        assert_eq!(w.check(), Err(Refusal::ApprovalMismatch));
        w.approvals[0] = approval();
        w.approvals[0].pool_id = Some("cpu".into());
        assert_eq!(w.check(), Err(Refusal::ApprovalMismatch));
        w.approvals[0] = approval();
        w.approvals[0].tenant_id = Some("other".into());
        assert_eq!(w.check(), Err(Refusal::ApprovalMismatch));
    }

    #[test]
    fn one_machine_one_node() {
        let uuid = World::new().token(|t| t.expect.product_uuid = Some("AA-BB".into()));
        let key = trusted_hardware_key(uuid.tokens.first(), Role::Node);
        assert_eq!(key.as_deref(), Some("uuid:aa-bb"));
        assert_eq!(
            trusted_hardware_key(uuid.tokens.first(), Role::Ramdisk),
            None
        );
        // A bare claim is no key.
        let mut claim = World::new();
        claim.claims.product_uuid = Some("aa-bb".into());
        assert_eq!(trusted_hardware_key(claim.tokens.first(), Role::Node), None);
        // A TPM's EK is no hardware key (its binding is unique already).
        assert_eq!(trusted_hardware_key(None, Role::Node), None);

        let new = Placement {
            node_id: None,
            tenant_id: "root".into(),
            pool_id: None,
            site_id: None,
            token_id: None,
        };
        let t = token();
        assert_eq!(
            hardware_key_admits(None, &new, Some(&t), None),
            Ok(HardwareKey::Free)
        );
        assert_eq!(
            hardware_key_admits(Some("node_x"), &new, Some(&t), None),
            Err(Refusal::Reclaim)
        );
        assert_eq!(
            hardware_key_admits(Some("node_x"), &new, None, None),
            Err(Refusal::Reclaim)
        );
        let mut reclaim = token();
        reclaim.reclaim = true;
        assert_eq!(
            hardware_key_admits(Some("node_x"), &new, Some(&reclaim), None),
            Ok(HardwareKey::ReclaimHolder("node_x".into()))
        );
        let rekey = Placement {
            node_id: Some("node_y".into()),
            ..new.clone()
        };
        assert_eq!(
            hardware_key_admits(Some("node_x"), &rekey, Some(&reclaim), None),
            Err(Refusal::Reclaim)
        );
        assert_eq!(
            hardware_key_admits(Some("node_y"), &rekey, None, None),
            Ok(HardwareKey::Free)
        );
    }

    fn pool(join_attestors: Option<&[&str]>) -> PoolRow {
        PoolRow {
            tenant_id: "root".into(),
            id: "gpu".into(),
            join_attestors: join_attestors.map(|l| l.iter().map(|a| (*a).to_owned()).collect()),
            owner: Some("lessee-1".into()),
        }
    }

    #[test]
    fn a_pool_admits_only_the_attestors_it_lists() {
        assert_eq!(pool_admits(None, "join-token"), Err(Refusal::UnknownPool));
        assert_eq!(pool_admits(Some(&pool(None)), "join-token"), Ok(()));
        let tpm_only = pool(Some(&["tpm"]));
        assert_eq!(
            pool_admits(Some(&tpm_only), "join-token"),
            Err(Refusal::PoolAttestor)
        );
        assert_eq!(pool_admits(Some(&tpm_only), "tpm"), Ok(()));
        let both = pool(Some(&["join-token", "x509pop"]));
        assert_eq!(pool_admits(Some(&both), "x509pop"), Ok(()));
        assert_eq!(pool_admits(Some(&both), "join-token"), Ok(()));
        // Ids compare exactly: no case folding, no prefixes.
        assert_eq!(
            pool_admits(Some(&both), "X509POP"),
            Err(Refusal::PoolAttestor)
        );
        assert_eq!(
            pool_admits(Some(&pool(Some(&["x509pop"]))), "x509"),
            Err(Refusal::PoolAttestor)
        );
    }

    #[test]
    fn tokenless_results_need_a_tenant() {
        let mut w = World::tokenless("x509pop");
        w.result.tenant_id = None;
        assert_eq!(w.check(), Err(Refusal::NoTenant));
        w.result.tenant_id = Some("t1".into());
        assert_eq!(w.check().unwrap().tenant_id, "t1");
    }

    #[test]
    fn exactly_ramdisks_carry_kinds() {
        let kinds: Vec<String> = ["disk.wipe", "deploy.*"].map(String::from).to_vec();
        let mut r = result();
        assert_eq!(kinds_statement(&r, Role::Node), Ok(None));
        assert_eq!(kinds_statement(&r, Role::Site), Ok(None));
        // An unrestricted ramdisk certificate never exists.
        assert_eq!(
            kinds_statement(&r, Role::Ramdisk),
            Err(Refusal::AllowedKinds)
        );
        r.allowed_kinds = Some(kinds);
        assert_eq!(
            kinds_statement(&r, Role::Ramdisk),
            Ok(Some("urn:bc:kinds:disk.wipe,deploy.*".into()))
        );
        assert_eq!(kinds_statement(&r, Role::Node), Err(Refusal::AllowedKinds));
        let mut w = World::new();
        w.result = r.clone();
        assert_eq!(w.check(), Err(Refusal::AllowedKinds));
        for bad in [vec![], vec!["*".to_owned()], vec!["a,b".to_owned()]] {
            r.allowed_kinds = Some(bad);
            assert_eq!(
                kinds_statement(&r, Role::Ramdisk),
                Err(Refusal::AllowedKinds)
            );
        }
    }
}
