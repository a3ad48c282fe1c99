//! The machine's TPM 2.0, through tss-esapi: the endorsement key (EK) and its certificate, the
//! attestation key (AK), the two rounds of a tpm join, and node keys that never leave the TPM.
//!
//! Nothing is persisted in the TPM. The EK is one of the TCG EK profile's templates
//! ([`EkTemplate`]: RSA-2048 or ECC P-256 in the low range, RSA-3072 or ECC P-384 in the high
//! range, chosen by `--ek` or by which certificate the TPM holds) and the AK a restricted P-256
//! ECDSA-SHA256 signing key, both primaries of the endorsement hierarchy: the same TPM derives the same keys from the same templates at every
//! use, until its endorsement seed changes (another TPM). A node key is a primary of the owner
//! hierarchy derived from a 32-byte unique kept in `node.key` ([`TpmNodeKey`]); a TPM2_Clear
//! changes the owner seed, so the same unique then derives another key.
//!
//! A [`Tpm`] owns its tss-esapi `Context` on a thread of its own: the ESAPI context is not
//! `Send`, and a TLS signer must be `Send + Sync`. Every operation loads the objects it needs
//! and flushes them before it returns, so that a TPM without a resource manager (swtpm over
//! TCP, three transient object slots) never runs out of slots.

mod endorsement;
pub mod helper;
mod key;
mod producer;
#[cfg(any(test, feature = "swtpm"))]
pub mod swtpm;
#[cfg(test)]
mod tests;

use std::str::FromStr as _;
use std::sync::mpsc;

use gatehouse_proto::tpm::{
    PcrValue, TPM_EVIDENCE_VERSION, TpmAnswer, TpmCertifiedKey, TpmEnrollment, TpmKeyAttestation,
    TpmQuote,
};
use tss_esapi::abstraction::ek;
use tss_esapi::attributes::ObjectAttributesBuilder;
use tss_esapi::constants::SessionType;
use tss_esapi::constants::tss::{TPM2_RH_NULL, TPM2_ST_HASHCHECK};
use tss_esapi::handles::{AuthHandle, KeyHandle, ObjectHandle, SessionHandle};
use tss_esapi::interface_types::algorithm::{HashingAlgorithm, PublicAlgorithm};
use tss_esapi::interface_types::ecc::EccCurve;
use tss_esapi::interface_types::resource_handles::Hierarchy;
use tss_esapi::interface_types::session_handles::{AuthSession, PolicySession};
use tss_esapi::structures::{
    Data, Digest, EccParameter, EccPoint, EccScheme, EncryptedSecret, HashScheme, HashcheckTicket,
    IdObject, KeyDerivationFunctionScheme, PcrSelectionList, PcrSelectionListBuilder, PcrSlot,
    Public, PublicBuilder, PublicEccParametersBuilder, Signature, SignatureScheme,
    SymmetricDefinition, SymmetricDefinitionObject,
};
use tss_esapi::traits::Marshall as _;
use tss_esapi::tss2_esys::TPMT_TK_HASHCHECK;
use tss_esapi::{Context, TctiNameConf};

pub use endorsement::{EkSelection, EkTemplate};
pub use key::{NODE_KEY_PEM_LABEL, TpmNodeKey, is_record, parse_record};
pub use producer::{TPM, TpmProducer};

pub use crate::tpm_build::DEFAULT_TCTI;

/// The NV indices of the EK certificate's chain (TCG EK credential profile 2.x): TPMs whose
/// manufacturer CA is on the die (Intel PTT, AMD fTPM) keep their per-device intermediates
/// there, DER certificates back to back, in index order.
pub const EK_CHAIN_NV_INDICES: std::ops::RangeInclusive<u32> = 0x01c0_0100..=0x01c0_01ff;

/// Most chain certificates sent (the tpm attestor takes no more).
const MAX_EK_CHAIN: usize = 6;

/// What the TPM could not do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TpmError {
    /// The TCTI string is not one tss-esapi understands (`device:…`, `swtpm:…`, `mssim:…`).
    #[error("TCTI {0}: not a TCTI configuration like device:/dev/tpmrm0 or swtpm:port=2321")]
    Tcti(String),
    /// The TPM could not be opened through the TCTI.
    #[error("cannot open the TPM at {tcti}: {reason}")]
    Open {
        /// The TCTI.
        tcti: String,
        /// Why.
        reason: String,
    },
    /// A TPM command failed.
    #[error("TPM {step}: {source}")]
    Command {
        /// What was being done.
        step: &'static str,
        /// The TSS error.
        source: tss_esapi::Error,
    },
    /// The TPM's thread is gone (it panicked or the TPM was closed).
    #[error("the TPM connection is closed")]
    Closed,
    /// `--ek auto` found no EK certificate at any template's NV index.
    #[error(
        "no EK certificate in NV at 0x01c00002 (rsa2048), 0x01c0000a (ecc-p256), 0x01c0001c (rsa3072) or 0x01c00016 (ecc-p384): the TPM was not provisioned with one"
    )]
    NoEkCertificate,
    /// The TPM returned something this agent cannot use (e.g. a non-P-256 point).
    #[error("the TPM returned an unusable {0}")]
    Unexpected(&'static str),
    /// The challenge is not a tpm challenge this agent can answer.
    #[error("tpm challenge: {0}")]
    Challenge(String),
    /// The AK this TPM derives is not the one the certificate names: another TPM, or its
    /// endorsement seed changed.
    #[error(
        "the TPM's attestation key is not the one the node certificate names (another TPM, or its endorsement seed changed)"
    )]
    OtherAk,
    /// The node key record is malformed.
    #[error("node key record: {0}")]
    Record(String),
    /// The helper could not be reached, failed, or answered something that does not check
    /// out (a forged signature or certification), or the operation is not one it offers.
    #[error("TPM helper: {0}")]
    Helper(String),
    /// A signature the TPM (or the helper) returned does not verify under the node key.
    #[error("the node key's signature does not verify (a forged or broken TPM answer)")]
    BadSignature,
}

/// Maps a tss-esapi error to [`TpmError::Command`] naming the step.
fn cmd(step: &'static str) -> impl FnOnce(tss_esapi::Error) -> TpmError {
    move |source| TpmError::Command { step, source }
}

type Job = Box<dyn FnOnce(&mut Context) + Send>;

/// The public half of a key the TPM derived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DerivedKey {
    /// Its public area (TPMT_PUBLIC).
    pub public: Vec<u8>,
    /// Its point, `04 ‖ x ‖ y`.
    pub point: Vec<u8>,
    /// Its SubjectPublicKeyInfo (DER).
    pub spki: Vec<u8>,
}

/// A connection to one TPM, served by a thread that owns the ESAPI context. Cloning shares the
/// connection; the thread ends when the last clone is dropped. Commands are serialised.
#[derive(Clone)]
pub struct Tpm {
    /// The TPM's thread, or none when the TPM is reached through the helper.
    jobs: Option<mpsc::Sender<Job>>,
    /// Set when the TPM is reached through `gatehouse-agent helper`.
    helper: Option<helper::HelperClient>,
    tcti: String,
}

impl std::fmt::Debug for Tpm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tpm").field("tcti", &self.tcti).finish()
    }
}

impl Tpm {
    /// Opens the TPM at `tcti` (e.g. [`DEFAULT_TCTI`], `swtpm:host=127.0.0.1,port=2321`).
    pub fn open(tcti: &str) -> Result<Self, TpmError> {
        let conf = TctiNameConf::from_str(tcti).map_err(|_| TpmError::Tcti(tcti.to_owned()))?;
        let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
        let (jobs, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("tpm".into())
            .spawn(move || match Context::new(conf) {
                Ok(mut ctx) => {
                    let _ = ready_tx.send(Ok(()));
                    for job in rx {
                        job(&mut ctx);
                    }
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e.to_string()));
                }
            })
            .map_err(|e| TpmError::Open {
                tcti: tcti.to_owned(),
                reason: e.to_string(),
            })?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(Self {
                jobs: Some(jobs),
                helper: None,
                tcti: tcti.to_owned(),
            }),
            Ok(Err(reason)) => Err(TpmError::Open {
                tcti: tcti.to_owned(),
                reason,
            }),
            Err(_) => Err(TpmError::Closed),
        }
    }

    /// The TPM as `gatehouse-agent helper` on `socket` offers it: AK, node key derive,
    /// certify and sign, each answer checked here. Nothing is sent until the first use.
    pub fn through_helper(socket: &std::path::Path) -> Self {
        Self {
            jobs: None,
            helper: Some(helper::HelperClient::new(socket)),
            tcti: format!("helper:{}", socket.display()),
        }
    }

    /// Whether this TPM is reached through the helper.
    pub fn is_helper(&self) -> bool {
        self.helper.is_some()
    }

    /// The TCTI this connection was opened with.
    pub fn tcti(&self) -> &str {
        &self.tcti
    }

    /// Runs `f` on the TPM's thread and waits for its result.
    fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Context) -> Result<T, TpmError> + Send + 'static,
    ) -> Result<T, TpmError> {
        let Some(jobs) = &self.jobs else {
            return Err(TpmError::Helper(
                "not an operation the helper offers (AK, node key, certify, sign)".into(),
            ));
        };
        let (tx, rx) = mpsc::sync_channel(1);
        jobs.send(Box::new(move |ctx| {
            let result = f(ctx);
            // The caller waits for this; a failed send means it gave up.
            let _ = tx.send(result);
            ctx.clear_sessions();
        }))
        .map_err(|_| TpmError::Closed)?;
        rx.recv().map_err(|_| TpmError::Closed)?
    }

    /// Round 1 with the EK `--ek auto` chooses: see [`Tpm::enrollment_with`].
    pub fn enrollment(&self) -> Result<TpmEnrollment, TpmError> {
        self.enrollment_with(EkSelection::Auto).map(|(e, _)| e)
    }

    /// Round 1: the public area and certificate (from its template's NV index) of the EK
    /// `ek` selects, its chain certificates from NV, and the AK's public area; with the
    /// template used, which round 2 must use too.
    pub fn enrollment_with(
        &self,
        ek: EkSelection,
    ) -> Result<(TpmEnrollment, EkTemplate), TpmError> {
        self.run(move |ctx| {
            let indices = nv_indices(ctx);
            let template = ek
                .resolve(|i| indices.contains(&i))
                .ok_or(TpmError::NoEkCertificate)?;
            let handle = create_ek(ctx, template)?;
            let ek_public = read_public(ctx, handle);
            flush(ctx, handle);
            let ek_public = ek_public?;
            let nv = ek::retrieve_ek_pubcert(ctx, template.selection())
                .map_err(cmd("reading the EK certificate from NV"))?;
            // The index is sized for the largest certificate: real TPMs fill the rest (0xFF).
            let ek_certificate =
                gatehouse_tpm::nv_certificate(&nv).map_or(nv.clone(), <[u8]>::to_vec);
            let ek_chain = ek_chain(ctx, &indices);
            let (ak, ak_public) = create_ak(ctx)?;
            flush(ctx, ak);
            let enrollment = TpmEnrollment {
                v: TPM_EVIDENCE_VERSION,
                ek_public: marshal_public(&ek_public)?,
                ek_certificate,
                ek_chain,
                ak_public: marshal_public(&ak_public)?,
            };
            Ok((enrollment, template))
        })
    }

    /// The public area (TPMT_PUBLIC) of the EK of `template`, whether or not the TPM holds a
    /// certificate for it.
    pub fn ek_public(&self, template: EkTemplate) -> Result<Vec<u8>, TpmError> {
        self.run(move |ctx| {
            let handle = create_ek(ctx, template)?;
            let public = read_public(ctx, handle);
            flush(ctx, handle);
            marshal_public(&public?)
        })
    }

    /// The template `ek` selects on this TPM.
    pub fn resolve_ek(&self, ek: EkSelection) -> Result<EkTemplate, TpmError> {
        if let EkSelection::Template(t) = ek {
            return Ok(t);
        }
        self.run(move |ctx| {
            let indices = nv_indices(ctx);
            ek.resolve(|i| indices.contains(&i))
                .ok_or(TpmError::NoEkCertificate)
        })
    }

    /// The AK's public area (TPMT_PUBLIC).
    pub fn ak_public(&self) -> Result<Vec<u8>, TpmError> {
        if let Some(h) = &self.helper {
            return h.ak_public();
        }
        self.run(|ctx| {
            let (ak, public) = create_ak(ctx)?;
            flush(ctx, ak);
            marshal_public(&public)
        })
    }

    /// Round 2: activates the credential with the EK of template `ek` (the one round 1 sent),
    /// quotes `pcrs` (SHA-256 bank) over `sha256(secret ‖ sha256(csr))` and reads the quoted
    /// PCRs; with `node_key`, the AK certifies it over `sha256(csr)`.
    #[allow(clippy::too_many_arguments)]
    pub fn answer(
        &self,
        ek: EkTemplate,
        credential_blob: Vec<u8>,
        encrypted_secret: Vec<u8>,
        state: Vec<u8>,
        csr_sha256: [u8; 32],
        pcrs: Vec<u8>,
        node_key: Option<[u8; 32]>,
    ) -> Result<TpmAnswer, TpmError> {
        self.run(move |ctx| {
            let blob = IdObject::try_from(credential_blob)
                .map_err(|_| TpmError::Challenge("credential blob too large".into()))?;
            let secret = EncryptedSecret::try_from(encrypted_secret)
                .map_err(|_| TpmError::Challenge("encrypted secret too large".into()))?;
            let ek_handle = create_ek(ctx, ek)?;
            let ak = match create_ak(ctx) {
                Ok((ak, _)) => ak,
                Err(e) => {
                    flush(ctx, ek_handle);
                    return Err(e);
                }
            };
            let activated = activate(ctx, ak, ek_handle, ek, blob, secret);
            // Three transient slots: free the EK before the node key is loaded.
            flush(ctx, ek_handle);
            let result = (|| {
                let activated = activated?;
                let nonce = sha256(&gatehouse_proto::tpm::quote_nonce_input(
                    activated.value(),
                    &csr_sha256,
                ));
                let quote = quote(ctx, ak, &nonce, &pcrs)?;
                let node_key = match node_key {
                    Some(unique) => Some(certify(ctx, ak, &unique, &csr_sha256)?),
                    None => None,
                };
                Ok(TpmAnswer {
                    v: TPM_EVIDENCE_VERSION,
                    state,
                    secret: activated.value().to_vec(),
                    quote,
                    node_key,
                })
            })();
            flush(ctx, ak);
            result
        })
    }

    /// A renewal's proof: checks that this TPM's AK is the one named `expected_ak_name` (the
    /// certificate's statement) and has it certify the node key `unique` over `sha256(csr)`.
    pub fn key_attestation(
        &self,
        expected_ak_name: Vec<u8>,
        unique: [u8; 32],
        csr_sha256: [u8; 32],
    ) -> Result<TpmKeyAttestation, TpmError> {
        if let Some(h) = &self.helper {
            return h.key_attestation(expected_ak_name, unique, csr_sha256);
        }
        self.run(move |ctx| {
            let (ak, ak_public) = create_ak(ctx)?;
            let result = (|| {
                let ak_bytes = marshal_public(&ak_public)?;
                if tpm_name(&ak_bytes) != expected_ak_name {
                    return Err(TpmError::OtherAk);
                }
                let certified = certify(ctx, ak, &unique, &csr_sha256)?;
                Ok(TpmKeyAttestation {
                    ak_public: ak_bytes,
                    key_public: certified.public,
                    certify_info: certified.certify_info,
                    signature: certified.signature,
                })
            })();
            flush(ctx, ak);
            result
        })
    }

    /// The node key this TPM derives from `unique`.
    pub fn node_key(&self, unique: [u8; 32]) -> Result<DerivedKey, TpmError> {
        if let Some(h) = &self.helper {
            return h.node_key(unique);
        }
        self.run(move |ctx| {
            let (handle, public) = create_node_key(ctx, &unique)?;
            flush(ctx, handle);
            let (point, spki) = p256_public(&public)?;
            Ok(DerivedKey {
                public: marshal_public(&public)?,
                point,
                spki,
            })
        })
    }

    /// ECDSA with the node key `unique` over `digest` (made with `hash`): `(r, s)`, each
    /// 32 bytes.
    pub fn sign(
        &self,
        unique: [u8; 32],
        digest: Vec<u8>,
        hash: HashingAlgorithm,
    ) -> Result<([u8; 32], [u8; 32]), TpmError> {
        if let Some(h) = &self.helper {
            if hash != HashingAlgorithm::Sha256 {
                return Err(TpmError::Helper(
                    "the helper signs SHA-256 digests only".into(),
                ));
            }
            return h.sign(unique, digest);
        }
        self.run(move |ctx| {
            let (handle, _) = create_node_key(ctx, &unique)?;
            let result = (|| {
                let digest =
                    Digest::try_from(digest).map_err(|_| TpmError::Unexpected("digest length"))?;
                let ticket = HashcheckTicket::try_from(TPMT_TK_HASHCHECK {
                    tag: TPM2_ST_HASHCHECK,
                    hierarchy: TPM2_RH_NULL,
                    digest: Default::default(),
                })
                .map_err(cmd("making a null hashcheck ticket"))?;
                let scheme = SignatureScheme::EcDsa {
                    hash_scheme: HashScheme::new(hash),
                };
                let signature = ctx
                    .execute_with_nullauth_session(|c| c.sign(handle, digest, scheme, ticket))
                    .map_err(cmd("signing with the node key"))?;
                let Signature::EcDsa(sig) = signature else {
                    return Err(TpmError::Unexpected("signature"));
                };
                Ok((fixed32(sig.signature_r())?, fixed32(sig.signature_s())?))
            })();
            flush(ctx, handle);
            result
        })
    }

    /// TPM2_Clear through the lockout hierarchy (empty authorization): the owner seed changes,
    /// the endorsement seed (EK, AK) stays. For tests of the recovery path.
    pub fn clear(&self) -> Result<(), TpmError> {
        self.run(|ctx| {
            ctx.execute_with_nullauth_session(|c| c.clear(AuthHandle::Lockout))
                .map_err(cmd("TPM2_Clear"))
        })
    }

    /// TPM2_MakeCredential by this TPM for the EK public area `ek_public` and the object name
    /// `name`: what a verifier computes in software. For tests of round 2 without a host.
    pub fn make_credential(
        &self,
        ek_public: Vec<u8>,
        name: Vec<u8>,
        secret: Vec<u8>,
    ) -> Result<(Vec<u8>, Vec<u8>), TpmError> {
        use tss_esapi::traits::UnMarshall as _;
        self.run(move |ctx| {
            let public =
                Public::unmarshall(&ek_public).map_err(cmd("reading the EK public area"))?;
            let handle = ctx
                .load_external_public(public, Hierarchy::Owner)
                .map_err(cmd("loading the EK public area"))?;
            let result = (|| {
                let name = tss_esapi::structures::Name::try_from(name)
                    .map_err(|_| TpmError::Unexpected("name"))?;
                let secret =
                    Digest::try_from(secret).map_err(|_| TpmError::Unexpected("secret"))?;
                let (blob, seed) = ctx
                    .execute_without_session(|c| c.make_credential(handle, secret, name))
                    .map_err(cmd("TPM2_MakeCredential"))?;
                Ok((blob.value().to_vec(), seed.value().to_vec()))
            })();
            flush(ctx, handle);
            result
        })
    }
}

#[cfg(any(test, feature = "swtpm"))]
impl Tpm {
    /// Defines the NV index `index` in the platform hierarchy (empty platform auth, as a
    /// TPM has before firmware sets one) and writes `data` to it, with the attributes the TCG
    /// EK profile gives an EK certificate index: what a manufacturer does when it provisions
    /// a certificate swtpm_setup does not make (e.g. for the low-range ECC P-256 EK).
    pub fn provision_nv(&self, index: u32, data: Vec<u8>) -> Result<(), TpmError> {
        use tss_esapi::attributes::NvIndexAttributesBuilder;
        use tss_esapi::handles::NvIndexTpmHandle;
        use tss_esapi::interface_types::resource_handles::{NvAuth, Provision};
        use tss_esapi::structures::{MaxNvBuffer, NvPublicBuilder};

        self.run(move |ctx| {
            let attributes = NvIndexAttributesBuilder::new()
                .with_pp_write(true)
                .with_write_define(true)
                .with_pp_read(true)
                .with_owner_read(true)
                .with_auth_read(true)
                .with_no_da(true)
                .with_platform_create(true)
                .build()
                .map_err(cmd("building the NV attributes"))?;
            let size =
                u16::try_from(data.len()).map_err(|_| TpmError::Unexpected("NV data size"))?;
            let public = NvPublicBuilder::new()
                .with_nv_index(NvIndexTpmHandle::new(index).map_err(cmd("the NV index"))?)
                .with_index_name_algorithm(HashingAlgorithm::Sha256)
                .with_index_attributes(attributes)
                .with_data_area_size(usize::from(size))
                .build()
                .map_err(cmd("building the NV public area"))?;
            let handle = ctx
                .execute_with_nullauth_session(|c| {
                    c.nv_define_space(Provision::Platform, None, public)
                })
                .map_err(cmd("TPM2_NV_DefineSpace"))?;
            for (i, chunk) in data.chunks(512).enumerate() {
                let offset =
                    u16::try_from(i * 512).map_err(|_| TpmError::Unexpected("NV offset"))?;
                let chunk = MaxNvBuffer::try_from(chunk.to_vec()).map_err(cmd("an NV chunk"))?;
                ctx.execute_with_nullauth_session(|c| {
                    c.nv_write(NvAuth::Platform, handle, chunk, offset)
                })
                .map_err(cmd("TPM2_NV_Write"))?;
            }
            // The handle was loaded into ESYS's tables; close it, the index stays.
            let mut object = ObjectHandle::from(handle);
            ctx.tr_close(&mut object)
                .map_err(cmd("closing the NV handle"))
        })
    }
}

/// A key the AK certifies that a verifier must refuse (for tests of its checks).
#[cfg(any(test, feature = "swtpm"))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum OddKey {
    /// A signing key that can also decrypt.
    Decrypt,
    /// A key that may leave the TPM (fixedTPM and fixedParent clear).
    NotFixedTpm,
}

#[cfg(any(test, feature = "swtpm"))]
impl Tpm {
    /// The AK's certification, qualified by `qualifying`, of a P-256 key made in this TPM
    /// with the node key template changed as `odd` says.
    pub fn certify_odd_key(
        &self,
        odd: OddKey,
        qualifying: [u8; 32],
    ) -> Result<TpmCertifiedKey, TpmError> {
        self.run(move |ctx| {
            let mut unique = [0u8; 32];
            aws_lc_rs::rand::fill(&mut unique).map_err(|_| TpmError::Unexpected("randomness"))?;
            let mut attributes = ObjectAttributesBuilder::new()
                .with_sensitive_data_origin(true)
                .with_user_with_auth(true)
                .with_no_da(true)
                .with_sign_encrypt(true);
            attributes = match odd {
                OddKey::Decrypt => attributes
                    .with_fixed_tpm(true)
                    .with_fixed_parent(true)
                    .with_decrypt(true),
                OddKey::NotFixedTpm => attributes.with_fixed_tpm(false).with_fixed_parent(false),
            };
            let scheme = match odd {
                // A key that decrypts too takes no signing scheme in its template.
                OddKey::Decrypt => EccScheme::Null,
                OddKey::NotFixedTpm => EccScheme::EcDsa(HashScheme::new(HashingAlgorithm::Sha256)),
            };
            let params = PublicEccParametersBuilder::new()
                .with_ecc_scheme(scheme)
                .with_curve(EccCurve::NistP256)
                .with_is_signing_key(odd != OddKey::Decrypt)
                .with_symmetric(SymmetricDefinitionObject::Null)
                .with_key_derivation_function_scheme(KeyDerivationFunctionScheme::Null)
                .build()
                .map_err(cmd("building the odd key parameters"))?;
            let x = EccParameter::try_from(unique.to_vec()).map_err(cmd("the odd key unique"))?;
            let template = PublicBuilder::new()
                .with_public_algorithm(PublicAlgorithm::Ecc)
                .with_name_hashing_algorithm(HashingAlgorithm::Sha256)
                .with_object_attributes(
                    attributes
                        .build()
                        .map_err(cmd("building the odd key attributes"))?,
                )
                .with_ecc_parameters(params)
                .with_ecc_unique_identifier(EccPoint::new(x, EccParameter::default()))
                .build()
                .map_err(cmd("building the odd key template"))?;
            let (ak, _) = create_ak(ctx)?;
            let result = certify_template(ctx, ak, template, &qualifying);
            flush(ctx, ak);
            result
        })
    }
}

/// SHA-256.
pub(crate) fn sha256(data: &[u8]) -> [u8; 32] {
    let d = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, data);
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

/// The TPM name of a TPMT_PUBLIC made by this agent (nameAlg SHA-256): `0x000b ‖
/// sha256(public)`.
pub fn tpm_name(public: &[u8]) -> Vec<u8> {
    let mut name = vec![0x00, 0x0b];
    name.extend_from_slice(&sha256(public));
    name
}

fn marshal_public(public: &Public) -> Result<Vec<u8>, TpmError> {
    public.marshall().map_err(cmd("marshalling a public area"))
}

fn read_public(ctx: &mut Context, key: KeyHandle) -> Result<Public, TpmError> {
    ctx.execute_without_session(|c| c.read_public(key))
        .map(|(public, _, _)| public)
        .map_err(cmd("reading a public area"))
}

/// Flushes a transient object; a failure only leaks a slot until the connection closes.
fn flush(ctx: &mut Context, key: KeyHandle) {
    if let Err(e) = ctx.flush_context(ObjectHandle::from(key)) {
        tracing::debug!(error = %e, "flushing a TPM object failed");
    }
}

/// The NV indices the TPM has defined; none when they cannot be listed (then `--ek auto`
/// finds no certificate and says so).
fn nv_indices(ctx: &mut Context) -> Vec<u32> {
    use tss_esapi::abstraction::nv;
    ctx.execute_without_session(nv::list)
        .map(|list| {
            list.iter()
                .map(|(public, _)| u32::from(public.nv_index()))
                .collect()
        })
        .unwrap_or_default()
}

/// The EK's chain certificates from [`EK_CHAIN_NV_INDICES`] (of the defined `indices`), in
/// index order, each cut at its DER length; at most [`MAX_EK_CHAIN`]. Best effort: a TPM
/// without them (most discrete TPMs, swtpm) or an index that cannot be read or holds
/// something else gives fewer or none, and the host decides with the configured roots alone.
fn ek_chain(ctx: &mut Context, indices: &[u32]) -> Vec<Vec<u8>> {
    use tss_esapi::abstraction::nv;
    use tss_esapi::handles::{NvIndexTpmHandle, TpmHandle};
    use tss_esapi::interface_types::resource_handles::NvAuth;

    let mut handles: Vec<u32> = indices
        .iter()
        .copied()
        .filter(|index| EK_CHAIN_NV_INDICES.contains(index))
        .collect();
    handles.sort_unstable();
    let mut chain = Vec::new();
    for index in handles {
        let Ok(handle) = NvIndexTpmHandle::new(index) else {
            continue;
        };
        let read = ctx
            .execute_without_session(|ctx| ctx.tr_from_tpm_public(TpmHandle::NvIndex(handle)))
            .and_then(|object| {
                ctx.execute_with_nullauth_session(|ctx| {
                    nv::read_full(ctx, NvAuth::NvIndex(object.into()), handle)
                })
            });
        let Ok(bytes) = read else {
            continue;
        };
        let room = MAX_EK_CHAIN - chain.len();
        match gatehouse_tpm::nv_certificates(&bytes, room) {
            Some(certs) => chain.extend(certs.into_iter().map(<[u8]>::to_vec)),
            None => continue,
        }
        if chain.len() == MAX_EK_CHAIN {
            break;
        }
    }
    chain
}

/// Derives the EK of `template` (tss-esapi's templates are the TCG EK profile's).
fn create_ek(ctx: &mut Context, template: EkTemplate) -> Result<KeyHandle, TpmError> {
    ek::create_ek_object_2(ctx, template.selection(), None).map_err(cmd("deriving the EK"))
}

/// The AK template: a restricted P-256 ECDSA-SHA256 signing key made in the TPM.
fn ak_template() -> Result<Public, TpmError> {
    let attributes = ObjectAttributesBuilder::new()
        .with_fixed_tpm(true)
        .with_fixed_parent(true)
        .with_sensitive_data_origin(true)
        .with_user_with_auth(true)
        .with_no_da(true)
        .with_restricted(true)
        .with_sign_encrypt(true)
        .build()
        .map_err(cmd("building the AK attributes"))?;
    let params = PublicEccParametersBuilder::new()
        .with_ecc_scheme(EccScheme::EcDsa(HashScheme::new(HashingAlgorithm::Sha256)))
        .with_curve(EccCurve::NistP256)
        .with_is_signing_key(true)
        .with_restricted(true)
        .with_symmetric(SymmetricDefinitionObject::Null)
        .with_key_derivation_function_scheme(KeyDerivationFunctionScheme::Null)
        .build()
        .map_err(cmd("building the AK parameters"))?;
    PublicBuilder::new()
        .with_public_algorithm(PublicAlgorithm::Ecc)
        .with_name_hashing_algorithm(HashingAlgorithm::Sha256)
        .with_object_attributes(attributes)
        .with_ecc_parameters(params)
        .with_ecc_unique_identifier(EccPoint::default())
        .build()
        .map_err(cmd("building the AK template"))
}

/// The node key template: an unrestricted P-256 ECDSA-SHA256 signing key (fixedTPM,
/// fixedParent, sensitiveDataOrigin, userWithAuth, noDA, sign), derived from `unique`. The
/// scheme is fixed (tss-esapi refuses a signing template without one): every signature is
/// SHA-256, which TLS 1.3 requires of a P-256 key anyway.
fn node_key_template(unique: &[u8; 32]) -> Result<Public, TpmError> {
    let attributes = ObjectAttributesBuilder::new()
        .with_fixed_tpm(true)
        .with_fixed_parent(true)
        .with_sensitive_data_origin(true)
        .with_user_with_auth(true)
        .with_no_da(true)
        .with_sign_encrypt(true)
        .build()
        .map_err(cmd("building the node key attributes"))?;
    let params = PublicEccParametersBuilder::new()
        .with_ecc_scheme(EccScheme::EcDsa(HashScheme::new(HashingAlgorithm::Sha256)))
        .with_curve(EccCurve::NistP256)
        .with_is_signing_key(true)
        .with_symmetric(SymmetricDefinitionObject::Null)
        .with_key_derivation_function_scheme(KeyDerivationFunctionScheme::Null)
        .build()
        .map_err(cmd("building the node key parameters"))?;
    let x = EccParameter::try_from(unique.to_vec()).map_err(cmd("building the node key unique"))?;
    PublicBuilder::new()
        .with_public_algorithm(PublicAlgorithm::Ecc)
        .with_name_hashing_algorithm(HashingAlgorithm::Sha256)
        .with_object_attributes(attributes)
        .with_ecc_parameters(params)
        .with_ecc_unique_identifier(EccPoint::new(x, EccParameter::default()))
        .build()
        .map_err(cmd("building the node key template"))
}

fn create_ak(ctx: &mut Context) -> Result<(KeyHandle, Public), TpmError> {
    let template = ak_template()?;
    let created = ctx
        .execute_with_nullauth_session(|c| {
            c.create_primary(Hierarchy::Endorsement, template, None, None, None, None)
        })
        .map_err(cmd("deriving the AK"))?;
    Ok((created.key_handle, created.out_public))
}

fn create_node_key(ctx: &mut Context, unique: &[u8; 32]) -> Result<(KeyHandle, Public), TpmError> {
    let template = node_key_template(unique)?;
    let created = ctx
        .execute_with_nullauth_session(|c| {
            c.create_primary(Hierarchy::Owner, template, None, None, None, None)
        })
        .map_err(cmd("deriving the node key"))?;
    Ok((created.key_handle, created.out_public))
}

/// TPM2_ActivateCredential: the AK (password session) and the EK of `template`: a
/// high-range EK (userWithAuth) with its empty auth value, a low-range one with a policy
/// session satisfying its policy, PolicySecret with the endorsement hierarchy.
fn activate(
    ctx: &mut Context,
    ak: KeyHandle,
    ek: KeyHandle,
    template: EkTemplate,
    blob: IdObject,
    secret: EncryptedSecret,
) -> Result<Digest, TpmError> {
    if template.user_with_auth() {
        return ctx
            .execute_with_sessions(
                (
                    Some(AuthSession::Password),
                    Some(AuthSession::Password),
                    None,
                ),
                |c| c.activate_credential(ak, ek, blob, secret),
            )
            .map_err(cmd("TPM2_ActivateCredential"));
    }
    let session = ctx
        .start_auth_session(
            None,
            None,
            None,
            SessionType::Policy,
            SymmetricDefinition::AES_128_CFB,
            HashingAlgorithm::Sha256,
        )
        .map_err(cmd("starting the EK policy session"))?
        .ok_or(TpmError::Unexpected("policy session"))?;
    ctx.execute_with_temporary_object(SessionHandle::from(session).into(), |ctx, _| {
        let policy = PolicySession::try_from(session)?;
        ctx.execute_with_nullauth_session(|c| {
            c.policy_secret(
                policy,
                AuthHandle::Endorsement,
                Default::default(),
                Default::default(),
                Default::default(),
                None,
            )
        })?;
        ctx.execute_with_sessions((Some(AuthSession::Password), Some(session), None), |c| {
            c.activate_credential(ak, ek, blob, secret)
        })
    })
    .map_err(cmd("TPM2_ActivateCredential"))
}

/// The SHA-256 bank selection of `pcrs`.
fn pcr_selection(pcrs: &[u8]) -> Result<PcrSelectionList, TpmError> {
    let slots = pcrs
        .iter()
        .map(|&i| {
            1u32.checked_shl(u32::from(i))
                .and_then(|bit| PcrSlot::try_from(bit).ok())
                .ok_or(TpmError::Unexpected("PCR index"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    PcrSelectionListBuilder::new()
        .with_selection(HashingAlgorithm::Sha256, &slots)
        .build()
        .map_err(cmd("building the PCR selection"))
}

/// TPM2_Quote by the AK over `nonce`, and the quoted PCRs' values in selection order.
fn quote(
    ctx: &mut Context,
    ak: KeyHandle,
    nonce: &[u8; 32],
    pcrs: &[u8],
) -> Result<TpmQuote, TpmError> {
    let selection = pcr_selection(pcrs)?;
    let data = Data::try_from(nonce.to_vec()).map_err(cmd("the quote nonce"))?;
    let scheme = SignatureScheme::EcDsa {
        hash_scheme: HashScheme::new(HashingAlgorithm::Sha256),
    };
    let (attest, signature) = ctx
        .execute_with_nullauth_session(|c| c.quote(ak, data, scheme, selection.clone()))
        .map_err(cmd("TPM2_Quote"))?;
    let values = read_pcrs(ctx, selection)?;
    Ok(TpmQuote {
        attest: attest.marshall().map_err(cmd("marshalling the quote"))?,
        signature: signature
            .marshall()
            .map_err(cmd("marshalling the quote signature"))?,
        pcrs: values,
    })
}

/// The values of the PCRs in `selection`, bank by bank, ascending index (TPM2_PCR_Read
/// returns at most eight per call, so it is called until the selection is read).
fn read_pcrs(
    ctx: &mut Context,
    mut selection: PcrSelectionList,
) -> Result<Vec<PcrValue>, TpmError> {
    let mut values = Vec::new();
    while !selection.is_empty() {
        let (_, read, digests) = ctx
            .execute_without_session(|c| c.pcr_read(selection.clone()))
            .map_err(cmd("TPM2_PCR_Read"))?;
        if read.is_empty() {
            return Err(TpmError::Unexpected("PCR read"));
        }
        let mut digests = digests.value().iter();
        for bank in read.get_selections() {
            let alg: u16 =
                tss_esapi::constants::AlgorithmIdentifier::from(bank.hashing_algorithm()).into();
            for slot in bank.selected() {
                let digest = digests.next().ok_or(TpmError::Unexpected("PCR read"))?;
                let index = u32::from(slot).trailing_zeros();
                values.push(PcrValue {
                    hash_alg: alg,
                    index: u8::try_from(index).map_err(|_| TpmError::Unexpected("PCR index"))?,
                    digest: digest.value().to_vec(),
                });
            }
        }
        selection
            .subtract(&read)
            .map_err(cmd("tracking the PCRs read"))?;
    }
    values.sort_by_key(|v| (v.hash_alg, v.index));
    Ok(values)
}

/// TPM2_Certify of the node key `unique` by the AK, qualified by `qualifying`.
fn certify(
    ctx: &mut Context,
    ak: KeyHandle,
    unique: &[u8; 32],
    qualifying: &[u8; 32],
) -> Result<TpmCertifiedKey, TpmError> {
    certify_template(ctx, ak, node_key_template(unique)?, qualifying)
}

/// TPM2_Certify by the AK of the owner-hierarchy primary `template` makes.
fn certify_template(
    ctx: &mut Context,
    ak: KeyHandle,
    template: Public,
    qualifying: &[u8; 32],
) -> Result<TpmCertifiedKey, TpmError> {
    let (key, public) = ctx
        .execute_with_nullauth_session(|c| {
            c.create_primary(Hierarchy::Owner, template, None, None, None, None)
        })
        .map(|created| (created.key_handle, created.out_public))
        .map_err(cmd("creating the key to certify"))?;
    let result = (|| {
        let data = Data::try_from(qualifying.to_vec()).map_err(cmd("the qualifying data"))?;
        let scheme = SignatureScheme::EcDsa {
            hash_scheme: HashScheme::new(HashingAlgorithm::Sha256),
        };
        let (attest, signature) = ctx
            .execute_with_sessions(
                (
                    Some(AuthSession::Password),
                    Some(AuthSession::Password),
                    None,
                ),
                |c| c.certify(ObjectHandle::from(key), ak, data, scheme),
            )
            .map_err(cmd("TPM2_Certify"))?;
        Ok(TpmCertifiedKey {
            public: marshal_public(&public)?,
            certify_info: attest
                .marshall()
                .map_err(cmd("marshalling the certification"))?,
            signature: signature
                .marshall()
                .map_err(cmd("marshalling the certification signature"))?,
        })
    })();
    flush(ctx, key);
    result
}

/// A P-256 coordinate or signature half as exactly 32 bytes (the TPM may drop leading zeros).
fn fixed32(p: &EccParameter) -> Result<[u8; 32], TpmError> {
    let bytes = p.value();
    if bytes.len() > 32 {
        return Err(TpmError::Unexpected("P-256 value"));
    }
    let mut out = [0u8; 32];
    out[32 - bytes.len()..].copy_from_slice(bytes);
    Ok(out)
}

/// The DER header of a P-256 SubjectPublicKeyInfo up to the uncompressed point: SEQUENCE {
/// SEQUENCE { id-ecPublicKey, prime256v1 }, BIT STRING (0 unused bits) }. Fixed for every
/// P-256 key, so written out rather than built with an ASN.1 crate.
const P256_SPKI_PREFIX: [u8; 27] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00, 0x04,
];

/// The uncompressed point `04 ‖ x ‖ y` and the SubjectPublicKeyInfo (DER) of a P-256 public
/// area.
fn p256_public(public: &Public) -> Result<(Vec<u8>, Vec<u8>), TpmError> {
    let Public::Ecc { unique, .. } = public else {
        return Err(TpmError::Unexpected("key type"));
    };
    let (x, y) = (fixed32(unique.x())?, fixed32(unique.y())?);
    let mut point = vec![0x04];
    point.extend_from_slice(&x);
    point.extend_from_slice(&y);
    let mut spki = P256_SPKI_PREFIX.to_vec();
    spki.extend_from_slice(&point[1..]);
    Ok((point, spki))
}
