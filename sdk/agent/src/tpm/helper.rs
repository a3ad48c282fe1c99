//! `gatehouse-agent helper`: the root process that holds the TPM connection for an
//! unprivileged agent, and the agent's client of it.
//!
//! The kernel's resource manager filters no command, so whoever can open /dev/tpmrm0 can
//! change the hierarchies' authorization, clear the TPM or trip its dictionary-attack lockout.
//! The agent therefore never opens the TPM: the helper (root) does, and offers over a local
//! Unix socket only the four operations the agent needs, each naming a node key by its 32-byte
//! unique. The helper builds every TPM command itself, so the agent picks no template, handle,
//! hierarchy or authorization:
//!
//! | request | answer |
//! |---|---|
//! | `{"op":"ak"}` | `{"akPublic"}`: the AK's public area |
//! | `{"op":"nodeKey","unique"}` | `{"public"}`: the node key's public area |
//! | `{"op":"certify","unique","akName","qualifying"}` | `{"akPublic","keyPublic","certifyInfo","signature"}` |
//! | `{"op":"sign","unique","digest"}` | `{"r","s"}`: ECDSA P-256 over the SHA-256 digest |
//!
//! One JSON object per line each way (bytes base64), `{"error"}` on failure. The agent trusts
//! nothing it gets back: a node key's public area must be a TPM-resident P-256 signing key, a
//! certification must verify under the AK the certificate names, over the right nonce, of the
//! key it asked for, and every signature is checked against the node key's public half
//! ([`super::TpmNodeKey`] checks each one, whichever way the TPM is reached).

use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use gatehouse_proto::tpm::TpmKeyAttestation;
use serde::{Deserialize, Serialize};
use tss_esapi::interface_types::algorithm::HashingAlgorithm;
use tss_esapi::structures::Public;
use tss_esapi::traits::UnMarshall as _;

use super::{DerivedKey, Tpm, TpmError, p256_public, tpm_name};

pub use crate::tpm_build::DEFAULT_SOCKET;

/// Longest line either side sends: public areas and certifications are a few hundred bytes.
const MAX_LINE: u64 = 64 * 1024;

/// How long the agent waits for one answer.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

mod b64 {
    use base64::Engine as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(serde::de::Error::custom)
    }
}

/// What the agent asks the helper.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase", deny_unknown_fields)]
pub enum Request {
    /// The AK's public area.
    Ak,
    /// The node key derived from `unique`.
    #[serde(rename_all = "camelCase")]
    NodeKey {
        /// The key's 32-byte unique.
        #[serde(with = "b64")]
        unique: Vec<u8>,
    },
    /// The AK named `ak_name` certifies the node key `unique` over `qualifying`.
    #[serde(rename_all = "camelCase")]
    Certify {
        /// The node key's unique.
        #[serde(with = "b64")]
        unique: Vec<u8>,
        /// The AK's TPM name the certificate names.
        #[serde(with = "b64")]
        ak_name: Vec<u8>,
        /// The qualifying data (sha256 of the CSR), 32 bytes.
        #[serde(with = "b64")]
        qualifying: Vec<u8>,
    },
    /// ECDSA with the node key `unique` over a SHA-256 `digest`.
    #[serde(rename_all = "camelCase")]
    Sign {
        /// The node key's unique.
        #[serde(with = "b64")]
        unique: Vec<u8>,
        /// The SHA-256 digest, 32 bytes.
        #[serde(with = "b64")]
        digest: Vec<u8>,
    },
}

/// The helper's answer: exactly one of the fields, by request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Response {
    /// Why the request failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// `ak`, `certify`: the AK's public area.
    #[serde(default, with = "opt_b64", skip_serializing_if = "Option::is_none")]
    pub ak_public: Option<Vec<u8>>,
    /// `nodeKey`: the key's public area.
    #[serde(default, with = "opt_b64", skip_serializing_if = "Option::is_none")]
    pub public: Option<Vec<u8>>,
    /// `certify`: the certified key's public area.
    #[serde(default, with = "opt_b64", skip_serializing_if = "Option::is_none")]
    pub key_public: Option<Vec<u8>>,
    /// `certify`: the TPMS_ATTEST.
    #[serde(default, with = "opt_b64", skip_serializing_if = "Option::is_none")]
    pub certify_info: Option<Vec<u8>>,
    /// `certify`: the AK's TPMT_SIGNATURE over it.
    #[serde(default, with = "opt_b64", skip_serializing_if = "Option::is_none")]
    pub signature: Option<Vec<u8>>,
    /// `sign`: r, 32 bytes.
    #[serde(default, with = "opt_b64", skip_serializing_if = "Option::is_none")]
    pub r: Option<Vec<u8>>,
    /// `sign`: s, 32 bytes.
    #[serde(default, with = "opt_b64", skip_serializing_if = "Option::is_none")]
    pub s: Option<Vec<u8>>,
}

mod opt_b64 {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match bytes {
            Some(b) => super::b64::serialize(b, s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        #[derive(Deserialize)]
        struct W(#[serde(with = "super::b64")] Vec<u8>);
        Option::<W>::deserialize(d).map(|o| o.map(|W(v)| v))
    }
}

fn unique32(bytes: &[u8]) -> Result<[u8; 32], TpmError> {
    <[u8; 32]>::try_from(bytes).map_err(|_| TpmError::Helper("a unique is 32 bytes".into()))
}

/// Serves one request on `tpm`: the helper side. Every TPM command is built here.
pub fn serve_request(tpm: &Tpm, request: Request) -> Response {
    let result = (|| -> Result<Response, TpmError> {
        Ok(match request {
            Request::Ak => Response {
                ak_public: Some(tpm.ak_public()?),
                ..Response::default()
            },
            Request::NodeKey { unique } => Response {
                public: Some(tpm.node_key(unique32(&unique)?)?.public),
                ..Response::default()
            },
            Request::Certify {
                unique,
                ak_name,
                qualifying,
            } => {
                let qualifying = <[u8; 32]>::try_from(qualifying.as_slice())
                    .map_err(|_| TpmError::Helper("qualifying data is 32 bytes".into()))?;
                let a = tpm.key_attestation(ak_name, unique32(&unique)?, qualifying)?;
                Response {
                    ak_public: Some(a.ak_public),
                    key_public: Some(a.key_public),
                    certify_info: Some(a.certify_info),
                    signature: Some(a.signature),
                    ..Response::default()
                }
            }
            Request::Sign { unique, digest } => {
                if digest.len() != 32 {
                    return Err(TpmError::Helper("a digest is 32 bytes (SHA-256)".into()));
                }
                let (r, s) = tpm.sign(unique32(&unique)?, digest, HashingAlgorithm::Sha256)?;
                Response {
                    r: Some(r.to_vec()),
                    s: Some(s.to_vec()),
                    ..Response::default()
                }
            }
        })
    })();
    result.unwrap_or_else(|e| Response {
        error: Some(e.to_string()),
        ..Response::default()
    })
}

/// Serves connections on the Unix socket `listener` with `tpm` until the process ends. Each
/// connection may send several requests; a line that is not a request closes it.
pub async fn serve(listener: tokio::net::UnixListener, tpm: Tpm) -> std::io::Result<()> {
    loop {
        let (stream, _) = listener.accept().await?;
        let tpm = tpm.clone();
        tokio::spawn(async move {
            if let Err(e) = serve_connection(stream, tpm).await {
                tracing::debug!(error = %e, "helper connection ended");
            }
        });
    }
}

async fn serve_connection(stream: tokio::net::UnixStream, tpm: Tpm) -> std::io::Result<()> {
    use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _};
    let (read, mut write) = stream.into_split();
    let mut lines = tokio::io::BufReader::new(read.take(MAX_LINE * 64)).lines();
    while let Some(line) = lines.next_line().await? {
        let response = match serde_json::from_str::<Request>(&line) {
            Ok(request) => {
                let tpm = tpm.clone();
                tokio::task::spawn_blocking(move || serve_request(&tpm, request))
                    .await
                    .unwrap_or_else(|e| Response {
                        error: Some(e.to_string()),
                        ..Response::default()
                    })
            }
            Err(e) => Response {
                error: Some(format!("not a helper request: {e}")),
                ..Response::default()
            },
        };
        let mut text = serde_json::to_vec(&response)?;
        text.push(b'\n');
        write.write_all(&text).await?;
    }
    Ok(())
}

/// The agent's side: one request per connection to the helper's socket.
#[derive(Debug, Clone)]
pub struct HelperClient {
    socket: PathBuf,
}

impl HelperClient {
    /// A client of the helper listening on `socket`.
    pub fn new(socket: &Path) -> Self {
        Self {
            socket: socket.to_owned(),
        }
    }

    /// The socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    fn call(&self, request: &Request) -> Result<Response, TpmError> {
        let io = |e: std::io::Error| {
            TpmError::Helper(format!("helper at {}: {e}", self.socket.display()))
        };
        let mut stream = UnixStream::connect(&self.socket).map_err(io)?;
        stream.set_read_timeout(Some(CALL_TIMEOUT)).map_err(io)?;
        stream.set_write_timeout(Some(CALL_TIMEOUT)).map_err(io)?;
        let mut line = serde_json::to_vec(request)
            .map_err(|e| TpmError::Helper(format!("encoding a request: {e}")))?;
        line.push(b'\n');
        stream.write_all(&line).map_err(io)?;
        let mut answer = String::new();
        use std::io::Read as _;
        BufReader::new(stream.take(MAX_LINE))
            .read_line(&mut answer)
            .map_err(io)?;
        let response: Response = serde_json::from_str(&answer)
            .map_err(|e| TpmError::Helper(format!("not a helper answer: {e}")))?;
        if let Some(e) = response.error {
            return Err(TpmError::Helper(format!("the helper failed: {e}")));
        }
        Ok(response)
    }

    /// The AK's public area, checked to be an attestation key.
    pub fn ak_public(&self) -> Result<Vec<u8>, TpmError> {
        let ak = self
            .call(&Request::Ak)?
            .ak_public
            .ok_or_else(|| TpmError::Helper("no akPublic in the answer".into()))?;
        gatehouse_tpm::check_ak(&ak)
            .map_err(|e| TpmError::Helper(format!("the helper's AK: {e}")))?;
        Ok(ak)
    }

    /// The node key `unique` derives, checked to be a TPM-resident P-256 signing key.
    pub fn node_key(&self, unique: [u8; 32]) -> Result<DerivedKey, TpmError> {
        let public = self
            .call(&Request::NodeKey {
                unique: unique.to_vec(),
            })?
            .public
            .ok_or_else(|| TpmError::Helper("no public in the answer".into()))?;
        derived(public)
    }

    /// The AK named `ak_name` certifies `unique` over `qualifying`: checked to be signed by
    /// that AK, over `qualifying`, of the key `unique` derives.
    pub fn key_attestation(
        &self,
        ak_name: Vec<u8>,
        unique: [u8; 32],
        qualifying: [u8; 32],
    ) -> Result<TpmKeyAttestation, TpmError> {
        let expected_key = self.node_key(unique)?;
        let r = self.call(&Request::Certify {
            unique: unique.to_vec(),
            ak_name: ak_name.clone(),
            qualifying: qualifying.to_vec(),
        })?;
        let missing = || TpmError::Helper("an incomplete certification".into());
        let attestation = TpmKeyAttestation {
            ak_public: r.ak_public.ok_or_else(missing)?,
            key_public: r.key_public.ok_or_else(missing)?,
            certify_info: r.certify_info.ok_or_else(missing)?,
            signature: r.signature.ok_or_else(missing)?,
        };
        if tpm_name(&attestation.ak_public) != ak_name {
            return Err(TpmError::OtherAk);
        }
        if attestation.key_public != expected_key.public {
            return Err(TpmError::Helper(
                "the helper certified another key than the one asked for".into(),
            ));
        }
        gatehouse_tpm::check_ak(&attestation.ak_public)
            .map_err(|e| TpmError::Helper(format!("the helper's AK: {e}")))?;
        gatehouse_tpm::verify_certify(
            &AwsLcVerifier,
            &attestation.ak_public,
            &attestation.certify_info,
            &attestation.signature,
            &attestation.key_public,
            &qualifying,
        )
        .map_err(|e| TpmError::Helper(format!("the helper's certification: {e}")))?;
        Ok(attestation)
    }

    /// ECDSA with the node key `unique` over a SHA-256 `digest`: `(r, s)`. The caller checks
    /// the signature against the key (it knows the message).
    pub fn sign(
        &self,
        unique: [u8; 32],
        digest: Vec<u8>,
    ) -> Result<([u8; 32], [u8; 32]), TpmError> {
        let r = self.call(&Request::Sign {
            unique: unique.to_vec(),
            digest,
        })?;
        let half = |v: Option<Vec<u8>>| {
            v.and_then(|v| <[u8; 32]>::try_from(v.as_slice()).ok())
                .ok_or_else(|| TpmError::Helper("a signature half is 32 bytes".into()))
        };
        Ok((half(r.r)?, half(r.s)?))
    }
}

/// A public area from the helper as a [`DerivedKey`], after checking that it is a
/// TPM-resident P-256 signing key.
fn derived(public: Vec<u8>) -> Result<DerivedKey, TpmError> {
    let parsed = gatehouse_tpm::Public::parse(&public)
        .map_err(|e| TpmError::Helper(format!("the node key's public area: {e}")))?;
    gatehouse_tpm::check_certified_key(&parsed)
        .map_err(|e| TpmError::Helper(format!("the node key's public area: {e}")))?;
    let area = Public::unmarshall(&public)
        .map_err(|e| TpmError::Helper(format!("the node key's public area: {e}")))?;
    let (point, spki) = p256_public(&area)?;
    Ok(DerivedKey {
        public,
        point,
        spki,
    })
}

/// [`gatehouse_tpm::Verifier`] for the one scheme an AK of this agent signs with: ECDSA P-256
/// SHA-256.
struct AwsLcVerifier;

impl gatehouse_tpm::Verifier for AwsLcVerifier {
    fn verify(
        &self,
        key: &gatehouse_tpm::Public,
        message: &[u8],
        signature: &gatehouse_tpm::Signature,
    ) -> Result<(), gatehouse_tpm::TpmError> {
        use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED, UnparsedPublicKey};
        let gatehouse_tpm::PublicKey::Ecc {
            curve: gatehouse_tpm::EccCurve::P256,
            x,
            y,
        } = &key.key
        else {
            return Err(gatehouse_tpm::TpmError::Unsupported(
                "an AK that is not P-256",
            ));
        };
        let fixed = signature
            .ecdsa_fixed(32)
            .ok_or(gatehouse_tpm::TpmError::BadSignature)?;
        let mut point = vec![0x04];
        point.extend_from_slice(x);
        point.extend_from_slice(y);
        UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, point)
            .verify(message, &fixed)
            .map_err(|_| gatehouse_tpm::TpmError::BadSignature)
    }
}

#[cfg(test)]
mod tests;
