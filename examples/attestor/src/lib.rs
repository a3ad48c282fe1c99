//! `ssh-host-key`, an example third-party attestor: a machine joins by proving it holds one of
//! the SSH host keys the operator allowed, the way `known_hosts` trusts a server.
//!
//! Two rounds:
//!
//! 1. The agent sends `{"hostKey": "ssh-ed25519 AAAA…"}` (the machine's
//!    `/etc/ssh/ssh_host_ed25519_key.pub`). Unless the key is in the configuration's
//!    `hostKeys` the machine is refused (`unknown-host-key`). Otherwise the attestor challenges
//!    it: a fresh 32-byte nonce, and the state (the nonce and the key) sealed by the host,
//!    bound to the CSR and expiring with the challenge. The payload is
//!    `{"namespace": "gatehouse-join", "message": b64url(nonce ‖ sha256(CSR)), "state": …}`.
//!    Nothing is written.
//! 2. The machine's evidence producer signs the message with the host key (`ssh-keygen -Y sign
//!    -n gatehouse-join`, so the private key never leaves the file sshd reads it from) and the
//!    agent sends `{"state": …, "signature": "-----BEGIN SSH SIGNATURE-----…"}`. The state must
//!    open for this CSR (`challenge-state`; `challenge-expired` after its not-after), the
//!    signature must be the host key's over the message in the namespace (`bad-signature`),
//!    the key must still be allowed, and the nonce is recorded in the single-use ledger
//!    (`challenge-replayed` for a second answer). The machine is admitted into the configured
//!    tenant and pool, bound to the key (`ssh-host-key:sha256` = the key's SHA-256, hex): a
//!    machine whose key is already bound to a node re-keys that node.
//!
//! Configuration (`[attestors.ssh-host-key]`):
//!
//! ```toml
//! tenant = "acme"
//! pool = "edge"            # optional
//! host_keys = ["ssh-ed25519 AAAAC3Nza… web-1", "ssh-ed25519 AAAAC3Nza… web-2"]
//! challenge_ttl_ms = 60000 # optional, at most 300000
//! ```

use gatehouse_sdk::{
    AttestationResult, Attestor, Binding, Challenge, Context, CryptoError, Deferral, Info,
    JoinRequest, Outcome, Refusal, SignatureScheme, UseError, b64url, hex, reason, refuse,
};
use sha2::Digest as _;

pub mod ssh;

use ssh::{HostKey, SshSig};

/// The attestor's id: requests name it, `attestors_dir` holds it as `ssh-host-key.wasm`.
pub const ID: &str = "ssh-host-key";
/// The SSHSIG namespace the machine signs in, so a signature made for anything else (a git
/// commit, a file) never answers a join challenge.
pub const NAMESPACE: &str = "gatehouse-join";
/// The binding kind: namespaced by the attestor's id, as the host requires.
pub const BINDING: &str = "ssh-host-key:sha256";

/// The key is not in `host_keys`.
pub const UNKNOWN_HOST_KEY: &str = "unknown-host-key";
/// The sealed state does not open for this CSR, or does not hold what this attestor seals.
pub const CHALLENGE_STATE: &str = "challenge-state";
/// The challenge's not-after has passed.
pub const CHALLENGE_EXPIRED: &str = "challenge-expired";
/// The signature is not the host key's over the challenge in the namespace.
pub const BAD_SIGNATURE: &str = "bad-signature";
/// This challenge was answered before.
pub const CHALLENGE_REPLAYED: &str = "challenge-replayed";

/// How long a challenge may be answered unless configured (ms).
const DEFAULT_TTL_MS: u32 = 60_000;
/// The host keeps sealed state 5 minutes at most.
const MAX_TTL_MS: u32 = 300_000;
const NONCE_LEN: usize = 32;

/// The configuration, as the operator writes it.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    tenant: String,
    #[serde(default)]
    pool: Option<String>,
    host_keys: Vec<String>,
    #[serde(default = "default_ttl")]
    challenge_ttl_ms: u32,
}

fn default_ttl() -> u32 {
    DEFAULT_TTL_MS
}

/// The `ssh-host-key` attestor, configured.
#[derive(Debug)]
pub struct SshHostKey {
    tenant: String,
    pool: Option<String>,
    allowed: Vec<HostKey>,
    ttl_ms: u32,
}

/// Round 1's evidence.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Enrollment {
    /// The public key line.
    pub host_key: String,
}

/// The challenge's payload, which the agent hands its producer on stdin.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Payload {
    /// The SSHSIG namespace to sign in.
    pub namespace: String,
    /// What to sign (base64url).
    pub message: String,
    /// The sealed state, to send back unchanged.
    pub state: String,
}

/// Round 2's evidence: what the producer prints.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Answer {
    /// The state from the payload.
    pub state: String,
    /// The armoured SSH signature of the message.
    pub signature: String,
}

impl Attestor for SshHostKey {
    fn info() -> Info {
        Info {
            id: ID.into(),
            version: env!("CARGO_PKG_VERSION").into(),
            rounds: 2,
        }
    }

    fn configure(config: &str) -> Result<Self, String> {
        let config: Config = gatehouse_sdk::config::parse(config)?;
        if config.tenant.is_empty() {
            return Err("tenant must not be empty".into());
        }
        if config.challenge_ttl_ms == 0 || config.challenge_ttl_ms > MAX_TTL_MS {
            return Err(format!("challenge_ttl_ms must be 1 to {MAX_TTL_MS}"));
        }
        let allowed = config
            .host_keys
            .iter()
            .map(|line| {
                HostKey::parse_line(line)
                    .ok_or_else(|| format!("host_keys: not an ssh-ed25519 public key: {line:?}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if allowed.is_empty() {
            return Err("host_keys must name at least one key".into());
        }
        Ok(SshHostKey {
            tenant: config.tenant,
            pool: config.pool,
            allowed,
            ttl_ms: config.challenge_ttl_ms,
        })
    }

    fn verify(&self, cx: &Context<'_>, request: &JoinRequest) -> Outcome {
        let decided = match request.round {
            1 => self.challenge(cx, request),
            _ => self.answered(cx, request),
        };
        decided.unwrap_or_else(Outcome::from)
    }
}

gatehouse_sdk::export_attestor!(SshHostKey);

impl SshHostKey {
    /// Round 1: an allowed key is challenged.
    fn challenge(&self, cx: &Context<'_>, request: &JoinRequest) -> Result<Outcome, Refusal> {
        let enrollment: Enrollment = gatehouse_sdk::evidence::json(&request.attestation)?;
        let key = HostKey::parse_line(&enrollment.host_key)
            .ok_or_else(|| refuse(reason::MALFORMED_EVIDENCE))?;
        if !self.allowed.contains(&key) {
            return Err(refuse(UNKNOWN_HOST_KEY));
        }
        let now = cx.tx.now();
        let not_after = now.saturating_add(i64::from(self.ttl_ms));
        // 32 fresh bytes: sealed state starts with the random AES-GCM nonce the host drew.
        let mut seed = cx.crypto.seal_state(b"", b"nonce");
        seed.extend_from_slice(&request.csr_sha256);
        seed.extend_from_slice(&now.to_be_bytes());
        let nonce = cx.crypto.sha256(&seed);

        let mut plaintext = nonce.clone();
        plaintext.extend_from_slice(&key.key);
        let state = cx
            .crypto
            .seal_state_until(&plaintext, &request.csr_sha256, not_after);
        let payload = Payload {
            namespace: NAMESPACE.into(),
            message: b64url::encode(&message(&nonce, &request.csr_sha256)),
            state: b64url::encode(&state),
        };
        let payload = serde_json::to_vec(&payload).map_err(|_| refuse(reason::STORAGE))?;
        Ok(Deferral::Challenge(Challenge { payload, not_after }).into())
    }

    /// Round 2: the signed answer admits, once.
    fn answered(&self, cx: &Context<'_>, request: &JoinRequest) -> Result<Outcome, Refusal> {
        let answer: Answer = gatehouse_sdk::evidence::json(&request.attestation)?;
        let sealed = b64url::decode(&answer.state).map_err(|_| refuse(CHALLENGE_STATE))?;
        let plaintext =
            cx.crypto
                .open_state(&sealed, &request.csr_sha256)
                .map_err(|e| match e {
                    CryptoError::Expired => refuse(CHALLENGE_EXPIRED),
                    _ => refuse(CHALLENGE_STATE),
                })?;
        let (nonce, key) = plaintext
            .split_at_checked(NONCE_LEN)
            .ok_or_else(|| refuse(CHALLENGE_STATE))?;
        let key = HostKey {
            key: key.try_into().map_err(|_| refuse(CHALLENGE_STATE))?,
        };
        // Allowed when challenged, and still allowed now (the operator may have removed it).
        if !self.allowed.contains(&key) {
            return Err(refuse(UNKNOWN_HOST_KEY));
        }

        let signature =
            SshSig::parse_armored(&answer.signature).ok_or_else(|| refuse(BAD_SIGNATURE))?;
        if signature.public_key != key.blob() || signature.namespace != NAMESPACE.as_bytes() {
            return Err(refuse(BAD_SIGNATURE));
        }
        let message = message(nonce, &request.csr_sha256);
        let digest = match signature.hash_algorithm.as_slice() {
            b"sha512" => sha2::Sha512::digest(&message).to_vec(),
            b"sha256" => cx.crypto.sha256(&message),
            _ => return Err(refuse(BAD_SIGNATURE)),
        };
        cx.crypto
            .verify_signature(
                SignatureScheme::Ed25519,
                &key.spki(),
                &signature.signed_data(&digest),
                &signature.signature,
            )
            .map_err(|_| refuse(BAD_SIGNATURE))?;

        // Sealed state lives at most MAX_TTL_MS: a use recorded that long outlives it.
        let until = cx.tx.now().saturating_add(i64::from(MAX_TTL_MS));
        match cx
            .tx
            .record_use(&format!("ssh-nonce:{}", hex::encode(nonce)), until)
        {
            Ok(()) => {}
            Err(UseError::Reused) => return Err(refuse(CHALLENGE_REPLAYED)),
            Err(UseError::Storage) => return Err(refuse(reason::STORAGE)),
        }

        let fingerprint = hex::encode(&cx.crypto.sha256(&key.blob()));
        let node_id = cx.tx.bound_node(BINDING, &fingerprint)?;
        Ok(AttestationResult {
            node_id,
            tenant_id: Some(self.tenant.clone()),
            pool_id: self.pool.clone(),
            bindings: vec![Binding {
                kind: BINDING.into(),
                value: fingerprint.clone(),
            }],
            subject: Some(format!("ssh:{fingerprint}")),
            ..AttestationResult::default()
        }
        .into())
    }
}

/// What the machine signs: the nonce and the CSR's hash, so the signature is for this node key.
pub fn message(nonce: &[u8], csr_sha256: &[u8]) -> Vec<u8> {
    [nonce, csr_sha256].concat()
}

#[cfg(test)]
mod tests;
