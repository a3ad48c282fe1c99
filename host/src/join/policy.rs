//! What JoinService enforces after an attestor admits a machine, whichever attestor it is.
//!
//! The attestor decides *who* the machine is; this module decides whether that answer may
//! stand: that a token the attestor spent is the request's token and was spent exactly once,
//! that the token is live and of a role that admits the requested role, the token's `expect`
//! binding and `reclaim` flag, tenant/pool/site consistency with the token and the node, that
//! no certificate statement is written that renewal could not prove again, and the pool's
//! `joinAttestors` ([`pool_admits`]).
//!
//! Everything here is a pure function of the data JoinService read in the transaction, so each
//! rule is tested on its own.

use gatehouse_proto::{Claims, Role};

use crate::imports::Effects;
use crate::runtime::bindings::transaction::{Node, Token};
use crate::runtime::bindings::types::{AttestationResult, JoinRole, NodeKeyAttestation, TokenRole};
use crate::store::PoolRow;

/// Why JoinService overrode an admission. Each becomes the refusal reason in the event and the
/// audit row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyRefusal {
    /// The attestor spent a token but named another (or none) in its result, spent more than
    /// one use, or spent one that is not the request's.
    #[error("token-accounting")]
    TokenAccounting,
    /// The result names a token the attestor did not spend.
    #[error("token-not-consumed")]
    TokenNotConsumed,
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
    /// A token join would re-key an existing node without the token's `reclaim` flag.
    #[error("reclaim")]
    Reclaim,
    /// The result asks for a certificate statement renewal cannot prove again.
    #[error("node-key-statement")]
    NodeKeyStatement,
    /// The result carries command kinds for a role other than ramdisk, kinds that are not a
    /// valid list (`gatehouse_proto::kinds`), or none for a ramdisk: a ramdisk certificate is
    /// always restricted, and only a ramdisk certificate is.
    #[error("allowed-kinds")]
    AllowedKinds,
    /// The machine's pool lists the attestors that may admit into it (`joinAttestors`), and
    /// the round's attestor is not one of them.
    #[error("pool-attestor")]
    PoolAttestor,
}

impl PolicyRefusal {
    /// The stable reason code.
    pub fn reason(self) -> String {
        self.to_string()
    }
}

/// Everything the policy looks at.
pub struct Facts<'a> {
    /// The attestor's result.
    pub result: &'a AttestationResult,
    /// What the attestor did through the transaction.
    pub effects: &'a Effects,
    /// The id of the request's opened token, if it had one.
    pub request_token: Option<&'a str>,
    /// The requested role.
    pub role: Role,
    /// The machine's claims.
    pub claims: &'a Claims,
    /// Database time of the round.
    pub now: i64,
    /// The node the result names, as read in the transaction (None if it names none, or if it
    /// names one that does not exist).
    pub node: Option<&'a Node>,
    /// For a spent `provisioned` token: the node of the running workflow whose
    /// `userdata.render` step minted it, as JoinService read it in the transaction (never as
    /// the attestor said).
    pub minted_for: Option<&'a str>,
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

/// Whether renewal can prove `statement` again, so it may go into a certificate: only a
/// well-formed `urn:bc:tpm-ak:<nameAlg>:<digest>` (renewal checks a TPM key attestation by
/// that AK) of a join whose node key the attestor found certified.
fn renewal_proves(statement: &str, node_key: NodeKeyAttestation) -> bool {
    node_key == NodeKeyAttestation::Tpm
        && gatehouse_proto::tpm::ak_name_from_statement(statement).is_some()
}

/// Applies every rule; the first that fails refuses the join.
pub fn check(f: &Facts<'_>) -> Result<Placement, PolicyRefusal> {
    let result = f.result;
    let token = spent_token(f)?;

    if let Some(uri) = &result.node_key_uri
        && !renewal_proves(uri, result.node_key)
    {
        return Err(PolicyRefusal::NodeKeyStatement);
    }
    kinds_statement(result, f.role)?;

    if let Some(token) = token {
        if token.revoked {
            return Err(PolicyRefusal::Revoked);
        }
        if f.now >= token.expires_at {
            return Err(PolicyRefusal::Expired);
        }
        if !token_admits(token.role, f.role) {
            return Err(PolicyRefusal::WrongRole);
        }
        check_expect(token, result, f.claims)?;
    }

    let node = match (&result.node_id, f.node) {
        (Some(id), Some(node)) if node.id == *id => Some(node),
        (Some(_), _) => return Err(PolicyRefusal::UnknownNode),
        (None, _) => None,
    };
    if let Some(node) = node {
        if node.retired {
            return Err(PolicyRefusal::Retired);
        }
        if node.role != join_role(f.role) {
            // A node keeps its role for life: a site never re-joins as a node, nor the reverse.
            return Err(PolicyRefusal::WrongRole);
        }
        if let Some(token) = token {
            let expected = token.expect.node_id.as_deref() == Some(node.id.as_str());
            // A provisioned token is minted, without `reclaim`, by the workflow that deploys
            // this very node, to re-key it once the installed system joins (seed: provisioned).
            // It re-keys that node and no other: the workflow is read by JoinService, so an
            // attestor cannot point a provisioned token at a node of its choosing.
            let provisioning =
                token.role == TokenRole::Provisioned && f.minted_for == Some(node.id.as_str());
            if !token.reclaim && !expected && !provisioning {
                return Err(PolicyRefusal::Reclaim);
            }
        }
    }

    let tenant_id = resolve(
        result.tenant_id.as_deref(),
        token.map(|t| t.tenant_id.as_str()),
        node.map(|n| n.tenant_id.as_str()),
    )
    .map_err(|()| PolicyRefusal::TenantMismatch)?
    .ok_or(PolicyRefusal::NoTenant)?;
    let pool_id = resolve(
        result.pool_id.as_deref(),
        token.and_then(|t| t.pool_id.as_deref()),
        node.and_then(|n| n.pool_id.as_deref()),
    )
    .map_err(|()| PolicyRefusal::PlacementMismatch)?;
    let site_id = resolve(
        result.site_id.as_deref(),
        token.and_then(|t| t.site_id.as_deref()),
        node.and_then(|n| n.site_id.as_deref()),
    )
    .map_err(|()| PolicyRefusal::PlacementMismatch)?;

    Ok(Placement {
        node_id: node.map(|n| n.id.clone()),
        tenant_id,
        pool_id,
        site_id,
        token_id: token.map(|t| t.id.clone()),
    })
}

/// The `urn:bc:kinds:` statement the certificate carries (seed: discovery): exactly a ramdisk
/// gets one, from the result's `allowed-kinds`, which must be a valid list. Renewal copies it
/// from the old certificate, so the restriction lasts as long as the identity.
pub fn kinds_statement(
    result: &AttestationResult,
    role: Role,
) -> Result<Option<String>, PolicyRefusal> {
    match (&result.allowed_kinds, role) {
        (None, Role::Node | Role::Site) => Ok(None),
        (Some(kinds), Role::Ramdisk) => gatehouse_proto::kinds::statement(kinds)
            .map(Some)
            .ok_or(PolicyRefusal::AllowedKinds),
        _ => Err(PolicyRefusal::AllowedKinds),
    }
}

/// The pool's `joinAttestors`: a pool that lists attestors admits only machines one of them
/// admitted; a pool without the list (or no pool) admits whichever attestor did. Checked after
/// [`check`] placed the machine, before any reclaim, binding or insert.
pub fn pool_admits(pool: Option<&PoolRow>, attestor: &str) -> Result<(), PolicyRefusal> {
    match pool.and_then(|p| p.join_attestors.as_deref()) {
        Some(listed) if !listed.iter().any(|a| a == attestor) => Err(PolicyRefusal::PoolAttestor),
        _ => Ok(()),
    }
}

/// The token this join spent, after checking the attestor's accounting: the result names a
/// token exactly when the attestor spent one use of it, and it is the request's token.
fn spent_token<'a>(f: &Facts<'a>) -> Result<Option<&'a Token>, PolicyRefusal> {
    let consumed = &f.effects.consumed_tokens;
    match (&f.result.token_id, consumed.as_slice()) {
        (None, []) => Ok(None),
        (None, _) => Err(PolicyRefusal::TokenAccounting),
        (Some(_), []) => Err(PolicyRefusal::TokenNotConsumed),
        (Some(named), [spent]) if named == spent && f.request_token == Some(named.as_str()) => f
            .effects
            .locked_tokens
            .iter()
            .find(|t| t.id == *named)
            .map(Some)
            .ok_or(PolicyRefusal::TokenAccounting),
        (Some(_), _) => Err(PolicyRefusal::TokenAccounting),
    }
}

fn join_role(role: Role) -> JoinRole {
    match role {
        Role::Node => JoinRole::Node,
        Role::Site => JoinRole::Site,
        Role::Ramdisk => JoinRole::Ramdisk,
    }
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

fn check_expect(
    token: &Token,
    result: &AttestationResult,
    claims: &Claims,
) -> Result<(), PolicyRefusal> {
    let expect = &token.expect;
    if let Some(uuid) = &expect.product_uuid
        && claims.product_uuid.as_deref().map(str::to_ascii_lowercase)
            != Some(uuid.to_ascii_lowercase())
    {
        return Err(PolicyRefusal::ExpectProductUuid);
    }
    if let Some(mac) = &expect.mac
        && !claims.macs.iter().any(|m| m.eq_ignore_ascii_case(mac))
    {
        return Err(PolicyRefusal::ExpectMac);
    }
    if let Some(node) = &expect.node_id
        && result.node_id.as_deref() != Some(node.as_str())
    {
        return Err(PolicyRefusal::ExpectNode);
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
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::runtime::bindings::transaction::TokenExpect;
    use crate::runtime::bindings::types::{JoinRole, NodeKeyAttestation};

    fn token() -> Token {
        Token {
            id: "tok_a".into(),
            role: TokenRole::Node,
            secret_sha256: vec![0; 32],
            tenant_id: "root".into(),
            pool_id: None,
            site_id: None,
            expires_at: 2_000,
            revoked: false,
            uses_left: 0,
            expect: TokenExpect {
                product_uuid: None,
                mac: None,
                node_id: None,
            },
            reclaim: false,
        }
    }

    fn result() -> AttestationResult {
        AttestationResult {
            node_id: None,
            tenant_id: None,
            pool_id: None,
            site_id: None,
            token_id: Some("tok_a".into()),
            bindings: vec![],
            node_key: NodeKeyAttestation::Unattested,
            node_key_uri: None,
            cert_ttl_seconds: None,
            allowed_kinds: None,
            subject: None,
        }
    }

    fn effects(t: Token) -> Effects {
        Effects {
            consumed_tokens: vec![t.id.clone()],
            locked_tokens: vec![t],
            ..Effects::default()
        }
    }

    fn run(
        result: &AttestationResult,
        effects: &Effects,
        claims: &Claims,
        node: Option<&Node>,
    ) -> Result<Placement, PolicyRefusal> {
        check(&Facts {
            result,
            effects,
            request_token: Some("tok_a"),
            role: Role::Node,
            claims,
            now: 1_000,
            node,
            minted_for: None,
        })
    }

    #[test]
    fn a_clean_token_join_is_placed_in_the_tokens_tenant() {
        let p = run(&result(), &effects(token()), &Claims::default(), None).unwrap();
        assert_eq!(
            p,
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
        let c = Claims::default();
        let mut unspent = effects(token());
        unspent.consumed_tokens.clear();
        assert_eq!(
            run(&result(), &unspent, &c, None),
            Err(PolicyRefusal::TokenNotConsumed)
        );
        let mut silent = result();
        silent.token_id = None;
        assert_eq!(
            run(&silent, &effects(token()), &c, None),
            Err(PolicyRefusal::TokenAccounting)
        );
        let mut twice = effects(token());
        twice.consumed_tokens.push("tok_a".into());
        assert_eq!(
            run(&result(), &twice, &c, None),
            Err(PolicyRefusal::TokenAccounting)
        );
        let other = check(&Facts {
            result: &result(),
            effects: &effects(token()),
            request_token: Some("tok_b"),
            role: Role::Node,
            claims: &c,
            now: 1_000,
            node: None,
            minted_for: None,
        });
        assert_eq!(other, Err(PolicyRefusal::TokenAccounting));
    }

    #[test]
    fn token_state_is_enforced_whatever_the_attestor_said() {
        let c = Claims::default();
        let mut t = token();
        t.revoked = true;
        assert_eq!(
            run(&result(), &effects(t), &c, None),
            Err(PolicyRefusal::Revoked)
        );
        let mut t = token();
        t.expires_at = 1_000;
        assert_eq!(
            run(&result(), &effects(t), &c, None),
            Err(PolicyRefusal::Expired)
        );
        let mut t = token();
        t.role = TokenRole::Site;
        assert_eq!(
            run(&result(), &effects(t), &c, None),
            Err(PolicyRefusal::WrongRole)
        );
    }

    #[test]
    fn expect_binding() {
        let mut t = token();
        t.expect.product_uuid = Some("AA-BB".into());
        t.expect.mac = Some("aa:bb:cc:dd:ee:ff".into());
        let good = Claims {
            macs: vec!["AA:BB:CC:DD:EE:FF".into()],
            product_uuid: Some("aa-bb".into()),
        };
        assert!(run(&result(), &effects(t.clone()), &good, None).is_ok());
        let wrong_uuid = Claims {
            product_uuid: Some("cc".into()),
            ..good.clone()
        };
        assert_eq!(
            run(&result(), &effects(t.clone()), &wrong_uuid, None),
            Err(PolicyRefusal::ExpectProductUuid)
        );
        let no_mac = Claims {
            macs: vec![],
            ..good.clone()
        };
        assert_eq!(
            run(&result(), &effects(t.clone()), &no_mac, None),
            Err(PolicyRefusal::ExpectMac)
        );
        t.expect.node_id = Some("node_x".into());
        assert_eq!(
            run(&result(), &effects(t), &good, None),
            Err(PolicyRefusal::ExpectNode)
        );
    }

    fn node(tenant: &str) -> Node {
        Node {
            id: "node_x".into(),
            tenant_id: tenant.into(),
            pool_id: None,
            site_id: None,
            role: JoinRole::Node,
            retired: false,
            identity_generation: 1,
        }
    }

    #[test]
    fn another_tenants_admission_is_refused() {
        let mut r = result();
        r.tenant_id = Some("other-tenant".into());
        assert_eq!(
            run(&r, &effects(token()), &Claims::default(), None),
            Err(PolicyRefusal::TenantMismatch)
        );
        let mut r = result();
        r.node_id = Some("node_x".into());
        let mut t = token();
        t.reclaim = true;
        assert_eq!(
            run(&r, &effects(t), &Claims::default(), Some(&node("other"))),
            Err(PolicyRefusal::TenantMismatch)
        );
    }

    #[test]
    fn re_keying_a_node_needs_reclaim_and_a_live_node() {
        let mut r = result();
        r.node_id = Some("node_x".into());
        let c = Claims::default();
        assert_eq!(
            run(&r, &effects(token()), &c, Some(&node("root"))),
            Err(PolicyRefusal::Reclaim)
        );
        assert_eq!(
            run(&r, &effects(token()), &c, None),
            Err(PolicyRefusal::UnknownNode)
        );
        let mut t = token();
        t.reclaim = true;
        assert_eq!(
            run(&r, &effects(t.clone()), &c, Some(&node("root")))
                .unwrap()
                .node_id
                .as_deref(),
            Some("node_x")
        );
        let mut retired = node("root");
        retired.retired = true;
        assert_eq!(
            run(&r, &effects(t.clone()), &c, Some(&retired)),
            Err(PolicyRefusal::Retired)
        );
        // `run` asks for `node`: a site is never re-keyed as one.
        let mut site = node("root");
        site.role = JoinRole::Site;
        assert_eq!(
            run(&r, &effects(t), &c, Some(&site)),
            Err(PolicyRefusal::WrongRole)
        );
    }

    #[test]
    fn a_provisioned_token_re_keys_only_the_node_its_running_workflow_provisions() {
        let mut r = result();
        r.node_id = Some("node_x".into());
        let c = Claims::default();
        let mut t = token();
        t.role = TokenRole::Provisioned;
        let e = effects(t.clone());
        let facts = |minted_for| Facts {
            result: &r,
            effects: &e,
            request_token: Some("tok_a"),
            role: Role::Node,
            claims: &c,
            now: 1_000,
            node: None,
            minted_for,
        };
        let target = node("root");
        let with_node = |minted_for| {
            check(&Facts {
                node: Some(&target),
                ..facts(minted_for)
            })
        };
        assert_eq!(
            with_node(Some("node_x")).unwrap().node_id.as_deref(),
            Some("node_x")
        );
        // No running workflow minted it, or one for another node: no re-key without reclaim.
        assert_eq!(with_node(None), Err(PolicyRefusal::Reclaim));
        assert_eq!(with_node(Some("node_y")), Err(PolicyRefusal::Reclaim));
        // A node token gets no such pass, whatever JoinService read.
        let node_token = effects(token());
        assert_eq!(
            check(&Facts {
                effects: &node_token,
                node: Some(&target),
                ..facts(Some("node_x"))
            }),
            Err(PolicyRefusal::Reclaim)
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
        assert_eq!(pool_admits(None, "join-token"), Ok(()));
        assert_eq!(pool_admits(Some(&pool(None)), "join-token"), Ok(()));
        let tpm_only = pool(Some(&["tpm"]));
        assert_eq!(
            pool_admits(Some(&tpm_only), "join-token"),
            Err(PolicyRefusal::PoolAttestor)
        );
        assert_eq!(pool_admits(Some(&tpm_only), "tpm"), Ok(()));
        let both = pool(Some(&["join-token", "x509pop"]));
        assert_eq!(pool_admits(Some(&both), "x509pop"), Ok(()));
        assert_eq!(pool_admits(Some(&both), "join-token"), Ok(()));
        // Ids compare exactly: no case folding, no prefixes.
        assert_eq!(
            pool_admits(Some(&both), "X509POP"),
            Err(PolicyRefusal::PoolAttestor)
        );
        assert_eq!(
            pool_admits(Some(&pool(Some(&["x509pop"]))), "x509"),
            Err(PolicyRefusal::PoolAttestor)
        );
        assert_eq!(PolicyRefusal::PoolAttestor.reason(), "pool-attestor");
    }

    #[test]
    fn tokenless_results_need_a_tenant_and_no_statement() {
        let mut r = result();
        r.token_id = None;
        let none = Effects::default();
        let c = Claims::default();
        let f = |r: &AttestationResult| {
            check(&Facts {
                result: r,
                effects: &none,
                request_token: None,
                role: Role::Node,
                claims: &c,
                now: 0,
                node: None,
                minted_for: None,
            })
        };
        assert_eq!(f(&r), Err(PolicyRefusal::NoTenant));
        r.tenant_id = Some("t1".into());
        assert_eq!(f(&r).unwrap().tenant_id, "t1");
        r.node_key_uri = Some("urn:bc:tpm-ak:000b:00".into());
        assert_eq!(f(&r), Err(PolicyRefusal::NodeKeyStatement));
    }

    #[test]
    fn only_well_formed_tpm_ak_statements_of_certified_keys_pass() {
        let mut r = result();
        r.token_id = None;
        r.tenant_id = Some("t1".into());
        let none = Effects::default();
        let c = Claims::default();
        let f = |r: &AttestationResult| {
            check(&Facts {
                result: r,
                effects: &none,
                request_token: None,
                role: Role::Node,
                claims: &c,
                now: 0,
                node: None,
                minted_for: None,
            })
        };
        let good = format!("urn:bc:tpm-ak:sha256:{}", "ab".repeat(32));
        r.node_key_uri = Some(good.clone());
        r.node_key = NodeKeyAttestation::Tpm;
        assert!(f(&r).is_ok());
        // Not certified: the statement could never be proved.
        r.node_key = NodeKeyAttestation::Unattested;
        assert_eq!(f(&r), Err(PolicyRefusal::NodeKeyStatement));
        r.node_key = NodeKeyAttestation::Tpm;
        for bad in [
            format!("urn:bc:tpm-ak:sha256:{}", "AB".repeat(32)),
            format!("urn:bc:tpm-ak:sha1:{}", "ab".repeat(20)),
            "urn:bc:tpm-ak:sha256:ab".to_owned(),
            "urn:bc:other:x".to_owned(),
            format!("{good}:extra"),
        ] {
            r.node_key_uri = Some(bad.clone());
            assert_eq!(f(&r), Err(PolicyRefusal::NodeKeyStatement), "{bad}");
        }
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
            Err(PolicyRefusal::AllowedKinds)
        );
        r.allowed_kinds = Some(kinds);
        assert_eq!(
            kinds_statement(&r, Role::Ramdisk),
            Ok(Some("urn:bc:kinds:disk.wipe,deploy.*".into()))
        );
        assert_eq!(
            kinds_statement(&r, Role::Node),
            Err(PolicyRefusal::AllowedKinds)
        );
        assert_eq!(
            run(&r, &effects(token()), &Claims::default(), None),
            Err(PolicyRefusal::AllowedKinds)
        );
        for bad in [vec![], vec!["*".to_owned()], vec!["a,b".to_owned()]] {
            r.allowed_kinds = Some(bad);
            assert_eq!(
                kinds_statement(&r, Role::Ramdisk),
                Err(PolicyRefusal::AllowedKinds)
            );
        }
    }
}
