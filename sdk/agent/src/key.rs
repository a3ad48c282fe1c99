//! The node key and the CSR it signs.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair};
use rcgen::{
    CertificateParams, DistinguishedName, DnType, KeyPair, PKCS_ECDSA_P256_SHA256,
    PublicKeyData as _,
};

/// Why a node key could not be made, saved, loaded or used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// Key generation, PEM parsing or signing the CSR failed.
    #[error("node key: {0}")]
    Crypto(#[from] rcgen::Error),
    /// The loaded key is not a P-256 ECDSA key: the host certifies nothing else.
    #[error("the node key is not a P-256 ECDSA key")]
    NotP256,
    /// Signing with the key failed.
    #[error("signing with the node key failed")]
    Sign,
    /// The key file could not be written or read.
    #[error("node key file {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

/// A P-256 node key (aws-lc-rs through rcgen): what the node certificate certifies.
pub struct NodeKey {
    pair: KeyPair,
}

impl std::fmt::Debug for NodeKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the private key.
        f.write_str("NodeKey(P-256)")
    }
}

impl NodeKey {
    /// A fresh key, made for each join.
    pub fn generate() -> Result<Self, KeyError> {
        Ok(Self {
            pair: KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?,
        })
    }

    /// Loads a PKCS#8 PEM P-256 key written by [`NodeKey::save`].
    pub fn load(path: &Path) -> Result<Self, KeyError> {
        let pem = std::fs::read_to_string(path).map_err(|source| KeyError::Io {
            path: path.display().to_string(),
            source,
        })?;
        let pair = KeyPair::from_pem(&pem)?;
        if pair.algorithm() != &PKCS_ECDSA_P256_SHA256 {
            return Err(KeyError::NotP256);
        }
        Ok(Self { pair })
    }

    /// Writes the key as PKCS#8 PEM to a new file created with mode 0600, so the private key is
    /// never readable by others, not even briefly. An existing file is never overwritten.
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
            .map_err(io)?;
        file.sync_all().map_err(io)
    }

    /// Writes the key as PKCS#8 PEM to `path`, replacing whatever is there in one rename: a
    /// reader sees the old file or the whole new one, never a part. The key is written to
    /// `<path>.tmp` (mode 0600, synced) first.
    pub fn save_replacing(&self, path: &Path) -> Result<(), KeyError> {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = std::path::PathBuf::from(tmp);
        match std::fs::remove_file(&tmp) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(KeyError::Io {
                    path: tmp.display().to_string(),
                    source,
                });
            }
        }
        self.save(&tmp)?;
        std::fs::rename(&tmp, path).map_err(|source| KeyError::Io {
            path: path.display().to_string(),
            source,
        })
    }

    /// ES256 over `message`: ECDSA P-256 over its SHA-256, the signature fixed-width
    /// `r || s` (64 bytes), as x509pop proofs carry it.
    pub fn sign(&self, message: &[u8]) -> Result<Vec<u8>, KeyError> {
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &self.pkcs8_der())
            .map_err(|_| KeyError::NotP256)?;
        let sig = pair
            .sign(&SystemRandom::new(), message)
            .map_err(|_| KeyError::Sign)?;
        Ok(sig.as_ref().to_vec())
    }

    /// The key as PKCS#8 DER (for the TLS client certificate's key).
    pub(crate) fn pkcs8_der(&self) -> Vec<u8> {
        self.pair.serialize_der()
    }

    /// The SubjectPublicKeyInfo (DER): what the issued leaf must hold.
    pub fn spki_der(&self) -> Vec<u8> {
        self.pair.subject_public_key_info()
    }

    #[cfg(test)]
    pub(crate) fn key_pair(&self) -> &KeyPair {
        &self.pair
    }
}

/// A PKCS#10 CSR (DER) signed by `key`. Its subject carries nothing the host uses (the host
/// names the node), and it has no SANs (the host ignores them).
pub fn build_csr(key: &NodeKey) -> Result<Vec<u8>, KeyError> {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "gatehouse-agent");
    params.distinguished_name = dn;
    Ok(params.serialize_request(&key.pair)?.der().to_vec())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;
    use x509_parser::prelude::FromDer;

    #[test]
    fn saved_key_is_private_and_loads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("node.key");
        let key = NodeKey::generate().unwrap();
        key.save(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(
            std::fs::read_to_string(&path)
                .unwrap()
                .starts_with("-----BEGIN PRIVATE KEY-----")
        );
        assert_eq!(NodeKey::load(&path).unwrap().spki_der(), key.spki_der());
        assert!(
            matches!(key.save(&path), Err(KeyError::Io { .. })),
            "never overwritten"
        );
        assert_eq!(format!("{key:?}"), "NodeKey(P-256)");
    }

    #[test]
    fn load_refuses_other_keys() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ed.key");
        let ed = KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
        std::fs::write(&path, ed.serialize_pem()).unwrap();
        assert!(matches!(NodeKey::load(&path), Err(KeyError::NotP256)));
        std::fs::write(&path, "not a key").unwrap();
        assert!(matches!(NodeKey::load(&path), Err(KeyError::Crypto(_))));
        let missing = NodeKey::load(&dir.path().join("missing")).unwrap_err();
        assert!(
            missing.to_string().starts_with("node key file "),
            "{missing}"
        );
        assert_eq!(
            KeyError::NotP256.to_string(),
            "the node key is not a P-256 ECDSA key"
        );
    }

    #[test]
    fn signs_es256_fixed() {
        use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED, UnparsedPublicKey};
        let key = NodeKey::generate().unwrap();
        let sig = key.sign(b"message").unwrap();
        assert_eq!(sig.len(), 64, "r || s");
        let der = key.spki_der();
        let (_, spki) = x509_parser::x509::SubjectPublicKeyInfo::from_der(&der).unwrap();
        let public = UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, spki.subject_public_key.data);
        public.verify(b"message", &sig).unwrap();
        assert!(public.verify(b"other", &sig).is_err());
        assert_eq!(
            KeyError::Sign.to_string(),
            "signing with the node key failed"
        );
    }

    #[test]
    fn save_replacing_swaps_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("node.key.next");
        let (a, b) = (NodeKey::generate().unwrap(), NodeKey::generate().unwrap());
        a.save_replacing(&path).unwrap();
        // A stale temporary file from a crash does not get in the way.
        std::fs::write(dir.path().join("node.key.next.tmp"), b"junk").unwrap();
        b.save_replacing(&path).unwrap();
        assert_eq!(NodeKey::load(&path).unwrap().spki_der(), b.spki_der());
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(!dir.path().join("node.key.next.tmp").exists());
    }

    #[test]
    fn csr_is_signed_by_the_key() {
        let key = NodeKey::generate().unwrap();
        let der = build_csr(&key).unwrap();
        let (rest, csr) =
            x509_parser::certification_request::X509CertificationRequest::from_der(&der).unwrap();
        assert!(rest.is_empty());
        csr.verify_signature().unwrap();
        assert_eq!(
            csr.certification_request_info.subject_pki.raw,
            key.spki_der()
        );
    }
}
