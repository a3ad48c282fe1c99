//! What an agent sends as evidence, and how it answers challenges.

use std::io::{Read as _, Write as _};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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

/// The most bytes an external producer may print as its answer (the host takes at most that
/// much evidence too).
pub const MAX_ANSWER: usize = 256 * 1024;

/// How long an external producer may take to answer.
pub const PRODUCER_TIMEOUT: Duration = Duration::from_secs(60);

/// Evidence for any attestor, from outside the agent: the first round's evidence as bytes
/// (`gatehouse-agent join --evidence-file`), and the answers to challenges from an external
/// command (`--producer`), so the stock agent joins through a third-party attestor without a
/// line of code in it.
///
/// The producer protocol: for each challenge, the agent runs the command through `/bin/sh -c`
/// with the challenge's payload (the attestor's bytes, exactly) on stdin and these variables
/// set: `GATEHOUSE_ATTESTOR` (the attestor id), `GATEHOUSE_CSR_SHA256` (lowercase hex of the
/// join's CSR hash, which every answer is bound to), `GATEHOUSE_NOT_AFTER` (ms since the Unix
/// epoch, server time, after which the answer is refused) and `GATEHOUSE_ROUND` (2 for the
/// answer to the first challenge). Whatever it prints on stdout (at most [`MAX_ANSWER`] bytes)
/// is the next round's evidence; exiting non-zero, or running longer than
/// [`PRODUCER_TIMEOUT`], fails the join with its stderr in the message. Nothing else is
/// inherited from the agent's environment but `PATH`.
#[derive(Debug, Clone)]
pub struct ExternalProducer {
    attestor: String,
    role: Role,
    evidence: Vec<u8>,
    command: Option<String>,
    round: u8,
}

impl ExternalProducer {
    /// A join as `role` through `attestor`, sending `evidence` in the first round and
    /// answering challenges with `command` (none: the attestor must not challenge).
    pub fn new(attestor: &str, role: Role, evidence: Vec<u8>, command: Option<String>) -> Self {
        Self {
            attestor: attestor.to_owned(),
            role,
            evidence,
            command,
            round: 1,
        }
    }
}

impl EvidenceProducer for ExternalProducer {
    fn attestor(&self) -> &str {
        &self.attestor
    }

    fn role(&self) -> Role {
        self.role
    }

    fn evidence(&mut self, _csr_der: &[u8]) -> Result<Vec<u8>, ProducerError> {
        self.round = 1;
        Ok(self.evidence.clone())
    }

    fn answer(&mut self, challenge: &Challenge, csr_der: &[u8]) -> Result<Vec<u8>, ProducerError> {
        let Some(command) = &self.command else {
            return Err(ProducerError::NoChallenges {
                attestor: self.attestor.clone(),
            });
        };
        self.round = self.round.saturating_add(1);
        let csr_sha256 = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, csr_der);
        let hex: String = csr_sha256
            .as_ref()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        run_producer(
            command,
            &challenge.payload,
            &[
                ("GATEHOUSE_ATTESTOR", self.attestor.clone()),
                ("GATEHOUSE_CSR_SHA256", hex),
                ("GATEHOUSE_NOT_AFTER", challenge.not_after.to_string()),
                ("GATEHOUSE_ROUND", self.round.to_string()),
            ],
        )
    }
}

/// Runs `command` with `input` on stdin and `vars` in its environment; its stdout.
fn run_producer(
    command: &str,
    input: &[u8],
    vars: &[(&str, String)],
) -> Result<Vec<u8>, ProducerError> {
    let failed = |what: String| ProducerError::Failed(format!("producer `{command}`: {what}"));
    let mut child = Command::new("/bin/sh")
        .arg("-c")
        .arg(command)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(vars.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| failed(format!("cannot start: {e}")))?;
    // Writing and reading from threads: a producer that prints before it has read all of its
    // input must not deadlock against a full pipe.
    let stdin = child.stdin.take();
    let input = input.to_vec();
    let writer = std::thread::spawn(move || {
        if let Some(mut stdin) = stdin {
            // A producer that exits without reading is judged by its exit status.
            let _ = stdin.write_all(&input);
        }
    });
    let stdout = child.stdout.take();
    let reader = std::thread::spawn(move || {
        // Keeps one byte past the limit (to tell a flood) and drains the rest, so a flooding
        // producer exits rather than blocking on a full pipe.
        let mut out = Vec::new();
        if let Some(mut stdout) = stdout {
            let _ = (&mut stdout)
                .take(MAX_ANSWER as u64 + 1)
                .read_to_end(&mut out);
            let _ = std::io::copy(&mut stdout, &mut std::io::sink());
        }
        out
    });
    let stderr = child.stderr.take();
    let errors = std::thread::spawn(move || {
        let mut out = Vec::new();
        if let Some(stderr) = stderr {
            let _ = stderr.take(4096).read_to_end(&mut out);
        }
        out
    });
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() > PRODUCER_TIMEOUT => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(failed(format!(
                    "no answer within {}s",
                    PRODUCER_TIMEOUT.as_secs()
                )));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => return Err(failed(e.to_string())),
        }
    };
    let _ = writer.join();
    let out = reader.join().unwrap_or_default();
    let err = errors.join().unwrap_or_default();
    if !status.success() {
        return Err(failed(format!(
            "{status}: {}",
            String::from_utf8_lossy(&err).trim()
        )));
    }
    if out.len() > MAX_ANSWER {
        return Err(failed(format!("printed more than {MAX_ANSWER} bytes")));
    }
    Ok(out)
}

#[cfg(test)]
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

    fn challenge(payload: &[u8]) -> Challenge {
        Challenge {
            attestor: "mine".into(),
            payload: payload.to_vec(),
            not_after: 1_790_000_000_000,
        }
    }

    #[test]
    fn external_producer_sends_the_file_and_runs_the_command_per_challenge() {
        let command = r#"printf '%s|%s|%s|%s|' "$GATEHOUSE_ATTESTOR" "$GATEHOUSE_ROUND" \
            "$GATEHOUSE_NOT_AFTER" "$GATEHOUSE_CSR_SHA256"; cat; test -z "$HOME""#;
        let mut p =
            ExternalProducer::new("mine", Role::Node, b"first".to_vec(), Some(command.into()));
        assert_eq!(p.attestor(), "mine");
        assert_eq!(p.evidence(b"csr").unwrap(), b"first");
        let answer = p.answer(&challenge(b"\x00payload\xff"), b"csr").unwrap();
        let text = String::from_utf8_lossy(&answer).into_owned();
        let fields: Vec<&str> = text.splitn(5, '|').collect();
        assert_eq!(&fields[..3], ["mine", "2", "1790000000000"]);
        let csr_sha256 = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, b"csr");
        let hex: String = csr_sha256
            .as_ref()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(fields[3], hex, "the CSR hash in hex");
        assert!(
            answer.ends_with(b"\x00payload\xff"),
            "the payload, byte for byte"
        );
        // A second challenge is round 3.
        let again = p.answer(&challenge(b""), b"csr").unwrap();
        assert!(again.starts_with(b"mine|3|"));
    }

    #[test]
    fn external_producer_failures_fail_the_join() {
        let mut none = ExternalProducer::new("mine", Role::Node, vec![], None);
        assert!(matches!(
            none.answer(&challenge(b"x"), b"csr"),
            Err(ProducerError::NoChallenges { .. })
        ));
        let mut failing = ExternalProducer::new(
            "mine",
            Role::Node,
            vec![],
            Some("echo no key >&2; exit 7".into()),
        );
        let error = failing
            .answer(&challenge(b"x"), b"csr")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("exit status: 7") && error.contains("no key"),
            "{error}"
        );
        let mut flood = ExternalProducer::new(
            "mine",
            Role::Node,
            vec![],
            Some(format!("head -c {} /dev/zero", MAX_ANSWER + 1)),
        );
        let error = flood
            .answer(&challenge(b"x"), b"csr")
            .unwrap_err()
            .to_string();
        assert!(error.contains("more than"), "{error}");
    }
}
