//! The tpm attestor's evidence producer: round 1 the EK and AK, round 2 the activated secret,
//! a quote and the node key's certification.

use gatehouse_proto::tpm::{TpmChallenge, TpmEvidence};
use gatehouse_proto::{Challenge, Role};

use super::{EkSelection, EkTemplate, Tpm, TpmNodeKey};
use crate::producer::{EvidenceProducer, ProducerError};
use crate::verify::sha256;

pub use crate::tpm_build::TPM;

/// The PCRs quoted unless told otherwise: SHA-256 bank, 0 to 7 (firmware and boot loader).
const DEFAULT_PCRS: [u8; 8] = [0, 1, 2, 3, 4, 5, 6, 7];

/// Answers a tpm join from a TPM. With a node key in that TPM, the answer carries the AK's
/// certification of it (what an attestor at `nodeKey: certified` requires).
#[derive(Debug)]
pub struct TpmProducer {
    tpm: Tpm,
    node_key: Option<TpmNodeKey>,
    pcrs: Vec<u8>,
    ek_chain: Vec<Vec<u8>>,
    ek: EkSelection,
    /// The EK template round 1 sent, which round 2 activates with.
    ek_used: Option<EkTemplate>,
    role: Role,
}

impl TpmProducer {
    /// A producer for `tpm` joining as a node; `node_key` is the join's key when it is in
    /// this TPM (it must be the key the CSR is for).
    pub fn new(tpm: Tpm, node_key: Option<TpmNodeKey>) -> Self {
        Self {
            tpm,
            node_key,
            pcrs: DEFAULT_PCRS.to_vec(),
            ek_chain: Vec::new(),
            ek: EkSelection::Auto,
            ek_used: None,
            role: Role::Node,
        }
    }

    /// Sends these intermediate CA certificates (DER) between the EK certificate and a root
    /// (a manufacturer's intermediate the attestor's `ekRoots` may not hold).
    pub fn with_ek_chain(mut self, chain: Vec<Vec<u8>>) -> Self {
        self.ek_chain = chain;
        self
    }

    /// Proves the EK `ek` selects (default: [`EkSelection::Auto`]).
    pub fn with_ek(mut self, ek: EkSelection) -> Self {
        self.ek = ek;
        self
    }

    /// Quotes these SHA-256 PCRs instead of 0 to 7.
    pub fn with_pcrs(mut self, pcrs: Vec<u8>) -> Self {
        self.pcrs = pcrs;
        self
    }

    fn failed(e: impl std::fmt::Display) -> ProducerError {
        ProducerError::Failed(format!("tpm: {e}"))
    }
}

impl EvidenceProducer for TpmProducer {
    fn attestor(&self) -> &str {
        TPM
    }

    fn role(&self) -> Role {
        self.role
    }

    fn evidence(&mut self, _csr_der: &[u8]) -> Result<Vec<u8>, ProducerError> {
        let (mut enrollment, template) = self.tpm.enrollment_with(self.ek).map_err(Self::failed)?;
        self.ek_used = Some(template);
        // Chain certificates given on the command line replace those read from NV.
        if !self.ek_chain.is_empty() {
            enrollment.ek_chain.clone_from(&self.ek_chain);
        }
        serde_json::to_vec(&TpmEvidence::Enroll(enrollment)).map_err(Self::failed)
    }

    fn answer(&mut self, challenge: &Challenge, csr_der: &[u8]) -> Result<Vec<u8>, ProducerError> {
        let c: TpmChallenge = serde_json::from_slice(&challenge.payload)
            .map_err(|e| Self::failed(format!("the challenge is not a tpm challenge: {e}")))?;
        let template = match self.ek_used {
            Some(t) => t,
            None => self.tpm.resolve_ek(self.ek).map_err(Self::failed)?,
        };
        let answer = self
            .tpm
            .answer(
                template,
                c.credential_blob,
                c.encrypted_secret,
                c.state,
                sha256(csr_der),
                self.pcrs.clone(),
                self.node_key.as_ref().map(TpmNodeKey::unique),
            )
            .map_err(Self::failed)?;
        serde_json::to_vec(&TpmEvidence::Answer(answer)).map_err(Self::failed)
    }
}
