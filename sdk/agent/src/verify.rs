//! Verifying a JoinResponse against what the agent pinned and what it asked for.

use aws_lc_rs::signature::{ECDSA_P256_SHA256_ASN1, ECDSA_P256_SHA256_FIXED, UnparsedPublicKey};
use gatehouse_proto::{
    Challenge, Deferral, JoinResponse, JoinResponseBody, JoinTrust, Pending, response_signing_input,
};
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};
use x509_parser::x509::SubjectPublicKeyInfo;

const OID_EC_PUBLIC_KEY: &str = "1.2.840.10045.2.1";
const OID_P256: &str = "1.2.840.10045.3.1.7";
const OID_ECDSA_SHA256: &str = "1.2.840.10045.4.3.2";

/// Why a response was not accepted. Each means the agent must not use what it got.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResponseError {
    /// The pinned join signing key or node CA in the trust file is unusable.
    #[error("the join trust file is unusable: {0}")]
    Trust(String),
    /// The response names another signing key than the pinned one.
    #[error("the response is signed by another key than the pinned one")]
    WrongKey,
    /// The signature does not verify under the pinned key.
    #[error("the response signature does not verify")]
    BadSignature,
    /// The signed body is not a JoinResponseBody.
    #[error("the response body is malformed: {0}")]
    Malformed(String),
    /// The body answers another CSR.
    #[error("the response is for another request (CSR hash mismatch)")]
    OtherRequest,
    /// A joined response without a node id or chain, or with both a deferral and a chain.
    #[error("the response is incomplete")]
    Incomplete,
    /// The certificate is not for this agent's key.
    #[error("the certificate is not for this node key")]
    NotOurKey,
    /// The certificate does not chain to the pinned node CA.
    #[error("the certificate is not issued by the pinned node CA")]
    NotFromNodeCa,
    /// The certificate's SPIFFE ID is not the node's.
    #[error("the certificate's SPIFFE ID is not spiffe://<trust domain>/node/<node id>")]
    WrongIdentity,
}

/// A verified response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verified {
    /// Joined.
    Joined {
        /// The node id.
        node_id: String,
        /// The chain, leaf first (DER).
        chain: Vec<Vec<u8>>,
        /// The leaf's notAfter, ms since the epoch.
        not_after_ms: i64,
    },
    /// Wait for an operator.
    Pending(Pending),
    /// Answer a challenge.
    Challenge(Challenge),
}

fn ec_point(spki_der: &[u8]) -> Result<Vec<u8>, ResponseError> {
    let (rest, spki) = SubjectPublicKeyInfo::from_der(spki_der)
        .map_err(|e| ResponseError::Trust(e.to_string()))?;
    let params_ok = spki
        .algorithm
        .parameters
        .as_ref()
        .and_then(|p| p.as_oid().ok())
        .is_some_and(|o| o.to_id_string() == OID_P256);
    if !rest.is_empty()
        || spki.algorithm.algorithm.to_id_string() != OID_EC_PUBLIC_KEY
        || !params_ok
    {
        return Err(ResponseError::Trust(
            "the key is not a P-256 SubjectPublicKeyInfo".into(),
        ));
    }
    Ok(spki.subject_public_key.data.to_vec())
}

fn sha256_hex(data: &[u8]) -> String {
    hex::encode(aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, data))
}

/// Verifies `response` for the request whose CSR hashes to `csr_sha256`, made with the key
/// whose SubjectPublicKeyInfo is `node_spki`.
pub fn verify_response(
    trust: &JoinTrust,
    response: &JoinResponse,
    csr_sha256: &[u8; 32],
    node_spki: &[u8],
) -> Result<Verified, ResponseError> {
    if response.key_id != sha256_hex(&trust.join_signing_key) {
        return Err(ResponseError::WrongKey);
    }
    let point = ec_point(&trust.join_signing_key)?;
    UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, &point)
        .verify(&response_signing_input(&response.body), &response.signature)
        .map_err(|_| ResponseError::BadSignature)?;
    let body: JoinResponseBody = serde_json::from_slice(&response.body)
        .map_err(|e| ResponseError::Malformed(e.to_string()))?;
    if body.v != 1 {
        return Err(ResponseError::Malformed(format!("version {}", body.v)));
    }
    if body.csr_sha256 != hex::encode(csr_sha256) {
        return Err(ResponseError::OtherRequest);
    }
    match body.deferral {
        Some(_) if !body.chain.is_empty() || !body.node_id.is_empty() => {
            Err(ResponseError::Incomplete)
        }
        Some(Deferral::Pending(p)) => Ok(Verified::Pending(p)),
        Some(Deferral::Challenge(c)) => Ok(Verified::Challenge(c)),
        None => {
            let leaf = body.chain.first().ok_or(ResponseError::Incomplete)?;
            if body.node_id.is_empty() {
                return Err(ResponseError::Incomplete);
            }
            let not_after_ms = check_leaf(trust, leaf, &body.node_id, node_spki)?;
            Ok(Verified::Joined {
                node_id: body.node_id,
                chain: body.chain,
                not_after_ms,
            })
        }
    }
}

/// The leaf holds our key, is signed by the pinned node CA, and names exactly this node.
fn check_leaf(
    trust: &JoinTrust,
    leaf_der: &[u8],
    node_id: &str,
    node_spki: &[u8],
) -> Result<i64, ResponseError> {
    let (rest, leaf) =
        X509Certificate::from_der(leaf_der).map_err(|e| ResponseError::Malformed(e.to_string()))?;
    if !rest.is_empty() {
        return Err(ResponseError::Malformed(
            "trailing bytes after the certificate".into(),
        ));
    }
    if leaf.public_key().raw != node_spki {
        return Err(ResponseError::NotOurKey);
    }

    let (_, pem) = x509_parser::pem::parse_x509_pem(trust.node_ca_pem.as_bytes())
        .map_err(|e| ResponseError::Trust(e.to_string()))?;
    let ca = pem
        .parse_x509()
        .map_err(|e| ResponseError::Trust(e.to_string()))?;
    let ca_point = ec_point(ca.public_key().raw)?;
    if leaf.issuer().as_raw() != ca.subject().as_raw()
        || leaf.signature_algorithm.algorithm.to_id_string() != OID_ECDSA_SHA256
    {
        return Err(ResponseError::NotFromNodeCa);
    }
    UnparsedPublicKey::new(&ECDSA_P256_SHA256_ASN1, &ca_point)
        .verify(leaf.tbs_certificate.as_ref(), &leaf.signature_value.data)
        .map_err(|_| ResponseError::NotFromNodeCa)?;

    let expected = format!("spiffe://{}/node/{node_id}", trust.trust_domain);
    let uris: Vec<&str> = leaf
        .subject_alternative_name()
        .ok()
        .flatten()
        .map(|san| {
            san.value
                .general_names
                .iter()
                .filter_map(|n| {
                    if let GeneralName::URI(u) = n {
                        Some(*u)
                    } else {
                        None
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    let spiffe = uris.iter().filter(|u| u.starts_with("spiffe://")).count();
    if uris.first() != Some(&expected.as_str()) || spiffe != 1 {
        return Err(ResponseError::WrongIdentity);
    }
    Ok(leaf.validity().not_after.timestamp() * 1000)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use aws_lc_rs::rand::SystemRandom;
    use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair as _};
    use rcgen::{
        BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, PublicKeyData as _, SanType,
    };

    struct Fixture {
        trust: JoinTrust,
        signer: EcdsaKeyPair,
        ca_key: KeyPair,
        ca_params: CertificateParams,
        node: KeyPair,
    }

    fn spki_of(pair: &EcdsaKeyPair) -> Vec<u8> {
        // The fixed DER header of a P-256 SubjectPublicKeyInfo, then the uncompressed point.
        let point = pair.public_key().as_ref().to_vec();
        let mut spki = vec![
            0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06,
            0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
        ];
        spki.extend_from_slice(&point);
        spki
    }

    fn signer() -> EcdsaKeyPair {
        let pkcs8 =
            EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &SystemRandom::new())
                .unwrap();
        EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref()).unwrap()
    }

    fn fixture() -> Fixture {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "test node CA");
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let signer = signer();
        let trust = JoinTrust {
            trust_domain: "td.test".into(),
            node_ca_pem: ca.pem(),
            tls_ca_pem: String::new(),
            join_signing_key: spki_of(&signer),
            join_encryption_key: vec![0; 32],
        };
        Fixture {
            trust,
            signer,
            ca_key,
            ca_params,
            node: KeyPair::generate().unwrap(),
        }
    }

    fn leaf(f: &Fixture, issuer_key: &KeyPair, node_key: &KeyPair, uri: &str) -> Vec<u8> {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.subject_alt_names = vec![SanType::URI(uri.try_into().unwrap())];
        let issuer = Issuer::from_params(&f.ca_params, issuer_key);
        p.signed_by(node_key, &issuer).unwrap().der().to_vec()
    }

    fn respond(f: &Fixture, body: &JoinResponseBody) -> JoinResponse {
        let bytes = serde_json::to_vec(body).unwrap();
        let sig = f
            .signer
            .sign(&SystemRandom::new(), &response_signing_input(&bytes))
            .unwrap();
        JoinResponse {
            body: bytes,
            signature: sig.as_ref().to_vec(),
            key_id: sha256_hex(&f.trust.join_signing_key),
        }
    }

    const CSR: [u8; 32] = [5; 32];

    fn joined(chain: Vec<Vec<u8>>) -> JoinResponseBody {
        JoinResponseBody {
            v: 1,
            csr_sha256: hex::encode(CSR),
            node_id: "node_a".into(),
            chain,
            deferral: None,
        }
    }

    #[test]
    fn accepts_a_good_response_and_refuses_every_tampering() {
        let f = fixture();
        let spki = f.node.subject_public_key_info();
        let good_leaf = leaf(&f, &f.ca_key, &f.node, "spiffe://td.test/node/node_a");
        let good = respond(&f, &joined(vec![good_leaf.clone()]));
        assert!(matches!(
            verify_response(&f.trust, &good, &CSR, &spki),
            Ok(Verified::Joined { .. })
        ));

        let mut flipped = good.clone();
        flipped.body[10] ^= 1;
        assert_eq!(
            verify_response(&f.trust, &flipped, &CSR, &spki),
            Err(ResponseError::BadSignature)
        );

        let other = signer();
        let mut resigned = good.clone();
        resigned.signature = other
            .sign(&SystemRandom::new(), &response_signing_input(&good.body))
            .unwrap()
            .as_ref()
            .to_vec();
        assert_eq!(
            verify_response(&f.trust, &resigned, &CSR, &spki),
            Err(ResponseError::BadSignature)
        );

        let mut wrong_id = good.clone();
        wrong_id.key_id = "00".repeat(32);
        assert_eq!(
            verify_response(&f.trust, &wrong_id, &CSR, &spki),
            Err(ResponseError::WrongKey)
        );

        assert_eq!(
            verify_response(&f.trust, &good, &[6; 32], &spki),
            Err(ResponseError::OtherRequest)
        );

        let stranger = KeyPair::generate().unwrap();
        let not_ours = respond(
            &f,
            &joined(vec![leaf(
                &f,
                &f.ca_key,
                &stranger,
                "spiffe://td.test/node/node_a",
            )]),
        );
        assert_eq!(
            verify_response(&f.trust, &not_ours, &CSR, &spki),
            Err(ResponseError::NotOurKey)
        );

        let rogue_ca = KeyPair::generate().unwrap();
        let rogue = respond(
            &f,
            &joined(vec![leaf(
                &f,
                &rogue_ca,
                &f.node,
                "spiffe://td.test/node/node_a",
            )]),
        );
        assert_eq!(
            verify_response(&f.trust, &rogue, &CSR, &spki),
            Err(ResponseError::NotFromNodeCa)
        );

        let another = respond(
            &f,
            &joined(vec![leaf(
                &f,
                &f.ca_key,
                &f.node,
                "spiffe://td.test/node/node_b",
            )]),
        );
        assert_eq!(
            verify_response(&f.trust, &another, &CSR, &spki),
            Err(ResponseError::WrongIdentity)
        );

        let empty = respond(&f, &joined(vec![]));
        assert_eq!(
            verify_response(&f.trust, &empty, &CSR, &spki),
            Err(ResponseError::Incomplete)
        );
    }

    #[test]
    fn deferrals_carry_no_certificate() {
        let f = fixture();
        let body = JoinResponseBody {
            v: 1,
            csr_sha256: hex::encode(CSR),
            node_id: String::new(),
            chain: vec![],
            deferral: Some(Deferral::Pending(Pending {
                request_id: "jr_1".into(),
                retry_after_seconds: 5,
            })),
        };
        let spki = f.node.subject_public_key_info();
        assert!(matches!(
            verify_response(&f.trust, &respond(&f, &body), &CSR, &spki),
            Ok(Verified::Pending(_))
        ));
        let mut both = body.clone();
        both.node_id = "node_a".into();
        assert_eq!(
            verify_response(&f.trust, &respond(&f, &both), &CSR, &spki),
            Err(ResponseError::Incomplete)
        );
    }
}
