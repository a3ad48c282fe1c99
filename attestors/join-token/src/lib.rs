//! `join-token`, Gatehouse's built-in attestor: a join token an operator minted admits a
//! machine.
//!
//! The request carries the token JoinService opened (`gh1.<id>.<secret>`). The attestor locks
//! the token's row, checks the secret in constant time, revocation, expiry at database time,
//! the uses left and the role (node tokens admit `node`, site tokens admit `site`; provisioned
//! and discovery tokens belong to their own attestors), spends one use and admits the machine
//! into the token's tenant, pool and site. JoinService then enforces the token's `expect`
//! binding and `reclaim` flag, as for every token-based attestor.
//!
//! The crate is both the component the host loads and an `rlib`: [`JoinToken`] runs natively
//! through [`gatehouse_sdk::Attestor`] too.

use gatehouse_sdk::{
    AttestationResult, Attestor, Context, Info, JoinRequest, JoinRole, NodeKeyAttestation, Outcome,
    Refusal, Token, TokenRole, constant_time_eq, reason, refuse,
};

/// The `join-token` attestor. It has no configuration.
#[derive(Debug)]
pub struct JoinToken;

/// The configuration: empty, and strict, so a key meant for another attestor is caught at load.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {}

impl Attestor for JoinToken {
    fn info() -> Info {
        Info {
            id: "join-token".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            rounds: 1,
        }
    }

    fn configure(config: &str) -> Result<Self, String> {
        let Config {} = gatehouse_sdk::config::parse(config)?;
        Ok(JoinToken)
    }

    fn verify(&self, cx: &Context<'_>, request: &JoinRequest) -> Outcome {
        match admit(cx, request) {
            Ok(result) => result.into(),
            Err(refusal) => refusal.into(),
        }
    }
}

#[cfg(feature = "component")]
gatehouse_sdk::export_attestor!(JoinToken);

/// Decides one join, spending a use of the token when it admits.
fn admit(cx: &Context<'_>, request: &JoinRequest) -> Result<AttestationResult, Refusal> {
    let token = checked_token(cx, request)?;
    cx.tx.consume_token(&token.id).map_err(|_| {
        refuse(reason::STORAGE)
            .token(&token.id)
            .tenant(&token.tenant_id)
    })?;
    Ok(admission(token))
}

/// The request's token, locked for the transaction and checked as join-token checks it: the
/// secret in constant time, revocation, expiry by database time, a use left, and a role that
/// admits the requested one. Not spent: an attestor that defers first (a challenge, an
/// approval) spends it with `consume_token` on the round that admits.
pub fn checked_token(cx: &Context<'_>, request: &JoinRequest) -> Result<Token, Refusal> {
    let token = live_token(cx, request)?;
    if token.uses_left == 0 {
        return Err(token_refusal(&token, reason::NO_USES_LEFT));
    }
    if !admits(token.role, request.role) {
        return Err(token_refusal(&token, reason::WRONG_ROLE));
    }
    Ok(token)
}

/// The request's token, locked and checked as a single-use machine credential (seed:
/// provisioned and discovery tokens): live as [`checked_token`] checks it, minted for `role`,
/// a role that admits the requested one (provisioned admits `node`, discovery `ramdisk`), and
/// exactly one use left: a spent token is `no-uses-left`, and one minted for several machines
/// is never a machine credential (`not-single-use`). Not spent.
pub fn checked_single_use_token(
    cx: &Context<'_>,
    request: &JoinRequest,
    role: TokenRole,
) -> Result<Token, Refusal> {
    let token = live_token(cx, request)?;
    let join_role = match role {
        TokenRole::Provisioned => JoinRole::Node,
        TokenRole::Discovery => JoinRole::Ramdisk,
        TokenRole::Node | TokenRole::Site => {
            return Err(token_refusal(&token, reason::WRONG_ROLE));
        }
    };
    if token.role != role || request.role != join_role {
        return Err(token_refusal(&token, reason::WRONG_ROLE));
    }
    match token.uses_left {
        0 => Err(token_refusal(&token, reason::NO_USES_LEFT)),
        1 => Ok(token),
        _ => Err(token_refusal(&token, reason::NOT_SINGLE_USE)),
    }
}

/// A refusal naming `token` and its tenant.
fn token_refusal(token: &Token, code: &str) -> Refusal {
    refuse(code).token(&token.id).tenant(&token.tenant_id)
}

/// The request's token, locked, with its secret (constant time), revocation and expiry (by
/// database time) checked.
fn live_token(cx: &Context<'_>, request: &JoinRequest) -> Result<Token, Refusal> {
    let opened = request
        .token
        .as_ref()
        .ok_or_else(|| refuse(reason::NO_TOKEN))?;
    let token = cx
        .tx
        .lock_token(&opened.id)
        .map_err(|error| Refusal::from(error).token(&opened.id))?
        .ok_or_else(|| refuse(reason::UNKNOWN_TOKEN).token(&opened.id))?;
    let secret_sha256 = cx.crypto.sha256(&opened.secret);
    if !constant_time_eq(&secret_sha256, &token.secret_sha256) {
        return Err(token_refusal(&token, reason::BAD_SECRET));
    }
    if token.revoked {
        return Err(token_refusal(&token, reason::REVOKED));
    }
    if cx.tx.now() >= token.expires_at {
        return Err(token_refusal(&token, reason::EXPIRED));
    }
    Ok(token)
}

/// Whether a token minted for `token` admits a machine asking for `join`.
fn admits(token: TokenRole, join: JoinRole) -> bool {
    matches!(
        (token, join),
        (TokenRole::Node, JoinRole::Node) | (TokenRole::Site, JoinRole::Site)
    )
}

/// The admission for a token that passed every check and was spent: into the token's tenant,
/// pool and site, re-keying its `expect.nodeId` if it names one.
pub fn admission(token: Token) -> AttestationResult {
    AttestationResult {
        node_id: token.expect.node_id,
        tenant_id: Some(token.tenant_id),
        pool_id: token.pool_id,
        site_id: token.site_id,
        subject: Some(format!("token:{}", token.id)),
        token_id: Some(token.id),
        node_key: NodeKeyAttestation::Unattested,
        ..AttestationResult::default()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
