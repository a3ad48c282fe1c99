//! TPMS_ATTEST (Part 2 §10.12.12) with quote and certify bodies.

use crate::reader::Reader;
use crate::{HashAlg, MAX_ATTEST_LEN, ST_ATTEST_CERTIFY, ST_ATTEST_QUOTE, TpmError};

/// Most bytes of a TPM2B_NAME (a handle, or a nameAlg and a SHA-512 digest).
const MAX_NAME: usize = 2 + 64;
/// Most bytes of extraData (TPM2B_DATA: a digest at most).
const MAX_EXTRA_DATA: usize = 64;
/// Most banks in a quote's PCR selection.
const MAX_BANKS: u32 = 16;
/// Most bytes of a bank's PCR bitmap (32 PCRs).
const MAX_SELECT: u8 = 4;

/// TPMS_CLOCK_INFO.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockInfo {
    /// Milliseconds the TPM has been powered since it was made.
    pub clock: u64,
    /// TPM Resets since the last TPM2_Clear.
    pub reset_count: u32,
    /// TPM Restarts or Resumes since the last Reset.
    pub restart_count: u32,
    /// Whether `clock` is known not to have gone backwards.
    pub safe: bool,
}

/// One bank of a PCR selection (TPMS_PCR_SELECTION).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PcrSelection {
    /// The bank's hash (TPM_ALG_ID).
    pub hash_alg: u16,
    /// The selected PCR indexes, ascending.
    pub indexes: Vec<u8>,
}

/// The type-specific part of a TPMS_ATTEST this crate reads.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Attested {
    /// TPMS_QUOTE_INFO.
    Quote {
        /// The selected PCRs, bank by bank in the order given.
        selection: Vec<PcrSelection>,
        /// The digest of the selected PCRs' values.
        pcr_digest: Vec<u8>,
    },
    /// TPMS_CERTIFY_INFO.
    Certify {
        /// The certified object's name.
        name: Vec<u8>,
        /// Its qualified name.
        qualified_name: Vec<u8>,
    },
}

/// A parsed TPMS_ATTEST.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attest {
    /// The magic (TPM_GENERATED_VALUE when a TPM made it).
    pub magic: u32,
    /// TPMI_ST_ATTEST.
    pub kind: u16,
    /// The signing key's qualified name.
    pub qualified_signer: Vec<u8>,
    /// The caller's qualifying data (the nonce).
    pub extra_data: Vec<u8>,
    /// The TPM's clock.
    pub clock_info: ClockInfo,
    /// The firmware version.
    pub firmware_version: u64,
    /// The quote or certify body.
    pub attested: Attested,
}

impl Attest {
    /// Parses a TPMS_ATTEST of type quote or certify, requiring every byte to be part of it.
    /// Other types are [`TpmError::WrongType`]; the magic is returned, not checked (the
    /// verifiers check it).
    pub fn parse(bytes: &[u8]) -> Result<Self, TpmError> {
        if bytes.len() > MAX_ATTEST_LEN {
            return Err(TpmError::Malformed("attestation too long"));
        }
        let mut r = Reader::new(bytes);
        let magic = r.u32("magic")?;
        let kind = r.u16("type")?;
        let qualified_signer = r.tpm2b(MAX_NAME, "qualifiedSigner")?.to_vec();
        let extra_data = r.tpm2b(MAX_EXTRA_DATA, "extraData")?.to_vec();
        let clock_info = ClockInfo {
            clock: r.u64("clock")?,
            reset_count: r.u32("resetCount")?,
            restart_count: r.u32("restartCount")?,
            safe: match r.u8("safe")? {
                0 => false,
                1 => true,
                _ => return Err(TpmError::Malformed("safe")),
            },
        };
        let firmware_version = r.u64("firmwareVersion")?;
        let attested = match kind {
            ST_ATTEST_QUOTE => {
                let selection = pcr_selection(&mut r)?;
                let pcr_digest = r.tpm2b(64, "pcrDigest")?.to_vec();
                Attested::Quote {
                    selection,
                    pcr_digest,
                }
            }
            ST_ATTEST_CERTIFY => Attested::Certify {
                name: r.tpm2b(MAX_NAME, "certified name")?.to_vec(),
                qualified_name: r.tpm2b(MAX_NAME, "qualifiedName")?.to_vec(),
            },
            _ => return Err(TpmError::WrongType),
        };
        r.finish("trailing bytes after the attestation")?;
        Ok(Attest {
            magic,
            kind,
            qualified_signer,
            extra_data,
            clock_info,
            firmware_version,
            attested,
        })
    }
}

/// TPML_PCR_SELECTION: a count, then per bank a hash, a bitmap size and the bitmap (PCR `i`
/// is bit `i % 8` of byte `i / 8`). A bank may appear once.
fn pcr_selection(r: &mut Reader<'_>) -> Result<Vec<PcrSelection>, TpmError> {
    let count = r.u32("PCR selection count")?;
    if count > MAX_BANKS {
        return Err(TpmError::Malformed("too many PCR banks"));
    }
    let mut banks: Vec<PcrSelection> = Vec::new();
    for _ in 0..count {
        let hash_alg = r.u16("PCR bank")?;
        if HashAlg::from_id(hash_alg).is_none() {
            return Err(TpmError::Unsupported("PCR bank hash"));
        }
        if banks.iter().any(|b| b.hash_alg == hash_alg) {
            return Err(TpmError::Malformed("PCR bank selected twice"));
        }
        let size = r.u8("sizeofSelect")?;
        if size > MAX_SELECT {
            return Err(TpmError::Malformed("sizeofSelect"));
        }
        let bitmap = r.bytes(usize::from(size), "pcrSelect")?;
        let mut indexes = Vec::new();
        for (byte_index, byte) in (0u8..).zip(bitmap) {
            for bit in 0..8u8 {
                if byte & (1 << bit) != 0 {
                    indexes.push(byte_index * 8 + bit);
                }
            }
        }
        banks.push(PcrSelection { hash_alg, indexes });
    }
    Ok(banks)
}
