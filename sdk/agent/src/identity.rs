//! The files a joined agent keeps: node.key (0600), node.crt, identity.json.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::client::Joined;
use crate::key::{KeyError, NodeKey};

/// identity.json.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Identity {
    /// The node id.
    pub node_id: String,
    /// The trust domain.
    pub trust_domain: String,
    /// The SPIFFE ID.
    pub spiffe_id: String,
    /// The certificate's notAfter, ms since the epoch.
    pub not_after: i64,
    /// The attestor that admitted the machine.
    pub attestor: String,
}

/// Why the identity could not be written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IdentityError {
    /// An identity already exists there.
    #[error("{0} already holds an identity; move it aside first")]
    Exists(PathBuf),
    /// A file could not be written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The key could not be written.
    #[error(transparent)]
    Key(#[from] KeyError),
}

fn pem(der: &[u8]) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

/// Writes node.key, node.crt (PEM chain, leaf first) and identity.json into `dir` (created
/// 0700 if missing). Refuses a directory that already holds an identity.
pub fn write_identity(
    dir: &Path,
    key: &NodeKey,
    joined: &Joined,
    trust_domain: &str,
) -> Result<Identity, IdentityError> {
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| IdentityError::Io { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let identity_path = dir.join("identity.json");
    if identity_path.exists() || dir.join("node.key").exists() {
        return Err(IdentityError::Exists(dir.to_owned()));
    }
    key.save(&dir.join("node.key"))?;
    let crt_path = dir.join("node.crt");
    let chain: String = joined.chain.iter().map(|c| pem(c)).collect();
    write_new(&crt_path, chain.as_bytes(), 0o644).map_err(io(&crt_path))?;
    let identity = Identity {
        node_id: joined.node_id.clone(),
        trust_domain: trust_domain.to_owned(),
        spiffe_id: joined.spiffe_id.clone(),
        not_after: joined.not_after_ms,
        attestor: joined.attestor.clone(),
    };
    let text = serde_json::to_vec_pretty(&identity).map_err(|e| IdentityError::Io {
        path: identity_path.clone(),
        source: e.into(),
    })?;
    write_new(&identity_path, &text, 0o644).map_err(io(&identity_path))?;
    Ok(identity)
}

fn write_new(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)?;
    f.write_all(bytes)
}
