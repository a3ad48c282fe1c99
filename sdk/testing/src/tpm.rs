//! [`SoftTpm`]: the WIT `tpm` interface with gatehouse-tpm's parsers and RustCrypto.

use std::cell::RefCell;
use std::str::FromStr as _;
use std::time::Duration;

use der::{Decode as _, Encode as _};
use gatehouse_sdk::{TimestampMs, TpmCredential, TpmError, TpmPcrValue, TpmPublicInfo};
use gatehouse_tpm::RustCryptoVerifier;
use sha2::Digest as _;
use x509_cert::builder::{Builder as _, CertificateBuilder, Profile};
use x509_cert::name::Name;
use x509_cert::serial_number::SerialNumber;
use x509_cert::spki::SubjectPublicKeyInfoOwned;
use x509_cert::time::{Time, Validity};

/// A credential [`SoftTpm::make_credential`] made: for whom, and what it wraps.
#[derive(Debug, Clone)]
struct Made {
    blob: Vec<u8>,
    ek_public: Vec<u8>,
    ak_name: Vec<u8>,
    secret: Vec<u8>,
}

/// Software TPM checks: parsing public areas, AK attributes, quotes and certifications with
/// `gatehouse-tpm` (the host's own parsers) and RustCrypto (ECDSA P-256 keys: what software
/// TPM tests make), EK certificates verified as X.509 chains to the roots given.
///
/// `make_credential` checks its inputs as the host does but does not run TPM2_MakeCredential:
/// it returns an opaque credential that [`SoftTpm::activate`] opens, for the EK and the AK name
/// it was made for only, standing in for the TPM's ActivateCredential. [`SoftTpm::endorse`]
/// issues an EK certificate for an EK public area from the kit's own manufacturer CA.
#[derive(Debug, Default)]
pub struct SoftTpm {
    made: RefCell<Vec<Made>>,
}

fn info(p: gatehouse_tpm::Public) -> TpmPublicInfo {
    TpmPublicInfo {
        name: p.name,
        name_alg: p.name_alg.id(),
        object_attributes: p.attributes,
        spki: p.spki,
    }
}

fn wit(e: gatehouse_tpm::TpmError) -> TpmError {
    use gatehouse_tpm::TpmError as E;
    match e {
        E::BadSignature => TpmError::BadSignature,
        E::WrongType => TpmError::WrongType,
        E::WrongNonce => TpmError::WrongNonce,
        E::PcrMismatch => TpmError::PcrMismatch,
        E::WrongName => TpmError::WrongName,
        E::Attributes(a) => TpmError::Attributes(a.into()),
        E::Unsupported(a) => TpmError::Unsupported(a.into()),
        other => TpmError::Malformed(other.to_string()),
    }
}

/// The kit's manufacturer CA key (fixed: tests are reproducible): the first of
/// SHA-256("gatehouse-sdk-test EK CA" ‖ i) that is a valid P-256 scalar (in practice i = 0).
fn ca_key() -> p256::ecdsa::SigningKey {
    let mut i = 0u64;
    loop {
        let mut h = sha2::Sha256::new();
        h.update(b"gatehouse-sdk-test EK CA");
        h.update(i.to_be_bytes());
        if let Ok(key) = p256::ecdsa::SigningKey::from_slice(&h.finalize()) {
            return key;
        }
        i += 1;
    }
}

/// Builds and encodes a certificate.
fn issue(builder: CertificateBuilder<'_, p256::ecdsa::SigningKey>) -> Result<Vec<u8>, String> {
    let cert = builder
        .build::<p256::ecdsa::DerSignature>()
        .map_err(|e| e.to_string())?;
    cert.to_der().map_err(|e| e.to_string())
}

fn serial(n: u32) -> Result<SerialNumber, String> {
    SerialNumber::new(&n.to_be_bytes()).map_err(|e| e.to_string())
}

fn validity() -> Result<Validity, String> {
    let at = |secs| {
        x509_cert::der::asn1::GeneralizedTime::from_unix_duration(Duration::from_secs(secs))
            .map(Time::GeneralTime)
            .map_err(|e| e.to_string())
    };
    // 2000-01-01 to 2099-12-31.
    Ok(Validity {
        not_before: at(946_684_800)?,
        not_after: at(4_102_358_400)?,
    })
}

impl SoftTpm {
    /// What a TPM holding `ek_public`, with the object named `ak_name` loaded, recovers from
    /// `credential` (TPM2_ActivateCredential): the secret, or `None` for another EK or AK, or a
    /// credential this kit did not make.
    pub fn activate(
        &self,
        credential: &TpmCredential,
        ek_public: &[u8],
        ak_name: &[u8],
    ) -> Option<Vec<u8>> {
        self.made
            .borrow()
            .iter()
            .find(|m| {
                m.blob == credential.credential_blob
                    && credential.encrypted_secret == m.blob
                    && m.ek_public == ek_public
                    && m.ak_name == ak_name
            })
            .map(|m| m.secret.clone())
    }

    /// The kit's manufacturer root certificate (DER): what [`SoftTpm::endorse`]'s EK
    /// certificates chain to.
    pub fn manufacturer_root() -> Result<Vec<u8>, String> {
        let key = ca_key();
        let spki =
            SubjectPublicKeyInfoOwned::from_key(*key.verifying_key()).map_err(|e| e.to_string())?;
        let name = Name::from_str("CN=gatehouse-sdk-test EK root").map_err(|e| e.to_string())?;
        let builder =
            CertificateBuilder::new(Profile::Root, serial(1)?, validity()?, name, spki, &key)
                .map_err(|e| e.to_string())?;
        issue(builder)
    }

    /// An EK certificate (DER) for the key of `ek_public` (a TPMT_PUBLIC), issued by
    /// [`SoftTpm::manufacturer_root`].
    pub fn endorse(ek_public: &[u8]) -> Result<Vec<u8>, String> {
        let ek = gatehouse_tpm::Public::parse(ek_public).map_err(|e| e.to_string())?;
        let spki = SubjectPublicKeyInfoOwned::from_der(&ek.spki).map_err(|e| e.to_string())?;
        let issuer = Name::from_str("CN=gatehouse-sdk-test EK root").map_err(|e| e.to_string())?;
        let digest = sha2::Sha256::digest(ek_public);
        let number = u32::from_be_bytes([digest[0] & 0x7f, digest[1], digest[2], digest[3]]) | 1;
        let key = ca_key();
        let builder = CertificateBuilder::new(
            Profile::Leaf {
                issuer,
                enable_key_agreement: false,
                enable_key_encipherment: true,
            },
            serial(number)?,
            validity()?,
            Name::from_str("CN=gatehouse-sdk-test EK").map_err(|e| e.to_string())?,
            spki,
            &key,
        )
        .map_err(|e| e.to_string())?;
        issue(builder)
    }
}

impl gatehouse_sdk::Tpm for SoftTpm {
    fn parse_public(&self, public: &[u8]) -> Result<TpmPublicInfo, TpmError> {
        gatehouse_tpm::Public::parse(public).map(info).map_err(wit)
    }

    fn check_ak(&self, public: &[u8]) -> Result<TpmPublicInfo, TpmError> {
        gatehouse_tpm::check_ak(public).map(info).map_err(wit)
    }

    fn make_credential(
        &self,
        ek_public: &[u8],
        ak_name: &[u8],
        secret: &[u8],
    ) -> Result<TpmCredential, TpmError> {
        let ek = gatehouse_tpm::Public::parse(ek_public).map_err(wit)?;
        if !ek.has(gatehouse_tpm::attr::RESTRICTED | gatehouse_tpm::attr::DECRYPT)
            || ek.has(gatehouse_tpm::attr::SIGN)
        {
            return Err(TpmError::Attributes(
                "the EK is not a restricted decryption key".into(),
            ));
        }
        if !gatehouse_tpm::is_object_name(ak_name) {
            return Err(TpmError::Malformed("AK name".into()));
        }
        if secret.is_empty() || secret.len() > ek.name_alg.size() {
            return Err(TpmError::Malformed("secret length".into()));
        }
        let mut made = self.made.borrow_mut();
        let blob = sha2::Sha256::digest((made.len() as u64).to_be_bytes()).to_vec();
        made.push(Made {
            blob: blob.clone(),
            ek_public: ek_public.to_vec(),
            ak_name: ak_name.to_vec(),
            secret: secret.to_vec(),
        });
        Ok(TpmCredential {
            credential_blob: blob.clone(),
            encrypted_secret: blob,
        })
    }

    fn verify_quote(
        &self,
        ak_public: &[u8],
        quote: &[u8],
        signature: &[u8],
        pcrs: &[TpmPcrValue],
        nonce: &[u8],
    ) -> Result<Vec<TpmPcrValue>, TpmError> {
        let pcrs: Vec<gatehouse_tpm::PcrValue> = pcrs
            .iter()
            .map(|p| gatehouse_tpm::PcrValue {
                hash_alg: p.hash_alg,
                index: p.index,
                digest: p.digest.clone(),
            })
            .collect();
        gatehouse_tpm::verify_quote(
            &RustCryptoVerifier,
            ak_public,
            quote,
            signature,
            &pcrs,
            nonce,
        )
        .map(|covered| {
            covered
                .into_iter()
                .map(|p| TpmPcrValue {
                    hash_alg: p.hash_alg,
                    index: p.index,
                    digest: p.digest,
                })
                .collect()
        })
        .map_err(wit)
    }

    fn verify_certify(
        &self,
        ak_public: &[u8],
        certify_info: &[u8],
        signature: &[u8],
        key_public: &[u8],
        nonce: &[u8],
    ) -> Result<TpmPublicInfo, TpmError> {
        gatehouse_tpm::verify_certify(
            &RustCryptoVerifier,
            ak_public,
            certify_info,
            signature,
            key_public,
            nonce,
        )
        .map(info)
        .map_err(wit)
    }

    fn verify_ek(
        &self,
        ek_public: &[u8],
        ek_certificate: &[u8],
        intermediates: &[Vec<u8>],
        roots: &[Vec<u8>],
        at: TimestampMs,
    ) -> Result<TpmPublicInfo, TpmError> {
        if intermediates.len() > 6 || roots.len() > gatehouse_sdk::MAX_EK_ROOTS {
            return Err(TpmError::Malformed("too many certificates".into()));
        }
        let ek = gatehouse_tpm::Public::parse(ek_public).map_err(wit)?;
        let trim = |der: &[u8]| gatehouse_tpm::nv_certificate(der).unwrap_or(der).to_vec();
        let chain: Vec<Vec<u8>> = std::iter::once(trim(ek_certificate))
            .chain(intermediates.iter().map(|c| trim(c)))
            .collect();
        let verified = crate::crypto::verify_chain(&chain, roots, at)
            .map_err(|e| TpmError::Untrusted(format!("{e:?}")))?;
        if verified.leaf_spki != ek.spki {
            return Err(TpmError::Untrusted(
                "the certificate does not certify this EK".into(),
            ));
        }
        Ok(info(ek))
    }
}
