//! What an agent sends as evidence, and how it answers challenges.

use gatehouse_proto::{Challenge, Role};

/// Why a producer could not make evidence or answer a challenge.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProducerError {
    /// The attestor asked for something this producer does not answer.
    #[error("the {attestor} evidence producer cannot answer a challenge")]
    NoChallenges {
        /// The attestor.
        attestor: String,
    },
    /// The producer failed.
    #[error("evidence: {0}")]
    Failed(String),
}

/// The machine's side of one attestor.
pub trait EvidenceProducer: Send {
    /// The attestor id the evidence is for.
    fn attestor(&self) -> &str;
    /// The role to join as.
    fn role(&self) -> Role;
    /// The first round's evidence for this CSR.
    fn evidence(&mut self, csr_der: &[u8]) -> Result<Vec<u8>, ProducerError>;
    /// The answer to a challenge, for the same CSR.
    fn answer(&mut self, challenge: &Challenge, csr_der: &[u8]) -> Result<Vec<u8>, ProducerError>;
}

/// join-token: the sealed token is the evidence; there are no challenges.
#[derive(Debug, Clone)]
pub struct TokenProducer {
    role: Role,
}

impl TokenProducer {
    /// Joins as `role`.
    pub fn new(role: Role) -> Self {
        Self { role }
    }
}

impl EvidenceProducer for TokenProducer {
    fn attestor(&self) -> &str {
        "join-token"
    }
    fn role(&self) -> Role {
        self.role
    }
    fn evidence(&mut self, _csr_der: &[u8]) -> Result<Vec<u8>, ProducerError> {
        Ok(Vec::new())
    }
    fn answer(&mut self, _: &Challenge, _: &[u8]) -> Result<Vec<u8>, ProducerError> {
        Err(ProducerError::NoChallenges {
            attestor: "join-token".into(),
        })
    }
}
