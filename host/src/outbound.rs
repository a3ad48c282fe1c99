//! The host's client for what it calls out to: the refusal webhook and fetched configuration
//! values (a provider's JWKS). One rule for both: `https://` with rustls on aws-lc-rs,
//! trusting only a configured CA file's certificates when set, else the system's CA bundle
//! (`SSL_CERT_FILE`, or the usual Linux paths); `http://` only to a loopback address (a local
//! relay or sidecar, and the tests). Redirects are not followed: a target that moved is
//! reconfigured, not chased to wherever a redirect points.

use std::path::{Path, PathBuf};
use std::time::Duration;

use reqwest::Url;

/// Where the system CA bundle usually is (Debian and Ubuntu, Fedora and RHEL, Alpine and macOS).
const SYSTEM_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
];

/// Why an outbound client could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OutboundError {
    /// The URL does not parse, or is neither `https://` nor `http://` to loopback.
    #[error("url {url:?}: {why}")]
    BadUrl {
        /// The URL as configured.
        url: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A CA file could not be read or holds no certificate.
    #[error("CA file {path}: {why}")]
    Ca {
        /// The file.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// No CA file configured and no system CA bundle found.
    #[error("no system CA bundle found: set ca_file")]
    NoCaBundle,
    /// The HTTP client could not be built.
    #[error("HTTP client: {0}")]
    Client(#[from] reqwest::Error),
}

/// Parses `url` and says whether it needs TLS: `https://`, or `http://` to loopback.
pub fn check_url(url: &str) -> Result<(Url, bool), OutboundError> {
    let bad = |why| OutboundError::BadUrl {
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

/// A client for `url` (checked by [`check_url`]) with `timeout` for connecting and for the
/// whole exchange, trusting `ca_file` (PEM) when given, else the system's CA bundle.
pub fn client(
    url: &str,
    timeout: Duration,
    ca_file: Option<&Path>,
) -> Result<(reqwest::Client, Url), OutboundError> {
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
    Ok((builder.build()?, url))
}

/// The error without the URL, which may carry a secret path or query.
pub fn without_url(e: reqwest::Error) -> reqwest::Error {
    e.without_url()
}

fn read_ca(path: &Path) -> Result<Vec<reqwest::Certificate>, OutboundError> {
    let ca = |why: String| OutboundError::Ca {
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

fn system_roots() -> Result<Vec<reqwest::Certificate>, OutboundError> {
    let from_env = std::env::var_os("SSL_CERT_FILE").map(PathBuf::from);
    let path = from_env
        .into_iter()
        .chain(SYSTEM_BUNDLES.iter().map(PathBuf::from))
        .find(|p| p.is_file())
        .ok_or(OutboundError::NoCaBundle)?;
    read_ca(&path)
}

#[cfg(test)]
mod tests {
    use super::check_url;

    #[test]
    fn urls_are_https_or_loopback_http() {
        let check = |url: &str| check_url(url).map(|_| ()).map_err(|e| e.to_string());
        assert!(check("https://hooks.example.com/x").is_ok());
        assert!(check("http://127.0.0.1:9/x").is_ok());
        assert!(check("http://[::1]:9/x").is_ok());
        assert!(check("http://localhost:9/x").is_ok());
        assert!(check("http://hooks.example.com/x").is_err());
        assert!(check("http://10.0.0.1/x").is_err());
        assert!(check("ftp://127.0.0.1/x").is_err());
        assert!(check("not a url").is_err());
    }
}
