//! Admin identities: named admin keys, each operator their own, so that every event an
//! operator's action writes names who did it, and one person's key is revoked without
//! touching anyone else's.
//!
//! A key is `gha1.<key id>.<secret>`: the key id (public, random) finds the identity, the
//! 32-byte secret (base64url) proves it. Only the SHA-256 of the secret is stored and it is
//! compared in constant time, as join tokens are. The key is shown once, when the identity is
//! made. A name is never reused, so an event's actor always means one key holder.
//!
//! The configured `admin_key_file` keeps working as the identity `admin`
//! ([`Actor::BOOTSTRAP`]), so a host that upgrades keeps its operators' access; it is not a
//! row, and `admin` cannot be taken as a name.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::json;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::types::{Admin, CreateAdmin, CreatedAdmin, RevokedAdmin};
use super::{Actor, Id, OpsError, Page, PageRequest, event, record};
use crate::store::{AdminRow, Db, StoreError};

/// The prefix of a named admin key (the version of its format).
pub const KEY_PREFIX: &str = "gha1";

/// The shortest bootstrap key the host accepts ([`crate::app::MIN_ADMIN_KEY_BYTES`]): a
/// presented bootstrap key shorter than this is refused before hashing.
const MIN_BOOTSTRAP_KEY_BYTES: usize = crate::app::MIN_ADMIN_KEY_BYTES;

/// Why a request's key was refused. Each is the same 401 to the client; the log says which.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// No `Authorization: Bearer` key, or one too short to be any key.
    #[error("no admin key")]
    Missing,
    /// A key that is neither the bootstrap key nor any identity's.
    #[error("unknown admin key")]
    Unknown,
    /// The key of an identity that was revoked.
    #[error("admin key of revoked identity {0}")]
    Revoked(String),
    /// The identities could not be read.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A named key, split: its id and its secret's bytes.
struct ParsedKey<'a> {
    key_id: &'a str,
    secret: Vec<u8>,
}

fn parse_key(text: &str) -> Option<ParsedKey<'_>> {
    let mut parts = text.split('.');
    let (Some(KEY_PREFIX), Some(key_id), Some(secret), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    let secret = URL_SAFE_NO_PAD.decode(secret).ok()?;
    (super::is_id(key_id) && secret.len() == 32).then_some(ParsedKey { key_id, secret })
}

/// Who a presented bearer key is: the bootstrap identity when it is the configured key, the
/// identity whose key it is otherwise. `bootstrap` says whether a text is a configured key
/// (`admin_key_file`'s, or during a rotation the previous one: [`crate::app::AdminKeys`]).
pub async fn authenticate(
    db: &Db,
    bootstrap: impl Fn(&str) -> bool,
    presented: &str,
) -> Result<Actor, AuthError> {
    if let Some(key) = parse_key(presented) {
        let mut tx = db.read().await?;
        let row = tx.admin_by_key_id(key.key_id).await?;
        drop(tx);
        let hash: [u8; 32] = Sha256::digest(&key.secret).into();
        return match row {
            Some(row) if bool::from(hash.ct_eq(&row.key_sha256)) => match row.revoked_at {
                None => Ok(Actor::named(
                    Id::new(row.name).map_err(|_| AuthError::Unknown)?,
                )),
                Some(_) => Err(AuthError::Revoked(row.name)),
            },
            _ => Err(AuthError::Unknown),
        };
    }
    if presented.len() < MIN_BOOTSTRAP_KEY_BYTES {
        return Err(AuthError::Missing);
    }
    if bootstrap(presented) {
        Ok(Actor::bootstrap())
    } else {
        Err(AuthError::Unknown)
    }
}

fn view(a: AdminRow) -> Admin {
    Admin {
        name: a.name,
        created_at: a.created_at,
        created_by: a.created_by,
        revoked_at: a.revoked_at,
        revoked_by: a.revoked_by,
    }
}

/// Makes an identity and its key, shown once; `admin.created` names who made it.
pub async fn create(db: &Db, actor: &Actor, req: CreateAdmin) -> Result<CreatedAdmin, OpsError> {
    if req.name == Actor::BOOTSTRAP {
        return Err(OpsError::invalid(format!(
            "`{}` is the configured admin_key_file's identity",
            Actor::BOOTSTRAP
        )));
    }
    let secret: [u8; 32] = rand::random();
    let key_id = crate::store::new_id("adm_");
    let key = format!("{KEY_PREFIX}.{key_id}.{}", URL_SAFE_NO_PAD.encode(secret));
    let mut tx = db.begin().await?;
    let now = tx.now().await?;
    let row = AdminRow {
        name: req.name.to_string(),
        key_id,
        key_sha256: Sha256::digest(secret).into(),
        created_at: now,
        created_by: actor.name().to_owned(),
        revoked_at: None,
        revoked_by: None,
    };
    if !tx.insert_admin(&row).await? {
        tx.rollback().await?;
        return Err(OpsError::Conflict(format!(
            "admin `{}` exists already (names are never reused, revoked or not)",
            req.name
        )));
    }
    record(
        &mut tx,
        actor,
        &event(now, "admin.created", json!({ "name": req.name })),
    )
    .await?;
    tx.commit().await?;
    tracing::info!(admin = %req.name, %actor, "admin identity created");
    Ok(CreatedAdmin {
        name: row.name,
        key,
        created_at: now,
    })
}

/// Identities by name, revoked ones included, a page at a time.
pub async fn list(db: &Db, page: &PageRequest) -> Result<Page<Admin>, OpsError> {
    let (after, limit) = page.resolve::<Id>()?;
    let mut tx = db.begin().await?;
    let after = after.map(Id::into_string).unwrap_or_default();
    let rows = tx.list_admins(&after, limit).await?;
    tx.commit().await?;
    let rows: Vec<Admin> = rows.into_iter().map(view).collect();
    Ok(Page::new(rows, limit, |a: &Admin| a.name.clone()))
}

/// Revokes an identity: its key is refused from the next request on. `admin.revoked` names
/// who revoked it.
pub async fn revoke(db: &Db, actor: &Actor, name: &Id) -> Result<RevokedAdmin, OpsError> {
    let mut tx = db.begin().await?;
    if tx.admin(name).await?.is_none() {
        tx.rollback().await?;
        return Err(OpsError::NotFound);
    }
    let now = tx.now().await?;
    let changed = tx.revoke_admin(name, now, actor.name()).await?;
    if changed {
        record(
            &mut tx,
            actor,
            &event(now, "admin.revoked", json!({ "name": name })),
        )
        .await?;
    }
    tx.commit().await?;
    if changed {
        tracing::info!(admin = %name, %actor, "admin identity revoked");
    }
    Ok(RevokedAdmin {
        name: name.to_string(),
        changed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_well_formed_named_keys_parse() {
        let secret = URL_SAFE_NO_PAD.encode([7u8; 32]);
        let good = format!("gha1.adm_abc.{secret}");
        let parsed = parse_key(&good).unwrap();
        assert_eq!((parsed.key_id, parsed.secret.len()), ("adm_abc", 32));
        for bad in [
            format!("gha2.adm_abc.{secret}"),
            format!("gha1.adm/abc.{secret}"),
            format!("gha1.adm_abc.{secret}.x"),
            "gha1.adm_abc.c2hvcnQ".to_owned(),
            "gha1.adm_abc".to_owned(),
            "x".repeat(44),
        ] {
            assert!(parse_key(&bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn refusals_name_the_reason_for_the_log() {
        assert_eq!(AuthError::Unknown.to_string(), "unknown admin key");
        assert_eq!(
            AuthError::Revoked("alice".into()).to_string(),
            "admin key of revoked identity alice"
        );
    }
}
