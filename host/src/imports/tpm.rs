//! The host side of the WIT `tpm` interface: TPM 2.0 structures parsed and checked natively
//! with `gatehouse-tpm` (total parsers, every length capped), signatures verified and
//! MakeCredential's RSA-OAEP, ECDH and AES-CFB done with aws-lc-rs, EK chains verified with
//! [`crate::pki::verify::verify_chain`].
//!
//! The functions are pure (no transaction, no session), so the renewal path and the benchmark
//! call the same [`native`] functions the import does.

use super::{CallState, TxBackend};
use crate::runtime::bindings::tpm::{Credential, Host, PcrValue, PublicInfo, TpmError};

/// Most certificates `verify-ek` looks at besides the leaf, and most roots (the tpm attestor's
/// `ekRoots` refuses to load with more, so a configuration that loads never meets this).
const MAX_INTERMEDIATES: usize = 6;
const MAX_ROOTS: usize = gatehouse_sdk::MAX_EK_ROOTS;

impl<B: TxBackend> Host for CallState<B> {
    async fn parse_public(
        &mut self,
        public: Vec<u8>,
    ) -> wasmtime::Result<Result<PublicInfo, TpmError>> {
        Ok(native::parse_public(&public).map(info).map_err(wit_error))
    }

    async fn check_ak(
        &mut self,
        public: Vec<u8>,
    ) -> wasmtime::Result<Result<PublicInfo, TpmError>> {
        Ok(gatehouse_tpm::check_ak(&public)
            .map(info)
            .map_err(wit_error))
    }

    async fn make_credential(
        &mut self,
        ek_public: Vec<u8>,
        ak_name: Vec<u8>,
        secret: Vec<u8>,
    ) -> wasmtime::Result<Result<Credential, TpmError>> {
        Ok(native::make_credential(&ek_public, &ak_name, &secret)
            .map(|c| Credential {
                credential_blob: c.credential_blob,
                encrypted_secret: c.encrypted_secret,
            })
            .map_err(wit_error))
    }

    async fn verify_quote(
        &mut self,
        ak_public: Vec<u8>,
        quote: Vec<u8>,
        signature: Vec<u8>,
        pcrs: Vec<PcrValue>,
        nonce: Vec<u8>,
    ) -> wasmtime::Result<Result<Vec<PcrValue>, TpmError>> {
        if pcrs.len() > gatehouse_tpm::MAX_PCRS {
            return Ok(Err(TpmError::Malformed("too many PCR values".into())));
        }
        let pcrs: Vec<gatehouse_tpm::PcrValue> = pcrs
            .into_iter()
            .map(|p| gatehouse_tpm::PcrValue {
                hash_alg: p.hash_alg,
                index: p.index,
                digest: p.digest,
            })
            .collect();
        Ok(gatehouse_tpm::verify_quote(
            &native::AwsLcVerifier,
            &ak_public,
            &quote,
            &signature,
            &pcrs,
            &nonce,
        )
        .map(|covered| {
            covered
                .into_iter()
                .map(|p| PcrValue {
                    hash_alg: p.hash_alg,
                    index: p.index,
                    digest: p.digest,
                })
                .collect()
        })
        .map_err(wit_error))
    }

    async fn verify_certify(
        &mut self,
        ak_public: Vec<u8>,
        certify_info: Vec<u8>,
        signature: Vec<u8>,
        key_public: Vec<u8>,
        nonce: Vec<u8>,
    ) -> wasmtime::Result<Result<PublicInfo, TpmError>> {
        let verified = gatehouse_tpm::verify_certify(
            &native::AwsLcVerifier,
            &ak_public,
            &certify_info,
            &signature,
            &key_public,
            &nonce,
        );
        // What the host saw proved, for JoinService's node-key checks after the call.
        if let (Ok(key), Ok(ak), Some(session)) = (
            &verified,
            native::parse_public(&ak_public),
            self.session.as_mut(),
        ) {
            use sha2::Digest as _;
            session.effects.tpm_certified.push(super::TpmCertified {
                ak_name: ak.name,
                key_spki_sha256: sha2::Sha256::digest(&key.spki).into(),
            });
        }
        Ok(verified.map(info).map_err(wit_error))
    }

    async fn verify_ek(
        &mut self,
        ek_public: Vec<u8>,
        ek_certificate: Vec<u8>,
        intermediates: Vec<Vec<u8>>,
        roots: Vec<Vec<u8>>,
        at: i64,
    ) -> wasmtime::Result<Result<PublicInfo, TpmError>> {
        if intermediates.len() > MAX_INTERMEDIATES || roots.len() > MAX_ROOTS {
            return Ok(Err(TpmError::Malformed(format!(
                "at most {MAX_INTERMEDIATES} intermediates and {MAX_ROOTS} roots"
            ))));
        }
        Ok(
            native::verify_ek(&ek_public, &ek_certificate, &intermediates, &roots, at)
                .map(info)
                .map_err(|e| match e {
                    native::EkError::Tpm(e) => wit_error(e),
                    other => TpmError::Untrusted(other.to_string()),
                }),
        )
    }
}

/// The WIT record of a parsed public area.
fn info(public: gatehouse_tpm::Public) -> PublicInfo {
    PublicInfo {
        name: public.name,
        name_alg: public.name_alg.id(),
        object_attributes: public.attributes,
        spki: public.spki,
    }
}

/// The WIT error for a crate error.
fn wit_error(e: gatehouse_tpm::TpmError) -> TpmError {
    use gatehouse_tpm::TpmError as E;
    match e {
        E::Malformed(what) => TpmError::Malformed(what.into()),
        E::BadSignature => TpmError::BadSignature,
        E::WrongType => TpmError::WrongType,
        E::WrongNonce => TpmError::WrongNonce,
        E::PcrMismatch => TpmError::PcrMismatch,
        E::WrongName => TpmError::WrongName,
        E::Attributes(what) => TpmError::Attributes(what.into()),
        E::Unsupported(what) => TpmError::Unsupported(what.into()),
        other => TpmError::Malformed(other.to_string()),
    }
}

/// The native TPM checks the import, renewal and the benchmark share.
pub mod native {
    use aws_lc_rs::agreement::{
        ECDH_P256, ECDH_P384, EphemeralPrivateKey, UnparsedPublicKey, agree_ephemeral,
    };
    use aws_lc_rs::cipher::{AES_128, AES_256, EncryptingKey, EncryptionContext, UnboundCipherKey};
    use aws_lc_rs::iv::FixedLength;
    use aws_lc_rs::rand::SystemRandom;
    use aws_lc_rs::rsa::{
        OAEP_SHA256_MGF1SHA256, OAEP_SHA384_MGF1SHA384, OAEP_SHA512_MGF1SHA512,
        OaepPublicEncryptingKey, PublicEncryptingKey,
    };
    use gatehouse_tpm::{
        Credential, CredentialCrypto, EccCurve, EcdhShare, HashAlg, Public, PublicKey, Signature,
        TpmError, Verifier,
    };
    use x509_parser::prelude::FromDer as _;
    use x509_parser::x509::SubjectPublicKeyInfo;

    use crate::pki::verify::{self, ChainError, Scheme, VerifyError};

    /// [`Verifier`] over the host's aws-lc-rs signature verification.
    #[derive(Debug, Clone, Copy, Default)]
    pub struct AwsLcVerifier;

    impl Verifier for AwsLcVerifier {
        fn verify(
            &self,
            key: &Public,
            message: &[u8],
            signature: &Signature,
        ) -> Result<(), TpmError> {
            let (scheme, bytes) = match (&key.key, signature) {
                (
                    PublicKey::Ecc {
                        curve: EccCurve::P256,
                        ..
                    },
                    Signature::Ecdsa {
                        hash: HashAlg::Sha256,
                        ..
                    },
                ) => (
                    Scheme::EcdsaP256Sha256Fixed,
                    signature.ecdsa_fixed(32).ok_or(TpmError::BadSignature)?,
                ),
                (
                    PublicKey::Ecc {
                        curve: EccCurve::P384,
                        ..
                    },
                    Signature::Ecdsa {
                        hash: HashAlg::Sha384,
                        ..
                    },
                ) => (
                    Scheme::EcdsaP384Sha384Der,
                    signature.ecdsa_der().ok_or(TpmError::BadSignature)?,
                ),
                (
                    PublicKey::Rsa { .. },
                    Signature::RsaSsa {
                        hash: HashAlg::Sha256,
                        sig,
                    },
                ) => (Scheme::RsaPkcs1Sha256, sig.clone()),
                (
                    PublicKey::Rsa { .. },
                    Signature::RsaPss {
                        hash: HashAlg::Sha256,
                        sig,
                    },
                ) => (Scheme::RsaPssSha256, sig.clone()),
                _ => return Err(TpmError::Unsupported("signature scheme and key")),
            };
            verify::verify_signature(scheme, &key.spki, message, &bytes).map_err(|e| match e {
                VerifyError::BadSignature => TpmError::BadSignature,
                _ => TpmError::Malformed("signature key or encoding"),
            })
        }
    }

    /// MakeCredential's randomness, RSA-OAEP, ECDH and AES-CFB over aws-lc-rs.
    struct AwsLcCredential;

    impl CredentialCrypto for AwsLcCredential {
        fn fill_random(&self, out: &mut [u8]) -> Result<(), TpmError> {
            aws_lc_rs::rand::fill(out).map_err(|_| TpmError::Unsupported("randomness"))
        }

        fn rsa_oaep(
            &self,
            hash: HashAlg,
            spki: &[u8],
            plaintext: &[u8],
            label: &[u8],
        ) -> Result<Vec<u8>, TpmError> {
            let algorithm = match hash {
                HashAlg::Sha256 => &OAEP_SHA256_MGF1SHA256,
                HashAlg::Sha384 => &OAEP_SHA384_MGF1SHA384,
                HashAlg::Sha512 => &OAEP_SHA512_MGF1SHA512,
                _ => return Err(TpmError::Unsupported("RSA-OAEP hash")),
            };
            let key = PublicEncryptingKey::from_der(spki)
                .map_err(|_| TpmError::Malformed("EK RSA key"))?;
            let key =
                OaepPublicEncryptingKey::new(key).map_err(|_| TpmError::Malformed("EK RSA key"))?;
            let mut out = vec![0; key.ciphertext_size()];
            let len = key
                .encrypt(algorithm, plaintext, &mut out, Some(label))
                .map_err(|_| TpmError::Malformed("RSA-OAEP"))?
                .len();
            out.truncate(len);
            Ok(out)
        }

        fn ecdh_ephemeral(
            &self,
            curve: EccCurve,
            x: &[u8],
            y: &[u8],
        ) -> Result<EcdhShare, TpmError> {
            let algorithm = match curve {
                EccCurve::P256 => &ECDH_P256,
                EccCurve::P384 => &ECDH_P384,
                _ => return Err(TpmError::Unsupported("EK curve")),
            };
            let width = curve.coordinate_len();
            let private = EphemeralPrivateKey::generate(algorithm, &SystemRandom::new())
                .map_err(|_| TpmError::Unsupported("randomness"))?;
            let public = private
                .compute_public_key()
                .map_err(|_| TpmError::Unsupported("ECDH"))?;
            // The uncompressed point 04 ‖ x ‖ y.
            let (ephemeral_x, ephemeral_y) = match public.as_ref().split_first() {
                Some((0x04, xy)) if xy.len() == 2 * width => xy.split_at(width),
                _ => return Err(TpmError::Unsupported("ECDH public point")),
            };
            let mut peer = Vec::with_capacity(1 + 2 * width);
            peer.push(0x04);
            peer.extend_from_slice(x);
            peer.extend_from_slice(y);
            // aws-lc checks that the EK's point is on the curve.
            let z = agree_ephemeral(
                private,
                UnparsedPublicKey::new(algorithm, &peer),
                TpmError::Malformed("the EK's point is not on its curve"),
                |z| Ok(z.to_vec()),
            )?;
            Ok(EcdhShare {
                z,
                x: ephemeral_x.to_vec(),
                y: ephemeral_y.to_vec(),
            })
        }

        fn aes_cfb_encrypt(&self, key: &[u8], data: &mut [u8]) -> Result<(), TpmError> {
            let algorithm = match key.len() {
                16 => &AES_128,
                32 => &AES_256,
                _ => return Err(TpmError::Unsupported("AES key size")),
            };
            let key = UnboundCipherKey::new(algorithm, key)
                .and_then(EncryptingKey::cfb128)
                .map_err(|_| TpmError::Malformed("AES key"))?;
            key.less_safe_encrypt(data, EncryptionContext::Iv128(FixedLength::from([0u8; 16])))
                .map_err(|_| TpmError::Malformed("AES-CFB"))?;
            Ok(())
        }
    }

    /// Parses a public area.
    pub fn parse_public(public: &[u8]) -> Result<Public, TpmError> {
        Public::parse(public)
    }

    /// MakeCredential of `secret` for the EK `ek_public` (TPMT_PUBLIC, RSA or ECC) and the
    /// object named `ak_name`, with a fresh random seed (RSA) or ephemeral key (ECC).
    pub fn make_credential(
        ek_public: &[u8],
        ak_name: &[u8],
        secret: &[u8],
    ) -> Result<Credential, TpmError> {
        let ek = Public::parse(ek_public)?;
        gatehouse_tpm::make_credential(&AwsLcCredential, &ek, ak_name, secret)
    }

    /// Why [`verify_ek`] refused.
    #[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
    #[non_exhaustive]
    pub enum EkError {
        /// The EK public area does not parse.
        #[error("EK public area: {0}")]
        Tpm(TpmError),
        /// The certificate chain does not verify.
        #[error("EK certificate chain: {0}")]
        Chain(ChainError),
        /// The certificate certifies another key than the EK's.
        #[error("the EK certificate certifies another key than the EK public area's")]
        KeyMismatch,
    }

    /// Verifies that `certificate` chains through `intermediates` to one of `roots` at `at_ms`
    /// and certifies the key of `ek_public`.
    ///
    /// The certificate and intermediates may be given as their NV indices hold them: each is
    /// cut at its DER length when only 0xFF or 0x00 fill follows (real TPMs pad the index), so
    /// the agent can send what it read. Any other trailing byte is still refused.
    pub fn verify_ek(
        ek_public: &[u8],
        certificate: &[u8],
        intermediates: &[Vec<u8>],
        roots: &[Vec<u8>],
        at_ms: i64,
    ) -> Result<Public, EkError> {
        let ek = Public::parse(ek_public).map_err(EkError::Tpm)?;
        let cut = |nv: &[u8]| gatehouse_tpm::nv_certificate(nv).unwrap_or(nv).to_vec();
        let mut chain = Vec::with_capacity(1 + intermediates.len());
        chain.push(cut(certificate));
        chain.extend(intermediates.iter().map(|c| cut(c)));
        let verified = verify::verify_chain(&chain, roots, at_ms).map_err(EkError::Chain)?;
        if !same_key(&verified.leaf_spki, &ek.key) {
            return Err(EkError::KeyMismatch);
        }
        Ok(ek)
    }

    /// Whether the SPKI (DER) holds `key`, compared by value (modulus and exponent, or the
    /// point), not by encoding.
    fn same_key(spki_der: &[u8], key: &PublicKey) -> bool {
        let Ok((_, spki)) = SubjectPublicKeyInfo::from_der(spki_der) else {
            return false;
        };
        let Ok(parsed) = spki.parsed() else {
            return false;
        };
        match (parsed, key) {
            (
                x509_parser::public_key::PublicKey::RSA(rsa),
                PublicKey::Rsa { modulus, exponent },
            ) => {
                strip_zeros(rsa.modulus) == strip_zeros(modulus)
                    && strip_zeros(rsa.exponent) == strip_zeros(&exponent.to_be_bytes())
            }
            (x509_parser::public_key::PublicKey::EC(point), PublicKey::Ecc { x, y, .. }) => {
                let mut expected = vec![0x04];
                expected.extend_from_slice(x);
                expected.extend_from_slice(y);
                point.data() == expected.as_slice()
            }
            _ => false,
        }
    }

    fn strip_zeros(bytes: &[u8]) -> &[u8] {
        let start = bytes.iter().position(|b| *b != 0).unwrap_or(bytes.len());
        bytes.get(start..).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests;
