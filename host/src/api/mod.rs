//! The HTTPS API: `POST /v1/join`, `POST /v1/renew` and the site routes (mTLS), the public
//! trust, CRL, health and readiness routes ([`publish`]), and the admin routes, served by axum
//! over rustls.

mod admin;
mod error;
mod join;
mod join_requests;
pub mod limits;
mod middleware;
mod mtls;
mod pools;
mod provisioning;
mod prune;
pub mod publish;
mod renew;
mod server;
mod site;
mod tenants;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};

pub use error::ApiError;
pub use limits::Limits;
pub use server::{ServerHandle, serve};

use crate::join::JoinService;
use crate::store::Db;

/// What the handlers share.
#[derive(Clone)]
pub struct AppState {
    /// Runs join rounds.
    pub join: Arc<JoinService>,
    /// The database, for the admin routes.
    pub db: Db,
    /// The admin API's bearer keys (the current one, and the previous one during a rotation).
    pub admin_keys: Arc<crate::app::AdminKeys>,
    /// The host's PKI: the CRL is signed and the SPIFFE bundle made with it.
    pub pki: Arc<crate::pki::Pki>,
    /// What the public routes serve.
    pub published: Arc<publish::Published>,
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

/// The routes, behind the limits that do not need the connection: the body size, the request
/// timeout, the join rate per source address, control characters in the URI, and a JSON body
/// for every error.
pub fn router(state: AppState, limits: &Limits) -> Router {
    let join_route = match limits.join_rate {
        Some(rate) => post(join::join).route_layer(axum::middleware::from_fn_with_state(
            Arc::new(limits::RateLimiter::new(rate)),
            middleware::rate_limit,
        )),
        None => post(join::join),
    };
    // Renewals from one source address get a budget of their own at the same rate, in front
    // of the per-node interval JoinService enforces: a node hammering /v1/renew is answered
    // 429 here before each attempt costs a database transaction and an audit row.
    let renew_route = match limits.join_rate {
        Some(rate) => post(renew::renew).route_layer(axum::middleware::from_fn_with_state(
            Arc::new(limits::RateLimiter::new(rate)),
            middleware::rate_limit,
        )),
        None => post(renew::renew),
    };
    Router::new()
        .route("/v1/join", join_route)
        .route("/v1/renew", renew_route)
        .route("/v1/trust", get(publish::trust))
        .route("/v1/trust/spiffe-bundle", get(publish::spiffe_bundle))
        .route("/v1/crl", get(publish::crl))
        .route("/v1/crl.pem", get(publish::crl_pem))
        .route("/healthz", get(publish::healthz))
        .route("/readyz", get(publish::readyz))
        .route("/metrics", get(publish::metrics))
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
        .route("/v1/admin/attestation-uses/prune", post(prune::prune_uses))
        .route("/v1/admin/tokens/prune", post(prune::prune_tokens))
        .route("/v1/admin/events/prune", post(prune::prune_events))
        .route("/v1/admin/audits/prune", post(prune::prune_audits))
        .route("/v1/admin/events", get(admin::list_events))
        .route("/v1/admin/audits", get(admin::list_audits))
        .route("/v1/admin/attestors", get(admin::list_attestors))
        .route(
            "/v1/admin/tenants",
            post(tenants::create_tenant).get(tenants::list_tenants),
        )
        .fallback(middleware::not_found)
        .method_not_allowed_fallback(middleware::method_not_allowed)
        .layer(DefaultBodyLimit::max(limits.max_body))
        .layer(axum::middleware::from_fn_with_state(
            limits.max_body,
            middleware::content_length,
        ))
        .layer(axum::middleware::from_fn_with_state(
            limits.request_timeout,
            middleware::timeout,
        ))
        .layer(axum::middleware::from_fn(middleware::clean_uri))
        .layer(axum::middleware::from_fn(middleware::json_errors))
        .with_state(state)
}

/// The API's TLS server configuration over `cert_pem` (chain, leaf first) and `key_pem`, asking
/// clients for a node certificate of `node_ca_der` (verified by the renew and site routes), and
/// the handle that replaces the certificate while serving ([`TlsCertificate::replace`]).
pub fn tls_config(
    cert_pem: &[u8],
    key_pem: &[u8],
    node_ca_der: &[u8],
) -> Result<(Arc<rustls::ServerConfig>, Arc<TlsCertificate>), ApiError> {
    let (_, node_ca) = x509_parser::parse_x509_certificate(node_ca_der)
        .map_err(|e| ApiError::InvalidInput(format!("node CA: {e}")))?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let certificate = Arc::new(TlsCertificate(std::sync::RwLock::new(certified_key(
        cert_pem, key_pem, &provider,
    )?)));
    let verifier = mtls::NodeCertProof::new(node_ca.subject().as_raw().to_vec(), &provider);
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ApiError::InvalidInput(format!("TLS: {e}")))?
        .with_client_cert_verifier(verifier)
        .with_cert_resolver(certificate.clone());
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok((Arc::new(config), certificate))
}

/// The API's TLS certificate and key, replaceable while the server runs: handshakes after
/// [`TlsCertificate::replace`] present the new one, connections already open keep theirs.
#[derive(Debug)]
pub struct TlsCertificate(std::sync::RwLock<Arc<rustls::sign::CertifiedKey>>);

impl TlsCertificate {
    /// Loads a new certificate chain and key; on any error (unreadable PEM, no key, a key that
    /// does not match the certificate) the current one stays.
    pub fn replace(&self, cert_pem: &[u8], key_pem: &[u8]) -> Result<(), ApiError> {
        let provider = rustls::crypto::aws_lc_rs::default_provider();
        let key = certified_key(cert_pem, key_pem, &provider)?;
        *self
            .0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = key;
        Ok(())
    }
}

impl rustls::server::ResolvesServerCert for TlsCertificate {
    fn resolve(
        &self,
        _: rustls::server::ClientHello<'_>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(
            self.0
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone(),
        )
    }
}

fn certified_key(
    cert_pem: &[u8],
    key_pem: &[u8],
    provider: &rustls::crypto::CryptoProvider,
) -> Result<Arc<rustls::sign::CertifiedKey>, ApiError> {
    let certs = rustls_pemfile::certs(&mut &cert_pem[..])
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ApiError::InvalidInput(format!("TLS certificate: {e}")))?;
    if certs.is_empty() {
        return Err(ApiError::InvalidInput(
            "TLS certificate file holds no certificate".into(),
        ));
    }
    let key = rustls_pemfile::private_key(&mut &key_pem[..])
        .map_err(|e| ApiError::InvalidInput(format!("TLS key: {e}")))?
        .ok_or_else(|| ApiError::InvalidInput("TLS key file holds no private key".into()))?;
    rustls::sign::CertifiedKey::from_der(certs, key, provider)
        .map(Arc::new)
        .map_err(|e| ApiError::InvalidInput(format!("TLS certificate and key: {e}")))
}
