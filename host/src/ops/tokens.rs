//! Join tokens: the one place a token is minted (an operator's `token create`, a provisioning
//! workflow's user data, a site's discovery-token fetch all call [`mint`]), listed and
//! revoked.

use serde_json::json;
use sha2::{Digest, Sha256};

use super::types::{CreateToken, CreatedToken, RevokedToken, Token, TokenExpectation};
use super::{Actor, Id, OpsError, Page, PageRequest, event, record};
use crate::store::{Cursor, Db, NewToken, StoreError, TokenExpect, TokenRole, TokenRow, Tx};

/// Most uses one token may admit.
pub const MAX_USES: u32 = 100_000;
/// Shortest and longest life of a token an operator mints.
pub const MIN_TTL_SECONDS: u64 = 60;
/// Thirty days.
pub const MAX_TTL_SECONDS: u64 = 30 * 24 * 3600;

/// What a token is minted with.
#[derive(Debug, Clone)]
pub(crate) struct Mint {
    /// What it admits.
    pub role: TokenRole,
    /// The tenant machines join.
    pub tenant_id: String,
    /// The pool machines join.
    pub pool_id: Option<String>,
    /// The site machines belong to.
    pub site_id: Option<String>,
    /// How many joins it admits.
    pub uses: u32,
    /// Database time it is minted at.
    pub now: i64,
    /// Its lifetime in ms.
    pub ttl_ms: i64,
    /// Its binding.
    pub expect: TokenExpect,
    /// Whether it may re-key an existing node.
    pub reclaim: bool,
}

/// A minted token: the only time its secret exists outside the machine it is given to.
#[derive(Debug, Clone)]
pub(crate) struct Minted {
    /// The token id.
    pub id: String,
    /// `gh1.<id>.<secret>`.
    pub text: String,
    /// When it stops admitting.
    pub expires_at: i64,
}

/// Mints a token in `tx`: a fresh id and 32-byte secret, of which only the SHA-256 is stored.
pub(crate) async fn mint(tx: &mut Tx, m: Mint) -> Result<Minted, StoreError> {
    let secret: [u8; 32] = rand::random();
    let token = gatehouse_proto::TokenString {
        id: crate::store::new_id("tok_"),
        secret: secret.to_vec(),
    };
    let expires_at = m.now.saturating_add(m.ttl_ms);
    tx.insert_token(&NewToken {
        id: token.id.clone(),
        role: m.role,
        secret_sha256: Sha256::digest(secret).into(),
        tenant_id: m.tenant_id,
        pool_id: m.pool_id,
        site_id: m.site_id,
        expires_at,
        uses: m.uses,
        expect: m.expect,
        reclaim: m.reclaim,
        created_at: m.now,
    })
    .await?;
    Ok(Minted {
        text: token.to_text(),
        id: token.id,
        expires_at,
    })
}

/// The binding a request asks for, normalised as joins compare it.
fn expectation(e: &TokenExpectation) -> Result<TokenExpect, OpsError> {
    let prefixed = |prefix: &str| {
        let prefix = prefix.to_owned();
        move |e: OpsError| match e {
            OpsError::InvalidInput(m) => OpsError::InvalidInput(format!("{prefix}{m}")),
            other => other,
        }
    };
    let node_id = match &e.node_id {
        Some(id) => Some(
            Id::new(id.as_str())
                .map_err(|_| OpsError::invalid("expect.nodeId is not an id"))?
                .into_string(),
        ),
        None => None,
    };
    Ok(TokenExpect {
        product_uuid: e
            .product_uuid
            .as_deref()
            .map(|u| super::product_uuid(u).map_err(prefixed("expect.")))
            .transpose()?,
        mac: e
            .mac
            .as_deref()
            .map(|m| super::mac(m).map_err(prefixed("expect.mac: ")))
            .transpose()?,
        node_id,
    })
}

/// Mints a token an operator asked for, with its `token.created` event.
pub async fn create(db: &Db, actor: &Actor, req: CreateToken) -> Result<CreatedToken, OpsError> {
    if !(1..=MAX_USES).contains(&req.uses) {
        return Err(OpsError::invalid(format!("uses must be 1 to {MAX_USES}")));
    }
    if !(MIN_TTL_SECONDS..=MAX_TTL_SECONDS).contains(&req.ttl_seconds) {
        return Err(OpsError::invalid(format!(
            "ttlSeconds must be {MIN_TTL_SECONDS} to {MAX_TTL_SECONDS}"
        )));
    }
    let expect = expectation(&req.expect)?;
    let mut tx = db.begin().await?;
    // A token naming a tenant or pool that does not exist could never admit anyone (and the
    // foreign keys would make the insert fail as a 5xx): say so instead.
    if !tx.tenant_exists(&req.tenant_id).await? {
        tx.rollback().await?;
        return Err(OpsError::invalid(format!(
            "tenant {} does not exist",
            req.tenant_id
        )));
    }
    if let Some(pool_id) = &req.pool_id
        && tx.pool(&req.tenant_id, pool_id).await?.is_none()
    {
        tx.rollback().await?;
        return Err(OpsError::invalid(format!(
            "pool {pool_id} does not exist in tenant {}",
            req.tenant_id
        )));
    }
    let now = tx.now().await?;
    let minted = mint(
        &mut tx,
        Mint {
            role: req.role,
            tenant_id: req.tenant_id.clone().into_string(),
            pool_id: req.pool_id.clone().map(Id::into_string),
            site_id: req.site_id.clone().map(Id::into_string),
            uses: req.uses,
            now,
            // At most 30 days in ms: no overflow.
            ttl_ms: req.ttl_seconds as i64 * 1000,
            expect: expect.clone(),
            reclaim: req.reclaim,
        },
    )
    .await?;
    let mut e = event(
        now,
        "token.created",
        json!({
            "role": req.role,
            "uses": req.uses,
            "expiresAt": minted.expires_at,
            "poolId": req.pool_id,
            "siteId": req.site_id,
            "expect": { "productUuid": expect.product_uuid, "mac": expect.mac, "nodeId": expect.node_id },
            "reclaim": req.reclaim,
        }),
    );
    e.tenant_id = Some(req.tenant_id.into_string());
    e.token_id = Some(minted.id.clone());
    record(&mut tx, actor, &e).await?;
    tx.commit().await?;
    tracing::info!(token_id = %minted.id, role = %req.role, uses = req.uses, %actor, "token created");
    Ok(CreatedToken {
        id: minted.id,
        token: minted.text,
        expires_at: minted.expires_at,
    })
}

/// A token row as the API shows it.
pub(crate) fn view(t: TokenRow) -> Token {
    Token {
        id: t.id,
        role: t.role,
        tenant_id: t.tenant_id,
        pool_id: t.pool_id,
        site_id: t.site_id,
        expires_at: t.expires_at,
        revoked: t.revoked,
        uses_total: t.uses_total,
        uses_left: t.uses_left,
        expect: TokenExpectation {
            product_uuid: t.expect.product_uuid,
            mac: t.expect.mac,
            node_id: t.expect.node_id,
        },
        reclaim: t.reclaim,
        created_at: t.created_at,
    }
}

/// Tokens, oldest first, a page at a time (never their secrets).
pub async fn list(db: &Db, page: &PageRequest) -> Result<Page<Token>, OpsError> {
    let (after, limit) = page.resolve::<Cursor>()?;
    let after = after.unwrap_or_else(Cursor::start);
    let mut tx = db.begin().await?;
    let rows = tx.list_tokens_page(&after, limit).await?;
    tx.commit().await?;
    let rows: Vec<Token> = rows.into_iter().map(view).collect();
    Ok(Page::new(rows, limit, |t: &Token| Cursor {
        created_at: t.created_at,
        id: t.id.clone(),
    }))
}

/// Revokes a token, with its `token.revoked` event.
pub async fn revoke(db: &Db, actor: &Actor, id: &Id) -> Result<RevokedToken, OpsError> {
    let mut tx = db.begin().await?;
    let Some(token) = tx.lock_token(id).await? else {
        tx.rollback().await?;
        return Err(OpsError::NotFound);
    };
    if !tx.revoke_token(id).await? {
        tx.rollback().await?;
        return Err(OpsError::NotFound);
    }
    let at = tx.now().await?;
    let mut e = event(at, "token.revoked", json!({ "wasRevoked": token.revoked }));
    e.tenant_id = Some(token.tenant_id);
    e.token_id = Some(token.id);
    record(&mut tx, actor, &e).await?;
    tx.commit().await?;
    tracing::info!(token_id = %id, %actor, "token revoked");
    Ok(RevokedToken {
        id: id.to_string(),
        revoked: true,
    })
}

/// Revokes a token if it exists, is not revoked and has uses left; whether it did. A finished
/// workflow's unspent token, or the discovery token a new fetch replaces, dies this way.
pub(crate) async fn revoke_unspent(
    tx: &mut Tx,
    token_id: Option<&str>,
) -> Result<bool, StoreError> {
    let Some(token_id) = token_id else {
        return Ok(false);
    };
    match tx.lock_token(token_id).await? {
        Some(token) if token.uses_left > 0 && !token.revoked => tx.revoke_token(token_id).await,
        _ => Ok(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expectations_are_normalised_or_refused() {
        let e = expectation(&TokenExpectation {
            product_uuid: Some("4C4C4544-0042-3510-8052-B4C04F384D32".into()),
            mac: Some("AA-BB-CC-00-11-22".into()),
            node_id: Some("node_1".into()),
        })
        .unwrap();
        assert_eq!(
            (
                e.product_uuid.as_deref(),
                e.mac.as_deref(),
                e.node_id.as_deref()
            ),
            (
                Some("4c4c4544-0042-3510-8052-b4c04f384d32"),
                Some("aa:bb:cc:00:11:22"),
                Some("node_1")
            )
        );
        let bad_mac = TokenExpectation {
            mac: Some("aa".into()),
            ..Default::default()
        };
        assert_eq!(
            expectation(&bad_mac).unwrap_err().to_string(),
            "invalid input: expect.mac: \"aa\" is not a MAC address"
        );
        let bad_node = TokenExpectation {
            node_id: Some("a/b".into()),
            ..Default::default()
        };
        assert!(expectation(&bad_node).is_err());
    }
}
