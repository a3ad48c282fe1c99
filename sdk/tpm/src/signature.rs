//! TPMT_SIGNATURE (Part 2 §11.3.4) for ECDSA, RSASSA and RSAPSS.

use crate::reader::Reader;
use crate::{HashAlg, MAX_SIGNATURE_LEN, TpmError, alg};

/// Most bytes of an ECDSA `r` or `s` (P-521).
const MAX_ECC_PARAMETER: usize = 66;
/// Most bytes of an RSA signature (4096 bits).
const MAX_RSA_SIGNATURE: usize = 512;

/// A parsed TPMT_SIGNATURE.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Signature {
    /// TPM_ALG_ECDSA.
    Ecdsa {
        /// The digest's hash.
        hash: HashAlg,
        /// `r`, big-endian, as the TPM sent it.
        r: Vec<u8>,
        /// `s`, big-endian, as the TPM sent it.
        s: Vec<u8>,
    },
    /// TPM_ALG_RSASSA (PKCS#1 v1.5).
    RsaSsa {
        /// The digest's hash.
        hash: HashAlg,
        /// The signature.
        sig: Vec<u8>,
    },
    /// TPM_ALG_RSAPSS.
    RsaPss {
        /// The digest's hash.
        hash: HashAlg,
        /// The signature.
        sig: Vec<u8>,
    },
}

impl Signature {
    /// Parses a TPMT_SIGNATURE, requiring every byte to be part of it.
    pub fn parse(bytes: &[u8]) -> Result<Self, TpmError> {
        if bytes.len() > MAX_SIGNATURE_LEN {
            return Err(TpmError::Malformed("signature too long"));
        }
        let mut r = Reader::new(bytes);
        let sig_alg = r.u16("sigAlg")?;
        let hash = match HashAlg::from_id(r.u16("signature hash")?) {
            Some(HashAlg::Sha1) | None => return Err(TpmError::Unsupported("signature hash")),
            Some(hash) => hash,
        };
        let signature = match sig_alg {
            alg::ECDSA => Signature::Ecdsa {
                hash,
                r: r.tpm2b(MAX_ECC_PARAMETER, "ECDSA r")?.to_vec(),
                s: r.tpm2b(MAX_ECC_PARAMETER, "ECDSA s")?.to_vec(),
            },
            alg::RSASSA => Signature::RsaSsa {
                hash,
                sig: r.tpm2b(MAX_RSA_SIGNATURE, "RSASSA signature")?.to_vec(),
            },
            alg::RSAPSS => Signature::RsaPss {
                hash,
                sig: r.tpm2b(MAX_RSA_SIGNATURE, "RSAPSS signature")?.to_vec(),
            },
            _ => return Err(TpmError::Unsupported("signature algorithm")),
        };
        r.finish("trailing bytes after the signature")?;
        Ok(signature)
    }

    /// The TPM_ALG_ID of the scheme.
    pub fn scheme(&self) -> u16 {
        match self {
            Signature::Ecdsa { .. } => alg::ECDSA,
            Signature::RsaSsa { .. } => alg::RSASSA,
            Signature::RsaPss { .. } => alg::RSAPSS,
        }
    }

    /// The digest's hash.
    pub fn hash(&self) -> HashAlg {
        match self {
            Signature::Ecdsa { hash, .. }
            | Signature::RsaSsa { hash, .. }
            | Signature::RsaPss { hash, .. } => *hash,
        }
    }

    /// ECDSA `r ‖ s`, each left-padded to `width` bytes (a TPM may drop leading zeros), or
    /// `None` for another scheme or a parameter longer than `width`.
    pub fn ecdsa_fixed(&self, width: usize) -> Option<Vec<u8>> {
        let Signature::Ecdsa { r, s, .. } = self else {
            return None;
        };
        let mut out = Vec::with_capacity(2 * width);
        for part in [r, s] {
            let pad = width.checked_sub(part.len())?;
            out.extend(std::iter::repeat_n(0, pad));
            out.extend_from_slice(part);
        }
        Some(out)
    }

    /// ECDSA `(r, s)` as an ASN.1 DER Ecdsa-Sig-Value, or `None` for another scheme.
    pub fn ecdsa_der(&self) -> Option<Vec<u8>> {
        let Signature::Ecdsa { r, s, .. } = self else {
            return None;
        };
        let mut body = crate::der::integer(r);
        body.extend(crate::der::integer(s));
        Some(crate::der::tlv(0x30, &body))
    }
}
