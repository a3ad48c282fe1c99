//! Join tokens: the checks every token-based attestor shares, so a third-party attestor that
//! takes a token (alone, or beside evidence of its own) checks it exactly as the built-in
//! `join-token` does.
//!
//! A round locks and checks the token with [`checked`] (or [`checked_single_use`] for a
//! machine credential), decides, and only on the round that admits spends it with [`spend`]:
//! a round that defers (a challenge, an approval) must spend nothing.
//!
//! ```
//! use gatehouse_sdk::{token, Context, JoinRequest, Outcome, Refusal};
//!
//! fn verify(cx: &Context<'_>, request: &JoinRequest) -> Result<Outcome, Refusal> {
//!     let token = token::checked(cx, request)?;
//!     // ... the attestor's own evidence, checked here ...
//!     token::spend(cx, &token)?;
//!     Ok(token::admission(token).into())
//! }
//! ```

use crate::{
    AttestationResult, Context, JoinRequest, JoinRole, NodeKeyAttestation, Refusal, Token,
    TokenRole, constant_time_eq, reason, refuse,
};
use alloc::format;

/// The request's token, locked for the round and checked as join-token checks it: the secret
/// in constant time, revocation, expiry by database time, a use left, and a role that admits
/// the requested one (node tokens admit `node`, site tokens `site`; provisioned and discovery
/// tokens belong to their own attestors). Not spent.
pub fn checked(cx: &Context<'_>, request: &JoinRequest) -> Result<Token, Refusal> {
    let token = live(cx, request)?;
    if token.uses_left == 0 {
        return Err(refusal(&token, reason::NO_USES_LEFT));
    }
    let admits = matches!(
        (token.role, request.role),
        (TokenRole::Node, JoinRole::Node) | (TokenRole::Site, JoinRole::Site)
    );
    if !admits {
        return Err(refusal(&token, reason::WRONG_ROLE));
    }
    Ok(token)
}

/// The request's token, locked and checked as a single-use machine credential (provisioned
/// and discovery tokens): live as [`checked`] checks it, minted for `role`, a join role that
/// role admits (provisioned admits `node`, discovery `ramdisk`), and exactly one use left: a
/// spent token is `no-uses-left`, and one minted for several machines is never a machine
/// credential (`not-single-use`). Not spent.
pub fn checked_single_use(
    cx: &Context<'_>,
    request: &JoinRequest,
    role: TokenRole,
) -> Result<Token, Refusal> {
    let token = live(cx, request)?;
    let join_role = match role {
        TokenRole::Provisioned => JoinRole::Node,
        TokenRole::Discovery => JoinRole::Ramdisk,
        TokenRole::Node | TokenRole::Site => return Err(refusal(&token, reason::WRONG_ROLE)),
    };
    if token.role != role || request.role != join_role {
        return Err(refusal(&token, reason::WRONG_ROLE));
    }
    match token.uses_left {
        0 => Err(refusal(&token, reason::NO_USES_LEFT)),
        1 => Ok(token),
        _ => Err(refusal(&token, reason::NOT_SINGLE_USE)),
    }
}

/// Spends one use of a token [`checked`] in this round; a storage failure is a
/// `storage-error` refusal naming the token.
pub fn spend(cx: &Context<'_>, token: &Token) -> Result<(), Refusal> {
    cx.tx
        .consume_token(&token.id)
        .map(drop)
        .map_err(|_| refusal(token, reason::STORAGE))
}

/// The admission for a token that passed every check and was spent: into the token's tenant,
/// pool and site, re-keying the node its `expect` names, if any.
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

/// A refusal with `code` naming `token` and its tenant.
pub fn refusal(token: &Token, code: &str) -> Refusal {
    refuse(code).token(&token.id).tenant(&token.tenant_id)
}

/// The request's token, locked, with its secret (constant time), revocation and expiry (by
/// database time) checked, in that order.
fn live(cx: &Context<'_>, request: &JoinRequest) -> Result<Token, Refusal> {
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
        return Err(refusal(&token, reason::BAD_SECRET));
    }
    if token.revoked {
        return Err(refusal(&token, reason::REVOKED));
    }
    if cx.tx.now() >= token.expires_at {
        return Err(refusal(&token, reason::EXPIRED));
    }
    Ok(token)
}
