//! Verifying a JoinResponse against what the agent pinned and what it asked for.
//!
//! After a key rotation the host's responses carry its current keys
//! ([`gatehouse_proto::TrustUpdate`]) inside the signed body. A body that verifies under a
//! pinned join signing key vouches for them, so the agent checks the leaf against the updated
//! trust and hands it back (`Verified::Joined`'s `trust`) to be pinned; a man in the middle
//! cannot inject trust without a signature by a key the agent already pins.

use aws_lc_rs::signature::{ECDSA_P256_SHA256_ASN1, ECDSA_P256_SHA256_FIXED, UnparsedPublicKey};
use gatehouse_proto::{
    Challenge, Deferral, JoinResponse, JoinResponseBody, JoinTrust, Pending, TrustUpdate,
    response_signing_input,
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
    /// The response names another signing key than the pinned one(s).
    #[error("the response is signed by another key than the pinned one")]
    WrongKey,
    /// The signed body carries a trust update that is unusable (not CA certificates, not
    /// P-256 keys, not a 32-byte encryption key).
    #[error("the response's trust update is unusable: {0}")]
    BadTrustUpdate(String),
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
        /// The trust to pin from now on, when the host's keys were rotated and the signed body
        /// carried them (never older than the pinned trust).
        trust: Option<JoinTrust>,
    },
    /// Wait for an operator.
    Pending(Pending),
    /// Answer a challenge.
    Challenge(Challenge),
}

/// The EC point of a P-256 SubjectPublicKeyInfo (and nothing else: no trailing bytes, no other
/// curve or algorithm).
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

/// SHA-256 of `data`.
pub(crate) fn sha256(data: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, data).as_ref());
    out
}

fn sha256_hex(data: &[u8]) -> String {
    hex::encode(sha256(data))
}

/// Verifies `response` for the request whose CSR hashes to `csr_sha256`, made with the key
/// whose SubjectPublicKeyInfo is `node_spki`.
pub fn verify_response(
    trust: &JoinTrust,
    response: &JoinResponse,
    csr_sha256: &[u8; 32],
    node_spki: &[u8],
) -> Result<Verified, ResponseError> {
    let signing_key = trust
        .join_signing_keys()
        .find(|key| response.key_id == sha256_hex(key))
        .ok_or(ResponseError::WrongKey)?;
    let point = ec_point(signing_key)?;
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
            // An update older than what is pinned is not taken: no rollback to retired keys.
            let updated = match &body.trust {
                Some(update) if update.sequence >= trust.sequence => {
                    Some(checked_update(trust, update)?)
                }
                _ => None,
            };
            let not_after_ms = check_leaf(
                updated.as_ref().unwrap_or(trust),
                leaf,
                &body.node_id,
                node_spki,
            )?;
            Ok(Verified::Joined {
                node_id: body.node_id,
                chain: body.chain,
                not_after_ms,
                trust: updated.filter(|t| t != trust),
            })
        }
    }
}

/// `trust` with `update`'s keys, each checked to be usable: at least one node CA certificate,
/// every signing key a P-256 SubjectPublicKeyInfo, a 32-byte encryption key.
fn checked_update(trust: &JoinTrust, update: &TrustUpdate) -> Result<JoinTrust, ResponseError> {
    let bad = |e: ResponseError| ResponseError::BadTrustUpdate(e.to_string());
    let next = trust.updated(update);
    for ca in node_cas(&next).map_err(bad)? {
        ca.parse_x509()
            .map_err(|e| ResponseError::BadTrustUpdate(e.to_string()))?;
    }
    for key in next.join_signing_keys() {
        ec_point(key).map_err(bad)?;
    }
    if next.join_encryption_key.len() != 32 {
        return Err(ResponseError::BadTrustUpdate(
            "the join encryption key is not 32 bytes".into(),
        ));
    }
    Ok(next)
}

/// The node CA certificates of `trust`: one or more PEM blocks, decoded but not yet parsed as
/// X.509 (each caller parses them once, as it needs them).
fn node_cas(trust: &JoinTrust) -> Result<Vec<x509_parser::pem::Pem>, ResponseError> {
    let mut cas = Vec::new();
    for pem in x509_parser::pem::Pem::iter_from_buffer(trust.node_ca_pem.as_bytes()) {
        cas.push(pem.map_err(|e| ResponseError::Trust(e.to_string()))?);
    }
    if cas.is_empty() {
        return Err(ResponseError::Trust("no node CA certificate".into()));
    }
    Ok(cas)
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

    if leaf.signature_algorithm.algorithm.to_id_string() != OID_ECDSA_SHA256 {
        return Err(ResponseError::NotFromNodeCa);
    }
    // Any pinned node CA: during a rotation's window the retiring one and the new one.
    let mut issued = false;
    // Every pinned CA parsed before any is tried: a pin that does not parse is an error even
    // when another CA issued the leaf.
    let pems = node_cas(trust)?;
    let cas = pems
        .iter()
        .map(|pem| pem.parse_x509())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ResponseError::Trust(e.to_string()))?;
    for ca in &cas {
        let ca_point = ec_point(ca.public_key().raw)?;
        if leaf.issuer().as_raw() == ca.subject().as_raw()
            && UnparsedPublicKey::new(&ECDSA_P256_SHA256_ASN1, &ca_point)
                .verify(leaf.tbs_certificate.as_ref(), &leaf.signature_value.data)
                .is_ok()
        {
            issued = true;
            break;
        }
    }
    if !issued {
        return Err(ResponseError::NotFromNodeCa);
    }

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
    Ok(leaf.validity().not_after.timestamp().saturating_mul(1000))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{Pki, deferred_body, joined_body, signer};
    use aws_lc_rs::rand::SystemRandom;
    use rcgen::{KeyPair, PublicKeyData as _};

    const CSR: [u8; 32] = [5; 32];

    struct Case {
        pki: Pki,
        node: KeyPair,
        good: JoinResponse,
    }

    fn case() -> Case {
        let pki = Pki::new();
        let node = KeyPair::generate().unwrap();
        let good = pki.respond(&joined_body(
            &CSR,
            "node_a",
            vec![pki.node_leaf(&node, "node_a")],
        ));
        Case { pki, node, good }
    }

    impl Case {
        fn verify(&self, response: &JoinResponse) -> Result<Verified, ResponseError> {
            verify_response(
                &self.pki.trust,
                response,
                &CSR,
                &self.node.subject_public_key_info(),
            )
        }
    }

    #[test]
    fn accepts_a_good_response() {
        let c = case();
        let Ok(Verified::Joined {
            node_id,
            chain,
            not_after_ms,
            trust,
        }) = c.verify(&c.good)
        else {
            panic!("refused a good response");
        };
        assert_eq!(node_id, "node_a");
        assert_eq!(chain.len(), 1);
        assert!(not_after_ms > 0);
        assert_eq!(trust, None);
    }

    /// The host after a rotation of every key: the new CA issues, the old signing key signs,
    /// and the body carries the new keys.
    struct Rotated {
        new_ca: Pki,
        update: TrustUpdate,
    }

    fn rotated(c: &Case) -> Rotated {
        let new_ca = Pki::new();
        let update = TrustUpdate {
            sequence: 1,
            node_ca_pem: format!("{}{}", new_ca.trust.node_ca_pem, c.pki.trust.node_ca_pem),
            join_signing_key: new_ca.trust.join_signing_key.clone(),
            other_join_signing_keys: vec![c.pki.trust.join_signing_key.clone()],
            join_encryption_key: new_ca.trust.join_encryption_key.clone(),
        };
        Rotated { new_ca, update }
    }

    #[test]
    fn takes_the_new_trust_from_a_body_signed_by_a_pinned_key() {
        let c = case();
        let r = rotated(&c);
        let mut body = joined_body(&CSR, "node_a", vec![r.new_ca.node_leaf(&c.node, "node_a")]);
        // Without the update the new CA's leaf is not trusted.
        assert_eq!(
            c.verify(&c.pki.respond(&body)),
            Err(ResponseError::NotFromNodeCa)
        );
        body.trust = Some(r.update.clone());
        let Ok(Verified::Joined {
            trust: Some(next), ..
        }) = c.verify(&c.pki.respond(&body))
        else {
            panic!("refused a rotated response");
        };
        assert_eq!(next, c.pki.trust.updated(&r.update));
        assert_eq!(next.tls_ca_pem, c.pki.trust.tls_ca_pem);
        // With the new trust, a response signed by the new key verifies, and one of the old
        // CA's leaves still does while the update names the old CA.
        let by_new = r.new_ca.respond(&joined_body(
            &CSR,
            "node_a",
            vec![c.pki.node_leaf(&c.node, "node_a")],
        ));
        let spki = c.node.subject_public_key_info();
        assert!(matches!(
            verify_response(&next, &by_new, &CSR, &spki),
            Ok(Verified::Joined { trust: None, .. })
        ));
    }

    #[test]
    fn a_trust_update_needs_a_signature_by_a_pinned_key() {
        let c = case();
        let r = rotated(&c);
        // A man in the middle with the new keys but not the pinned one: its signature names
        // a key the agent does not pin.
        let mut body = joined_body(&CSR, "node_a", vec![r.new_ca.node_leaf(&c.node, "node_a")]);
        body.trust = Some(r.update);
        assert_eq!(
            c.verify(&r.new_ca.respond(&body)),
            Err(ResponseError::WrongKey)
        );
    }

    #[test]
    fn refuses_an_unusable_or_stale_trust_update() {
        let c = case();
        let r = rotated(&c);
        let leaf = r.new_ca.node_leaf(&c.node, "node_a");
        let mut body = joined_body(&CSR, "node_a", vec![leaf]);
        for broken in [
            TrustUpdate {
                node_ca_pem: "no certificate".into(),
                ..r.update.clone()
            },
            TrustUpdate {
                join_signing_key: b"not an spki".to_vec(),
                ..r.update.clone()
            },
            TrustUpdate {
                join_encryption_key: vec![1; 31],
                ..r.update.clone()
            },
        ] {
            body.trust = Some(broken);
            assert!(matches!(
                c.verify(&c.pki.respond(&body)),
                Err(ResponseError::BadTrustUpdate(_))
            ));
        }
        // Older than what is pinned: ignored, so the new CA's leaf is not trusted.
        let mut pinned = c.pki.trust.clone();
        pinned.sequence = 2;
        body.trust = Some(r.update);
        assert_eq!(
            verify_response(
                &pinned,
                &c.pki.respond(&body),
                &CSR,
                &c.node.subject_public_key_info()
            ),
            Err(ResponseError::NotFromNodeCa)
        );
    }

    #[test]
    fn refuses_a_flipped_body_byte() {
        let c = case();
        for i in [0, c.good.body.len() / 2, c.good.body.len() - 1] {
            let mut flipped = c.good.clone();
            flipped.body[i] ^= 1;
            assert_eq!(
                c.verify(&flipped),
                Err(ResponseError::BadSignature),
                "byte {i}"
            );
        }
        let mut sig = c.good.clone();
        sig.signature[0] ^= 1;
        assert_eq!(c.verify(&sig), Err(ResponseError::BadSignature));
        sig.signature.truncate(10);
        assert_eq!(c.verify(&sig), Err(ResponseError::BadSignature));
    }

    #[test]
    fn refuses_a_signature_by_another_key() {
        let c = case();
        let mut resigned = c.good.clone();
        resigned.signature = signer()
            .sign(&SystemRandom::new(), &response_signing_input(&c.good.body))
            .unwrap()
            .as_ref()
            .to_vec();
        assert_eq!(c.verify(&resigned), Err(ResponseError::BadSignature));
        // Signed without the domain separation: not a response signature.
        let mut bare = c.good.clone();
        bare.signature = c
            .pki
            .signer
            .sign(&SystemRandom::new(), &c.good.body)
            .unwrap()
            .as_ref()
            .to_vec();
        assert_eq!(c.verify(&bare), Err(ResponseError::BadSignature));
    }

    #[test]
    fn refuses_a_wrong_key_id() {
        let c = case();
        let mut wrong = c.good.clone();
        wrong.key_id = "00".repeat(32);
        assert_eq!(c.verify(&wrong), Err(ResponseError::WrongKey));
        wrong.key_id = c.good.key_id.to_uppercase();
        assert_eq!(c.verify(&wrong), Err(ResponseError::WrongKey));
    }

    #[test]
    fn refuses_a_body_for_another_csr() {
        let c = case();
        let spki = c.node.subject_public_key_info();
        assert_eq!(
            verify_response(&c.pki.trust, &c.good, &[6; 32], &spki),
            Err(ResponseError::OtherRequest)
        );
    }

    #[test]
    fn refuses_a_leaf_with_another_key() {
        let c = case();
        let stranger = KeyPair::generate().unwrap();
        let r = c.pki.respond(&joined_body(
            &CSR,
            "node_a",
            vec![c.pki.node_leaf(&stranger, "node_a")],
        ));
        assert_eq!(c.verify(&r), Err(ResponseError::NotOurKey));
    }

    #[test]
    fn refuses_a_leaf_not_from_the_node_ca() {
        let c = case();
        // Same issuer name, another key: only the signature tells.
        let rogue_ca = KeyPair::generate().unwrap();
        let uri = "spiffe://td.test/node/node_a";
        let r = c.pki.respond(&joined_body(
            &CSR,
            "node_a",
            vec![c.pki.leaf(&rogue_ca, &c.node, uri)],
        ));
        assert_eq!(c.verify(&r), Err(ResponseError::NotFromNodeCa));
    }

    #[test]
    fn refuses_a_spiffe_id_of_another_node() {
        let c = case();
        let other = c.pki.respond(&joined_body(
            &CSR,
            "node_a",
            vec![c.pki.node_leaf(&c.node, "node_b")],
        ));
        assert_eq!(c.verify(&other), Err(ResponseError::WrongIdentity));
        let domain = c
            .pki
            .leaf(&c.pki.ca_key, &c.node, "spiffe://other.test/node/node_a");
        let r = c.pki.respond(&joined_body(&CSR, "node_a", vec![domain]));
        assert_eq!(c.verify(&r), Err(ResponseError::WrongIdentity));
        let prefix = c
            .pki
            .leaf(&c.pki.ca_key, &c.node, "spiffe://td.test/node/node_a/x");
        let r = c.pki.respond(&joined_body(&CSR, "node_a", vec![prefix]));
        assert_eq!(c.verify(&r), Err(ResponseError::WrongIdentity));
    }

    #[test]
    fn refuses_incomplete_and_malformed_bodies() {
        let c = case();
        let leaf = c.pki.node_leaf(&c.node, "node_a");
        let empty_chain = c.pki.respond(&joined_body(&CSR, "node_a", vec![]));
        assert_eq!(c.verify(&empty_chain), Err(ResponseError::Incomplete));
        let no_id = c.pki.respond(&joined_body(&CSR, "", vec![leaf.clone()]));
        assert_eq!(c.verify(&no_id), Err(ResponseError::Incomplete));
        let mut garbage = c
            .pki
            .respond(&joined_body(&CSR, "node_a", vec![b"not a cert".to_vec()]));
        assert!(matches!(
            c.verify(&garbage),
            Err(ResponseError::Malformed(_))
        ));
        let mut trailing = leaf;
        trailing.push(0);
        garbage = c.pki.respond(&joined_body(&CSR, "node_a", vec![trailing]));
        assert!(matches!(
            c.verify(&garbage),
            Err(ResponseError::Malformed(_))
        ));
        let mut v2 = joined_body(&CSR, "node_a", vec![]);
        v2.v = 2;
        assert!(matches!(
            c.verify(&c.pki.respond(&v2)),
            Err(ResponseError::Malformed(_))
        ));
        // A signed body that is not JSON at all.
        let mut not_json = c.good.clone();
        not_json.body = b"[]".to_vec();
        not_json.signature = c
            .pki
            .signer
            .sign(
                &SystemRandom::new(),
                &response_signing_input(&not_json.body),
            )
            .unwrap()
            .as_ref()
            .to_vec();
        assert!(matches!(
            c.verify(&not_json),
            Err(ResponseError::Malformed(_))
        ));
    }

    /// A PEM block that is no certificate, pinned beside the CA that issued the leaf: the pin is
    /// unusable, loudly, and an update carrying one is refused.
    #[test]
    fn refuses_a_pinned_ca_that_does_not_parse() {
        const NOT_A_CERTIFICATE: &str =
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        let mut c = case();
        assert!(c.verify(&c.good).is_ok());
        c.pki.trust.node_ca_pem.push_str(NOT_A_CERTIFICATE);
        assert!(matches!(c.verify(&c.good), Err(ResponseError::Trust(_))));

        let c = case();
        let r = rotated(&c);
        let mut body = joined_body(&CSR, "node_a", vec![r.new_ca.node_leaf(&c.node, "node_a")]);
        body.trust = Some(TrustUpdate {
            node_ca_pem: format!("{}{NOT_A_CERTIFICATE}", r.update.node_ca_pem),
            ..r.update
        });
        assert!(matches!(
            c.verify(&c.pki.respond(&body)),
            Err(ResponseError::BadTrustUpdate(_))
        ));
    }

    #[test]
    fn refuses_an_unusable_trust_file() {
        let mut c = case();
        c.pki.trust.join_signing_key = b"not an spki".to_vec();
        c.good.key_id = sha256_hex(&c.pki.trust.join_signing_key);
        assert!(matches!(c.verify(&c.good), Err(ResponseError::Trust(_))));
    }

    #[test]
    fn deferrals_carry_no_certificate() {
        let c = case();
        let pending = Deferral::Pending(Pending {
            request_id: "jr_1".into(),
            retry_after_seconds: 5,
        });
        let body = deferred_body(&CSR, pending.clone());
        assert_eq!(
            c.verify(&c.pki.respond(&body)),
            Ok(Verified::Pending(Pending {
                request_id: "jr_1".into(),
                retry_after_seconds: 5,
            }))
        );
        let mut both = body.clone();
        both.node_id = "node_a".into();
        assert_eq!(
            c.verify(&c.pki.respond(&both)),
            Err(ResponseError::Incomplete)
        );
        let mut chained = body;
        chained.chain = vec![c.pki.node_leaf(&c.node, "node_a")];
        assert_eq!(
            c.verify(&c.pki.respond(&chained)),
            Err(ResponseError::Incomplete)
        );
        let other = deferred_body(&[7; 32], pending);
        assert_eq!(
            c.verify(&c.pki.respond(&other)),
            Err(ResponseError::OtherRequest)
        );
    }

    #[test]
    fn errors_display() {
        assert_eq!(
            ResponseError::OtherRequest.to_string(),
            "the response is for another request (CSR hash mismatch)"
        );
        assert_eq!(
            ResponseError::WrongIdentity.to_string(),
            "the certificate's SPIFFE ID is not spiffe://<trust domain>/node/<node id>"
        );
        assert_eq!(
            ResponseError::Malformed("x".into()).to_string(),
            "the response body is malformed: x"
        );
    }
}
