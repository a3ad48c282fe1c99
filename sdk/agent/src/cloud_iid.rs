//! The cloud-iid evidence: a cloud VM joins with the identity document its cloud signs, read
//! from a file the machine fetched from its metadata service, and no token.

use std::path::Path;

use gatehouse_proto::cloud_iid::{CloudIidEvidence, Provider};
use gatehouse_proto::{Challenge, Role};

use crate::producer::{EvidenceProducer, ProducerError};

/// Sends one identity document as cloud-iid evidence.
#[derive(Debug, Clone)]
pub struct CloudIidProducer {
    attestor: String,
    role: Role,
    evidence: CloudIidEvidence,
}

/// Why a document file could not become evidence.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DocumentError {
    /// A file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file holds no evidence JSON and no provider was named.
    #[error("{0}: not cloud-iid evidence JSON; name the provider with --provider")]
    NoProvider(String),
    /// The file's evidence names another provider than the one asked for.
    #[error("the evidence is for {found}, not {wanted}")]
    ProviderMismatch {
        /// The provider asked for.
        wanted: Provider,
        /// The one the evidence names.
        found: Provider,
    },
    /// AWS needs the signature beside the document.
    #[error("an AWS document needs its /rsa2048 signature (--signature-file)")]
    NoSignature,
    /// Only AWS documents come with a separate signature.
    #[error("only an AWS document takes a --signature-file")]
    UnexpectedSignature,
}

fn read(path: &Path) -> Result<String, DocumentError> {
    std::fs::read_to_string(path).map_err(|source| DocumentError::Read {
        path: path.display().to_string(),
        source,
    })
}

impl CloudIidProducer {
    /// Evidence for `attestor`, as `role`.
    pub fn new(attestor: &str, role: Role, evidence: CloudIidEvidence) -> Self {
        Self {
            attestor: attestor.to_owned(),
            role,
            evidence,
        }
    }

    /// Evidence from what the metadata service returned, saved to files:
    ///
    /// - a file holding cloud-iid evidence JSON (`{"provider": …, "document": …}`) is sent as
    ///   it is (`provider`, if given, must agree);
    /// - otherwise `provider` says what the file is: `aws` the identity document, sent byte
    ///   for byte, with `signature` the `/rsa2048` text (or `/signature` where the host
    ///   enables it; never `/pkcs7`, DSA-SHA-1); `azure` the `/metadata/attested/document`
    ///   response JSON (its `signature` member is sent) or that member alone; `gcp` and `oidc`
    ///   the token (surrounding whitespace trimmed).
    pub fn from_files(
        document: &Path,
        provider: Option<Provider>,
        signature: Option<&Path>,
    ) -> Result<CloudIidEvidence, DocumentError> {
        let text = read(document)?;
        if let Ok(evidence) = serde_json::from_str::<CloudIidEvidence>(&text) {
            if let Some(wanted) = provider
                && wanted != evidence.provider
            {
                return Err(DocumentError::ProviderMismatch {
                    wanted,
                    found: evidence.provider,
                });
            }
            if signature.is_some() {
                return Err(DocumentError::UnexpectedSignature);
            }
            return Ok(evidence);
        }
        let provider =
            provider.ok_or_else(|| DocumentError::NoProvider(document.display().to_string()))?;
        if provider != Provider::Aws && signature.is_some() {
            return Err(DocumentError::UnexpectedSignature);
        }
        let (document, signature) = match provider {
            Provider::Aws => {
                let signature = read(signature.ok_or(DocumentError::NoSignature)?)?;
                (text, Some(signature.trim().to_owned()))
            }
            Provider::Azure => {
                #[derive(serde::Deserialize)]
                struct Attested {
                    signature: String,
                }
                match serde_json::from_str::<Attested>(&text) {
                    Ok(attested) => (attested.signature, None),
                    Err(_) => (text.trim().to_owned(), None),
                }
            }
            Provider::Gcp | Provider::Oidc => (text.trim().to_owned(), None),
        };
        Ok(CloudIidEvidence {
            provider,
            document,
            signature,
        })
    }
}

impl EvidenceProducer for CloudIidProducer {
    fn attestor(&self) -> &str {
        &self.attestor
    }

    fn role(&self) -> Role {
        self.role
    }

    fn evidence(&mut self, _csr_der: &[u8]) -> Result<Vec<u8>, ProducerError> {
        serde_json::to_vec(&self.evidence).map_err(|e| ProducerError::Failed(e.to_string()))
    }

    fn answer(&mut self, _: &Challenge, _: &[u8]) -> Result<Vec<u8>, ProducerError> {
        Err(ProducerError::NoChallenges {
            attestor: self.attestor.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gatehouse_proto::cloud_iid::CLOUD_IID;

    fn file(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn reads_each_providers_files() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let doc = file(d, "doc.json", "{\"accountId\":\"1\"}");
        let sig = file(d, "pkcs7", "MIAG\nCSqG\n");
        let aws = CloudIidProducer::from_files(&doc, Some(Provider::Aws), Some(&sig)).unwrap();
        assert_eq!(aws.document, "{\"accountId\":\"1\"}");
        assert_eq!(aws.signature.as_deref(), Some("MIAG\nCSqG"));
        assert!(matches!(
            CloudIidProducer::from_files(&doc, Some(Provider::Aws), None),
            Err(DocumentError::NoSignature)
        ));

        let imds = file(
            d,
            "attested.json",
            r#"{"encoding":"pkcs7","signature":"MIIK"}"#,
        );
        let azure = CloudIidProducer::from_files(&imds, Some(Provider::Azure), None).unwrap();
        assert_eq!(azure.document, "MIIK");
        assert_eq!(azure.signature, None);

        let token = file(d, "token", "aaa.bbb.ccc\n");
        let gcp = CloudIidProducer::from_files(&token, Some(Provider::Gcp), None).unwrap();
        assert_eq!(gcp.document, "aaa.bbb.ccc");
        assert!(matches!(
            CloudIidProducer::from_files(&token, None, None),
            Err(DocumentError::NoProvider(_))
        ));
        assert!(matches!(
            CloudIidProducer::from_files(&token, Some(Provider::Gcp), Some(&sig)),
            Err(DocumentError::UnexpectedSignature)
        ));

        let evidence = file(d, "ev.json", r#"{"provider":"oidc","document":"x.y.z"}"#);
        let oidc = CloudIidProducer::from_files(&evidence, None, None).unwrap();
        assert_eq!(oidc.provider, Provider::Oidc);
        assert!(matches!(
            CloudIidProducer::from_files(&evidence, Some(Provider::Gcp), None),
            Err(DocumentError::ProviderMismatch { .. })
        ));
        assert!(matches!(
            CloudIidProducer::from_files(&d.join("missing"), Some(Provider::Gcp), None),
            Err(DocumentError::Read { .. })
        ));
    }

    #[test]
    fn sends_the_evidence_and_answers_no_challenge() {
        let evidence = CloudIidEvidence {
            provider: Provider::Gcp,
            document: "a.b.c".into(),
            signature: None,
        };
        let mut p = CloudIidProducer::new(CLOUD_IID, Role::Node, evidence.clone());
        assert_eq!(p.attestor(), "cloud-iid");
        assert_eq!(p.role(), Role::Node);
        let bytes = p.evidence(b"csr").unwrap();
        assert_eq!(
            serde_json::from_slice::<CloudIidEvidence>(&bytes).unwrap(),
            evidence
        );
        let challenge = Challenge {
            attestor: "cloud-iid".into(),
            payload: vec![],
            not_after: 0,
        };
        assert!(p.answer(&challenge, b"csr").is_err());
    }
}
