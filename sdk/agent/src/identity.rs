//! The files a joined agent keeps: node.key (0600), node.crt, identity.json.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::client::Joined;
use crate::key::{KeyError, NodeKey};

/// The node key, PKCS#8 PEM, mode 0600.
pub const KEY_FILE: &str = "node.key";
/// The certificate chain, PEM, leaf first.
pub const CERT_FILE: &str = "node.crt";
/// [`Identity`] as JSON.
pub const IDENTITY_FILE: &str = "identity.json";

/// identity.json: who the machine is, for people and for later commands (renew, reset).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Identity {
    /// The node id.
    pub node_id: String,
    /// The trust domain.
    pub trust_domain: String,
    /// The SPIFFE ID: `spiffe://<trustDomain>/node/<nodeId>`.
    pub spiffe_id: String,
    /// The certificate's notAfter, ms since the Unix epoch.
    pub not_after: i64,
    /// The attestor that admitted the machine.
    pub attestor: String,
}

/// Why the identity could not be written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IdentityError {
    /// The directory already holds (part of) an identity, which is never overwritten.
    #[error("{0} already holds an identity")]
    Exists(PathBuf),
    /// A file or the directory could not be written.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The key could not be written.
    #[error(transparent)]
    Key(#[from] KeyError),
}

/// Refuses a directory that already holds any identity file: checked before a join, so a
/// single-use token is not spent on an identity that could not be written.
pub fn ensure_no_identity(dir: &Path) -> Result<(), IdentityError> {
    for name in [KEY_FILE, CERT_FILE, IDENTITY_FILE] {
        let path = dir.join(name);
        match std::fs::symlink_metadata(&path) {
            Ok(_) => return Err(IdentityError::Exists(dir.to_owned())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(IdentityError::Io { path, source }),
        }
    }
    Ok(())
}

fn pem(der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    // Base64 output is ASCII, so every 64-byte chunk is a char boundary.
    let mut rest = b64.as_str();
    while !rest.is_empty() {
        let (line, tail) = rest.split_at(rest.len().min(64));
        out.push_str(line);
        out.push('\n');
        rest = tail;
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

/// Writes node.key (0600), node.crt (PEM chain, leaf first) and identity.json (last, so its
/// presence means a complete identity) into `dir`, created 0700 if missing. Refuses a
/// directory that already holds an identity.
pub fn write_identity(
    dir: &Path,
    key: &NodeKey,
    joined: &Joined,
) -> Result<Identity, IdentityError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|source| IdentityError::Io {
            path: dir.to_owned(),
            source,
        })?;
    ensure_no_identity(dir)?;
    key.save(&dir.join(KEY_FILE))?;
    let chain: String = joined.chain.iter().map(|c| pem(c)).collect();
    write_new(&dir.join(CERT_FILE), chain.as_bytes())?;
    let identity = Identity {
        node_id: joined.node_id.clone(),
        trust_domain: joined.trust_domain.clone(),
        spiffe_id: joined.spiffe_id.clone(),
        not_after: joined.not_after_ms,
        attestor: joined.attestor.clone(),
    };
    let mut text = serde_json::to_vec_pretty(&identity).map_err(|e| IdentityError::Io {
        path: dir.join(IDENTITY_FILE),
        source: e.into(),
    })?;
    text.push(b'\n');
    write_new(&dir.join(IDENTITY_FILE), &text)?;
    Ok(identity)
}

/// Creates `path` (never overwriting) with mode 0644: certificates and ids are public.
fn write_new(path: &Path, bytes: &[u8]) -> Result<(), IdentityError> {
    let io = |source| IdentityError::Io {
        path: path.to_owned(),
        source,
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(path)
        .map_err(io)?;
    f.write_all(bytes).map_err(io)?;
    f.sync_all().map_err(io)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject as _;

    fn joined() -> Joined {
        Joined {
            node_id: "node_a".into(),
            trust_domain: "td.test".into(),
            spiffe_id: "spiffe://td.test/node/node_a".into(),
            chain: vec![vec![1; 100], vec![2; 64]],
            not_after_ms: 1_800_000_000_000,
            attestor: "join-token".into(),
            rounds: 1,
        }
    }

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn writes_the_three_files() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("identity");
        let key = NodeKey::generate().unwrap();
        let identity = write_identity(&dir, &key, &joined()).unwrap();
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join(KEY_FILE)), 0o600);
        assert_eq!(
            NodeKey::load(&dir.join(KEY_FILE)).unwrap().spki_der(),
            key.spki_der()
        );
        let crt = std::fs::read(dir.join(CERT_FILE)).unwrap();
        let chain: Vec<Vec<u8>> = CertificateDer::pem_slice_iter(&crt)
            .map(|c| c.unwrap().to_vec())
            .collect();
        assert_eq!(chain, joined().chain, "PEM chain, leaf first");
        let json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join(IDENTITY_FILE)).unwrap()).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "nodeId": "node_a",
                "trustDomain": "td.test",
                "spiffeId": "spiffe://td.test/node/node_a",
                "notAfter": 1_800_000_000_000i64,
                "attestor": "join-token",
            })
        );
        assert_eq!(serde_json::from_value::<Identity>(json).unwrap(), identity);
    }

    #[test]
    fn never_overwrites_an_identity() {
        let tmp = tempfile::tempdir().unwrap();
        let key = NodeKey::generate().unwrap();
        write_identity(tmp.path(), &key, &joined()).unwrap();
        let before = std::fs::read(tmp.path().join(KEY_FILE)).unwrap();
        let err = write_identity(tmp.path(), &NodeKey::generate().unwrap(), &joined()).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("{} already holds an identity", tmp.path().display())
        );
        assert_eq!(std::fs::read(tmp.path().join(KEY_FILE)).unwrap(), before);

        // Any one of the files is enough to refuse.
        for name in [KEY_FILE, CERT_FILE, IDENTITY_FILE] {
            let tmp = tempfile::tempdir().unwrap();
            std::fs::write(tmp.path().join(name), b"").unwrap();
            assert!(
                matches!(
                    ensure_no_identity(tmp.path()),
                    Err(IdentityError::Exists(_))
                ),
                "{name}"
            );
        }
        let empty = tempfile::tempdir().unwrap();
        ensure_no_identity(empty.path()).unwrap();
        ensure_no_identity(&empty.path().join("missing")).unwrap();
    }

    #[test]
    fn pem_wraps_at_64() {
        let text = pem(&[0xff; 100]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 5);
        let widths: Vec<usize> = lines[1..4].iter().map(|l| l.len()).collect();
        assert_eq!(widths, [64, 64, 136 - 128]);
        assert_eq!(lines[4], "-----END CERTIFICATE-----");
    }
}
