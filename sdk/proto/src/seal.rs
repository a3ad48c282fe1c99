//! Sealing join tokens to the JoinService encryption key with HPKE (RFC 9180, base mode,
//! DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, ChaCha20-Poly1305), through the `hpke` crate.
//!
//! Wire form: the 32-byte encapsulated key followed by the AEAD ciphertext of the token's text
//! form. `info` is [`TOKEN_SEAL_INFO`]; the associated data is the CSR's SHA-256, so a sealed
//! token opens only for the request it was sealed for.

use hpke::aead::ChaCha20Poly1305;
use hpke::kdf::HkdfSha256;
use hpke::kem::X25519HkdfSha256;
use hpke::{Deserializable, Kem, OpModeR, OpModeS, Serializable};
use zeroize::Zeroize;

use crate::{TOKEN_SEAL_INFO, TokenError, TokenString};

type Suite = X25519HkdfSha256;
const ENC_LEN: usize = 32;
/// A token's text is under 128 bytes; anything much larger is not a sealed token.
const MAX_SEALED: usize = 1024;

/// Why a token could not be sealed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SealError {
    /// The recipient key is not a 32-byte X25519 public key.
    #[error("the JoinService encryption key is not an X25519 public key")]
    RecipientKey,
    /// The HPKE operation failed (the system random source, in practice).
    #[error("sealing failed")]
    Seal,
}

/// The JoinService's private token-opening key (X25519). Zeroized on drop, never printed.
pub struct TokenOpeningKey([u8; 32]);

impl TokenOpeningKey {
    /// The key from its 32 private bytes.
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// The 32 private bytes (for the encrypted PKI bundle).
    pub fn to_bytes(&self) -> [u8; 32] {
        self.0
    }

    /// The matching public key agents seal to.
    pub fn public_key(&self) -> Result<[u8; 32], SealError> {
        let sk =
            <Suite as Kem>::PrivateKey::from_bytes(&self.0).map_err(|_| SealError::RecipientKey)?;
        Ok(<Suite as Kem>::sk_to_pk(&sk).to_bytes().into())
    }
}

impl Drop for TokenOpeningKey {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}

impl std::fmt::Debug for TokenOpeningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenOpeningKey(..)")
    }
}

/// A fresh opening key and its public key.
pub fn generate_token_keypair() -> (TokenOpeningKey, [u8; 32]) {
    let (sk, pk) = <Suite as Kem>::gen_keypair();
    (TokenOpeningKey(sk.to_bytes().into()), pk.to_bytes().into())
}

/// Seals `token` to `recipient_public` for the CSR whose SHA-256 is `csr_sha256`.
pub fn seal_token(
    recipient_public: &[u8],
    token: &TokenString,
    csr_sha256: &[u8; 32],
) -> Result<Vec<u8>, SealError> {
    let pk = <Suite as Kem>::PublicKey::from_bytes(recipient_public)
        .map_err(|_| SealError::RecipientKey)?;
    let mut text = token.to_text().into_bytes();
    let sealed = hpke::single_shot_seal::<ChaCha20Poly1305, HkdfSha256, Suite>(
        &OpModeS::Base,
        &pk,
        TOKEN_SEAL_INFO,
        &text,
        csr_sha256,
    );
    text.zeroize();
    let (enc, ciphertext) = sealed.map_err(|_| SealError::Seal)?;
    let mut out = enc.to_bytes().to_vec();
    out.extend_from_slice(&ciphertext);
    Ok(out)
}

/// Opens a sealed token for the CSR whose SHA-256 is `csr_sha256`. Total on untrusted input:
/// [`TokenError::Sealed`] when it does not open (tampered, truncated, oversized, another key or
/// another CSR), otherwise the errors of [`TokenString::parse`] for what it held.
pub fn open_token(
    key: &TokenOpeningKey,
    sealed: &[u8],
    csr_sha256: &[u8; 32],
) -> Result<TokenString, TokenError> {
    if sealed.len() <= ENC_LEN || sealed.len() > MAX_SEALED {
        return Err(TokenError::Sealed);
    }
    let (enc, ciphertext) = sealed.split_at(ENC_LEN);
    let sk = <Suite as Kem>::PrivateKey::from_bytes(&key.0).map_err(|_| TokenError::Sealed)?;
    let enc = <Suite as Kem>::EncappedKey::from_bytes(enc).map_err(|_| TokenError::Sealed)?;
    let mut text = hpke::single_shot_open::<ChaCha20Poly1305, HkdfSha256, Suite>(
        &OpModeR::Base,
        &sk,
        &enc,
        TOKEN_SEAL_INFO,
        ciphertext,
        csr_sha256,
    )
    .map_err(|_| TokenError::Sealed)?;
    let parsed = std::str::from_utf8(&text)
        .map_err(|_| TokenError::Format)
        .and_then(TokenString::parse);
    text.zeroize();
    parsed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token() -> TokenString {
        TokenString {
            id: "tok_abc".into(),
            secret: vec![9; 32],
        }
    }

    #[test]
    fn round_trip_and_binding() {
        let (key, public) = generate_token_keypair();
        assert_eq!(key.public_key().unwrap(), public);
        let csr = [1u8; 32];
        let sealed = seal_token(&public, &token(), &csr).unwrap();
        assert_eq!(open_token(&key, &sealed, &csr).unwrap(), token());
        assert_eq!(
            open_token(&key, &sealed, &[2u8; 32]),
            Err(TokenError::Sealed),
            "another CSR"
        );
        let (other, _) = generate_token_keypair();
        assert_eq!(
            open_token(&other, &sealed, &csr),
            Err(TokenError::Sealed),
            "another key"
        );
    }

    #[test]
    fn tampering_and_garbage_do_not_open() {
        let (key, public) = generate_token_keypair();
        let csr = [1u8; 32];
        let sealed = seal_token(&public, &token(), &csr).unwrap();
        for i in [0, ENC_LEN, sealed.len() - 1] {
            let mut bad = sealed.clone();
            bad[i] ^= 1;
            assert_eq!(
                open_token(&key, &bad, &csr),
                Err(TokenError::Sealed),
                "byte {i}"
            );
        }
        assert_eq!(
            open_token(&key, &sealed[..ENC_LEN], &csr),
            Err(TokenError::Sealed)
        );
        assert_eq!(open_token(&key, &[], &csr), Err(TokenError::Sealed));
        assert_eq!(
            open_token(&key, &vec![0; 4096], &csr),
            Err(TokenError::Sealed)
        );
        assert_eq!(
            seal_token(&[1, 2, 3], &token(), &csr),
            Err(SealError::RecipientKey)
        );
    }

    #[test]
    fn opening_key_bytes_round_trip() {
        let (key, public) = generate_token_keypair();
        let again = TokenOpeningKey::from_bytes(key.to_bytes());
        assert_eq!(again.public_key().unwrap(), public);
        let csr = [3u8; 32];
        let sealed = seal_token(&public, &token(), &csr).unwrap();
        assert_eq!(open_token(&again, &sealed, &csr).unwrap(), token());
    }

    #[test]
    fn errors_display() {
        assert_eq!(
            SealError::RecipientKey.to_string(),
            "the JoinService encryption key is not an X25519 public key"
        );
        assert_eq!(SealError::Seal.to_string(), "sealing failed");
        assert_eq!(
            TokenError::Sealed.to_string(),
            "the sealed token does not open for this key and CSR"
        );
    }

    #[test]
    fn debug_hides_the_key() {
        let (key, _) = generate_token_keypair();
        assert_eq!(format!("{key:?}"), "TokenOpeningKey(..)");
    }
}
