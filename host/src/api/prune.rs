//! The admin API's pruning: what the database no longer needs, deleted a batch at a time.
//!
//! Every prune is one short transaction deleting at most `batch` rows (default 5,000, as the
//! seed prunes the ledger), so it never holds SQLite's write lock or a Postgres row lock for
//! long; it answers `{deleted, batch}` and the caller calls again while a batch comes back
//! full (`gatehouse prune ...` does). The age is measured on the database's clock:
//!
//! - `attestation-uses`: single-use evidence records that expired.
//! - `tokens`: tokens created more than `olderThanSeconds` ago that can admit no one (spent,
//!   revoked or expired). A token with a use left that is live is never pruned.
//! - `events`, `audits`: records stamped more than `olderThanSeconds` ago, oldest first, never
//!   one younger (see `crate::store`'s pruning for why they go as a prefix in id order).

use axum::Json;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::http::HeaderMap;
use serde::Deserialize;
use serde_json::{Value, json};

use super::AppState;
use super::admin::authorize;
use super::error::ApiError;
use crate::store::Tx;

/// Default and largest batch of a prune (seed: 5,000 per call).
const DEFAULT_PRUNE_BATCH: u32 = 5_000;
const MAX_PRUNE_BATCH: u32 = 100_000;
/// The largest age a prune takes: a hundred years, far inside i64 milliseconds.
const MAX_OLDER_THAN_SECONDS: u64 = 100 * 366 * 24 * 3600;

/// `POST /v1/admin/attestation-uses/prune` body.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct PruneUses {
    #[serde(default)]
    batch: Option<u32>,
}

/// `POST /v1/admin/{tokens,events,audits}/prune` body: the age is required, so a prune never
/// takes everything by default.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct PruneByAge {
    older_than_seconds: u64,
    #[serde(default)]
    batch: Option<u32>,
}

fn batch(batch: Option<u32>) -> Result<u32, ApiError> {
    let batch = batch.unwrap_or(DEFAULT_PRUNE_BATCH);
    if (1..=MAX_PRUNE_BATCH).contains(&batch) {
        Ok(batch)
    } else {
        Err(ApiError::InvalidInput(format!(
            "batch must be 1 to {MAX_PRUNE_BATCH}"
        )))
    }
}

/// The body's age in ms, range-checked before any arithmetic.
fn older_than_ms(body: &PruneByAge) -> Result<i64, ApiError> {
    if body.older_than_seconds > MAX_OLDER_THAN_SECONDS {
        return Err(ApiError::InvalidInput(format!(
            "olderThanSeconds must be 0 to {MAX_OLDER_THAN_SECONDS}"
        )));
    }
    // At most ~3.2e12 ms: no overflow.
    Ok(body.older_than_seconds as i64 * 1000)
}

/// `POST /v1/admin/attestation-uses/prune`: deletes up to `batch` single-use records that
/// expired by database time, in one short transaction; answers how many. Call it again while
/// it answers a full batch (`gatehouse prune-uses` does).
pub(super) async fn prune_uses(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Json<PruneUses>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    authorize(&state, &headers)?;
    let Json(body) = body?;
    let batch = batch(body.batch)?;
    let mut tx = state.db.begin().await?;
    let now = tx.now().await?;
    let deleted = tx.prune_uses(now, batch).await?;
    finish(tx, "expired single-use records", deleted, batch).await
}

/// `POST /v1/admin/tokens/prune`: deletes up to `batch` tokens older than the age that can
/// admit no one.
pub(super) async fn prune_tokens(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Json<PruneByAge>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    authorize(&state, &headers)?;
    let Json(body) = body?;
    let (age, batch) = (older_than_ms(&body)?, batch(body.batch)?);
    let mut tx = state.db.begin().await?;
    let now = tx.now().await?;
    let deleted = tx.prune_tokens(now, now - age, batch).await?;
    finish(tx, "dead tokens", deleted, batch).await
}

/// `POST /v1/admin/events/prune`: deletes up to `batch` events older than the age.
pub(super) async fn prune_events(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Json<PruneByAge>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    authorize(&state, &headers)?;
    let Json(body) = body?;
    let (age, batch) = (older_than_ms(&body)?, batch(body.batch)?);
    let mut tx = state.db.begin().await?;
    let now = tx.now().await?;
    let deleted = tx.prune_events(now - age, batch).await?;
    finish(tx, "old events", deleted, batch).await
}

/// `POST /v1/admin/audits/prune`: deletes up to `batch` audit records older than the age.
pub(super) async fn prune_audits(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Json<PruneByAge>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    authorize(&state, &headers)?;
    let Json(body) = body?;
    let (age, batch) = (older_than_ms(&body)?, batch(body.batch)?);
    let mut tx = state.db.begin().await?;
    let now = tx.now().await?;
    let deleted = tx.prune_audits(now - age, batch).await?;
    finish(tx, "old audit records", deleted, batch).await
}

/// Commits a prune and answers what it did.
async fn finish(tx: Tx, what: &str, deleted: u64, batch: u32) -> Result<Json<Value>, ApiError> {
    tx.commit().await?;
    if deleted > 0 {
        tracing::info!(deleted, batch, "{what} pruned");
    }
    Ok(Json(json!({ "deleted": deleted, "batch": batch })))
}
