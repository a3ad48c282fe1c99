//! Challenge state: what an attestor keeps between the rounds of a join, sealed by the host.
//!
//! A challenge round writes no row, so any replica can take the answer. The attestor's state
//! travels with the challenge, sealed under the challenge key every replica shares
//! (AES-256-GCM, a random 96-bit nonce in front). The associated data binds the calling
//! attestor's id and the binding it chose (typically the CSR's hash), so state opens only for
//! the same attestor and binding: one attestor cannot open or forge another's.
//!
//! State lasts at most [`MAX_STATE_TTL_MS`] (5 minutes): its expiry, issued-at plus that,
//! is sealed in front of the plaintext (so it is encrypted and authenticated: it cannot be
//! altered or extended), and [`Pki::open_state`] refuses state past it with
//! [`StateError::Expired`]; [`Pki::seal_state_until`] makes it sooner (a challenge's
//! not-after), never later. The caller supplies the time for both; the `crypto` import uses
//! the join transaction's database time, the clock every replica shares.

use aws_lc_rs::aead::{Aad, NONCE_LEN, Nonce};

use super::Pki;

/// Domain separation for challenge state.
const CONTEXT: &[u8] = b"gatehouse/state/v2";
/// The longest sealed state lasts, in ms: 5 minutes from sealing.
pub const MAX_STATE_TTL_MS: i64 = 5 * 60 * 1000;
/// The sealed expiry in front of the plaintext: ms since the Unix epoch, big-endian.
const EXPIRY_LEN: usize = 8;
/// Largest plaintext sealed.
pub const MAX_STATE_LEN: usize = 64 * 1024;
/// Largest binding accepted.
pub const MAX_BINDING_LEN: usize = 1024;
/// Largest attestor id accepted.
const MAX_ATTESTOR_ID_LEN: usize = 256;
/// The AES-GCM tag length.
const TAG_LEN: usize = 16;

/// Why state could not be sealed or opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// The plaintext, sealed state, binding or attestor id is larger than allowed.
    #[error("state, binding or attestor id too large")]
    TooLarge,
    /// The sealed state does not open: modified, sealed for another attestor or binding, or
    /// under another challenge key.
    #[error("the sealed state does not open")]
    Unsealable,
    /// The sealed state opened but its lifetime is over.
    #[error("the sealed state has expired")]
    Expired,
    /// aws-lc-rs failed to seal (no randomness).
    #[error("sealing failed")]
    Seal,
}

/// `CONTEXT`, the attestor id and the binding, each with a 4-byte big-endian length.
fn associated_data(attestor_id: &str, binding: &[u8]) -> Result<Vec<u8>, StateError> {
    if attestor_id.len() > MAX_ATTESTOR_ID_LEN || binding.len() > MAX_BINDING_LEN {
        return Err(StateError::TooLarge);
    }
    let mut aad = Vec::with_capacity(12 + CONTEXT.len() + attestor_id.len() + binding.len());
    for field in [CONTEXT, attestor_id.as_bytes(), binding] {
        let len = u32::try_from(field.len()).map_err(|_| StateError::TooLarge)?;
        aad.extend_from_slice(&len.to_be_bytes());
        aad.extend_from_slice(field);
    }
    Ok(aad)
}

impl Pki {
    /// Seals `plaintext` (at most [`MAX_STATE_LEN`] bytes) for `attestor_id` and `binding`,
    /// at `now_ms`, to last until `now_ms +` [`MAX_STATE_TTL_MS`]:
    /// `nonce || ciphertext(expiry || plaintext) || tag`.
    pub fn seal_state(
        &self,
        attestor_id: &str,
        binding: &[u8],
        plaintext: &[u8],
        now_ms: i64,
    ) -> Result<Vec<u8>, StateError> {
        self.seal_state_until(attestor_id, binding, plaintext, now_ms, i64::MAX)
    }

    /// [`Pki::seal_state`], expiring at `not_after_ms` if that is sooner than
    /// [`MAX_STATE_TTL_MS`] after `now_ms` (a challenge's not-after).
    pub fn seal_state_until(
        &self,
        attestor_id: &str,
        binding: &[u8],
        plaintext: &[u8],
        now_ms: i64,
        not_after_ms: i64,
    ) -> Result<Vec<u8>, StateError> {
        if plaintext.len() > MAX_STATE_LEN {
            return Err(StateError::TooLarge);
        }
        let aad = associated_data(attestor_id, binding)?;
        let expires_at = now_ms.saturating_add(MAX_STATE_TTL_MS).min(not_after_ms);
        let mut in_out = Vec::with_capacity(EXPIRY_LEN + plaintext.len() + TAG_LEN);
        in_out.extend_from_slice(&expires_at.to_be_bytes());
        in_out.extend_from_slice(plaintext);
        let nonce = self
            .challenge_key
            .seal_in_place_append_tag(Aad::from(aad), &mut in_out)
            .map_err(|_| StateError::Seal)?;
        let mut sealed = Vec::with_capacity(NONCE_LEN + in_out.len());
        sealed.extend_from_slice(nonce.as_ref());
        sealed.extend_from_slice(&in_out);
        Ok(sealed)
    }

    /// Opens what [`Pki::seal_state`] sealed for the same `attestor_id` and `binding`, if
    /// `now_ms` is before its sealed expiry.
    pub fn open_state(
        &self,
        attestor_id: &str,
        binding: &[u8],
        sealed: &[u8],
        now_ms: i64,
    ) -> Result<Vec<u8>, StateError> {
        if sealed.len() > NONCE_LEN + EXPIRY_LEN + MAX_STATE_LEN + TAG_LEN {
            return Err(StateError::TooLarge);
        }
        let aad = associated_data(attestor_id, binding)?;
        let Some((nonce, ciphertext)) = sealed.split_at_checked(NONCE_LEN) else {
            return Err(StateError::Unsealable);
        };
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| StateError::Unsealable)?;
        let mut in_out = ciphertext.to_vec();
        let len = self
            .challenge_key
            .open_in_place(nonce, Aad::from(aad), &mut in_out)
            .map_err(|_| StateError::Unsealable)?
            .len();
        in_out.truncate(len);
        let Some((expiry, _)) = in_out.split_first_chunk::<EXPIRY_LEN>() else {
            return Err(StateError::Unsealable);
        };
        if now_ms >= i64::from_be_bytes(*expiry) {
            return Err(StateError::Expired);
        }
        in_out.drain(..EXPIRY_LEN);
        Ok(in_out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sealing time of the tests (ms).
    const T: i64 = 1_700_000_000_000;

    #[test]
    fn round_trip_with_fresh_nonces() {
        let pki = Pki::generate("td").unwrap();
        let a = pki
            .seal_state("tpm", b"csr-hash", b"secret state", T)
            .unwrap();
        let b = pki
            .seal_state("tpm", b"csr-hash", b"secret state", T)
            .unwrap();
        assert_ne!(a, b);
        assert_eq!(a.len(), NONCE_LEN + EXPIRY_LEN + 12 + TAG_LEN);
        assert_eq!(
            pki.open_state("tpm", b"csr-hash", &a, T).unwrap(),
            b"secret state"
        );
        assert_eq!(
            pki.open_state("tpm", b"csr-hash", &b, T + 1).unwrap(),
            b"secret state"
        );
        let empty = pki.seal_state("tpm", b"", b"", T).unwrap();
        assert_eq!(pki.open_state("tpm", b"", &empty, T).unwrap(), b"");
    }

    #[test]
    fn lasts_five_minutes_by_the_callers_clock() {
        let pki = Pki::generate("td").unwrap();
        let sealed = pki.seal_state("tpm", b"csr", b"state", T).unwrap();
        assert_eq!(
            pki.open_state("tpm", b"csr", &sealed, T + MAX_STATE_TTL_MS - 1)
                .unwrap(),
            b"state"
        );
        assert_eq!(
            pki.open_state("tpm", b"csr", &sealed, T + MAX_STATE_TTL_MS),
            Err(StateError::Expired)
        );
        assert_eq!(
            pki.open_state("tpm", b"csr", &sealed, i64::MAX),
            Err(StateError::Expired)
        );
        // Sealed at the end of time: the expiry saturates instead of wrapping into the past.
        let late = pki.seal_state("tpm", b"csr", b"state", i64::MAX).unwrap();
        assert_eq!(
            pki.open_state("tpm", b"csr", &late, i64::MAX - 1).unwrap(),
            b"state"
        );
        // The expiry is inside the ciphertext: no bit of it can be changed to extend it (the
        // tag fails), and expired state with a wrong binding is unsealable, not expired.
        for i in NONCE_LEN..NONCE_LEN + EXPIRY_LEN {
            let mut flipped = sealed.clone();
            flipped[i] ^= 0x01;
            assert_eq!(
                pki.open_state("tpm", b"csr", &flipped, T + MAX_STATE_TTL_MS),
                Err(StateError::Unsealable),
                "byte {i}"
            );
        }
        assert_eq!(
            pki.open_state("tpm", b"other", &sealed, T + MAX_STATE_TTL_MS),
            Err(StateError::Unsealable)
        );
    }

    #[test]
    fn a_sooner_not_after_shortens_the_life_but_never_extends_it() {
        let pki = Pki::generate("td").unwrap();
        let short = pki
            .seal_state_until("tpm", b"csr", b"state", T, T + 1_000)
            .unwrap();
        assert_eq!(
            pki.open_state("tpm", b"csr", &short, T + 999).unwrap(),
            b"state"
        );
        assert_eq!(
            pki.open_state("tpm", b"csr", &short, T + 1_000),
            Err(StateError::Expired)
        );
        let long = pki
            .seal_state_until("tpm", b"csr", b"state", T, T + 2 * MAX_STATE_TTL_MS)
            .unwrap();
        assert_eq!(
            pki.open_state("tpm", b"csr", &long, T + MAX_STATE_TTL_MS),
            Err(StateError::Expired)
        );
        let past = pki
            .seal_state_until("tpm", b"csr", b"state", T, T - 1)
            .unwrap();
        assert_eq!(
            pki.open_state("tpm", b"csr", &past, T),
            Err(StateError::Expired)
        );
    }

    #[test]
    fn bound_to_attestor_binding_and_key() {
        let pki = Pki::generate("td").unwrap();
        let sealed = pki.seal_state("tpm", b"csr-1", b"state", T).unwrap();
        assert_eq!(
            pki.open_state("x509pop", b"csr-1", &sealed, T),
            Err(StateError::Unsealable)
        );
        assert_eq!(
            pki.open_state("tpm", b"csr-2", &sealed, T),
            Err(StateError::Unsealable)
        );
        // Length prefixes: moving bytes between the id and the binding changes the AAD.
        assert_eq!(
            pki.open_state("tp", b"mcsr-1", &sealed, T),
            Err(StateError::Unsealable)
        );
        let other = Pki::generate("td").unwrap();
        assert_eq!(
            other.open_state("tpm", b"csr-1", &sealed, T),
            Err(StateError::Unsealable)
        );
        for i in 0..sealed.len() {
            let mut flipped = sealed.clone();
            flipped[i] ^= 0x80;
            assert_eq!(
                pki.open_state("tpm", b"csr-1", &flipped, T),
                Err(StateError::Unsealable),
                "byte {i}"
            );
        }
        assert_eq!(
            pki.open_state("tpm", b"csr-1", &sealed[..sealed.len() - 1], T),
            Err(StateError::Unsealable)
        );
        assert_eq!(
            pki.open_state("tpm", b"csr-1", &sealed[..5], T),
            Err(StateError::Unsealable)
        );
    }

    #[test]
    fn size_caps() {
        let pki = Pki::generate("td").unwrap();
        let largest = pki
            .seal_state("a", &[0; MAX_BINDING_LEN], &vec![0; MAX_STATE_LEN], T)
            .unwrap();
        assert_eq!(
            pki.open_state("a", &[0; MAX_BINDING_LEN], &largest, T)
                .unwrap()
                .len(),
            MAX_STATE_LEN
        );
        assert_eq!(
            pki.seal_state("a", b"", &vec![0; MAX_STATE_LEN + 1], T),
            Err(StateError::TooLarge)
        );
        assert_eq!(
            pki.seal_state("a", &[0; MAX_BINDING_LEN + 1], b"", T),
            Err(StateError::TooLarge)
        );
        assert_eq!(
            pki.seal_state(&"a".repeat(257), b"", b"", T),
            Err(StateError::TooLarge)
        );
        assert_eq!(
            pki.open_state(
                "a",
                b"",
                &vec![0; NONCE_LEN + EXPIRY_LEN + MAX_STATE_LEN + TAG_LEN + 1],
                T
            ),
            Err(StateError::TooLarge)
        );
    }

    #[test]
    fn display() {
        assert_eq!(
            StateError::TooLarge.to_string(),
            "state, binding or attestor id too large"
        );
        assert_eq!(
            StateError::Unsealable.to_string(),
            "the sealed state does not open"
        );
        assert_eq!(
            StateError::Expired.to_string(),
            "the sealed state has expired"
        );
        assert_eq!(StateError::Seal.to_string(), "sealing failed");
    }
}
