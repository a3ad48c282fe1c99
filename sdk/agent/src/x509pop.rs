//! The x509pop evidence: a node whose certificate expired (offline, or its host down past the
//! expiry) re-joins as itself by proving, with its last certificate's key, that it asks for
//! the new CSR.

use gatehouse_proto::x509pop::{X509POP_VERSION, X509popEvidence, signing_input};
use gatehouse_proto::{Challenge, Role};

use crate::cert::NodeCert;
use crate::key::NodeKey;
use crate::producer::{EvidenceProducer, ProducerError};
use crate::verify::sha256;

/// The attestor id.
pub const X509POP: &str = "x509pop";

/// Makes x509pop evidence from the last certificate chain (leaf, node CA) and its key.
pub struct X509popProducer {
    key: NodeKey,
    chain: Vec<Vec<u8>>,
    node_id: String,
    role: Role,
    clock: fn() -> i64,
}

impl std::fmt::Debug for X509popProducer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("X509popProducer")
            .field("node_id", &self.node_id)
            .field("role", &self.role)
            .finish_non_exhaustive()
    }
}

/// Milliseconds since the Unix epoch by the system clock.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl X509popProducer {
    /// A producer for the chain `chain` (leaf first) whose leaf certifies `key`. It asks for
    /// the leaf's role (`node` for a `node-tenant` certificate); a certificate that names no
    /// node, has another key, or whose role never re-joins (a ramdisk) is refused.
    pub fn new(key: NodeKey, chain: Vec<Vec<u8>>) -> Result<Self, ProducerError> {
        let leaf = chain
            .first()
            .ok_or_else(|| ProducerError::Failed("x509pop: no certificate".into()))?;
        let cert =
            NodeCert::parse(leaf).map_err(|e| ProducerError::Failed(format!("x509pop: {e}")))?;
        if cert.spki_der != key.spki_der() {
            return Err(ProducerError::Failed(
                "x509pop: the key is not the certificate's".into(),
            ));
        }
        let role = cert.rejoin_role().ok_or_else(|| {
            ProducerError::Failed(format!(
                "x509pop: a {} certificate never re-joins",
                cert.role
            ))
        })?;
        Ok(Self {
            key,
            chain,
            node_id: cert.node_id,
            role,
            clock: now_ms,
        })
    }

    /// The node the evidence names.
    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    #[cfg(test)]
    fn with_clock(mut self, clock: fn() -> i64) -> Self {
        self.clock = clock;
        self
    }
}

impl EvidenceProducer for X509popProducer {
    fn attestor(&self) -> &str {
        X509POP
    }

    fn role(&self) -> Role {
        self.role
    }

    fn evidence(&mut self, csr_der: &[u8]) -> Result<Vec<u8>, ProducerError> {
        let client_time = (self.clock)();
        let input = signing_input(&sha256(csr_der), &self.node_id, client_time)
            .ok_or_else(|| ProducerError::Failed("x509pop: node id too long".into()))?;
        let sig = self
            .key
            .sign(&input)
            .map_err(|e| ProducerError::Failed(format!("x509pop: {e}")))?;
        let evidence = X509popEvidence {
            v: X509POP_VERSION,
            node_id: self.node_id.clone(),
            chain: self.chain.clone(),
            client_time,
            sig,
        };
        serde_json::to_vec(&evidence).map_err(|e| ProducerError::Failed(format!("x509pop: {e}")))
    }

    fn answer(&mut self, _: &Challenge, _: &[u8]) -> Result<Vec<u8>, ProducerError> {
        Err(ProducerError::NoChallenges {
            attestor: X509POP.into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED, UnparsedPublicKey};
    use x509_parser::prelude::FromDer as _;

    use super::*;
    use crate::testutil::Pki;

    const NOW: i64 = 1_790_000_000_000;

    #[test]
    fn evidence_is_signed_by_the_old_key_over_the_new_csr() {
        let pki = Pki::new();
        let old = NodeKey::generate().unwrap();
        let old_spki = old.spki_der();
        let chain = vec![pki.node_leaf(old.key_pair(), "node_a"), pki.ca_der()];
        let mut p = X509popProducer::new(old, chain.clone())
            .unwrap()
            .with_clock(|| NOW);
        assert_eq!(
            (p.attestor(), p.role(), p.node_id()),
            ("x509pop", Role::Node, "node_a")
        );

        let csr = crate::key::build_csr(&NodeKey::generate().unwrap()).unwrap();
        let bytes = p.evidence(&csr).unwrap();
        let e: X509popEvidence = serde_json::from_slice(&bytes).unwrap();
        assert_eq!((e.v, e.node_id.as_str(), e.client_time), (1, "node_a", NOW));
        assert_eq!(e.chain, chain);
        let input = signing_input(&sha256(&csr), "node_a", NOW).unwrap();
        let (_, spki) = x509_parser::x509::SubjectPublicKeyInfo::from_der(&old_spki).unwrap();
        UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, spki.subject_public_key.data)
            .verify(&input, &e.sig)
            .unwrap();
        // The JSON is the wire shape: camelCase, base64url.
        let json: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert!(json["nodeId"].is_string() && json["clientTime"].is_i64());

        let challenge = Challenge {
            attestor: "x509pop".into(),
            payload: vec![],
            not_after: 0,
        };
        assert!(matches!(
            p.answer(&challenge, &csr),
            Err(ProducerError::NoChallenges { .. })
        ));
    }

    #[test]
    fn roles_and_refusals() {
        let pki = Pki::new();
        let key = NodeKey::generate().unwrap();
        let (nb, na) = (1_700_000_000, 1_700_086_400);
        for (role, want) in [
            ("node-tenant", Some(Role::Node)),
            ("site", Some(Role::Site)),
            ("ramdisk", None),
        ] {
            let key = NodeKey::generate().unwrap();
            let leaf = pki.node_cert(key.key_pair(), "node_a", role, nb, na);
            let got = X509popProducer::new(key, vec![leaf]).map(|p| p.role());
            match want {
                Some(r) => assert_eq!(got.unwrap(), r, "{role}"),
                None => assert_eq!(
                    got.unwrap_err().to_string(),
                    "evidence: x509pop: a ramdisk certificate never re-joins"
                ),
            }
        }
        let stranger = NodeKey::generate().unwrap();
        let leaf = pki.node_leaf(stranger.key_pair(), "node_a");
        assert!(X509popProducer::new(key, vec![leaf]).is_err());
        assert!(X509popProducer::new(NodeKey::generate().unwrap(), vec![]).is_err());
    }
}
