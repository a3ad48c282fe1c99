//! The HTTPS API: `POST /v1/join`, `POST /v1/renew` and the site routes (mTLS), and the admin routes, served by
//! axum over rustls.

mod admin;
mod error;
mod join;
mod join_requests;
mod mtls;
mod pools;
mod provisioning;
mod renew;
mod site;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt as _;

pub use error::ApiError;

use crate::join::JoinService;
use crate::store::Db;

/// Largest request body accepted (a TPM answer with its quote and PCRs is a few KiB).
const MAX_BODY: usize = 256 * 1024;
/// A TLS handshake that takes longer is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// What the handlers share.
#[derive(Clone)]
pub struct AppState {
    /// Runs join rounds.
    pub join: Arc<JoinService>,
    /// The database, for the admin routes.
    pub db: Db,
    /// SHA-256 of the admin API's bearer key.
    pub admin_key_sha256: [u8; 32],
}

/// What is known about the connection a request came on.
#[derive(Debug, Clone)]
pub struct Peer {
    /// The remote address.
    pub addr: SocketAddr,
    /// The leaf certificate (DER) the client presented and proved it holds the key of, if
    /// any. Nothing else about it is checked yet (see [`mtls`]).
    pub client_cert: Option<Arc<Vec<u8>>>,
}

/// The routes.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/v1/join", post(join::join))
        .route("/v1/renew", post(renew::renew))
        .route("/v1/leases/{name}/acquire", post(site::acquire))
        .route("/v1/leases/{name}/renew", post(site::renew_lease))
        .route("/v1/leases/{name}/release", post(site::release))
        .route("/v1/site/discovery-tokens", post(site::discovery_token))
        .route(
            "/v1/admin/tokens",
            post(admin::create_token).get(admin::list_tokens),
        )
        .route("/v1/admin/tokens/{id}/revoke", post(admin::revoke_token))
        .route("/v1/admin/nodes", get(admin::list_nodes))
        .route(
            "/v1/admin/nodes/{id}",
            get(admin::show_node).delete(admin::delete_node),
        )
        .route("/v1/admin/nodes/{id}/cordon", post(admin::cordon_node))
        .route("/v1/admin/nodes/{id}/uncordon", post(admin::uncordon_node))
        .route("/v1/admin/nodes/{id}/retire", post(admin::retire_node))
        .route(
            "/v1/admin/nodes/{id}/revoke-identity",
            post(admin::revoke_node_identity),
        )
        .route(
            "/v1/admin/nodes/{id}/certs/{serial}/revoke",
            post(admin::revoke_node_cert),
        )
        .route(
            "/v1/admin/pools",
            post(pools::create_pool).get(pools::list_pools),
        )
        .route(
            "/v1/admin/pools/{tenant}/{id}",
            get(pools::show_pool)
                .put(pools::update_pool)
                .post(pools::update_pool),
        )
        .route(
            "/v1/admin/join-requests",
            get(join_requests::list_join_requests),
        )
        .route(
            "/v1/admin/join-requests/{id}",
            get(join_requests::show_join_request),
        )
        .route(
            "/v1/admin/join-requests/{id}/approve",
            post(join_requests::approve_join_request),
        )
        .route(
            "/v1/admin/join-requests/{id}/deny",
            post(join_requests::deny_join_request),
        )
        .route(
            "/v1/admin/nodes/{id}/inventories",
            post(provisioning::record_inventory).get(provisioning::list_inventories),
        )
        .route(
            "/v1/admin/workflows",
            post(provisioning::start_workflow).get(provisioning::list_workflows),
        )
        .route("/v1/admin/workflows/{id}", get(provisioning::show_workflow))
        .route(
            "/v1/admin/workflows/{id}/complete",
            post(provisioning::complete_workflow),
        )
        .route(
            "/v1/admin/workflows/{id}/cancel",
            post(provisioning::cancel_workflow),
        )
        .route(
            "/v1/admin/attestation-uses/prune",
            post(provisioning::prune_uses),
        )
        .route("/v1/admin/events", get(admin::list_events))
        .route("/v1/admin/audits", get(admin::list_audits))
        .route("/v1/admin/attestors", get(admin::list_attestors))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(state)
}

/// A running server; dropping the handle does not stop it, [`ServerHandle::shutdown`] does.
pub struct ServerHandle {
    /// The address it listens on.
    pub addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl ServerHandle {
    /// Stops accepting, lets open connections finish their current requests, and waits.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// Serves `router` over TLS on `listener`.
pub fn serve(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    router: Router,
) -> std::io::Result<ServerHandle> {
    let addr = listener.local_addr()?;
    let (stop, mut stopped) = watch::channel(false);
    let acceptor = TlsAcceptor::from(tls);
    let task = tokio::spawn(async move {
        let mut connections = tokio::task::JoinSet::new();
        loop {
            let (tcp, peer_addr) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(conn) => conn,
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
                _ = stopped.changed() => break,
            };
            let acceptor = acceptor.clone();
            let router = router.clone();
            let mut stop_conn = stopped.clone();
            connections.spawn(async move {
                let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                    Ok(Ok(tls)) => tls,
                    Ok(Err(e)) => {
                        tracing::debug!(peer = %peer_addr, error = %e, "TLS handshake failed");
                        return;
                    }
                    Err(_) => return,
                };
                let client_cert = tls
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|chain| chain.first())
                    .map(|leaf| Arc::new(leaf.to_vec()));
                let peer = Peer { addr: peer_addr, client_cert };
                let service = router.map_request(move |mut req: axum::extract::Request<hyper::body::Incoming>| {
                    req.extensions_mut().insert(peer.clone());
                    req
                });
                let builder = auto::Builder::new(TokioExecutor::new());
                let conn = builder.serve_connection_with_upgrades(TokioIo::new(tls), TowerToHyperService::new(service));
                tokio::pin!(conn);
                tokio::select! {
                    result = conn.as_mut() => {
                        if let Err(e) = result {
                            tracing::debug!(peer = %peer_addr, error = %e, "connection ended with an error");
                        }
                    }
                    _ = stop_conn.changed() => {
                        conn.as_mut().graceful_shutdown();
                        let _ = conn.await;
                    }
                }
            });
            // Reap finished connections so the set does not grow without bound.
            while connections.try_join_next().is_some() {}
        }
        while connections.join_next().await.is_some() {}
    });
    Ok(ServerHandle { addr, stop, task })
}

/// A rustls server configuration from PEM files' contents. Clients may present a node
/// certificate (issued under `node_ca_der`) for renewal; none is required.
pub fn tls_config(
    cert_pem: &[u8],
    key_pem: &[u8],
    node_ca_der: &[u8],
) -> Result<Arc<rustls::ServerConfig>, ApiError> {
    let certs = rustls_pemfile::certs(&mut &cert_pem[..])
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ApiError::InvalidInput(format!("TLS certificate: {e}")))?;
    let key = rustls_pemfile::private_key(&mut &key_pem[..])
        .map_err(|e| ApiError::InvalidInput(format!("TLS key: {e}")))?
        .ok_or_else(|| ApiError::InvalidInput("TLS key file holds no private key".into()))?;
    let (_, node_ca) = x509_parser::parse_x509_certificate(node_ca_der)
        .map_err(|e| ApiError::InvalidInput(format!("node CA: {e}")))?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let verifier = mtls::NodeCertProof::new(node_ca.subject().as_raw().to_vec(), &provider);
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ApiError::InvalidInput(format!("TLS: {e}")))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .map_err(|e| ApiError::InvalidInput(format!("TLS certificate and key: {e}")))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
