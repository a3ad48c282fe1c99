//! Signing join responses, and the trust file agents pin to verify them.

use gatehouse_proto::{JoinResponse, JoinResponseBody, JoinTrust, response_signing_input};

use super::{Pki, PkiError};

impl Pki {
    /// Signs `body` at `now_ms`: adds the trust update once the keys have been rotated
    /// ([`Pki::trust_update`]), serializes it once, signs `response_signing_input(body)` with
    /// the join signing key of the moment (ECDSA P-256 SHA-256, fixed-width `r || s`; the
    /// retiring key during a rotation's window) and names that key by its id. The agent
    /// verifies these exact body bytes.
    pub fn sign_response(
        &self,
        mut body: JoinResponseBody,
        now_ms: i64,
    ) -> Result<JoinResponse, PkiError> {
        body.trust = self.trust_update(now_ms);
        let body = serde_json::to_vec(&body).map_err(|e| PkiError::Encode(e.to_string()))?;
        let (key, key_id) = self.signer(now_ms);
        let rng = aws_lc_rs::rand::SystemRandom::new();
        let signature = key
            .sign(&rng, &response_signing_input(&body))
            .map_err(|_| PkiError::Crypto("response signing"))?;
        Ok(JoinResponse {
            body,
            signature: signature.as_ref().to_vec(),
            key_id: key_id.to_owned(),
        })
    }

    /// What agents pin at `now_ms`: the trust domain, the node CA(s), the API's TLS CA
    /// (`tls_ca_pem`, which this bundle does not hold), the join signing key(s) and the join
    /// encryption key. During a rotation's window the previous CA and signing key are there
    /// too, so a trust file written then works on either side of the window's end.
    pub fn join_trust(&self, tls_ca_pem: &str, now_ms: i64) -> JoinTrust {
        JoinTrust {
            trust_domain: self.trust_domain.clone(),
            node_ca_pem: self.live_node_cas_pem(now_ms),
            tls_ca_pem: tls_ca_pem.to_owned(),
            join_signing_key: self.signing_spki.clone(),
            join_encryption_key: self.join_encryption_public().to_vec(),
            other_join_signing_keys: self.other_signing_spkis(now_ms),
            sequence: self.sequence,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pki::verify::{Scheme, VerifyError, verify_signature};
    use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED, UnparsedPublicKey};
    use x509_parser::prelude::FromDer;
    use x509_parser::x509::SubjectPublicKeyInfo;

    /// The signing time of the tests (ms).
    const T: i64 = 1_800_000_000_000;

    fn body() -> JoinResponseBody {
        JoinResponseBody {
            v: 1,
            csr_sha256: "ab".repeat(32),
            node_id: "node_a".into(),
            chain: vec![vec![1, 2, 3]],
            deferral: None,
            trust: None,
        }
    }

    #[test]
    fn signature_verifies_under_the_published_key() {
        let pki = Pki::generate("td").unwrap();
        let response = pki.sign_response(body(), T).unwrap();
        assert_eq!(
            serde_json::from_slice::<JoinResponseBody>(&response.body).unwrap(),
            body()
        );
        assert_eq!(response.signature.len(), 64);
        assert_eq!(
            response.key_id,
            hex::encode(crate::pki::verify::sha256(pki.join_signing_spki()))
        );

        // As an agent would: the published SPKI from the trust file, aws-lc-rs directly.
        let trust = pki.join_trust("tls pem", T);
        let (_, spki) = SubjectPublicKeyInfo::from_der(&trust.join_signing_key).unwrap();
        let input = response_signing_input(&response.body);
        UnparsedPublicKey::new(
            &ECDSA_P256_SHA256_FIXED,
            spki.subject_public_key.data.as_ref(),
        )
        .verify(&input, &response.signature)
        .unwrap();
        verify_signature(
            Scheme::EcdsaP256Sha256Fixed,
            &trust.join_signing_key,
            &input,
            &response.signature,
        )
        .unwrap();
        // Not over the bare body: the context separates it from other signatures.
        assert_eq!(
            verify_signature(
                Scheme::EcdsaP256Sha256Fixed,
                &trust.join_signing_key,
                &response.body,
                &response.signature
            ),
            Err(VerifyError::BadSignature)
        );
        // Not under another bundle's key.
        let other = Pki::generate("td").unwrap();
        assert_eq!(
            verify_signature(
                Scheme::EcdsaP256Sha256Fixed,
                other.join_signing_spki(),
                &input,
                &response.signature
            ),
            Err(VerifyError::BadSignature)
        );
    }

    #[test]
    fn join_trust_publishes_the_public_parts() {
        let pki = Pki::generate("example.org").unwrap();
        let trust = pki.join_trust("-----BEGIN CERTIFICATE-----\n", T);
        assert_eq!(trust.trust_domain, "example.org");
        assert_eq!(trust.node_ca_pem, pki.node_ca_pem());
        assert_eq!(trust.tls_ca_pem, "-----BEGIN CERTIFICATE-----\n");
        assert_eq!(trust.join_signing_key, pki.join_signing_spki());
        assert_eq!(trust.join_encryption_key, pki.join_encryption_public());
        assert!(trust.other_join_signing_keys.is_empty());
        assert_eq!(trust.sequence, 0);
    }

    #[test]
    fn after_a_rotation_the_retiring_key_signs_the_new_trust_until_the_window_ends() {
        let old = Pki::generate("td").unwrap();
        let new = old.rotate(&crate::pki::KeyKind::ALL, T, 3_600_000).unwrap();
        let verify = |response: &JoinResponse, spki: &[u8]| {
            verify_signature(
                Scheme::EcdsaP256Sha256Fixed,
                spki,
                &response_signing_input(&response.body),
                &response.signature,
            )
        };
        let during = new.sign_response(body(), T).unwrap();
        verify(&during, old.join_signing_spki()).unwrap();
        assert_eq!(during.key_id, old.join_signing_key_id());
        let signed: JoinResponseBody = serde_json::from_slice(&during.body).unwrap();
        let update = signed.trust.unwrap();
        assert_eq!(update.join_signing_key, new.join_signing_spki());
        assert_eq!(update.other_join_signing_keys, [old.join_signing_spki()]);
        assert_eq!(update.join_encryption_key, new.join_encryption_public());

        let after = new.sign_response(body(), T + 3_600_000).unwrap();
        verify(&after, new.join_signing_spki()).unwrap();
        assert_eq!(after.key_id, new.join_signing_key_id());
        let signed: JoinResponseBody = serde_json::from_slice(&after.body).unwrap();
        assert!(signed.trust.unwrap().other_join_signing_keys.is_empty());
        // Never rotated: no update, the body as before.
        let plain = old.sign_response(body(), T).unwrap();
        let signed: JoinResponseBody = serde_json::from_slice(&plain.body).unwrap();
        assert_eq!(signed, body());
    }
}
