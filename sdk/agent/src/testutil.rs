//! A local stand-in for the host's PKI: a join signing key, a node CA and a trust file, to
//! build the responses the verification and join-loop tests feed the agent.

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair as _};
use gatehouse_proto::{JoinResponse, JoinResponseBody, JoinTrust, response_signing_input};
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, PublicKeyData, SanType};

pub(crate) const TRUST_DOMAIN: &str = "td.test";

pub(crate) use crate::verify::sha256;

/// A P-256 signing key as the host's join signing key is.
pub(crate) fn signer() -> EcdsaKeyPair {
    let pkcs8 =
        EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &SystemRandom::new())
            .unwrap();
    EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref()).unwrap()
}

/// The DER SubjectPublicKeyInfo of a P-256 key: the fixed header, then the uncompressed point.
pub(crate) fn spki_of(pair: &EcdsaKeyPair) -> Vec<u8> {
    let mut spki = vec![
        0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08,
        0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
    ];
    spki.extend_from_slice(pair.public_key().as_ref());
    spki
}

pub(crate) struct Pki {
    pub(crate) trust: JoinTrust,
    pub(crate) signer: EcdsaKeyPair,
    pub(crate) ca_key: KeyPair,
    ca_params: CertificateParams,
    /// Opens tokens sealed to `trust.join_encryption_key`.
    pub(crate) opening_key: gatehouse_proto::TokenOpeningKey,
}

impl Pki {
    pub(crate) fn new() -> Self {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "test node CA");
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let signer = signer();
        let (opening_key, public) = gatehouse_proto::generate_token_keypair();
        let trust = JoinTrust {
            trust_domain: TRUST_DOMAIN.into(),
            node_ca_pem: ca.pem(),
            tls_ca_pem: ca.pem(),
            join_signing_key: spki_of(&signer),
            join_encryption_key: public.to_vec(),
        };
        Self {
            trust,
            signer,
            ca_key,
            ca_params,
            opening_key,
        }
    }

    /// A leaf for `subject` signed by `issuer_key` under the node CA's name, with one URI SAN.
    pub(crate) fn leaf(
        &self,
        issuer_key: &KeyPair,
        subject: &impl PublicKeyData,
        uri: &str,
    ) -> Vec<u8> {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.subject_alt_names = vec![SanType::URI(uri.try_into().unwrap())];
        let issuer = Issuer::from_params(&self.ca_params, issuer_key);
        p.signed_by(subject, &issuer).unwrap().der().to_vec()
    }

    /// A good leaf for `subject` as node `node_id`.
    pub(crate) fn node_leaf(&self, subject: &impl PublicKeyData, node_id: &str) -> Vec<u8> {
        self.leaf(
            &self.ca_key,
            subject,
            &format!("spiffe://{TRUST_DOMAIN}/node/{node_id}"),
        )
    }

    /// `body`, signed by the join signing key.
    pub(crate) fn respond(&self, body: &JoinResponseBody) -> JoinResponse {
        let bytes = serde_json::to_vec(body).unwrap();
        let sig = self
            .signer
            .sign(&SystemRandom::new(), &response_signing_input(&bytes))
            .unwrap();
        JoinResponse {
            body: bytes,
            signature: sig.as_ref().to_vec(),
            key_id: hex::encode(sha256(&self.trust.join_signing_key)),
        }
    }
}

/// A body admitting node `node_id` with `chain`, for the CSR hashing to `csr_sha256`.
pub(crate) fn joined_body(
    csr_sha256: &[u8; 32],
    node_id: &str,
    chain: Vec<Vec<u8>>,
) -> JoinResponseBody {
    JoinResponseBody {
        v: 1,
        csr_sha256: hex::encode(csr_sha256),
        node_id: node_id.into(),
        chain,
        deferral: None,
    }
}

/// A body deferring the CSR hashing to `csr_sha256`.
pub(crate) fn deferred_body(
    csr_sha256: &[u8; 32],
    deferral: gatehouse_proto::Deferral,
) -> JoinResponseBody {
    JoinResponseBody {
        v: 1,
        csr_sha256: hex::encode(csr_sha256),
        node_id: String::new(),
        chain: vec![],
        deferral: Some(deferral),
    }
}
