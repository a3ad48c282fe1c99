//! The host's own view of what an attestor answered and read, converted once from the
//! generated WIT types right after the call, so JoinService and its policy speak the host's
//! domain (the store's roles and rows, fixed-size digests) and a WIT change touches only the
//! conversions here.

use crate::runtime::bindings::transaction as wit_tx;
use crate::runtime::bindings::types as wit;
use crate::store::{TokenExpect, TokenRole};

/// How much the control plane knows about where the node key lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NodeKey {
    /// Nothing: the agent's word only.
    #[default]
    Unattested,
    /// The attestor says the key was made in a TPM and certified by an AK; the policy checks
    /// that the call proved it to the host (`Effects::tpm_certified`).
    Tpm,
}

impl NodeKey {
    /// The label in the audit row and the event.
    pub fn label(self) -> &'static str {
        match self {
            NodeKey::Tpm => "tpm",
            NodeKey::Unattested => "unattested",
        }
    }
}

impl From<wit::NodeKeyAttestation> for NodeKey {
    fn from(k: wit::NodeKeyAttestation) -> Self {
        match k {
            wit::NodeKeyAttestation::Tpm => NodeKey::Tpm,
            wit::NodeKeyAttestation::Unattested => NodeKey::Unattested,
        }
    }
}

/// A hardware identity to bind to the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    /// The kind (`tpm-ek`, or `<attestor>:<kind>` for any other attestor's).
    pub kind: String,
    /// Its value.
    pub value: String,
}

/// An attestor's admission: who it says the machine is. Nothing here is trusted until the
/// policy ([`super::policy::check`]) accepts it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Admission {
    /// An existing node to re-key, or none for a new node.
    pub node_id: Option<String>,
    /// The tenant it names.
    pub tenant_id: Option<String>,
    /// The pool it names.
    pub pool_id: Option<String>,
    /// The site it names.
    pub site_id: Option<String>,
    /// The token it says the join spent.
    pub token_id: Option<String>,
    /// Hardware identities to bind.
    pub bindings: Vec<Binding>,
    /// Where the node key lives, as the attestor says.
    pub node_key: NodeKey,
    /// A `urn:bc:` statement about the node key for the certificate.
    pub node_key_uri: Option<String>,
    /// A shorter certificate lifetime.
    pub cert_ttl_seconds: Option<u32>,
    /// A ramdisk's command kinds.
    pub allowed_kinds: Option<Vec<String>>,
    /// What the attestor identified the machine by (audit only).
    pub subject: Option<String>,
}

impl From<wit::AttestationResult> for Admission {
    fn from(r: wit::AttestationResult) -> Self {
        Self {
            node_id: r.node_id,
            tenant_id: r.tenant_id,
            pool_id: r.pool_id,
            site_id: r.site_id,
            token_id: r.token_id,
            bindings: r
                .bindings
                .into_iter()
                .map(|b| Binding {
                    kind: b.kind,
                    value: b.value,
                })
                .collect(),
            node_key: r.node_key.into(),
            node_key_uri: r.node_key_uri,
            cert_ttl_seconds: r.cert_ttl_seconds,
            allowed_kinds: r.allowed_kinds,
            subject: r.subject,
        }
    }
}

/// A token row as the attestor's transaction locked it (before any use was spent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockedToken {
    /// The token id.
    pub id: String,
    /// What it was minted for.
    pub role: TokenRole,
    /// SHA-256 of its secret; a row that does not hold 32 bytes matches no secret.
    pub secret_sha256: Option<[u8; 32]>,
    /// Its tenant.
    pub tenant_id: String,
    /// Its pool.
    pub pool_id: Option<String>,
    /// Its site.
    pub site_id: Option<String>,
    /// Database time after which it admits nothing.
    pub expires_at: i64,
    /// Revoked by an operator.
    pub revoked: bool,
    /// Uses left when it was locked.
    pub uses_left: u32,
    /// The binding JoinService enforces.
    pub expect: TokenExpect,
    /// Whether a join with it may re-key an existing node.
    pub reclaim: bool,
}

impl From<&wit_tx::Token> for LockedToken {
    fn from(t: &wit_tx::Token) -> Self {
        Self {
            id: t.id.clone(),
            role: match t.role {
                wit::TokenRole::Node => TokenRole::Node,
                wit::TokenRole::Site => TokenRole::Site,
                wit::TokenRole::Provisioned => TokenRole::Provisioned,
                wit::TokenRole::Discovery => TokenRole::Discovery,
            },
            secret_sha256: <[u8; 32]>::try_from(t.secret_sha256.as_slice()).ok(),
            tenant_id: t.tenant_id.clone(),
            pool_id: t.pool_id.clone(),
            site_id: t.site_id.clone(),
            expires_at: t.expires_at,
            revoked: t.revoked,
            uses_left: t.uses_left,
            expect: TokenExpect {
                product_uuid: t.expect.product_uuid.clone(),
                mac: t.expect.mac.clone(),
                node_id: t.expect.node_id.clone(),
            },
            reclaim: t.reclaim,
        }
    }
}
