//! The files a joined agent keeps: node.key (0600), node.crt, identity.json, and during a
//! renewal node.key.next.
//!
//! # Replacing an identity
//!
//! A renewal (or an x509pop re-join) keeps the next key as node.key.next until the host has
//! answered, then [`commit_next`] replaces node.crt (one rename), renames node.key.next over
//! node.key (one rename) and rewrites identity.json. At every instant one of node.key and
//! node.key.next is the key node.crt certifies: a crash between the two renames leaves the
//! new certificate with node.key.next, and [`load_identity`] finishes the swap.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;

use crate::cert::NodeCert;
use crate::client::Joined;
use crate::key::{KeyError, NodeKey};

/// The node key, PKCS#8 PEM, mode 0600.
pub const KEY_FILE: &str = "node.key";
/// The next node key during a renewal, PKCS#8 PEM, mode 0600.
pub const NEXT_KEY_FILE: &str = "node.key.next";
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
    /// The key could not be written or read.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// The directory holds no complete identity (never joined, or moved aside by a reset).
    #[error("{0} holds no identity; join first: gatehouse-agent join")]
    Missing(PathBuf),
    /// A file of the identity is unreadable or inconsistent with the others.
    #[error("{path}: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
}

/// An identity loaded from its directory, ready to renew.
#[derive(Debug)]
pub struct LoadedIdentity {
    /// identity.json.
    pub identity: Identity,
    /// The node key node.crt certifies.
    pub key: NodeKey,
    /// node.crt: the chain, leaf first (DER).
    pub chain: Vec<Vec<u8>>,
    /// The leaf, read.
    pub cert: NodeCert,
}

/// Loads the identity in `dir`: identity.json, node.crt and the key its leaf certifies. When
/// node.key is not that key but node.key.next is (a crash between the renames of
/// [`commit_next`]), the swap is finished first. A pending node.key.next that node.crt does
/// not certify is a renewal that never completed and is left for the next one to replace.
pub fn load_identity(dir: &Path) -> Result<LoadedIdentity, IdentityError> {
    load_identity_with(dir, None)
}

/// The hint on a TPM node key that no longer matches its certificate.
pub const TPM_CLEARED_HINT: &str = "the TPM derives another key from node.key (was the TPM \
     cleared?); join again: gatehouse-agent join --reset --yes --attestor tpm";

/// [`load_identity`], deriving a node key kept in the TPM (a `BCD TPM NODE KEY` record) in
/// `tpm`; without one such a key does not load.
pub fn load_identity_with(
    dir: &Path,
    tpm: Option<&crate::tpm_build::HostTpm>,
) -> Result<LoadedIdentity, IdentityError> {
    let id_path = dir.join(IDENTITY_FILE);
    let text = match std::fs::read(&id_path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(IdentityError::Missing(dir.to_owned()));
        }
        Err(source) => {
            return Err(IdentityError::Io {
                path: id_path,
                source,
            });
        }
    };
    let identity: Identity = serde_json::from_slice(&text).map_err(|e| IdentityError::Corrupt {
        path: id_path.clone(),
        reason: e.to_string(),
    })?;
    let crt_path = dir.join(CERT_FILE);
    let pem_text = std::fs::read(&crt_path).map_err(|source| IdentityError::Io {
        path: crt_path.clone(),
        source,
    })?;
    let corrupt = |reason: String| IdentityError::Corrupt {
        path: crt_path.clone(),
        reason,
    };
    let chain = CertificateDer::pem_slice_iter(&pem_text)
        .map(|c| c.map(|c| c.to_vec()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| corrupt(e.to_string()))?;
    let leaf = chain
        .first()
        .ok_or_else(|| corrupt("holds no certificate".into()))?;
    let cert = NodeCert::parse(leaf).map_err(|e| corrupt(e.to_string()))?;
    if cert.node_id != identity.node_id || cert.trust_domain != identity.trust_domain {
        return Err(corrupt(format!(
            "names node {} of {}, not {} of {} as {IDENTITY_FILE} says",
            cert.node_id, cert.trust_domain, identity.node_id, identity.trust_domain
        )));
    }
    let key_path = dir.join(KEY_FILE);
    let key = match NodeKey::load_with(&key_path, tpm) {
        Ok(key) if key.spki_der() == cert.spki_der => key,
        current => {
            let next_path = dir.join(NEXT_KEY_FILE);
            match NodeKey::load_with(&next_path, tpm) {
                Ok(next) if next.spki_der() == cert.spki_der => {
                    std::fs::rename(&next_path, &key_path).map_err(|source| IdentityError::Io {
                        path: key_path.clone(),
                        source,
                    })?;
                    sync_dir(dir)?;
                    tracing::info!(
                        node_id = %identity.node_id,
                        "finished an interrupted key swap: {NEXT_KEY_FILE} is now {KEY_FILE}"
                    );
                    next
                }
                _ => {
                    return Err(match current {
                        Err(e) => e.into(),
                        Ok(key) if key.in_tpm() => IdentityError::Corrupt {
                            path: key_path,
                            reason: format!(
                                "the node key does not match the node certificate: \
                                 {TPM_CLEARED_HINT}"
                            ),
                        },
                        Ok(_) => IdentityError::Corrupt {
                            path: key_path,
                            reason: "is not the key the node certificate certifies".into(),
                        },
                    });
                }
            }
        }
    };
    Ok(LoadedIdentity {
        identity,
        key,
        chain,
        cert,
    })
}

/// Writes the next node key as node.key.next (0600, replacing a stale one from an earlier
/// attempt), before the request that certifies it is sent.
pub fn stage_next_key(dir: &Path, next: &NodeKey) -> Result<(), IdentityError> {
    next.save_replacing(&dir.join(NEXT_KEY_FILE))?;
    sync_dir(dir)
}

/// Installs the identity `joined` certifies for the key staged by [`stage_next_key`]: node.crt,
/// then node.key (node.key.next renamed over it), then identity.json, each replaced in one
/// rename. `next` must be the staged key; it is checked against the leaf and the staged file
/// so that a key that does not match the certificate is never installed.
pub fn commit_next(
    dir: &Path,
    next: &NodeKey,
    joined: &Joined,
    attestor: &str,
) -> Result<Identity, IdentityError> {
    let next_path = dir.join(NEXT_KEY_FILE);
    // The staged file must be `next` as written (a PKCS#8 key or a TPM key record): compared
    // as text, so that a key in the TPM need not be derived again.
    let staged = std::fs::read_to_string(&next_path).map_err(|source| IdentityError::Io {
        path: next_path.clone(),
        source,
    })?;
    let leaf = joined.chain.first().map(|c| NodeCert::parse(c));
    let leaf_ok = matches!(&leaf, Some(Ok(c)) if c.spki_der == next.spki_der());
    if staged != next.file_pem() || !leaf_ok {
        return Err(IdentityError::Corrupt {
            path: next_path,
            reason: "is not the key the new certificate certifies".into(),
        });
    }
    let chain: String = joined.chain.iter().map(|c| pem(c)).collect();
    write_replacing(&dir.join(CERT_FILE), chain.as_bytes())?;
    let key_path = dir.join(KEY_FILE);
    std::fs::rename(&next_path, &key_path).map_err(|source| IdentityError::Io {
        path: key_path,
        source,
    })?;
    let identity = identity_of(joined, attestor);
    write_replacing(&dir.join(IDENTITY_FILE), &identity_json(dir, &identity)?)?;
    sync_dir(dir)?;
    Ok(identity)
}

fn identity_of(joined: &Joined, attestor: &str) -> Identity {
    Identity {
        node_id: joined.node_id.clone(),
        trust_domain: joined.trust_domain.clone(),
        spiffe_id: joined.spiffe_id.clone(),
        not_after: joined.not_after_ms,
        attestor: attestor.to_owned(),
    }
}

fn identity_json(dir: &Path, identity: &Identity) -> Result<Vec<u8>, IdentityError> {
    let mut text = serde_json::to_vec_pretty(identity).map_err(|e| IdentityError::Io {
        path: dir.join(IDENTITY_FILE),
        source: e.into(),
    })?;
    text.push(b'\n');
    Ok(text)
}

/// Replaces `path` with `bytes` (mode 0644) in one rename through `<path>.tmp`.
pub(crate) fn write_replacing(path: &Path, bytes: &[u8]) -> Result<(), IdentityError> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    match std::fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => return Err(IdentityError::Io { path: tmp, source }),
    }
    write_new(&tmp, bytes)?;
    std::fs::rename(&tmp, path).map_err(|source| IdentityError::Io {
        path: path.to_owned(),
        source,
    })
}

/// Makes the renames in `dir` durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), IdentityError> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|source| IdentityError::Io {
            path: dir.to_owned(),
            source,
        })
}

/// Refuses a directory that already holds any identity file: checked before a join, so a
/// single-use token is not spent on an identity that could not be written.
pub fn ensure_no_identity(dir: &Path) -> Result<(), IdentityError> {
    for name in [KEY_FILE, NEXT_KEY_FILE, CERT_FILE, IDENTITY_FILE] {
        let path = dir.join(name);
        match std::fs::symlink_metadata(&path) {
            Ok(_) => return Err(IdentityError::Exists(dir.to_owned())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(IdentityError::Io { path, source }),
        }
    }
    Ok(())
}

pub(crate) fn pem(der: &[u8]) -> String {
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
    let identity = identity_of(joined, &joined.attestor);
    write_new(&dir.join(IDENTITY_FILE), &identity_json(dir, &identity)?)?;
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
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn joined() -> Joined {
        Joined {
            node_id: "node_a".into(),
            trust_domain: "td.test".into(),
            spiffe_id: "spiffe://td.test/node/node_a".into(),
            chain: vec![vec![1; 100], vec![2; 64]],
            not_after_ms: 1_800_000_000_000,
            attestor: "join-token".into(),
            rounds: 1,
            trust: None,
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
        for name in [KEY_FILE, NEXT_KEY_FILE, CERT_FILE, IDENTITY_FILE] {
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
