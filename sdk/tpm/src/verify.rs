//! The checks: attestation-key attributes, quotes, certifications.

use crate::public::{Public, PublicKey};
use crate::signature::Signature;
use crate::{
    Attest, Attested, HashAlg, MAX_PCRS, ST_ATTEST_CERTIFY, ST_ATTEST_QUOTE, TPM_GENERATED_VALUE,
    TpmError, alg, attr,
};

/// Verifies a TPM signature with a key from a public area. The host implements it over
/// aws-lc-rs; a wasm build can use [`crate::RustCryptoVerifier`] (feature `rustcrypto`).
///
/// Callers of this trait have already checked that the signature's scheme fits the key (ECDSA
/// for ECC keys, RSASSA or RSAPSS for RSA keys, the key's own scheme when it has one), so an
/// implementation only maps the pair onto its primitives, and answers
/// [`TpmError::Unsupported`] for a combination it lacks.
pub trait Verifier {
    /// Verifies `signature` over `message` (the structure's bytes: the implementation hashes
    /// them with the signature's hash) by `key`. [`TpmError::BadSignature`] when it does not.
    fn verify(&self, key: &Public, message: &[u8], signature: &Signature) -> Result<(), TpmError>;
}

/// One PCR value the agent reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PcrValue {
    /// The bank's hash (TPM_ALG_ID).
    pub hash_alg: u16,
    /// The PCR index.
    pub index: u8,
    /// The value.
    pub digest: Vec<u8>,
}

/// What an attestation key must be: a restricted signing key (it signs only TPM-made
/// structures, so a quote or certification cannot be forged by signing chosen bytes) that
/// cannot leave its TPM (fixedTPM, fixedParent) and whose private part the TPM made
/// (sensitiveDataOrigin); never a decryption key.
pub fn check_ak(public: &[u8]) -> Result<Public, TpmError> {
    let ak = Public::parse(public)?;
    for (bit, what) in [
        (attr::RESTRICTED, "restricted clear"),
        (attr::SIGN, "sign clear"),
        (attr::FIXED_TPM, "fixedTPM clear"),
        (attr::FIXED_PARENT, "fixedParent clear"),
        (attr::SENSITIVE_DATA_ORIGIN, "sensitiveDataOrigin clear"),
    ] {
        if !ak.has(bit) {
            return Err(TpmError::Attributes(what));
        }
    }
    if ak.has(attr::DECRYPT) {
        return Err(TpmError::Attributes("decrypt set"));
    }
    Ok(ak)
}

/// What a certified node key must be: a signing key that cannot leave its TPM and whose
/// private part the TPM made; not a decryption key.
pub fn check_certified_key(key: &Public) -> Result<(), TpmError> {
    for (bit, what) in [
        (attr::FIXED_TPM, "fixedTPM clear"),
        (attr::FIXED_PARENT, "fixedParent clear"),
        (attr::SENSITIVE_DATA_ORIGIN, "sensitiveDataOrigin clear"),
        (attr::SIGN, "sign clear"),
    ] {
        if !key.has(bit) {
            return Err(TpmError::Attributes(what));
        }
    }
    if key.has(attr::DECRYPT) {
        return Err(TpmError::Attributes("decrypt set"));
    }
    Ok(())
}

/// Parses `signature` and verifies it over `message` by `signer`, after checking the scheme
/// fits the key: a signing key, ECDSA for ECC and RSASSA/RSAPSS for RSA, and the key's own
/// scheme and hash when its public area fixes one (a restricted key always does).
pub fn verify_signed(
    verifier: &dyn Verifier,
    signer: &Public,
    message: &[u8],
    signature: &[u8],
) -> Result<Signature, TpmError> {
    let signature = Signature::parse(signature)?;
    if !signer.has(attr::SIGN) {
        return Err(TpmError::Attributes("the signer is not a signing key"));
    }
    let fits = match signer.key {
        PublicKey::Ecc { .. } => signature.scheme() == alg::ECDSA,
        PublicKey::Rsa { .. } => matches!(signature.scheme(), alg::RSASSA | alg::RSAPSS),
    };
    let own_scheme = signer.params.scheme == alg::NULL
        || (signer.params.scheme == signature.scheme()
            && signer.params.scheme_hash == signature.hash().id());
    if !fits || !own_scheme {
        return Err(TpmError::BadSignature);
    }
    verifier.verify(signer, message, &signature)?;
    Ok(signature)
}

/// The digest a quote carries for `values`: the signature's hash over their concatenation.
pub fn pcr_digest(hash: HashAlg, values: &[PcrValue]) -> Result<Vec<u8>, TpmError> {
    let mut all = Vec::new();
    for value in values {
        all.extend_from_slice(&value.digest);
    }
    hash.digest(&all)
}

/// Verifies a TPM2_Quote by the key `ak_public`: every structure parses, the signature
/// verifies, the magic is TPM_GENERATED_VALUE and the type TPM_ST_ATTEST_QUOTE, extraData is
/// `nonce`, `pcrs` are exactly the PCRs the quote selects (bank by bank, ascending index, each
/// of its bank's size) and their digest is the quote's. Returns the PCRs covered: no value the
/// quote does not cover is ever accepted.
pub fn verify_quote(
    verifier: &dyn Verifier,
    ak_public: &[u8],
    quote: &[u8],
    signature: &[u8],
    pcrs: &[PcrValue],
    nonce: &[u8],
) -> Result<Vec<PcrValue>, TpmError> {
    if pcrs.len() > MAX_PCRS {
        return Err(TpmError::Malformed("too many PCR values"));
    }
    let ak = Public::parse(ak_public)?;
    let attest = Attest::parse(quote)?;
    let signature = verify_signed(verifier, &ak, quote, signature)?;
    if attest.magic != TPM_GENERATED_VALUE || attest.kind != ST_ATTEST_QUOTE {
        return Err(TpmError::WrongType);
    }
    if attest.extra_data != nonce {
        return Err(TpmError::WrongNonce);
    }
    let Attested::Quote {
        selection,
        pcr_digest: quoted,
    } = &attest.attested
    else {
        return Err(TpmError::WrongType);
    };
    let mut expected = selection
        .iter()
        .flat_map(|bank| bank.indexes.iter().map(|i| (bank.hash_alg, *i)));
    for value in pcrs {
        let Some((hash_alg, index)) = expected.next() else {
            return Err(TpmError::PcrMismatch);
        };
        let size = HashAlg::from_id(hash_alg).map(HashAlg::size);
        if value.hash_alg != hash_alg || value.index != index || Some(value.digest.len()) != size {
            return Err(TpmError::PcrMismatch);
        }
    }
    if expected.next().is_some() {
        return Err(TpmError::PcrMismatch);
    }
    if pcr_digest(signature.hash(), pcrs)? != *quoted {
        return Err(TpmError::PcrMismatch);
    }
    Ok(pcrs.to_vec())
}

/// Verifies a TPM2_Certify of `key_public` by `ak_public`: every structure parses, the
/// signature verifies, the magic is TPM_GENERATED_VALUE and the type TPM_ST_ATTEST_CERTIFY,
/// extraData is `nonce`, the certified name is the name of `key_public`, and that key is a
/// TPM-resident signing key ([`check_certified_key`]). Returns the certified key.
pub fn verify_certify(
    verifier: &dyn Verifier,
    ak_public: &[u8],
    certify_info: &[u8],
    signature: &[u8],
    key_public: &[u8],
    nonce: &[u8],
) -> Result<Public, TpmError> {
    let ak = Public::parse(ak_public)?;
    let key = Public::parse(key_public)?;
    let attest = Attest::parse(certify_info)?;
    verify_signed(verifier, &ak, certify_info, signature)?;
    if attest.magic != TPM_GENERATED_VALUE || attest.kind != ST_ATTEST_CERTIFY {
        return Err(TpmError::WrongType);
    }
    if attest.extra_data != nonce {
        return Err(TpmError::WrongNonce);
    }
    let Attested::Certify { name, .. } = &attest.attested else {
        return Err(TpmError::WrongType);
    };
    if *name != key.name {
        return Err(TpmError::WrongName);
    }
    check_certified_key(&key)?;
    Ok(key)
}
