//! `provisioned`, Gatehouse's built-in attestor: an installed system joins once with the
//! single-use token its provisioning workflow rendered into its user data.
//!
//! When an operating system is deployed, the workflow's `userdata.render` step mints a token of
//! role `provisioned` with one use and renders it into the machine's user data; the installed
//! system joins with it (seed: provisioned). The attestor admits the machine only if, in this
//! order:
//!
//! 1. the request's token is live and of role `provisioned`, the machine asks to join as
//!    `node`, and the token has exactly one use left (`not-single-use` for a token minted for
//!    several machines, which is never a machine credential; `no-uses-left` once spent), as
//!    the SDK's [`gatehouse_sdk::token::checked_single_use`] checks it;
//! 2. the request carries no evidence bytes (the token is the evidence);
//! 3. the machine claims a product UUID (`no-product-uuid`);
//! 4. the token is bound to one machine: by its `expect.productUuid`, or by the target the
//!    resolver finds — the node of the *running* workflow whose `userdata.render` step minted
//!    the token (`tx.token-workflow`), with the product UUID of that node's newest inventory.
//!    Neither is `unbound`; a claimed UUID that differs from either is
//!    `product-uuid-mismatch`.
//!
//! It then spends the token. With a target the result names that node, and JoinService re-keys
//! it in place (a new identity generation, older certificates revoked, tenant, pool, site and
//! cordon kept); JoinService itself checks that the node is the one the token's running
//! workflow provisions, since a provisioned token carries no `reclaim` flag. Without a target
//! the machine joins as a new node (a provider bootstrap such as an `installimage` run that no
//! workflow here tracks, bound by `expect.productUuid`).
//!
//! The crate is both the component the host loads and an `rlib`: [`Provisioned`] runs natively
//! through [`gatehouse_sdk::Attestor`] too.
//!
//! The component leaves out Rust's standard library ([`gatehouse_sdk::no_std_runtime!`]) and
//! names its host calls ([`Attestor::CALLS`]), so it imports nothing from WASI and only the
//! seven host functions it calls: every installed machine of a fleet joins through it once.

#![cfg_attr(target_arch = "wasm32", no_std)]

extern crate alloc;

use alloc::format;
use alloc::string::String;

use gatehouse_sdk::{
    AttestationResult, Attestor, Calls, Context, Info, JoinRequest, NodeKeyAttestation, Outcome,
    Refusal, Token, TokenRole, reason, refuse, token,
};

/// The workflow state in which a workflow still vouches for the token it minted: a completed,
/// failed or cancelled workflow binds no machine.
pub const RUNNING: &str = "running";

/// The request carries evidence bytes; a provisioned join carries the sealed token only.
pub const BAD_EVIDENCE: &str = "bad-evidence";

/// The `provisioned` attestor. It has no configuration.
#[derive(Debug)]
pub struct Provisioned;

/// The configuration: empty, and strict, so a key meant for another attestor is caught at load.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {}

impl Attestor for Provisioned {
    /// The token checks' calls, and the resolver's (the token's workflow, its node's
    /// inventory).
    const CALLS: Calls = Calls::TOKEN
        .union(Calls::TOKEN_WORKFLOW)
        .union(Calls::NEWEST_INVENTORY);

    fn info() -> Info {
        Info {
            id: "provisioned".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            rounds: 1,
        }
    }

    fn configure(config: &str) -> Result<Self, String> {
        let Config {} = gatehouse_sdk::config::parse(config)?;
        Ok(Provisioned)
    }

    fn verify(&self, cx: &Context<'_>, request: &JoinRequest) -> Outcome {
        match admit(cx, request) {
            Ok(result) => result.into(),
            Err(refusal) => refusal.into(),
        }
    }
}

gatehouse_sdk::export_attestor!(Provisioned);
gatehouse_sdk::no_std_runtime!();

/// The node a provisioned token was minted for, as the resolver finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The node the running workflow provisions.
    pub node_id: String,
    /// The product UUID of that node's newest inventory, if it reported one.
    pub product_uuid: Option<String>,
}

/// The resolver (seed: `provisionedTargetResolver`): the node of the running workflow whose
/// `userdata.render` step minted `token`, and the product UUID of that node's newest
/// inventory. `None` when no workflow minted it or that workflow is no longer running.
pub fn resolve_target(cx: &Context<'_>, token: &Token) -> Result<Option<Target>, Refusal> {
    let storage = |_| {
        refuse(reason::STORAGE)
            .token(&token.id)
            .tenant(&token.tenant_id)
    };
    let Some(workflow) = cx.tx.token_workflow(&token.id).map_err(storage)? else {
        return Ok(None);
    };
    if workflow.state != RUNNING {
        return Ok(None);
    }
    let inventory = cx.tx.newest_inventory(&workflow.node_id).map_err(storage)?;
    Ok(Some(Target {
        node_id: workflow.node_id,
        product_uuid: inventory.and_then(|i| i.product_uuid),
    }))
}

/// Decides one join, spending the token when it admits.
fn admit(cx: &Context<'_>, request: &JoinRequest) -> Result<AttestationResult, Refusal> {
    // 1. The token: live, of role provisioned, for a node, exactly one use left.
    let token = token::checked_single_use(cx, request, TokenRole::Provisioned)?;
    let refusal = |code: &str| refuse(code).token(&token.id).tenant(&token.tenant_id);

    // 2. Nothing but the token.
    if !request.attestation.is_empty() {
        return Err(refusal(BAD_EVIDENCE));
    }

    // 3. The machine's product UUID.
    let claimed = request
        .claims
        .product_uuid
        .as_deref()
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(str::to_ascii_lowercase)
        .ok_or_else(|| refusal(reason::NO_PRODUCT_UUID))?;

    // 4. Bound to one machine, by the token's expect or by its workflow's target.
    let target = resolve_target(cx, &token)?;
    let expected = [
        token.expect.product_uuid.as_deref(),
        target.as_ref().and_then(|t| t.product_uuid.as_deref()),
    ];
    if expected.iter().all(Option::is_none) {
        return Err(refusal(reason::UNBOUND).node_opt(target.as_ref()));
    }
    if expected
        .iter()
        .flatten()
        .any(|uuid| !uuid.eq_ignore_ascii_case(&claimed))
    {
        return Err(refusal(reason::PRODUCT_UUID_MISMATCH).node_opt(target.as_ref()));
    }

    // Spend it: the token admits this one machine, once.
    cx.tx
        .consume_token(&token.id)
        .map_err(|_| refusal(reason::STORAGE))?;

    Ok(AttestationResult {
        node_id: target.map(|t| t.node_id).or(token.expect.node_id),
        tenant_id: Some(token.tenant_id),
        pool_id: token.pool_id,
        site_id: token.site_id,
        subject: Some(format!("product-uuid:{claimed}")),
        token_id: Some(token.id),
        node_key: NodeKeyAttestation::Unattested,
        ..AttestationResult::default()
    })
}

/// Naming the target node in a refusal, when there is one.
trait NodeOpt {
    fn node_opt(self, target: Option<&Target>) -> Self;
}

impl NodeOpt for Refusal {
    fn node_opt(self, target: Option<&Target>) -> Self {
        match target {
            Some(t) => self.node(&t.node_id),
            None => self,
        }
    }
}

#[cfg(test)]
mod tests;
