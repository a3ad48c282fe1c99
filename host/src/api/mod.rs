//! The HTTPS API: `POST /v1/join`, `POST /v1/renew` and the site routes (mTLS), the public
//! trust, CRL, health and readiness routes ([`publish`]), the admin routes (`admin`, over
//! [`crate::ops`]) and their OpenAPI document ([`openapi`]), served by axum over rustls.

mod admin;
mod error;
mod join;
pub mod limits;
mod middleware;
mod mtls;
pub mod openapi;
pub mod publish;
mod renew;
mod server;
mod site;

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

/// The response header naming where the next page of an admin list starts, present when a
/// page came back full.
pub const NEXT_CURSOR: &str = "x-next-cursor";

/// What the handlers share.
#[derive(Clone)]
pub struct AppState {
    /// Runs join rounds.
    pub join: Arc<JoinService>,
    /// The database, for the admin routes.
    pub db: Db,
    /// The configured admin keys (`admin_key_file`: the current one, and the previous one
    /// during a rotation), the bootstrap identity `admin`; named identities are in the
    /// database ([`crate::ops::admins`]).
    pub admin_keys: Arc<crate::app::AdminKeys>,
    /// The host's PKI: the CRL is signed and the SPIFFE bundle made with it.
    pub pki: crate::pki::LivePki,
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
        .route("/v1/openapi.json", get(openapi::document))
        .route(
            "/v1/admin/tokens",
            post(admin::tokens::create).get(admin::tokens::list),
        )
        .route("/v1/admin/tokens/{id}/revoke", post(admin::tokens::revoke))
        .route("/v1/admin/nodes", get(admin::nodes::list))
        .route(
            "/v1/admin/nodes/{id}",
            get(admin::nodes::show).delete(admin::nodes::delete),
        )
        .route("/v1/admin/nodes/{id}/cordon", post(admin::nodes::cordon))
        .route(
            "/v1/admin/nodes/{id}/uncordon",
            post(admin::nodes::uncordon),
        )
        .route("/v1/admin/nodes/{id}/retire", post(admin::nodes::retire))
        .route(
            "/v1/admin/nodes/{id}/revoke-identity",
            post(admin::nodes::revoke_identity),
        )
        .route(
            "/v1/admin/nodes/{id}/certs/{serial}/revoke",
            post(admin::nodes::revoke_cert),
        )
        .route(
            "/v1/admin/nodes/{id}/inventories",
            post(admin::nodes::record_inventory).get(admin::nodes::inventories),
        )
        .route(
            "/v1/admin/pools",
            post(admin::pools::create).get(admin::pools::list),
        )
        .route(
            "/v1/admin/pools/{tenant}/{id}",
            get(admin::pools::show)
                .put(admin::pools::update)
                .post(admin::pools::update),
        )
        .route("/v1/admin/join-requests", get(admin::join_requests::list))
        .route(
            "/v1/admin/join-requests/{id}",
            get(admin::join_requests::show),
        )
        .route(
            "/v1/admin/join-requests/{id}/approve",
            post(admin::join_requests::approve),
        )
        .route(
            "/v1/admin/join-requests/{id}/deny",
            post(admin::join_requests::deny),
        )
        .route(
            "/v1/admin/workflows",
            post(admin::workflows::start).get(admin::workflows::list),
        )
        .route("/v1/admin/workflows/{id}", get(admin::workflows::show))
        .route(
            "/v1/admin/workflows/{id}/complete",
            post(admin::workflows::complete),
        )
        .route(
            "/v1/admin/workflows/{id}/cancel",
            post(admin::workflows::cancel),
        )
        .route("/v1/admin/attestation-uses/prune", post(admin::prune::uses))
        .route("/v1/admin/tokens/prune", post(admin::prune::tokens))
        .route("/v1/admin/events/prune", post(admin::prune::events))
        .route("/v1/admin/audits/prune", post(admin::prune::audits))
        .route("/v1/admin/events", get(admin::journal::events))
        .route("/v1/admin/audits", get(admin::journal::audits))
        .route("/v1/admin/attestors", get(admin::attestors::list))
        .route(
            "/v1/admin/tenants",
            post(admin::tenants::create).get(admin::tenants::list),
        )
        .route(
            "/v1/admin/admins",
            post(admin::admins::create).get(admin::admins::list),
        )
        .route(
            "/v1/admin/admins/{name}/revoke",
            post(admin::admins::revoke),
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
