//! Signing join responses, and the trust file agents pin to verify them.

use gatehouse_proto::{JoinResponse, JoinResponseBody, JoinTrust, response_signing_input};

use super::{Pki, PkiError};

impl Pki {
    /// Signs `body`: serializes it once, signs `response_signing_input(body)` with the join
    /// signing key (ECDSA P-256 SHA-256, fixed-width `r || s`), and names the key by
    /// [`Pki::join_signing_key_id`]. The agent verifies these exact body bytes.
    pub fn sign_response(&self, body: &JoinResponseBody) -> Result<JoinResponse, PkiError> {
        let body = serde_json::to_vec(body).map_err(|e| PkiError::Encode(e.to_string()))?;
        let rng = aws_lc_rs::rand::SystemRandom::new();
        let signature = self
            .signing_key
            .sign(&rng, &response_signing_input(&body))
            .map_err(|_| PkiError::Crypto("response signing"))?;
        Ok(JoinResponse {
            body,
            signature: signature.as_ref().to_vec(),
            key_id: self.signing_key_id.clone(),
        })
    }

    /// What agents pin before their first join: the trust domain, the node CA, the API's TLS
    /// CA (`tls_ca_pem`, which this bundle does not hold), the join signing key and the join
    /// encryption key.
    pub fn join_trust(&self, tls_ca_pem: &str) -> JoinTrust {
        JoinTrust {
            trust_domain: self.trust_domain.clone(),
            node_ca_pem: self.node_ca_pem.clone(),
            tls_ca_pem: tls_ca_pem.to_owned(),
            join_signing_key: self.signing_spki.clone(),
            join_encryption_key: self.encryption_public.to_vec(),
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

    fn body() -> JoinResponseBody {
        JoinResponseBody {
            v: 1,
            csr_sha256: "ab".repeat(32),
            node_id: "node_a".into(),
            chain: vec![vec![1, 2, 3]],
            deferral: None,
        }
    }

    #[test]
    fn signature_verifies_under_the_published_key() {
        let pki = Pki::generate("td").unwrap();
        let response = pki.sign_response(&body()).unwrap();
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
        let trust = pki.join_trust("tls pem");
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
        let trust = pki.join_trust("-----BEGIN CERTIFICATE-----\n");
        assert_eq!(trust.trust_domain, "example.org");
        assert_eq!(trust.node_ca_pem, pki.node_ca_pem());
        assert_eq!(trust.tls_ca_pem, "-----BEGIN CERTIFICATE-----\n");
        assert_eq!(trust.join_signing_key, pki.join_signing_spki());
        assert_eq!(trust.join_encryption_key, pki.join_encryption_public());
    }
}
