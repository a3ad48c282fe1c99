//! The node key and the CSR it signs.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use rcgen::{
    CertificateParams, DistinguishedName, DnType, KeyPair, PKCS_ECDSA_P256_SHA256,
    PublicKeyData as _,
};

/// Why a node key could not be made, saved, loaded or used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// Key generation or the CSR failed.
    #[error("node key: {0}")]
    Crypto(#[from] rcgen::Error),
    /// The key file could not be written or read.
    #[error("node key file {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

/// A P-256 node key (aws-lc-rs through rcgen).
pub struct NodeKey {
    pair: KeyPair,
}

impl std::fmt::Debug for NodeKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NodeKey(P-256)")
    }
}

impl NodeKey {
    /// A fresh key.
    pub fn generate() -> Result<Self, KeyError> {
        Ok(Self {
            pair: KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?,
        })
    }

    /// Loads a PKCS#8 PEM key.
    pub fn load(path: &Path) -> Result<Self, KeyError> {
        let pem = std::fs::read_to_string(path).map_err(|source| KeyError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Ok(Self {
            pair: KeyPair::from_pem(&pem)?,
        })
    }

    /// Writes the key as PKCS#8 PEM, creating the file with mode 0600 (never widened, never
    /// overwritten).
    pub fn save(&self, path: &Path) -> Result<(), KeyError> {
        let io = |source| KeyError::Io {
            path: path.display().to_string(),
            source,
        };
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(io)?;
        file.write_all(self.pair.serialize_pem().as_bytes())
            .map_err(io)
    }

    /// The SubjectPublicKeyInfo (DER).
    pub fn spki_der(&self) -> Vec<u8> {
        self.pair.subject_public_key_info()
    }
}

/// A PKCS#10 CSR (DER) signed by `key`. Its subject and SANs carry nothing the host uses: the
/// host names the node.
pub fn build_csr(key: &NodeKey) -> Result<Vec<u8>, KeyError> {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "gatehouse-agent");
    params.distinguished_name = dn;
    Ok(params.serialize_request(&key.pair)?.der().to_vec())
}
