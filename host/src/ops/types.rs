//! The admin API's wire types: the one set of request and answer bodies the server
//! (`crate::api`), the CLI (`crate::cli`) and the integration tests all use, so that a field
//! renamed or retyped here breaks the compilation of all three, never a run. Each derives
//! serde (camelCase on the wire) and `utoipa::ToSchema`, from which `GET /v1/openapi.json` is
//! generated.
//!
//! Ids a client sends are [`Id`]s, checked as they are parsed; ids the host answers with are
//! plain text (the host made them). Times are milliseconds since the Unix epoch on the
//! database's clock.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::Id;
use crate::store::{AuditResult, JoinRequestState, NodeRole, Revocation, TokenRole};

fn root() -> Id {
    Id::root()
}

fn one() -> u32 {
    1
}

// ---------------------------------------------------------------------------------------------
// Tokens

/// `POST /v1/admin/tokens`: mint a join token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateToken {
    /// What it admits.
    pub role: TokenRole,
    /// How many joins it admits (1 to 100000).
    #[serde(default = "one")]
    pub uses: u32,
    /// How long it lives (60 s to 30 days).
    pub ttl_seconds: u64,
    /// The tenant machines join (it must exist).
    #[serde(default = "root")]
    pub tenant_id: Id,
    /// The pool machines join (one of the tenant's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool_id: Option<Id>,
    /// The site machines belong to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub site_id: Option<Id>,
    /// What JoinService binds the machine to.
    #[serde(default)]
    pub expect: TokenExpectation,
    /// Whether a join with it may re-key a node that already exists for the machine.
    #[serde(default)]
    pub reclaim: bool,
}

/// A token's binding: what the machine must be.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TokenExpectation {
    /// The machine's SMBIOS product UUID (stored lowercase).
    #[serde(default)]
    pub product_uuid: Option<String>,
    /// A MAC the machine claims (stored lowercase with colons).
    #[serde(default)]
    pub mac: Option<String>,
    /// The node the join must re-key.
    #[serde(default)]
    pub node_id: Option<String>,
}

/// A minted token, shown once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreatedToken {
    /// The token id.
    pub id: String,
    /// The whole token, `gh1.<id>.<secret>`: give it to the machine, never log it.
    pub token: String,
    /// When it stops admitting.
    pub expires_at: i64,
}

/// A token as `GET /v1/admin/tokens` lists it (never its secret).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Token {
    /// The token id.
    pub id: String,
    /// What it admits.
    pub role: TokenRole,
    /// The tenant machines join.
    pub tenant_id: String,
    /// The pool machines join.
    pub pool_id: Option<String>,
    /// The site machines belong to.
    pub site_id: Option<String>,
    /// When it stops admitting.
    pub expires_at: i64,
    /// Revoked by an operator (or a finished workflow).
    pub revoked: bool,
    /// Uses it was minted with.
    pub uses_total: u32,
    /// Uses left.
    pub uses_left: u32,
    /// Its binding.
    pub expect: TokenExpectation,
    /// Whether it may re-key an existing node.
    pub reclaim: bool,
    /// When it was minted.
    pub created_at: i64,
}

/// `POST /v1/admin/tokens/{id}/revoke`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RevokedToken {
    /// The token id.
    pub id: String,
    /// Always true: an unknown token is 404.
    pub revoked: bool,
}

// ---------------------------------------------------------------------------------------------
// Nodes

/// A node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Node {
    /// The node id.
    pub id: String,
    /// Its tenant.
    pub tenant_id: String,
    /// Its pool.
    pub pool_id: Option<String>,
    /// Its site.
    pub site_id: Option<String>,
    /// The role its certificates carry.
    pub role: NodeRole,
    /// It never joins or renews again.
    pub retired: bool,
    /// Cordoned by an operator.
    pub cordoned: bool,
    /// The current identity generation.
    pub identity_generation: u32,
    /// The key its identity is held in, when attested (the TPM AK name).
    pub hardware_key: Option<String>,
    /// When it joined first.
    pub created_at: i64,
    /// When it last changed.
    pub updated_at: i64,
    /// When an operator deleted it.
    pub deleted_at: Option<i64>,
}

/// `GET /v1/admin/nodes/{id}`: the node, its certificates newest first, its bindings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeDetail {
    /// The node.
    #[serde(flatten)]
    pub node: Node,
    /// Its certificates, newest first (without their DER).
    pub certificates: Vec<Certificate>,
    /// The hardware identities bound to it.
    pub bindings: Vec<Binding>,
}

/// A certificate this host issued.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Certificate {
    /// The serial, lowercase hex.
    pub serial: String,
    /// The identity generation it belongs to.
    pub generation: u32,
    /// The role it carries.
    pub role: NodeRole,
    /// Start of validity.
    pub not_before: i64,
    /// End of validity.
    pub not_after: i64,
    /// Why it was revoked; `null` while it is live.
    pub revoked: Option<Revocation>,
    /// The `urn:bc:` statements it carries.
    pub statements: Vec<String>,
    /// When it was issued.
    pub created_at: i64,
}

/// A hardware identity bound to a node (`tpm-ek-sha256`, ...).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Binding {
    /// What kind of identity.
    pub kind: String,
    /// Its value.
    pub value: String,
}

/// `POST /v1/admin/nodes/{id}/cordon` and `/uncordon`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Cordoned {
    /// The node id.
    pub id: String,
    /// Whether it is cordoned now.
    pub cordoned: bool,
    /// Whether this call changed it.
    pub changed: bool,
}

/// `POST /v1/admin/nodes/{id}/retire`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Retired {
    /// The node id.
    pub id: String,
    /// Always true.
    pub retired: bool,
    /// Whether this call retired it (false: it was retired already).
    pub changed: bool,
    /// How many live certificates it revoked.
    pub certificates_revoked: u64,
}

/// `DELETE /v1/admin/nodes/{id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Deleted {
    /// The node id.
    pub id: String,
    /// When it was deleted.
    pub deleted_at: i64,
    /// How many live certificates it revoked.
    pub certificates_revoked: u64,
    /// The bindings it freed.
    pub bindings_freed: Vec<Binding>,
    /// Whether it freed the node's hardware key.
    pub hardware_key_freed: bool,
}

/// `POST /v1/admin/nodes/{id}/revoke-identity`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct IdentityRevoked {
    /// The node id.
    pub id: String,
    /// The generation before.
    pub previous_generation: u32,
    /// The generation now.
    pub generation: u32,
    /// How many live certificates it revoked.
    pub certificates_revoked: u64,
}

/// `POST /v1/admin/nodes/{id}/certs/{serial}/revoke`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CertRevoked {
    /// The node id.
    pub id: String,
    /// The serial, lowercase hex.
    pub serial: String,
    /// Why it is revoked (`operator`, or what revoked it before).
    pub revoked: Revocation,
    /// Whether this call revoked it.
    pub changed: bool,
}

/// `POST /v1/admin/nodes/{id}/inventories`: what the node's hardware is.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RecordInventory {
    /// The SMBIOS product UUID.
    #[serde(default)]
    pub product_uuid: Option<String>,
    /// Its MACs (at most 64).
    #[serde(default)]
    pub macs: Vec<String>,
}

/// An inventory of a node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Inventory {
    /// The inventory id.
    pub id: String,
    /// The node.
    pub node_id: String,
    /// The product UUID, lowercase.
    pub product_uuid: Option<String>,
    /// The MACs, lowercase with colons.
    pub macs: Vec<String>,
    /// When it was recorded.
    pub recorded_at: i64,
}

// ---------------------------------------------------------------------------------------------
// Tenants and pools

/// `POST /v1/admin/tenants`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateTenant {
    /// The new tenant's id.
    pub id: Id,
}

/// A tenant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Tenant {
    /// The tenant id.
    pub id: String,
}

/// A pool's join policy: when `joinAttestors` is set, only those attestors (1 to 16 distinct
/// ids of attestors the host runs) admit machines into the pool.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PoolPolicy {
    /// The attestors allowed; absent or `null`: every attestor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub join_attestors: Option<Vec<String>>,
}

/// `POST /v1/admin/pools`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreatePool {
    /// Its tenant (which must exist).
    #[serde(default = "root")]
    pub tenant_id: Id,
    /// The pool id, unique in the tenant.
    pub id: Id,
    /// Its join policy.
    #[serde(default)]
    pub policy: PoolPolicy,
    /// Who owns it (a lessee).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<Id>,
}

/// `PUT /v1/admin/pools/{tenant}/{id}`: the whole new policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpdatePool {
    /// The policy that replaces the pool's.
    pub policy: PoolPolicy,
}

/// A pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Pool {
    /// Its tenant.
    pub tenant_id: String,
    /// The pool id.
    pub id: String,
    /// Its join policy.
    pub policy: PoolPolicy,
    /// Who owns it.
    pub owner: Option<String>,
}

/// The answer to a pool update.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdatedPool {
    /// The pool as it is now.
    #[serde(flatten)]
    pub pool: Pool,
    /// Whether the policy changed.
    pub changed: bool,
}

// ---------------------------------------------------------------------------------------------
// Join requests

/// A join request an attestor opened for an operator's decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct JoinRequest {
    /// The request id (`jr_...`).
    pub id: String,
    /// The attestor that opened it.
    pub attestor: String,
    /// What the attestor identified the machine by.
    pub subject: String,
    /// What the attestor saw (its `details`), as JSON.
    #[schema(value_type = Object)]
    pub details: Value,
    /// Hex SHA-256 of the CSR it was opened for: only that CSR is admitted.
    pub csr_sha256: String,
    /// Where it stands, as of database time.
    pub state: JoinRequestState,
    /// On approval: the tenant chosen.
    pub tenant_id: Option<String>,
    /// On approval: the pool chosen.
    pub pool_id: Option<String>,
    /// On approval: the site chosen.
    pub site_id: Option<String>,
    /// When it was opened.
    pub created_at: i64,
    /// When an operator decided it.
    pub decided_at: Option<i64>,
    /// When it lapses unless used.
    pub expires_at: i64,
}

/// `GET /v1/admin/join-requests` query.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JoinRequestQuery {
    /// `pending` (the default), `approved`, `denied`, `expired`, `used` or `all`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Where the page starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// Rows per page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// `POST /v1/admin/join-requests/{id}/approve` (an empty body approves into `root`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Approve {
    /// The tenant the machine joins (which must exist).
    #[serde(default = "root")]
    pub tenant_id: Id,
    /// The pool it joins (one of the tenant's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool_id: Option<Id>,
    /// The site it belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub site_id: Option<Id>,
}

impl Default for Approve {
    fn default() -> Self {
        Self {
            tenant_id: Id::root(),
            pool_id: None,
            site_id: None,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Workflows

/// `POST /v1/admin/workflows`: a provisioning workflow (the default `kind`, `provision`) or a
/// discovery one (`"kind": "discovery"`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum StartWorkflow {
    /// Provision a node: mint its single-use provisioned token and render its user data.
    Provision(StartProvisioning),
    /// Let a machine boot the discovery ramdisk at a site.
    Discovery(StartDiscovery),
}

impl<'de> Deserialize<'de> for StartWorkflow {
    /// `kind` may be absent (a provisioning workflow, as before discovery existed).
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        let mut body = serde_json::Map::deserialize(d)?;
        let kind = match body.remove("kind") {
            None => "provision".to_owned(),
            Some(Value::String(kind)) => kind,
            Some(_) => return Err(D::Error::custom("kind must be a string")),
        };
        let body = Value::Object(body);
        match kind.as_str() {
            "provision" => serde_json::from_value(body)
                .map(StartWorkflow::Provision)
                .map_err(D::Error::custom),
            "discovery" => serde_json::from_value(body)
                .map(StartWorkflow::Discovery)
                .map_err(D::Error::custom),
            _ => Err(D::Error::custom("kind must be provision or discovery")),
        }
    }
}

/// A provisioning workflow to start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StartProvisioning {
    /// The node to provision.
    pub node_id: Id,
    /// The host's URL as the machine reaches it (`https://`), rendered into the user data.
    pub server_url: String,
    /// The token's lifetime (60 s to 30 days; default a day).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_ttl_seconds: Option<u64>,
}

/// A discovery workflow to start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StartDiscovery {
    /// The site whose boot server serves the machine.
    pub site_id: Id,
    /// The machine's MAC.
    pub mac: String,
    /// The machine's product UUID, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub product_uuid: Option<String>,
    /// The tenant the ramdisk joins.
    #[serde(default = "root")]
    pub tenant_id: Id,
    /// Lifetime of each token a fetch mints (60 s to a day; default an hour).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_ttl_seconds: Option<u64>,
}

/// A workflow of either kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Workflow {
    /// A provisioning workflow.
    Provision(ProvisionWorkflow),
    /// A discovery workflow.
    Discovery(DiscoveryWorkflow),
}

impl Workflow {
    /// The workflow id.
    pub fn id(&self) -> &str {
        match self {
            Workflow::Provision(w) => &w.id,
            Workflow::Discovery(w) => &w.id,
        }
    }

    /// When it started.
    pub fn created_at(&self) -> i64 {
        match self {
            Workflow::Provision(w) => w.created_at,
            Workflow::Discovery(w) => w.created_at,
        }
    }
}

/// A provisioning workflow.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProvisionWorkflow {
    /// The workflow id.
    pub id: String,
    /// The node it provisions.
    pub node_id: String,
    /// `running`, `succeeded`, `failed` or `cancelled`.
    pub state: String,
    /// The step running (`userdata.render`).
    pub step: String,
    /// The token its render step minted.
    pub token_id: Option<String>,
    /// When it started.
    pub created_at: i64,
}

/// A discovery workflow.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DiscoveryWorkflow {
    /// The workflow id.
    pub id: String,
    /// The tenant the ramdisk joins.
    pub tenant_id: String,
    /// The site whose boot server serves the machine.
    pub site_id: String,
    /// The machine's MAC.
    pub mac: String,
    /// The machine's product UUID.
    pub product_uuid: Option<String>,
    /// `running`, `succeeded` or `cancelled`.
    pub state: String,
    /// Lifetime of each token a fetch mints.
    pub token_ttl_seconds: u32,
    /// The newest token a fetch minted.
    pub token_id: Option<String>,
    /// When it started.
    pub created_at: i64,
}

/// What starting a workflow answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum StartedWorkflow {
    /// The workflow, its token (shown once, as in the user data) and the user data.
    Provision(StartedProvisioning),
    /// The workflow (its tokens are fetched by the site's boot server).
    Discovery(DiscoveryWorkflow),
}

/// A started provisioning workflow.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct StartedProvisioning {
    /// The workflow.
    pub workflow: ProvisionWorkflow,
    /// The token its render step minted.
    pub token_id: String,
    /// The token, shown once.
    pub token: String,
    /// When the token stops admitting.
    pub token_expires_at: i64,
    /// The rendered `#cloud-config` user data.
    pub user_data: String,
}

/// `GET /v1/admin/workflows/{id}`: the workflow and where its token stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowDetail {
    /// The workflow.
    #[serde(flatten)]
    pub workflow: Workflow,
    /// Its (newest) token, if any.
    pub token: Option<WorkflowToken>,
}

/// Where a workflow's token stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowToken {
    /// The token id.
    pub id: String,
    /// Uses left.
    pub uses_left: u32,
    /// Revoked.
    pub revoked: bool,
    /// When it stops admitting.
    pub expires_at: i64,
}

/// `POST /v1/admin/workflows/{id}/complete` and `/cancel`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FinishedWorkflow {
    /// The workflow id.
    pub id: String,
    /// `provision` or `discovery`.
    pub kind: String,
    /// The node a provisioning workflow provisioned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    /// The site of a discovery workflow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub site_id: Option<String>,
    /// The MAC of a discovery workflow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    /// `succeeded` or `cancelled`.
    pub state: String,
    /// Whether its unspent token was revoked.
    pub token_revoked: bool,
}

// ---------------------------------------------------------------------------------------------
// Events and audits

/// An event: what happened, and who did it when an operator did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    /// Its id, the feed's cursor.
    pub id: i64,
    /// When it happened.
    pub at: i64,
    /// What happened (`node.joined`, `token.created`, ...).
    pub kind: String,
    /// The tenant concerned.
    pub tenant_id: Option<String>,
    /// The node concerned.
    pub node_id: Option<String>,
    /// The attestor concerned.
    pub attestor: Option<String>,
    /// The reason code, for refusals.
    pub reason: Option<String>,
    /// The token concerned.
    pub token_id: Option<String>,
    /// The admin identity that did it (an operator's action); `null` for what the host did
    /// on its own (a join, a renewal, a reload).
    pub actor: Option<String>,
    /// Anything else.
    #[schema(value_type = Object)]
    pub payload: Value,
}

/// An audit record of one join round.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Audit {
    /// Its id, the list's cursor.
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
    /// The node admitted or concerned.
    pub node_id: Option<String>,
    /// The token used.
    pub token_id: Option<String>,
    /// What the attestor identified the machine by.
    pub subject: Option<String>,
    /// How the node key was held.
    pub node_key: Option<String>,
    /// Hex SHA-256 of the CSR.
    pub csr_sha256: Option<String>,
    /// The client's address.
    pub client_addr: Option<String>,
}

/// `GET /v1/admin/audits` query: filters, then the page.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AuditQuery {
    /// Only rounds about this node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<Id>,
    /// Only rounds of this attestor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attestor: Option<Id>,
    /// Only rounds that ended so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<AuditResult>,
    /// Only rounds that ended at or after this time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<i64>,
    /// Where the page starts (the last id of the page before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// Rows per page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

// ---------------------------------------------------------------------------------------------
// Attestors

/// An attestor the host runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Attestor {
    /// The id join requests name it by.
    pub id: String,
    /// Its own version.
    pub version: String,
    /// The most rounds a join through it takes.
    pub rounds: u8,
    /// Where it came from.
    pub source: AttestorSource,
    /// SHA-256 of the component, lowercase hex.
    pub sha256: String,
    /// For a shadow: the live attestor it runs beside.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow_of: Option<String>,
}

/// Where an attestor came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case", tag = "kind", content = "path")]
pub enum AttestorSource {
    /// Embedded in the gatehouse binary.
    BuiltIn,
    /// A file in `attestors_dir`.
    File(String),
}

// ---------------------------------------------------------------------------------------------
// Pruning

/// `POST /v1/admin/attestation-uses/prune`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PruneUses {
    /// Most rows deleted (1 to 100000; default 5000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<u32>,
}

/// `POST /v1/admin/{tokens,events,audits}/prune`: the age is required.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PruneByAge {
    /// Only rows older than this.
    pub older_than_seconds: u64,
    /// Most rows deleted (1 to 100000; default 5000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<u32>,
}

/// What a prune deleted: call again while `deleted == batch`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Pruned {
    /// Rows deleted.
    pub deleted: u64,
    /// The batch size used.
    pub batch: u32,
}

// ---------------------------------------------------------------------------------------------
// Admin identities

/// `POST /v1/admin/admins`: a new named admin key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateAdmin {
    /// Who the key is for: what events name as the actor.
    pub name: Id,
}

/// A new admin key, shown once (the host keeps only its hash).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreatedAdmin {
    /// The identity.
    pub name: String,
    /// The key, `gha1.<key id>.<secret>`: the bearer it authenticates with.
    pub key: String,
    /// When it was made.
    pub created_at: i64,
}

/// An admin identity (never its key).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Admin {
    /// The identity.
    pub name: String,
    /// When it was made.
    pub created_at: i64,
    /// Who made it.
    pub created_by: String,
    /// When it was revoked.
    pub revoked_at: Option<i64>,
    /// Who revoked it.
    pub revoked_by: Option<String>,
}

/// `POST /v1/admin/admins/{name}/revoke`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RevokedAdmin {
    /// The identity.
    pub name: String,
    /// Whether this call revoked it (false: revoked already).
    pub changed: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn requests_take_defaults_and_refuse_bad_ids() {
        let t: CreateToken =
            serde_json::from_value(json!({"role": "node", "ttlSeconds": 60})).unwrap();
        assert_eq!((t.uses, t.tenant_id.as_str()), (1, "root"));
        assert!(
            serde_json::from_value::<CreateToken>(
                json!({"role": "node", "ttlSeconds": 60, "tenantId": "a/b"})
            )
            .is_err()
        );
        assert!(
            serde_json::from_value::<CreateToken>(json!({"role": "ramdisk", "ttlSeconds": 60}))
                .is_err()
        );
        assert!(
            serde_json::from_value::<CreateToken>(
                json!({"role": "node", "ttlSeconds": 60, "x": 1})
            )
            .is_err()
        );
        // What the CLI sends for an absent option reads back as absent.
        let back: CreateToken = serde_json::from_value(serde_json::to_value(&t).unwrap()).unwrap();
        assert_eq!(back, t);
    }

    #[test]
    fn a_workflow_start_without_kind_provisions() {
        let w: StartWorkflow =
            serde_json::from_value(json!({"nodeId": "n", "serverUrl": "https://h"})).unwrap();
        assert!(matches!(w, StartWorkflow::Provision(_)));
        let d: StartWorkflow = serde_json::from_value(
            json!({"kind": "discovery", "siteId": "s", "mac": "aa:bb:cc:dd:ee:ff"}),
        )
        .unwrap();
        assert!(matches!(&d, StartWorkflow::Discovery(s) if s.tenant_id == "root"));
        assert_eq!(
            serde_json::from_value::<StartWorkflow>(serde_json::to_value(&d).unwrap()).unwrap(),
            d
        );
        for bad in [
            json!({"kind": 1}),
            json!({"kind": "reboot"}),
            json!({"nodeId": "n"}),
        ] {
            assert!(
                serde_json::from_value::<StartWorkflow>(bad.clone()).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn workflows_carry_their_kind() {
        let w = Workflow::Discovery(DiscoveryWorkflow {
            id: "wf_1".into(),
            tenant_id: "root".into(),
            site_id: "s".into(),
            mac: "aa:bb:cc:dd:ee:ff".into(),
            product_uuid: None,
            state: "running".into(),
            token_ttl_seconds: 60,
            token_id: None,
            created_at: 1,
        });
        let detail = WorkflowDetail {
            workflow: w,
            token: None,
        };
        let v = serde_json::to_value(&detail).unwrap();
        assert_eq!(
            (v["kind"].as_str(), v["siteId"].as_str()),
            (Some("discovery"), Some("s"))
        );
        assert_eq!(serde_json::from_value::<WorkflowDetail>(v).unwrap(), detail);
    }
}
