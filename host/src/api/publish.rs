//! The public routes: what agents and relying parties fetch without credentials, and what a
//! load balancer or an orchestrator polls.
//!
//! - `GET /v1/trust`: the join trust agents pin (`join-trust.json`), so an agent (or its
//!   operator) can compare what it pinned with what the host serves; during a rotation's
//!   overlap window it names both node CAs and both join signing keys;
//! - `GET /v1/trust/spiffe-bundle`: the node CA(s) as a SPIFFE trust bundle (a JWK Set) for
//!   relying parties that check node certificates;
//! - `GET /v1/crl` (DER, `application/pkix-crl`) and `GET /v1/crl.pem`: the certificates this
//!   host revoked and that have not expired, signed by the node CA, with a nextUpdate
//!   `[trust] refresh_seconds` later. During a rotation's window the PEM holds one CRL per node
//!   CA (the current CA's first); the DER is the current CA's;
//! - `GET /healthz`: the process answers; `GET /readyz`: the database answers within
//!   [`READY_TIMEOUT`] and attestors are loaded (503 otherwise, with what is missing);
//! - `GET /metrics`: see [`crate::metrics`]. On the API's address it needs the admin key
//!   (refusal counts by reason are for operators); on `[observability] metrics_listen` it is
//!   open.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use gatehouse_proto::JoinTrust;
use serde::Serialize;

use super::AppState;
use super::error::ApiError;
use crate::join::JoinService;
use crate::pki::{CrlEntry, Pki, RevocationReason, SpiffeBundle};
use crate::store::{Db, Revocation};

/// How long `/readyz` waits for the database.
pub const READY_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a signed CRL is served again before it is made anew: a revocation appears in the
/// CRL at most this long after it committed. Bounds the work an unauthenticated client can
/// cause (the CRL reads every unexpired revoked certificate).
pub const CRL_CACHE: Duration = Duration::from_secs(5);

/// CRLs made at an instant.
type CachedCrls = (Instant, Arc<Vec<Vec<u8>>>);

/// What the host publishes, shared by the routes.
pub struct Published {
    /// The API's TLS CA (PEM), which the join trust carries beside the bundle's keys.
    pub tls_ca_pem: String,
    /// `[trust] refresh_seconds`.
    pub refresh: Duration,
    /// The last CRLs made (one per live node CA, the current CA's first), and when.
    crl: tokio::sync::Mutex<Option<CachedCrls>>,
}

impl Published {
    /// What a host whose API's TLS CA is `tls_ca_pem` publishes, refreshed every `refresh`.
    pub fn new(tls_ca_pem: String, refresh: Duration) -> Self {
        Self {
            tls_ca_pem,
            refresh,
            crl: tokio::sync::Mutex::new(None),
        }
    }
}

/// Why a certificate was revoked, as RFC 5280's CRLReason.
pub fn crl_reason(why: Revocation) -> RevocationReason {
    match why {
        // A reclaim (a new identity generation) or a renewal replaced it.
        Revocation::Superseded => RevocationReason::Superseded,
        // The node may no longer hold any identity it had.
        Revocation::IdentityRevoked => RevocationReason::PrivilegeWithdrawn,
        Revocation::NodeRemoved => RevocationReason::CessationOfOperation,
        // An operator's reasons are not recorded.
        Revocation::Operator => RevocationReason::Unspecified,
    }
}

/// Reads the unexpired revoked certificates and signs them into a CRL (DER) by each live node
/// CA, the current one's first.
pub async fn make_crls(db: &Db, pki: &Pki, refresh: Duration) -> Result<Vec<Vec<u8>>, ApiError> {
    let mut tx = db.read().await?;
    let now = tx.now().await?;
    let revoked = tx.revoked_node_certs(now).await?;
    drop(tx);
    let entries: Vec<CrlEntry> = revoked
        .into_iter()
        .map(|(serial_hex, revoked_at_ms, why)| CrlEntry {
            serial_hex,
            revoked_at_ms,
            reason: crl_reason(why),
        })
        .collect();
    let refresh_ms = i64::try_from(refresh.as_millis()).unwrap_or(i64::MAX);
    pki.sign_crls(&entries, now, now.saturating_add(refresh_ms))
        .map_err(|e| ApiError::Internal(format!("signing the CRL: {e}")))
}

/// `GET /v1/trust`.
pub(super) async fn trust(State(state): State<AppState>) -> Json<JoinTrust> {
    Json(
        state
            .pki
            .get()
            .join_trust(&state.published.tls_ca_pem, crate::wall_clock::now_ms()),
    )
}

/// `GET /v1/trust/spiffe-bundle`.
pub(super) async fn spiffe_bundle(
    State(state): State<AppState>,
) -> Result<Json<SpiffeBundle>, ApiError> {
    let bundle = state
        .pki
        .get()
        .spiffe_bundle(
            state.published.refresh.as_secs(),
            crate::wall_clock::now_ms(),
        )
        .map_err(|e| ApiError::Internal(format!("SPIFFE bundle: {e}")))?;
    Ok(Json(bundle))
}

/// The CRLs, from the cache when it is younger than [`CRL_CACHE`].
async fn crls_der(state: &AppState) -> Result<Arc<Vec<Vec<u8>>>, ApiError> {
    let mut cached = state.published.crl.lock().await;
    if let Some((at, der)) = cached.as_ref()
        && at.elapsed() < CRL_CACHE
    {
        return Ok(der.clone());
    }
    let der = Arc::new(make_crls(&state.db, &state.pki.get(), state.published.refresh).await?);
    *cached = Some((Instant::now(), der.clone()));
    Ok(der)
}

/// `GET /v1/crl`: DER, the current node CA's.
pub(super) async fn crl(State(state): State<AppState>) -> Result<Response, ApiError> {
    let crls = crls_der(&state).await?;
    let current = crls
        .first()
        .ok_or_else(|| ApiError::Internal("no CRL was signed".into()))?;
    Ok((
        [(header::CONTENT_TYPE, "application/pkix-crl")],
        current.clone(),
    )
        .into_response())
}

/// `GET /v1/crl.pem`: PEM, one CRL per live node CA.
pub(super) async fn crl_pem(State(state): State<AppState>) -> Result<Response, ApiError> {
    let crls = crls_der(&state).await?;
    let text: String = crls
        .iter()
        .map(|der| crate::pki::pem_block("X509 CRL", der))
        .collect();
    Ok(([(header::CONTENT_TYPE, "application/x-pem-file")], text).into_response())
}

/// `GET /healthz`: the process serves requests.
pub(super) async fn healthz() -> Json<serde_json::Value> {
    Json(serde_json::json!({ "status": "ok" }))
}

/// What `/readyz` found.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Readiness {
    /// Whether the host can decide joins.
    pub ready: bool,
    /// Whether the database answered in time.
    pub database: bool,
    /// How many attestors are loaded.
    pub attestors: usize,
    /// What is wrong, when not ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Checks the database (one statement on the read pool, within [`READY_TIMEOUT`]) and the
/// attestors.
pub async fn readiness(db: &Db, join: &JoinService) -> Readiness {
    let database = tokio::time::timeout(READY_TIMEOUT, async {
        let mut tx = db.read().await?;
        tx.ping().await
    })
    .await;
    let attestors = join.runtime().attestors().len();
    let (database, error) = match database {
        Ok(Ok(_)) => (true, None),
        Ok(Err(e)) => (false, Some(format!("database: {e}"))),
        Err(_) => (
            false,
            Some(format!(
                "database: no answer in {} s",
                READY_TIMEOUT.as_secs()
            )),
        ),
    };
    let error = error.or_else(|| (attestors == 0).then(|| "no attestor is loaded".to_owned()));
    Readiness {
        ready: database && attestors > 0,
        database,
        attestors,
        error,
    }
}

fn readiness_response(readiness: Readiness) -> Response {
    let status = if readiness.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    // Not an API error body: a probe reads the status, people read the fields.
    (status, Json(readiness)).into_response()
}

/// `GET /readyz`.
pub(super) async fn readyz(State(state): State<AppState>) -> Response {
    readiness_response(readiness(&state.db, &state.join).await)
}

fn metrics_response(join: &JoinService) -> Response {
    (
        [(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)],
        join.metrics().encode(join.sink_dropped()),
    )
        .into_response()
}

/// `GET /metrics` on the API's address: an admin key (any admin identity's) is required.
pub(super) async fn metrics(
    super::admin::AdminActor(_): super::admin::AdminActor,
    State(state): State<AppState>,
) -> Response {
    metrics_response(&state.join)
}

/// The router of `[observability] metrics_listen`: `/metrics`, `/healthz` and `/readyz`, open.
pub fn observability_router(db: Db, join: Arc<JoinService>) -> axum::Router {
    use axum::routing::get;
    let state = (db, join);
    axum::Router::new()
        .route(
            "/metrics",
            get(|State((_, join)): State<(Db, Arc<JoinService>)>| async move {
                metrics_response(&join)
            }),
        )
        .route("/healthz", get(healthz))
        .route(
            "/readyz",
            get(|State((db, join)): State<(Db, Arc<JoinService>)>| async move {
                readiness_response(readiness(&db, &join).await)
            }),
        )
        .with_state(state)
}
