//! TPMT_PUBLIC (Part 2 §12.2.4) for RSA and ECC keys, its TPM name and its SPKI.

use crate::reader::Reader;
use crate::{HashAlg, MAX_PUBLIC_LEN, TpmError, alg, der};

/// Most bytes of an RSA modulus (4096 bits).
const MAX_RSA_MODULUS: usize = 512;
/// Most bytes of an ECC coordinate (P-521).
const MAX_ECC_COORDINATE: usize = 66;
/// Most bytes of an authPolicy (a SHA-512 digest).
const MAX_POLICY: usize = 64;

/// A parsed TPMT_PUBLIC of an RSA or ECC key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Public {
    /// The TPM name: nameAlg (2 bytes, big-endian) ‖ H_nameAlg(TPMT_PUBLIC).
    pub name: Vec<u8>,
    /// The name algorithm.
    pub name_alg: HashAlg,
    /// TPMA_OBJECT bits.
    pub attributes: u32,
    /// The authPolicy digest (empty when none).
    pub auth_policy: Vec<u8>,
    /// The type-specific parameters.
    pub params: KeyParams,
    /// The public key.
    pub key: PublicKey,
    /// The key as an X.509 SubjectPublicKeyInfo (DER).
    pub spki: Vec<u8>,
}

/// A symmetric algorithm definition (TPMT_SYM_DEF_OBJECT), when not TPM_ALG_NULL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SymDef {
    /// The algorithm (TPM_ALG_AES, …).
    pub alg: u16,
    /// The key size in bits.
    pub key_bits: u16,
    /// The mode (TPM_ALG_CFB, …).
    pub mode: u16,
}

/// The parameters of a key (TPMU_PUBLIC_PARMS) this crate reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyParams {
    /// The symmetric algorithm for a storage (restricted decryption) key, else `None`.
    pub symmetric: Option<SymDef>,
    /// The signing or encryption scheme (TPM_ALG_NULL when the key has none).
    pub scheme: u16,
    /// The scheme's hash (TPM_ALG_NULL when the scheme is).
    pub scheme_hash: u16,
}

/// An ECC curve (TPM_ECC_CURVE) with an X.509 encoding here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EccCurve {
    /// TPM_ECC_NIST_P256.
    P256,
    /// TPM_ECC_NIST_P384.
    P384,
}

impl EccCurve {
    /// The curve for a TPM_ECC_CURVE, or `None`.
    pub fn from_id(id: u16) -> Option<Self> {
        match id {
            0x0003 => Some(Self::P256),
            0x0004 => Some(Self::P384),
            _ => None,
        }
    }

    /// The size of a coordinate (and of `r` and `s`) in bytes.
    pub fn coordinate_len(self) -> usize {
        match self {
            Self::P256 => 32,
            Self::P384 => 48,
        }
    }
}

/// A public key.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PublicKey {
    /// An RSA key.
    Rsa {
        /// The modulus, big-endian.
        modulus: Vec<u8>,
        /// The public exponent (TPM's 0 already replaced by 65537).
        exponent: u32,
    },
    /// An ECC key, coordinates left-padded to the curve's size.
    Ecc {
        /// The curve.
        curve: EccCurve,
        /// X, big-endian, fixed width.
        x: Vec<u8>,
        /// Y, big-endian, fixed width.
        y: Vec<u8>,
    },
}

impl Public {
    /// Parses a TPMT_PUBLIC, or a TPM2B_PUBLIC (the same with a 16-bit size in front: a
    /// size equal to the rest's length can never be a TPMT_PUBLIC's type, so this is not
    /// ambiguous), requiring every byte to be part of it.
    pub fn parse(bytes: &[u8]) -> Result<Self, TpmError> {
        if bytes.len() > MAX_PUBLIC_LEN {
            return Err(TpmError::Malformed("public area too long"));
        }
        let area = match bytes.split_first_chunk::<2>() {
            Some((size, rest)) if usize::from(u16::from_be_bytes(*size)) == rest.len() => rest,
            _ => bytes,
        };
        parse_area(area)
    }

    /// Whether every bit of `bits` is set in the attributes.
    pub fn has(&self, bits: u32) -> bool {
        self.attributes & bits == bits
    }
}

fn parse_area(area: &[u8]) -> Result<Public, TpmError> {
    let mut r = Reader::new(area);
    let kind = r.u16("public type")?;
    let name_alg = match HashAlg::from_id(r.u16("nameAlg")?) {
        Some(HashAlg::Sha1) => return Err(TpmError::Unsupported("SHA-1 nameAlg")),
        Some(hash) => hash,
        None => return Err(TpmError::Unsupported("nameAlg")),
    };
    let attributes = r.u32("objectAttributes")?;
    let auth_policy = r.tpm2b(MAX_POLICY, "authPolicy")?.to_vec();
    let (params, key) = match kind {
        alg::RSA => {
            let symmetric = sym_def(&mut r)?;
            let (scheme, scheme_hash) = read_scheme(&mut r, "RSA scheme")?;
            let key_bits = r.u16("RSA keyBits")?;
            let exponent = match r.u32("RSA exponent")? {
                0 => 65_537,
                e => e,
            };
            let modulus = r.tpm2b(MAX_RSA_MODULUS, "RSA modulus")?;
            if modulus.is_empty()
                || modulus.first() == Some(&0)
                || usize::from(key_bits) != modulus.len() * 8
            {
                return Err(TpmError::Malformed("RSA modulus"));
            }
            if exponent < 3 || exponent % 2 == 0 {
                return Err(TpmError::Malformed("RSA exponent"));
            }
            (
                KeyParams {
                    symmetric,
                    scheme,
                    scheme_hash,
                },
                PublicKey::Rsa {
                    modulus: modulus.to_vec(),
                    exponent,
                },
            )
        }
        alg::ECC => {
            let symmetric = sym_def(&mut r)?;
            let (scheme, scheme_hash) = read_scheme(&mut r, "ECC scheme")?;
            let curve =
                EccCurve::from_id(r.u16("curveID")?).ok_or(TpmError::Unsupported("ECC curve"))?;
            // The KDF scheme (TPMT_KDF_SCHEME): read and ignored, it plays no part in any check.
            let _ = read_scheme(&mut r, "ECC kdf")?;
            let x = coordinate(r.tpm2b(MAX_ECC_COORDINATE, "ECC x")?, curve)?;
            let y = coordinate(r.tpm2b(MAX_ECC_COORDINATE, "ECC y")?, curve)?;
            (
                KeyParams {
                    symmetric,
                    scheme,
                    scheme_hash,
                },
                PublicKey::Ecc { curve, x, y },
            )
        }
        _ => return Err(TpmError::Unsupported("public area type (RSA and ECC only)")),
    };
    r.finish("trailing bytes after the public area")?;
    let mut name = name_alg.id().to_be_bytes().to_vec();
    name.extend(name_alg.digest(area)?);
    let spki = der::spki(&key);
    Ok(Public {
        name,
        name_alg,
        attributes,
        auth_policy,
        params,
        key,
        spki,
    })
}

/// TPMT_SYM_DEF_OBJECT: TPM_ALG_NULL, or an algorithm, its key bits and mode.
fn sym_def(r: &mut Reader<'_>) -> Result<Option<SymDef>, TpmError> {
    let alg = r.u16("symmetric algorithm")?;
    if alg == alg::NULL {
        return Ok(None);
    }
    // XOR's details are a hash, not key bits and a mode; no key an attestor reads has it.
    if alg == alg::XOR {
        return Err(TpmError::Unsupported("XOR symmetric definition"));
    }
    Ok(Some(SymDef {
        alg,
        key_bits: r.u16("symmetric keyBits")?,
        mode: r.u16("symmetric mode")?,
    }))
}

/// A TPMT_*_SCHEME: the scheme, then its hash unless it is TPM_ALG_NULL (ECDAA also has a
/// count). Returns (scheme, hash).
fn read_scheme(r: &mut Reader<'_>, what: &'static str) -> Result<(u16, u16), TpmError> {
    let scheme = r.u16(what)?;
    if scheme == alg::NULL {
        return Ok((alg::NULL, alg::NULL));
    }
    let hash = r.u16(what)?;
    if scheme == alg::ECDAA {
        let _count = r.u16(what)?;
    }
    Ok((scheme, hash))
}

/// A coordinate left-padded to the curve's width (a TPM may drop leading zeros).
fn coordinate(bytes: &[u8], curve: EccCurve) -> Result<Vec<u8>, TpmError> {
    let width = curve.coordinate_len();
    if bytes.is_empty() || bytes.len() > width {
        return Err(TpmError::Malformed("ECC coordinate"));
    }
    let mut out = vec![0; width - bytes.len()];
    out.extend_from_slice(bytes);
    Ok(out)
}
