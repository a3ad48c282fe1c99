//! Building join requests and token rows for tests.

use gatehouse_sdk::{
    HardwareClaims, JoinRequest, JoinRole, OpenedToken, TimestampMs, Token, TokenExpect, TokenRole,
};
use sha2::Digest as _;

/// A first-round `node` join request for attestor `attestor`, with a stand-in CSR whose hash
/// is a real SHA-256 of its bytes, one MAC and no product UUID, token or evidence. Adjust it
/// with [`JoinRequestExt`] or by setting fields.
pub fn join_request(attestor: &str) -> JoinRequest {
    let csr_der = b"test CSR (not DER)".to_vec();
    JoinRequest {
        attestor: attestor.into(),
        role: JoinRole::Node,
        attestation: Vec::new(),
        token: None,
        csr_sha256: sha2::Sha256::digest(&csr_der).to_vec(),
        csr_spki_sha256: sha2::Sha256::digest(b"test CSR key").to_vec(),
        csr_der,
        claims: HardwareClaims {
            macs: vec!["52:54:00:12:34:56".into()],
            product_uuid: None,
        },
        round: 1,
    }
}

/// Builder-style adjustments of a [`JoinRequest`].
pub trait JoinRequestExt: Sized {
    /// Carries the opened token `id` with `secret`.
    fn with_token(self, id: &str, secret: &[u8]) -> Self;
    /// Carries `attestation` as the evidence, in round `round`.
    fn with_evidence(self, attestation: impl Into<Vec<u8>>, round: u8) -> Self;
    /// Stands for another CSR (another node key): `csr_der`, its SHA-256 and an SPKI hash
    /// derived from it.
    fn with_csr(self, csr_der: &[u8]) -> Self;
}

impl JoinRequestExt for JoinRequest {
    fn with_token(mut self, id: &str, secret: &[u8]) -> Self {
        self.token = Some(OpenedToken {
            id: id.into(),
            secret: secret.to_vec(),
        });
        self
    }
    fn with_evidence(mut self, attestation: impl Into<Vec<u8>>, round: u8) -> Self {
        self.attestation = attestation.into();
        self.round = round;
        self
    }
    fn with_csr(mut self, csr_der: &[u8]) -> Self {
        self.csr_der = csr_der.to_vec();
        self.csr_sha256 = sha2::Sha256::digest(csr_der).to_vec();
        let mut spki = b"key of ".to_vec();
        spki.extend_from_slice(csr_der);
        self.csr_spki_sha256 = sha2::Sha256::digest(&spki).to_vec();
        self
    }
}

/// A live `join_tokens` row: `role`, the SHA-256 of `secret`, tenant `ten_test`, no pool,
/// site, `expect` or reclaim, one use left, expiring at `expires_at`.
pub fn token_row(id: &str, role: TokenRole, secret: &[u8], expires_at: TimestampMs) -> Token {
    Token {
        id: id.into(),
        role,
        secret_sha256: sha2::Sha256::digest(secret).to_vec(),
        tenant_id: "ten_test".into(),
        pool_id: None,
        site_id: None,
        expires_at,
        revoked: false,
        uses_left: 1,
        expect: TokenExpect {
            product_uuid: None,
            mac: None,
            node_id: None,
        },
        reclaim: false,
    }
}
