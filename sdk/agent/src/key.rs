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

use crate::status::KeyPlace;
use crate::tpm_build::{HostTpm, TPM_SUPPORT};

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
    /// The file is a TPM key record, and no TPM was given to derive the key in.
    #[error("node key file {0} names a key in the TPM; no TPM is configured (--tpm)")]
    NeedsTpm(String),
    /// The file is a TPM key record, and this agent was built without TPM support.
    #[error(
        "node key file {0} names a key in the TPM; this agent was built without TPM support \
         (install the TPM build)"
    )]
    NoTpmSupport(String),
    /// The TPM could not make, derive or use the key.
    #[cfg(feature = "tpm")]
    #[error(transparent)]
    Tpm(#[from] crate::tpm::TpmError),
}

/// A P-256 node key: what the node certificate certifies. It lives in a PKCS#8 file, or in the
/// TPM (the file then holds only the record it is derived from).
#[non_exhaustive]
pub enum NodeKey {
    /// A software key (aws-lc-rs through rcgen), kept as PKCS#8 PEM.
    File(FileKey),
    /// A key the TPM derives from the unique in its record, never leaving the TPM.
    #[cfg(feature = "tpm")]
    Tpm(crate::tpm::TpmNodeKey),
}

/// A software P-256 key pair.
pub struct FileKey {
    pair: KeyPair,
}

impl std::fmt::Debug for FileKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the private key.
        f.write_str("NodeKey(P-256)")
    }
}

impl std::fmt::Debug for NodeKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NodeKey::File(k) => k.fmt(f),
            #[cfg(feature = "tpm")]
            NodeKey::Tpm(_) => f.write_str("NodeKey(P-256, in the TPM)"),
        }
    }
}

impl NodeKey {
    /// A fresh software key, made for each join.
    pub fn generate() -> Result<Self, KeyError> {
        Ok(Self::File(FileKey {
            pair: KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?,
        }))
    }

    /// A fresh key in `tpm`: a new random unique, the key derived from it.
    #[cfg(feature = "tpm")]
    pub fn generate_in(tpm: &crate::tpm::Tpm) -> Result<Self, KeyError> {
        Ok(Self::Tpm(crate::tpm::TpmNodeKey::generate(tpm)?))
    }

    /// A new node key where this host keeps them: in `tpm` when there is one, else a file
    /// key. When the TPM cannot make the key, the reason is logged as a warning and a file key
    /// is made instead (a later renewal moves it into the TPM); callers whose certificate
    /// names an AK must use [`NodeKey::generate_in`], which has no fallback.
    pub fn generate_for_host(tpm: Option<&HostTpm>) -> Result<Self, KeyError> {
        if let Some(tpm) = tpm {
            #[cfg(not(feature = "tpm"))]
            match *tpm {}
            #[cfg(feature = "tpm")]
            match Self::generate_in(tpm) {
                Ok(key) => return Ok(key),
                Err(e) => tracing::warn!(
                    tcti = tpm.tcti(),
                    error = %e,
                    "the TPM cannot hold the node key; making a file key instead"
                ),
            }
        }
        Self::generate()
    }

    /// Loads a PKCS#8 PEM P-256 key written by [`NodeKey::save`]; a TPM key record is refused
    /// ([`KeyError::NeedsTpm`]).
    pub fn load(path: &Path) -> Result<Self, KeyError> {
        Self::load_with(path, None)
    }

    /// Loads a key written by [`NodeKey::save`]: a PKCS#8 PEM P-256 key, or a TPM key record
    /// whose key is derived in `tpm` (refused without one, and by a build without TPM
    /// support).
    pub fn load_with(path: &Path, tpm: Option<&HostTpm>) -> Result<Self, KeyError> {
        let pem = std::fs::read_to_string(path).map_err(|source| KeyError::Io {
            path: path.display().to_string(),
            source,
        })?;
        if KeyPlace::of_file_text(&pem) == KeyPlace::Tpm {
            let Some(tpm) = tpm else {
                let path = path.display().to_string();
                return Err(if TPM_SUPPORT {
                    KeyError::NeedsTpm(path)
                } else {
                    KeyError::NoTpmSupport(path)
                });
            };
            #[cfg(not(feature = "tpm"))]
            match *tpm {}
            #[cfg(feature = "tpm")]
            return Ok(Self::Tpm(crate::tpm::TpmNodeKey::from_record(tpm, &pem)?));
        }
        let pair = KeyPair::from_pem(&pem)?;
        if pair.algorithm() != &PKCS_ECDSA_P256_SHA256 {
            return Err(KeyError::NotP256);
        }
        Ok(Self::File(FileKey { pair }))
    }

    /// Whether the key lives in the TPM.
    pub fn in_tpm(&self) -> bool {
        match self {
            NodeKey::File(_) => false,
            #[cfg(feature = "tpm")]
            NodeKey::Tpm(_) => true,
        }
    }

    /// What the key file holds: PKCS#8 PEM, or the TPM key record.
    pub(crate) fn file_pem(&self) -> String {
        match self {
            NodeKey::File(k) => k.pair.serialize_pem(),
            #[cfg(feature = "tpm")]
            NodeKey::Tpm(k) => k.record_pem(),
        }
    }

    /// Writes the key (PKCS#8 PEM, or the TPM key record) to a new file created with mode 0600,
    /// so the private key is never readable by others, not even briefly. An existing file is
    /// never overwritten.
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
        file.write_all(self.file_pem().as_bytes()).map_err(io)?;
        file.sync_all().map_err(io)
    }

    /// Writes the key to `path` as [`NodeKey::save`] does, replacing whatever is there in one
    /// rename: a reader sees the old file or the whole new one, never a part. The key is
    /// written to `<path>.tmp` (mode 0600, synced) first.
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
        match self {
            NodeKey::File(k) => {
                let pair = EcdsaKeyPair::from_pkcs8(
                    &ECDSA_P256_SHA256_FIXED_SIGNING,
                    &k.pair.serialize_der(),
                )
                .map_err(|_| KeyError::NotP256)?;
                let sig = pair
                    .sign(&SystemRandom::new(), message)
                    .map_err(|_| KeyError::Sign)?;
                Ok(sig.as_ref().to_vec())
            }
            #[cfg(feature = "tpm")]
            NodeKey::Tpm(k) => Ok(k.sign_fixed(message)?),
        }
    }

    /// The key as rustls signs with it (the TLS client certificate's key).
    pub(crate) fn tls_signing_key(
        &self,
    ) -> Result<std::sync::Arc<dyn rustls::sign::SigningKey>, KeyError> {
        match self {
            NodeKey::File(k) => {
                let der = rustls::pki_types::PrivateKeyDer::Pkcs8(
                    rustls::pki_types::PrivatePkcs8KeyDer::from(k.pair.serialize_der()),
                );
                rustls::crypto::aws_lc_rs::sign::any_ecdsa_type(&der).map_err(|_| KeyError::NotP256)
            }
            #[cfg(feature = "tpm")]
            NodeKey::Tpm(k) => Ok(k.tls_signing_key()),
        }
    }

    /// The SubjectPublicKeyInfo (DER): what the issued leaf must hold.
    pub fn spki_der(&self) -> Vec<u8> {
        match self {
            NodeKey::File(k) => k.pair.subject_public_key_info(),
            #[cfg(feature = "tpm")]
            NodeKey::Tpm(k) => k.spki_der().to_vec(),
        }
    }

    #[cfg(test)]
    pub(crate) fn key_pair(&self) -> &KeyPair {
        match self {
            NodeKey::File(k) => &k.pair,
            #[cfg(feature = "tpm")]
            NodeKey::Tpm(_) => panic!("a TPM key has no key pair"),
        }
    }
}

/// A PKCS#10 CSR (DER) signed by `key`. Its subject carries nothing the host uses (the host
/// names the node), and it has no SANs (the host ignores them).
pub fn build_csr(key: &NodeKey) -> Result<Vec<u8>, KeyError> {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "gatehouse-agent");
    params.distinguished_name = dn;
    let csr = match key {
        NodeKey::File(k) => params.serialize_request(&k.pair)?,
        #[cfg(feature = "tpm")]
        NodeKey::Tpm(k) => params.serialize_request(k)?,
    };
    Ok(csr.der().to_vec())
}

#[cfg(test)]
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
