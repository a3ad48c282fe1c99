//! Sealing join tokens to the JoinService encryption key, and opening them: HPKE (RFC 9180)
//! in base mode, single shot, for one suite: DHKEM(X25519, HKDF-SHA256), HKDF-SHA256,
//! ChaCha20-Poly1305, over aws-lc-rs.
//!
//! Wire form: the 32-byte encapsulated key followed by the AEAD ciphertext of the token's text
//! form. `info` is [`TOKEN_SEAL_INFO`]; the associated data is the CSR's SHA-256, so a sealed
//! token opens only for the request it was sealed for.
//!
//! Written here rather than taken from the `hpke` crate (a dev-dependency: the reference these
//! tests hold both directions to, with RFC 9180's test vector for the suite) because aws-lc-rs
//! has no HPKE and that crate does its X25519 in portable Rust and recomputes the recipient's
//! public key at every open: 125 µs of an agent's CPU per seal and about 80 µs of the host's per
//! open, against a few tens of µs here (issue 14). Only the pieces this one suite needs are
//! here: the labelled HKDF steps are HMAC-SHA256 (every output is at most one block), the
//! X25519 exchange and the AEAD are aws-lc's, and the key schedule's context, which depends
//! only on the fixed `info`, is computed once per key.

use std::sync::OnceLock;

use aws_lc_rs::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, Nonce, UnboundKey};
use aws_lc_rs::agreement::{self, PrivateKey, UnparsedPublicKey, X25519};
use aws_lc_rs::hmac;
use zeroize::{Zeroize, Zeroizing};

use crate::{TOKEN_SEAL_INFO, TokenError, TokenString};

/// `suite_id` of the KEM: "KEM" ‖ I2OSP(0x0020, 2) (DHKEM(X25519, HKDF-SHA256)).
const KEM_SUITE: &[u8] = b"KEM\x00\x20";
/// `suite_id` of the whole: "HPKE" ‖ kem_id ‖ kdf_id (HKDF-SHA256) ‖ aead_id (ChaCha20-Poly1305).
const HPKE_SUITE: &[u8] = b"HPKE\x00\x20\x00\x01\x00\x03";
/// Nenc = Npk: an X25519 public key.
const ENC_LEN: usize = 32;
/// A token's text is under 128 bytes; anything much larger is not a sealed token.
const MAX_SEALED: usize = 1024;
/// The key schedule's context: mode (base, 0) ‖ psk_id_hash ‖ info_hash.
const CONTEXT_LEN: usize = 1 + 32 + 32;

/// Why a token could not be sealed, or a key not made or loaded.
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
        let private =
            PrivateKey::from_private_key(&X25519, &self.0).map_err(|_| SealError::RecipientKey)?;
        public_of(&private).ok_or(SealError::RecipientKey)
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

/// A fresh opening key and its public key: 32 bytes from the system's random source, which
/// X25519 takes as they are (RFC 7748 clamps them in the exchange).
pub fn generate_token_keypair() -> Result<(TokenOpeningKey, [u8; 32]), SealError> {
    let mut bytes = Zeroizing::new([0; 32]);
    aws_lc_rs::rand::fill(bytes.as_mut_slice()).map_err(|_| SealError::Seal)?;
    let key = TokenOpeningKey(*bytes);
    let public = key.public_key()?;
    Ok((key, public))
}

/// Seals `token` to `recipient_public` for the CSR whose SHA-256 is `csr_sha256`.
pub fn seal_token(
    recipient_public: &[u8],
    token: &TokenString,
    csr_sha256: &[u8; 32],
) -> Result<Vec<u8>, SealError> {
    let recipient: &[u8; 32] = recipient_public
        .try_into()
        .map_err(|_| SealError::RecipientKey)?;
    let ephemeral = PrivateKey::generate(&X25519).map_err(|_| SealError::Seal)?;
    let text = Zeroizing::new(token.to_text().into_bytes());
    seal_base(&ephemeral, recipient, token_context(), &text, csr_sha256)
}

/// The join encryption key, ready to open tokens sealed to it: the host keeps one per key it
/// opens with.
pub struct TokenOpener {
    /// The key as the bundle stores it.
    key: TokenOpeningKey,
    private: PrivateKey,
    public: [u8; 32],
    /// The key schedule's context for the `info` tokens are sealed with.
    context: [u8; CONTEXT_LEN],
}

impl std::fmt::Debug for TokenOpener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenOpener")
            .field("public", &self.public)
            .finish_non_exhaustive()
    }
}

impl TokenOpener {
    /// The opener of `key`; [`SealError::RecipientKey`] if aws-lc refuses it as an X25519
    /// private key.
    pub fn new(key: TokenOpeningKey) -> Result<Self, SealError> {
        Self::with_context(key, *token_context())
    }

    fn with_context(key: TokenOpeningKey, context: [u8; CONTEXT_LEN]) -> Result<Self, SealError> {
        let private =
            PrivateKey::from_private_key(&X25519, &key.0).map_err(|_| SealError::RecipientKey)?;
        let public = public_of(&private).ok_or(SealError::RecipientKey)?;
        Ok(Self {
            key,
            private,
            public,
            context,
        })
    }

    /// The key as the bundle stores it.
    pub fn key(&self) -> &TokenOpeningKey {
        &self.key
    }

    /// The X25519 public key agents seal to.
    pub fn public(&self) -> [u8; 32] {
        self.public
    }

    /// Opens a token sealed for the CSR whose SHA-256 is `csr_sha256`. Total on untrusted
    /// input: [`TokenError::Sealed`] when it does not open (tampered, truncated, oversized,
    /// another key or another CSR, a small-order encapsulated key), otherwise the errors of
    /// [`TokenString::parse`] for what it held.
    pub fn open(&self, sealed: &[u8], csr_sha256: &[u8; 32]) -> Result<TokenString, TokenError> {
        let text = self.open_base(sealed, csr_sha256)?;
        std::str::from_utf8(&text)
            .map_err(|_| TokenError::Format)
            .and_then(TokenString::parse)
    }

    /// RFC 9180's `Decap`, `KeyScheduleR` and `Open` of sequence number 0: the plaintext of
    /// `enc ‖ ciphertext`.
    fn open_base(&self, sealed: &[u8], aad: &[u8]) -> Result<Zeroizing<Vec<u8>>, TokenError> {
        if sealed.len() <= ENC_LEN || sealed.len() > MAX_SEALED {
            return Err(TokenError::Sealed);
        }
        let (enc, ciphertext) = sealed.split_at(ENC_LEN);
        let shared_secret =
            encapsulated(&self.private, enc, enc, &self.public).ok_or(TokenError::Sealed)?;
        let (key, nonce) = aead_key(&shared_secret, &self.context).ok_or(TokenError::Sealed)?;
        let mut text = Zeroizing::new(ciphertext.to_vec());
        let len = key
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad),
                &mut text,
            )
            .map_err(|_| TokenError::Sealed)?
            .len();
        // Dropping `text` zeroes its whole allocation, the cut tag included.
        text.truncate(len);
        Ok(text)
    }
}

/// RFC 9180's `Encap` with the ephemeral key `sender`, `KeyScheduleS` and `Seal` of sequence
/// number 0: `enc ‖ ciphertext`.
fn seal_base(
    sender: &PrivateKey,
    recipient: &[u8; 32],
    context: &[u8; CONTEXT_LEN],
    text: &[u8],
    aad: &[u8],
) -> Result<Vec<u8>, SealError> {
    let enc = public_of(sender).ok_or(SealError::Seal)?;
    // An exchange that fails here is a recipient key of small order (an all-zero result).
    let shared_secret =
        encapsulated(sender, recipient, &enc, recipient).ok_or(SealError::RecipientKey)?;
    let (key, nonce) = aead_key(&shared_secret, context).ok_or(SealError::Seal)?;
    // Sealed in place in the output, after `enc`: no other copy of the plaintext is made.
    let mut out = Vec::with_capacity(ENC_LEN + text.len() + CHACHA20_POLY1305.tag_len());
    out.extend_from_slice(&enc);
    out.extend_from_slice(text);
    let sealed = key.seal_in_place_separate_tag(
        Nonce::assume_unique_for_key(nonce),
        Aad::from(aad),
        &mut out[ENC_LEN..],
    );
    match sealed {
        Ok(tag) => {
            out.extend_from_slice(tag.as_ref());
            Ok(out)
        }
        Err(_) => {
            out.zeroize(); // It may still hold the plaintext.
            Err(SealError::Seal)
        }
    }
}

/// DHKEM's shared secret: the X25519 exchange of `private` with `peer`, extracted and
/// expanded with `kem_context` = `enc ‖ pkR`. `None` where the exchange fails: a peer key that
/// is not 32 bytes, or an all-zero result from a small-order point, which RFC 9180 requires
/// refusing and aws-lc refuses.
fn encapsulated(
    private: &PrivateKey,
    peer: &[u8],
    enc: &[u8],
    recipient: &[u8; 32],
) -> Option<Zeroizing<[u8; 32]>> {
    let eae_prk = agreement::agree(private, UnparsedPublicKey::new(&X25519, peer), (), |dh| {
        Ok(Zeroizing::new(labeled_extract(
            KEM_SUITE, b"", b"eae_prk", dh,
        )))
    })
    .ok()?;
    let mut kem_context = [0; 2 * ENC_LEN];
    kem_context[..ENC_LEN].copy_from_slice(enc);
    kem_context[ENC_LEN..].copy_from_slice(recipient);
    Some(Zeroizing::new(labeled_expand::<32>(
        KEM_SUITE,
        eae_prk.as_slice(),
        b"shared_secret",
        &kem_context,
    )))
}

/// The key schedule's AEAD key and base nonce for `shared_secret`.
fn aead_key(
    shared_secret: &[u8; 32],
    context: &[u8; CONTEXT_LEN],
) -> Option<(LessSafeKey, [u8; 12])> {
    let secret = Zeroizing::new(labeled_extract(HPKE_SUITE, shared_secret, b"secret", b""));
    let key = Zeroizing::new(labeled_expand::<32>(
        HPKE_SUITE,
        secret.as_slice(),
        b"key",
        context,
    ));
    let nonce = labeled_expand::<12>(HPKE_SUITE, secret.as_slice(), b"base_nonce", context);
    let key = UnboundKey::new(&CHACHA20_POLY1305, key.as_slice()).ok()?;
    Some((LessSafeKey::new(key), nonce))
}

/// The key schedule's context for `info`: mode (base) ‖ psk_id_hash ‖ info_hash.
fn context(info: &[u8]) -> [u8; CONTEXT_LEN] {
    let mut context = [0; CONTEXT_LEN];
    context[1..33].copy_from_slice(&labeled_extract(HPKE_SUITE, b"", b"psk_id_hash", b""));
    context[33..].copy_from_slice(&labeled_extract(HPKE_SUITE, b"", b"info_hash", info));
    context
}

/// The context for [`TOKEN_SEAL_INFO`], computed once.
fn token_context() -> &'static [u8; CONTEXT_LEN] {
    static CONTEXT: OnceLock<[u8; CONTEXT_LEN]> = OnceLock::new();
    CONTEXT.get_or_init(|| context(TOKEN_SEAL_INFO))
}

fn public_of(private: &PrivateKey) -> Option<[u8; 32]> {
    private.compute_public_key().ok()?.as_ref().try_into().ok()
}

/// `LabeledExtract(salt, label, ikm)`: HKDF-SHA256's extract, which is HMAC keyed with the salt
/// (an empty salt and HashLen zeros are the same HMAC key).
fn labeled_extract(suite: &[u8], salt: &[u8], label: &[u8], ikm: &[u8]) -> [u8; 32] {
    let mut mac = hmac::Context::with_key(&hmac::Key::new(hmac::HMAC_SHA256, salt));
    for part in [b"HPKE-v1".as_slice(), suite, label, ikm] {
        mac.update(part);
    }
    tag_bytes(mac)
}

/// `LabeledExpand(prk, label, info, L)` for `L` up to HashLen: HKDF-SHA256's expand is then its
/// first block, `HMAC(prk, labeled_info ‖ 0x01)`, cut to `L`.
fn labeled_expand<const L: usize>(suite: &[u8], prk: &[u8], label: &[u8], info: &[u8]) -> [u8; L] {
    const { assert!(L <= 32) };
    let length = (L as u16).to_be_bytes();
    let mut mac = hmac::Context::with_key(&hmac::Key::new(hmac::HMAC_SHA256, prk));
    for part in [length.as_slice(), b"HPKE-v1", suite, label, info, &[1]] {
        mac.update(part);
    }
    let block = Zeroizing::new(tag_bytes(mac));
    let mut out = [0; L];
    out.copy_from_slice(&block[..L]);
    out
}

fn tag_bytes(mac: hmac::Context) -> [u8; 32] {
    let mut out = [0; 32];
    out.copy_from_slice(mac.sign().as_ref());
    out
}

#[cfg(test)]
mod tests {
    use hpke::aead::ChaCha20Poly1305;
    use hpke::kdf::HkdfSha256;
    use hpke::kem::X25519HkdfSha256 as Kem;
    use hpke::{Deserializable, OpModeR, OpModeS, Serializable};

    use super::*;

    fn unhex(s: &str) -> Vec<u8> {
        hex::decode(s.split_whitespace().collect::<String>()).unwrap()
    }

    /// RFC 9180 Appendix A.2.1, "DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, ChaCha20Poly1305",
    /// base setup, as published in the CFRG's draft source (github.com/cfrg/draft-irtf-cfrg-hpke,
    /// `draft-irtf-cfrg-hpke.md`, commit b1f7cb0). The intermediate values are checked too, so
    /// a failure says which step went wrong; the `hpke` crate, an independent implementation,
    /// opens the same ciphertext in `the_hpke_crate_agrees_on_the_rfc_vector`.
    struct Vector {
        sk_em: &'static str,
        sk_rm: &'static str,
        pk_rm: &'static str,
        info: &'static str,
        enc: &'static str,
        shared_secret: &'static str,
        key: &'static str,
        base_nonce: &'static str,
        pt: &'static str,
        aad: &'static str,
        ct: &'static str,
    }

    const A_2_1: Vector = Vector {
        sk_em: "f4ec9b33b792c372c1d2c2063507b684ef925b8c75a42dbcbf57d63ccd381600",
        sk_rm: "8057991eef8f1f1af18f4a9491d16a1ce333f695d4db8e38da75975c4478e0fb",
        pk_rm: "4310ee97d88cc1f088a5576c77ab0cf5c3ac797f3d95139c6c84b5429c59662a",
        info: "4f6465206f6e2061204772656369616e2055726e",
        enc: "1afa08d3dec047a643885163f1180476fa7ddb54c6a8029ea33f95796bf2ac4a",
        shared_secret: "0bbe78490412b4bbea4812666f7916932b828bba79942424abb65244930d69a7",
        key: "ad2744de8e17f4ebba575b3f5f5a8fa1f69c2a07f6e7500bc60ca6e3e3ec1c91",
        base_nonce: "5c4d98150661b848853b547f",
        pt: "4265617574792069732074727574682c20747275746820626561757479",
        aad: "436f756e742d30",
        ct: "1c5250d8034ec2b784ba2cfd69dbdb8af406cfe3ff938e131f0def8c8b60b4db
             21993c62ce81883d2dd1b51a28",
    };

    fn vector_opener(v: &Vector) -> TokenOpener {
        let sk: [u8; 32] = unhex(v.sk_rm).try_into().unwrap();
        TokenOpener::with_context(TokenOpeningKey::from_bytes(sk), context(&unhex(v.info))).unwrap()
    }

    #[test]
    fn rfc_9180_a_2_1_opens_step_by_step() {
        let v = A_2_1;
        let opener = vector_opener(&v);
        assert_eq!(opener.public().to_vec(), unhex(v.pk_rm));
        let enc = unhex(v.enc);
        let shared = encapsulated(&opener.private, &enc, &enc, &opener.public).unwrap();
        assert_eq!(shared.to_vec(), unhex(v.shared_secret));
        let secret = labeled_extract(HPKE_SUITE, shared.as_slice(), b"secret", b"");
        let key = labeled_expand::<32>(HPKE_SUITE, &secret, b"key", &opener.context);
        assert_eq!(key.to_vec(), unhex(v.key));
        let nonce = labeled_expand::<12>(HPKE_SUITE, &secret, b"base_nonce", &opener.context);
        assert_eq!(nonce.to_vec(), unhex(v.base_nonce));
        let sealed = [enc, unhex(v.ct)].concat();
        let pt = opener.open_base(&sealed, &unhex(v.aad)).unwrap();
        assert_eq!(pt.to_vec(), unhex(v.pt));
        // Another sequence number's associated data does not open sequence 0's ciphertext.
        assert_eq!(
            opener.open_base(&sealed, b"Count-1").unwrap_err(),
            TokenError::Sealed
        );
    }

    #[test]
    fn rfc_9180_a_2_1_seals_to_the_vector() {
        // With the vector's ephemeral key, sealing is deterministic: `enc ‖ ct` byte for byte.
        let v = A_2_1;
        let sender = PrivateKey::from_private_key(&X25519, &unhex(v.sk_em)).unwrap();
        let recipient: [u8; 32] = unhex(v.pk_rm).try_into().unwrap();
        let sealed = seal_base(
            &sender,
            &recipient,
            &context(&unhex(v.info)),
            &unhex(v.pt),
            &unhex(v.aad),
        )
        .unwrap();
        assert_eq!(sealed, [unhex(v.enc), unhex(v.ct)].concat());
    }

    #[test]
    fn the_hpke_crate_agrees_on_the_rfc_vector() {
        let v = A_2_1;
        let sk = <Kem as hpke::Kem>::PrivateKey::from_bytes(&unhex(v.sk_rm)).unwrap();
        let enc = <Kem as hpke::Kem>::EncappedKey::from_bytes(&unhex(v.enc)).unwrap();
        let pt = hpke::single_shot_open::<ChaCha20Poly1305, HkdfSha256, Kem>(
            &OpModeR::Base,
            &sk,
            &enc,
            &unhex(v.info),
            &unhex(v.ct),
            &unhex(v.aad),
        )
        .unwrap();
        assert_eq!(pt, unhex(v.pt));
    }

    fn token() -> TokenString {
        TokenString {
            id: "tok_abc".into(),
            secret: vec![9; 32],
        }
    }

    fn fresh() -> TokenOpener {
        let (key, _) = generate_token_keypair().unwrap();
        TokenOpener::new(key).unwrap()
    }

    /// Opens with the `hpke` crate, the reference.
    fn reference_open(
        key: &TokenOpeningKey,
        sealed: &[u8],
        csr: &[u8; 32],
    ) -> Result<Vec<u8>, hpke::HpkeError> {
        if sealed.len() < ENC_LEN {
            return Err(hpke::HpkeError::ValidationError);
        }
        let (enc, ct) = sealed.split_at(ENC_LEN);
        let sk = <Kem as hpke::Kem>::PrivateKey::from_bytes(&key.to_bytes())?;
        let enc = <Kem as hpke::Kem>::EncappedKey::from_bytes(enc)?;
        hpke::single_shot_open::<ChaCha20Poly1305, HkdfSha256, Kem>(
            &OpModeR::Base,
            &sk,
            &enc,
            TOKEN_SEAL_INFO,
            ct,
            csr,
        )
    }

    /// Seals `text` with the `hpke` crate, the reference.
    fn reference_seal(public: &[u8; 32], text: &[u8], csr: &[u8; 32]) -> Vec<u8> {
        let pk = <Kem as hpke::Kem>::PublicKey::from_bytes(public).unwrap();
        let (enc, ct) = hpke::single_shot_seal::<ChaCha20Poly1305, HkdfSha256, Kem>(
            &OpModeS::Base,
            &pk,
            TOKEN_SEAL_INFO,
            text,
            csr,
        )
        .unwrap();
        [enc.to_bytes().to_vec(), ct].concat()
    }

    #[test]
    fn round_trip_and_binding() {
        let (key, public) = generate_token_keypair().unwrap();
        assert_eq!(key.public_key().unwrap(), public);
        let opener = TokenOpener::new(key).unwrap();
        assert_eq!(opener.public(), public);
        let csr = [1u8; 32];
        let sealed = seal_token(&public, &token(), &csr).unwrap();
        assert_eq!(opener.open(&sealed, &csr).unwrap(), token());
        assert_eq!(
            opener.open(&sealed, &[2u8; 32]),
            Err(TokenError::Sealed),
            "another CSR"
        );
        assert_eq!(
            fresh().open(&sealed, &csr),
            Err(TokenError::Sealed),
            "another key"
        );
        // Each seal has its own ephemeral key.
        assert_ne!(seal_token(&public, &token(), &csr).unwrap(), sealed);
    }

    #[test]
    fn the_reference_opens_what_we_seal_and_we_open_what_it_seals() {
        let opener = fresh();
        let csr = [7; 32];
        let ours = seal_token(&opener.public(), &token(), &csr).unwrap();
        let text = reference_open(opener.key(), &ours, &csr).unwrap();
        assert_eq!(text, token().to_text().into_bytes());
        let theirs = reference_seal(&opener.public(), token().to_text().as_bytes(), &csr);
        assert_eq!(opener.open(&theirs, &csr).unwrap(), token());
    }

    #[test]
    fn refuses_what_the_reference_refuses() {
        let opener = fresh();
        let csr = [1; 32];
        let sealed = seal_token(&opener.public(), &token(), &csr).unwrap();
        let mut cases = vec![
            Vec::new(),
            sealed[..ENC_LEN].to_vec(),
            sealed[..sealed.len() - 1].to_vec(),
            // An all-zero encapsulated key, a small-order point: the exchange gives zero.
            [vec![0; ENC_LEN], sealed[ENC_LEN..].to_vec()].concat(),
        ];
        for i in [0, ENC_LEN, sealed.len() - 1] {
            let mut bad = sealed.clone();
            bad[i] ^= 1;
            cases.push(bad);
        }
        for case in cases {
            assert_eq!(opener.open(&case, &csr), Err(TokenError::Sealed));
            assert!(reference_open(opener.key(), &case, &csr).is_err());
        }
        // Oversized: refused before any work (the reference has no bound of its own).
        assert_eq!(opener.open(&vec![0; 4096], &csr), Err(TokenError::Sealed));
    }

    #[test]
    fn what_opens_but_is_no_token_is_a_format_error() {
        let opener = fresh();
        let csr = [5; 32];
        assert_eq!(
            opener.open(&reference_seal(&opener.public(), &[0xff, 0xfe], &csr), &csr),
            Err(TokenError::Format)
        );
        let not_a_token = reference_seal(&opener.public(), b"not a token", &csr);
        let refused = opener.open(&not_a_token, &csr).unwrap_err();
        assert_ne!(refused, TokenError::Sealed);
        assert_eq!(Err(refused), TokenString::parse("not a token"));
    }

    #[test]
    fn bad_recipient_keys_are_refused() {
        let csr = [1u8; 32];
        assert_eq!(
            seal_token(&[1, 2, 3], &token(), &csr),
            Err(SealError::RecipientKey)
        );
        // A small-order public key (zero): the exchange's all-zero result is refused.
        assert_eq!(
            seal_token(&[0; 32], &token(), &csr),
            Err(SealError::RecipientKey)
        );
    }

    #[test]
    fn opening_key_bytes_round_trip() {
        let (key, public) = generate_token_keypair().unwrap();
        let again = TokenOpeningKey::from_bytes(key.to_bytes());
        assert_eq!(again.public_key().unwrap(), public);
        let csr = [3u8; 32];
        let sealed = seal_token(&public, &token(), &csr).unwrap();
        assert_eq!(
            TokenOpener::new(again)
                .unwrap()
                .open(&sealed, &csr)
                .unwrap(),
            token()
        );
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
        let (key, _) = generate_token_keypair().unwrap();
        assert_eq!(format!("{key:?}"), "TokenOpeningKey(..)");
        let opener = TokenOpener::new(key).unwrap();
        assert!(!format!("{opener:?}").contains(&format!("{:?}", opener.key().to_bytes())));
    }
}
