//! The webhook target: one `POST` of the refusal's JSON per refusal.
//!
//! `https://` with rustls, trusting only `ca_file`'s certificates when set, else the system's
//! CA bundle (`SSL_CERT_FILE`, or the usual Linux paths); `http://` only to a loopback
//! address. Redirects are not followed; an answer other than 2xx is a failed delivery.

use std::path::Path;
use std::time::Duration;

use reqwest::Url;
use reqwest::header::CONTENT_TYPE;

use super::{DeliveryError, Refusal, SinkError};

/// Where the system CA bundle usually is (Debian and Ubuntu, Fedora and RHEL, Alpine and macOS).
const SYSTEM_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
];

pub(super) struct Webhook {
    client: reqwest::Client,
    url: Url,
}

/// Parses the URL and says whether it needs TLS: `https://`, or `http://` to loopback.
pub(super) fn check_url(url: &str) -> Result<(Url, bool), SinkError> {
    let bad = |why| SinkError::BadUrl {
        url: url.to_owned(),
        why,
    };
    let parsed = Url::parse(url).map_err(|_| bad("not a URL"))?;
    match parsed.scheme() {
        "https" => Ok((parsed, true)),
        "http" => {
            let loopback = parsed.host_str().is_some_and(|h| {
                h.eq_ignore_ascii_case("localhost")
                    || h.trim_start_matches('[')
                        .trim_end_matches(']')
                        .parse::<std::net::IpAddr>()
                        .is_ok_and(|ip| ip.is_loopback())
            });
            if loopback {
                Ok((parsed, false))
            } else {
                Err(bad(
                    "http:// is allowed only to a loopback address; use https://",
                ))
            }
        }
        _ => Err(bad("the scheme must be https (or http to loopback)")),
    }
}

fn read_ca(path: &Path) -> Result<Vec<reqwest::Certificate>, SinkError> {
    let ca = |why: String| SinkError::Ca {
        path: path.to_owned(),
        why,
    };
    let pem = std::fs::read(path).map_err(|e| ca(e.to_string()))?;
    let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| ca(e.to_string()))?;
    if certs.is_empty() {
        return Err(ca("no PEM certificate in it".into()));
    }
    Ok(certs)
}

fn system_roots() -> Result<Vec<reqwest::Certificate>, SinkError> {
    let from_env = std::env::var_os("SSL_CERT_FILE").map(std::path::PathBuf::from);
    let path = from_env
        .into_iter()
        .chain(SYSTEM_BUNDLES.iter().map(std::path::PathBuf::from))
        .find(|p| p.is_file())
        .ok_or(SinkError::NoCaBundle)?;
    read_ca(&path)
}

impl Webhook {
    pub(super) fn new(
        url: &str,
        timeout: Duration,
        ca_file: Option<&Path>,
    ) -> Result<Self, SinkError> {
        let (url, tls) = check_url(url)?;
        // reqwest is built without a crypto provider, so that aws-lc-rs is the one TLS stack
        // (its default features would link ring too): make aws-lc-rs the process default.
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let mut builder = reqwest::Client::builder()
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .https_only(tls)
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(timeout)
            .timeout(timeout)
            .user_agent(concat!("gatehouse/", env!("CARGO_PKG_VERSION")));
        if tls {
            let roots = match ca_file {
                Some(path) => read_ca(path)?,
                None => system_roots()?,
            };
            for cert in roots {
                builder = builder.add_root_certificate(cert);
            }
        }
        Ok(Self {
            client: builder.build()?,
            url,
        })
    }

    pub(super) async fn deliver(&self, refusal: &Refusal) -> Result<(), DeliveryError> {
        let body = serde_json::to_vec(refusal).map_err(|e| DeliveryError::Http(e.to_string()))?;
        let response = self
            .client
            .post(self.url.clone())
            .header(CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .await
            .map_err(|e| DeliveryError::Http(without_url(e).to_string()))?;
        let status = response.status();
        if status.is_success() {
            Ok(())
        } else {
            Err(DeliveryError::Http(format!("answered {status}")))
        }
    }
}

/// The error without the URL, which may carry a secret path or query.
fn without_url(e: reqwest::Error) -> reqwest::Error {
    e.without_url()
}
