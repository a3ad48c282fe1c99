//! What an agent sends as evidence, and how it answers challenges.

use gatehouse_proto::{Challenge, Role};

/// The attestor a token join asks for unless told otherwise.
pub const JOIN_TOKEN: &str = "join-token";

/// Why a producer could not make evidence or answer a challenge.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProducerError {
    /// The attestor challenged, and this producer answers no challenges.
    #[error("the {attestor} evidence producer cannot answer a challenge")]
    NoChallenges {
        /// The attestor.
        attestor: String,
    },
    /// The producer could not make its evidence or answer (e.g. a TPM error).
    #[error("evidence: {0}")]
    Failed(String),
}

/// The machine's side of one attestor: the join loop asks it for the first round's evidence
/// and for the answer to each challenge, always for the join's one CSR.
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

/// A join on a token alone: no evidence bytes (the join loop attaches the sealed token) and no
/// challenges.
#[derive(Debug, Clone)]
pub struct TokenProducer {
    attestor: String,
    role: Role,
}

impl TokenProducer {
    /// A `join-token` join as `role`.
    pub fn new(role: Role) -> Self {
        Self::for_attestor(JOIN_TOKEN, role)
    }

    /// A join as `role` decided by `attestor`, one that admits on the sealed token alone.
    pub fn for_attestor(attestor: &str, role: Role) -> Self {
        Self {
            attestor: attestor.to_owned(),
            role,
        }
    }
}

impl EvidenceProducer for TokenProducer {
    fn attestor(&self) -> &str {
        &self.attestor
    }

    fn role(&self) -> Role {
        self.role
    }

    fn evidence(&mut self, _csr_der: &[u8]) -> Result<Vec<u8>, ProducerError> {
        Ok(Vec::new())
    }

    fn answer(&mut self, _: &Challenge, _: &[u8]) -> Result<Vec<u8>, ProducerError> {
        Err(ProducerError::NoChallenges {
            attestor: self.attestor.clone(),
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn token_producer_sends_nothing_and_answers_nothing() {
        let mut p = TokenProducer::new(Role::Site);
        assert_eq!(p.attestor(), "join-token");
        assert_eq!(p.role(), Role::Site);
        assert!(p.evidence(b"csr").unwrap().is_empty());
        let challenge = Challenge {
            attestor: "join-token".into(),
            payload: vec![1],
            not_after: 0,
        };
        let err = p.answer(&challenge, b"csr").unwrap_err();
        assert_eq!(
            err.to_string(),
            "the join-token evidence producer cannot answer a challenge"
        );
        assert_eq!(
            TokenProducer::for_attestor("mine", Role::Node).attestor(),
            "mine"
        );
        assert_eq!(
            ProducerError::Failed("tpm".into()).to_string(),
            "evidence: tpm"
        );
    }
}
