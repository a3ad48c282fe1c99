//! The rows the store reads and writes: plain structs, one per table, and the text enums
//! stored in their columns.
//!
//! Times are milliseconds since the Unix epoch in database time ([`super::Tx::now`]).
//!
//! The text enums (roles, states, revocation reasons) are also the admin API's: they
//! (de)serialize as their stored names and describe themselves to the OpenAPI document. The
//! admin API's rows are `crate::ops::types`, made from these.

use std::fmt;
use std::str::FromStr;

/// A column value that names no variant of a text enum.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} `{value}`")]
pub struct UnknownName {
    /// Which enum was being parsed.
    pub what: &'static str,
    /// The text that matched none of its names.
    pub value: String,
}

/// Defines a closed enum stored as text, with its names, `as_str`, `Display` and `FromStr`.
macro_rules! text_enum {
    (
        $(#[$meta:meta])*
        $name:ident ($what:literal) {
            $( $(#[$vmeta:meta])* $variant:ident = $text:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The name stored in the database (and used on the wire and in the CLI).
            pub fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $text, )+
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = String::deserialize(d)?;
                text.parse().map_err(serde::de::Error::custom)
            }
        }

        impl utoipa::PartialSchema for $name {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                utoipa::openapi::ObjectBuilder::new()
                    .schema_type(utoipa::openapi::schema::Type::String)
                    .enum_values(Some([$($text),+]))
                    .into()
            }
        }

        impl utoipa::ToSchema for $name {
            fn name() -> std::borrow::Cow<'static, str> {
                std::borrow::Cow::Borrowed(stringify!($name))
            }
        }

        impl FromStr for $name {
            type Err = UnknownName;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $( $text => Ok($name::$variant), )+
                    _ => Err(UnknownName { what: $what, value: s.to_owned() }),
                }
            }
        }
    };
}

text_enum! {
    /// What a join token was minted for (the WIT `token-role`).
    TokenRole("token role") {
        /// Admits a machine as `node`.
        Node = "node",
        /// Admits a machine as `site`.
        Site = "site",
        /// Single-use, rendered into an installed system's user data; admits `node`.
        Provisioned = "provisioned",
        /// Single-use, carried by a PXE-booted ramdisk; admits `ramdisk`.
        Discovery = "discovery",
    }
}

text_enum! {
    /// The role a node has and its certificates carry.
    NodeRole("node role") {
        /// A compute node.
        Node = "node",
        /// A site agent.
        Site = "site",
        /// A commissioning ramdisk (short-lived, restricted).
        Ramdisk = "ramdisk",
        /// A lessee's node: re-joins as `node` and JoinService restores the restriction.
        NodeTenant = "node-tenant",
    }
}

text_enum! {
    /// Why a certificate this host issued was revoked.
    Revocation("revocation") {
        /// A later identity generation replaced it (a reclaim in place).
        Superseded = "superseded",
        /// An operator revoked the node's identity.
        IdentityRevoked = "identity-revoked",
        /// The node was retired or deleted.
        NodeRemoved = "node-removed",
        /// An operator revoked this one certificate.
        Operator = "operator",
    }
}

text_enum! {
    /// Where a join request for operator approval stands.
    JoinRequestState("join request state") {
        /// Waiting for an operator.
        Pending = "pending",
        /// Approved: the next round with the same CSR is admitted, once.
        Approved = "approved",
        /// Denied by an operator.
        Denied = "denied",
        /// Not decided in time, or lapsed after approval before it was used.
        Expired = "expired",
        /// Its approval admitted the machine (once: it admits nothing more).
        Used = "used",
    }
}

text_enum! {
    /// How a join round ended, as its audit row records it.
    AuditResult("audit result") {
        /// A certificate was issued.
        Admitted = "admitted",
        /// The round was deferred (approval or challenge).
        Deferred = "deferred",
        /// The round was refused.
        Refused = "refused",
        /// A shadow attestor (`[attestors.<id>] shadow_of`) would have admitted the round; its
        /// verdict was recorded and not acted on.
        ShadowAdmitted = "shadow-admitted",
        /// A shadow attestor would have deferred the round.
        ShadowDeferred = "shadow-deferred",
        /// A shadow attestor would have refused the round (or faulted: the reason says).
        ShadowRefused = "shadow-refused",
    }
}

/// What a token, when set, binds the machine to.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenExpect {
    /// The machine's product UUID must be this.
    pub product_uuid: Option<String>,
    /// The machine must claim this MAC.
    pub mac: Option<String>,
    /// The join must re-key this node.
    pub node_id: Option<String>,
}

/// A join token to mint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewToken {
    /// The token id (the `<id>` of `gh1.<id>.<secret>`).
    pub id: String,
    /// What it is minted for.
    pub role: TokenRole,
    /// SHA-256 of the secret; the secret itself is never stored.
    pub secret_sha256: [u8; 32],
    /// The tenant machines admitted by it join.
    pub tenant_id: String,
    /// The pool machines admitted by it join, if any.
    pub pool_id: Option<String>,
    /// The site it is issued for, if any.
    pub site_id: Option<String>,
    /// Database time after which it admits nothing.
    pub expires_at: i64,
    /// How many joins it admits.
    pub uses: u32,
    /// The binding JoinService enforces.
    pub expect: TokenExpect,
    /// Whether a join with it may re-key a node that already exists for the machine.
    pub reclaim: bool,
    /// When it was minted.
    pub created_at: i64,
}

/// A `join_tokens` row.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenRow {
    /// The token id.
    pub id: String,
    /// What it was minted for.
    pub role: TokenRole,
    /// SHA-256 of the secret; compare in constant time.
    #[serde(skip)]
    pub secret_sha256: [u8; 32],
    /// The tenant machines admitted by it join.
    pub tenant_id: String,
    /// The pool machines admitted by it join, if any.
    pub pool_id: Option<String>,
    /// The site it was issued for, if any.
    pub site_id: Option<String>,
    /// Database time after which it admits nothing.
    pub expires_at: i64,
    /// Revoked by an operator.
    pub revoked: bool,
    /// How many joins it admitted when minted.
    pub uses_total: u32,
    /// Uses left (0 when spent).
    pub uses_left: u32,
    /// The binding JoinService enforces.
    pub expect: TokenExpect,
    /// Whether a join with it may re-key an existing node.
    pub reclaim: bool,
    /// When it was minted.
    pub created_at: i64,
}

/// A node to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewNode {
    /// The node id (`node_...`).
    pub id: String,
    /// Its tenant.
    pub tenant_id: String,
    /// Its pool, if any.
    pub pool_id: Option<String>,
    /// Its site, if any.
    pub site_id: Option<String>,
    /// The role its certificates carry.
    pub role: NodeRole,
    /// Its first identity generation (the one its first certificate carries).
    pub identity_generation: u32,
    /// The key its identity is held in, when attested (for example the TPM AK name).
    pub hardware_key: Option<String>,
    /// When it joined first.
    pub created_at: i64,
}

/// A `nodes` row.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeRow {
    /// The node id.
    pub id: String,
    /// Its tenant.
    pub tenant_id: String,
    /// Its pool, if any.
    pub pool_id: Option<String>,
    /// Its site, if any.
    pub site_id: Option<String>,
    /// The role its certificates carry.
    pub role: NodeRole,
    /// Retired: it never joins again.
    pub retired: bool,
    /// Cordoned by an operator.
    pub cordoned: bool,
    /// The current identity generation; certificates of older ones are revoked.
    pub identity_generation: u32,
    /// The key its identity is held in, when attested.
    pub hardware_key: Option<String>,
    /// When it joined first.
    pub created_at: i64,
    /// When it last changed.
    pub updated_at: i64,
    /// When an operator deleted it (it is then retired too), if they did.
    pub deleted_at: Option<i64>,
}

/// A certificate this host issued, to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewNodeCert {
    /// The serial number, lowercase hex.
    pub serial: String,
    /// The node it was issued to.
    pub node_id: String,
    /// The certificate, DER.
    pub der: Vec<u8>,
    /// The identity generation it belongs to.
    pub generation: u32,
    /// The role it carries.
    pub role: NodeRole,
    /// Start of validity.
    pub not_before: i64,
    /// End of validity.
    pub not_after: i64,
    /// The `urn:bc:` statements it carries.
    pub statements: Vec<String>,
    /// When it was issued.
    pub created_at: i64,
}

/// A `node_certs` row.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeCertRow {
    /// The serial number, lowercase hex.
    pub serial: String,
    /// The node it was issued to.
    pub node_id: String,
    /// The certificate, DER.
    #[serde(serialize_with = "hex_bytes")]
    pub der: Vec<u8>,
    /// The identity generation it belongs to.
    pub generation: u32,
    /// The role it carries.
    pub role: NodeRole,
    /// Start of validity.
    pub not_before: i64,
    /// End of validity.
    pub not_after: i64,
    /// Why it was revoked, or `None` while it is live.
    pub revoked: Option<Revocation>,
    /// The `urn:bc:` statements it carries.
    pub statements: Vec<String>,
    /// When it was issued.
    pub created_at: i64,
}

/// Whether [`super::Tx::record_use`] recorded the evidence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UseOutcome {
    /// First use (or the earlier record had expired): recorded.
    Recorded,
    /// Recorded before and not expired: the evidence is being replayed.
    Reused,
}

/// A `join_requests` row.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JoinRequestRow {
    /// The request id (`jr_...`).
    pub id: String,
    /// The attestor that opened it.
    pub attestor: String,
    /// What the attestor identified the machine by.
    pub subject: String,
    /// The CSR hash it was opened for: approval admits only that CSR.
    #[serde(serialize_with = "hex_bytes")]
    pub csr_sha256: [u8; 32],
    /// UTF-8 JSON shown to the operator (what the attestor saw).
    pub details: String,
    /// Where it stands, as of the database time of the read (a pending or approved request
    /// past `expires_at` reads as expired).
    pub state: JoinRequestState,
    /// On approval: the tenant the operator chose.
    pub tenant_id: Option<String>,
    /// On approval: the pool the operator chose.
    pub pool_id: Option<String>,
    /// On approval: the site the operator chose.
    pub site_id: Option<String>,
    /// When it was opened.
    pub created_at: i64,
    /// When an operator decided it.
    pub decided_at: Option<i64>,
    /// When it lapses unless used.
    pub expires_at: i64,
}

/// An operator's decision on a pending join request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JoinDecision {
    /// Admit the next round with the same CSR, into this placement.
    Approve {
        /// The tenant the machine joins.
        tenant_id: String,
        /// The pool it joins, if any.
        pool_id: Option<String>,
        /// The site it joins, if any.
        site_id: Option<String>,
    },
    /// Refuse it.
    Deny,
}

/// A `pools` row.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolRow {
    /// Its tenant.
    pub tenant_id: String,
    /// The pool id, unique within the tenant.
    pub id: String,
    /// The attestors allowed to join machines into it; `None` allows every attestor.
    pub join_attestors: Option<Vec<String>>,
    /// Who owns it (a lessee), if anyone.
    pub owner: Option<String>,
}

/// A `leases` row: a lease a site agent holds (for example `site:<id>:boot`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseRow {
    /// The lease name.
    pub name: String,
    /// The node holding it.
    pub holder: String,
    /// Raised every time the lease changes hands: a fence for old holders.
    pub epoch: u64,
    /// When it lapses unless renewed.
    pub expires_at: i64,
}

/// An inventory a node reported.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InventoryRow {
    /// The inventory id.
    pub id: String,
    /// The node it describes.
    pub node_id: String,
    /// The product UUID it reported.
    pub product_uuid: Option<String>,
    /// The MACs it reported.
    pub macs: Vec<String>,
    /// When it was recorded.
    pub recorded_at: i64,
}

/// A provisioning workflow.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowRow {
    /// The workflow id.
    pub id: String,
    /// The node it provisions.
    pub node_id: String,
    /// `running`, `succeeded`, `failed` or `cancelled`.
    pub state: String,
    /// The step currently running (for example `userdata.render`).
    pub step: String,
    /// The token its `userdata.render` step minted, if any.
    pub token_id: Option<String>,
    /// When it started.
    pub created_at: i64,
}

/// An event to append (`node.joined`, `security.join.refused`, ...).
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    /// When it happened.
    pub at: i64,
    /// What happened.
    pub kind: String,
    /// The tenant concerned, if known.
    pub tenant_id: Option<String>,
    /// The node concerned, if known.
    pub node_id: Option<String>,
    /// The attestor concerned, if any.
    pub attestor: Option<String>,
    /// The reason code, for refusals.
    pub reason: Option<String>,
    /// The token concerned, if any.
    pub token_id: Option<String>,
    /// Anything else, as JSON.
    pub payload: serde_json::Value,
}

/// An `events` row.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventRow {
    /// Increasing id, the cursor of [`super::Tx::list_events`].
    pub id: i64,
    /// When it happened.
    pub at: i64,
    /// What happened.
    pub kind: String,
    /// The tenant concerned, if known.
    pub tenant_id: Option<String>,
    /// The node concerned, if known.
    pub node_id: Option<String>,
    /// The attestor concerned, if any.
    pub attestor: Option<String>,
    /// The reason code, for refusals.
    pub reason: Option<String>,
    /// The token concerned, if any.
    pub token_id: Option<String>,
    /// The admin identity whose action it records; `None` for what the host did itself.
    pub actor: Option<String>,
    /// Anything else, as JSON.
    pub payload: serde_json::Value,
}

/// An audit record of one join round, to append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewAudit {
    /// When the round ended.
    pub at: i64,
    /// The attestor that ran.
    pub attestor: String,
    /// The round number (1 for the first).
    pub round: u32,
    /// How it ended.
    pub result: AuditResult,
    /// The reason code, for refusals.
    pub reason: Option<String>,
    /// The node admitted or concerned, if known.
    pub node_id: Option<String>,
    /// The token used, if any.
    pub token_id: Option<String>,
    /// What the attestor identified the machine by, if it said.
    pub subject: Option<String>,
    /// How the node key was held (`tpm`, or `unattested`), when admitted.
    pub node_key: Option<String>,
    /// SHA-256 of the CSR, when it parsed.
    pub csr_sha256: Option<[u8; 32]>,
    /// The client's address.
    pub client_addr: Option<String>,
}

/// An `audits` row.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditRow {
    /// Increasing id, the cursor of [`super::Tx::list_audits`].
    pub id: i64,
    /// When the round ended.
    pub at: i64,
    /// The attestor that ran.
    pub attestor: String,
    /// The round number.
    pub round: u32,
    /// How it ended.
    pub result: AuditResult,
    /// The reason code, for refusals.
    pub reason: Option<String>,
    /// The node admitted or concerned, if known.
    pub node_id: Option<String>,
    /// The token used, if any.
    pub token_id: Option<String>,
    /// What the attestor identified the machine by.
    pub subject: Option<String>,
    /// How the node key was held.
    pub node_key: Option<String>,
    /// SHA-256 of the CSR.
    #[serde(serialize_with = "hex_opt")]
    pub csr_sha256: Option<[u8; 32]>,
    /// The client's address.
    pub client_addr: Option<String>,
}

fn hex_bytes<S: serde::Serializer>(bytes: impl AsRef<[u8]>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&hex::encode(bytes))
}

fn hex_opt<S: serde::Serializer>(bytes: &Option<[u8; 32]>, s: S) -> Result<S::Ok, S::Error> {
    match bytes {
        Some(bytes) => hex_bytes(bytes, s),
        None => s.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for role in TokenRole::ALL {
            assert_eq!(role.as_str().parse::<TokenRole>().unwrap(), *role);
        }
        for role in NodeRole::ALL {
            assert_eq!(role.to_string().parse::<NodeRole>().unwrap(), *role);
        }
        for state in JoinRequestState::ALL {
            assert_eq!(state.as_str().parse::<JoinRequestState>().unwrap(), *state);
        }
        for result in AuditResult::ALL {
            assert_eq!(result.as_str().parse::<AuditResult>().unwrap(), *result);
        }
        assert_eq!(NodeRole::NodeTenant.as_str(), "node-tenant");
        assert_eq!(TokenRole::ALL.len(), 4);
    }

    #[test]
    fn rows_serialize_for_the_admin_api() {
        let token = TokenRow {
            id: "tok_1".into(),
            role: TokenRole::Discovery,
            secret_sha256: [0xab; 32],
            tenant_id: "root".into(),
            pool_id: None,
            site_id: Some("s".into()),
            expires_at: 5,
            revoked: false,
            uses_total: 1,
            uses_left: 1,
            expect: TokenExpect {
                product_uuid: None,
                mac: Some("aa".into()),
                node_id: None,
            },
            reclaim: false,
            created_at: 1,
        };
        let json = serde_json::to_value(&token).unwrap();
        assert_eq!(json["role"], "discovery");
        assert_eq!(json["usesLeft"], 1);
        assert_eq!(json["expect"]["mac"], "aa");
        assert!(
            json.get("secretSha256").is_none(),
            "the secret hash stays in the database"
        );
        assert!(!json.to_string().contains("abab"));

        let audit = AuditRow {
            id: 1,
            at: 2,
            attestor: "tpm".into(),
            round: 1,
            result: AuditResult::Refused,
            reason: Some("bound-elsewhere".into()),
            node_id: None,
            token_id: None,
            subject: None,
            node_key: None,
            csr_sha256: Some([1; 32]),
            client_addr: None,
        };
        let json = serde_json::to_value(&audit).unwrap();
        assert_eq!(json["result"], "refused");
        assert_eq!(json["csrSha256"], "01".repeat(32));
        let json = serde_json::to_value(AuditRow {
            csr_sha256: None,
            ..audit
        })
        .unwrap();
        assert!(json["csrSha256"].is_null());
    }

    #[test]
    fn unknown_names_are_errors() {
        let err = "ramdisk".parse::<TokenRole>().unwrap_err();
        assert_eq!(err.to_string(), "unknown token role `ramdisk`");
        let err = "Node".parse::<NodeRole>().unwrap_err();
        assert_eq!(
            err,
            UnknownName {
                what: "node role",
                value: "Node".into()
            }
        );
        assert!("".parse::<JoinRequestState>().is_err());
        assert!("admit".parse::<AuditResult>().is_err());
    }
}
