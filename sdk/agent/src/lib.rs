//! The machine side of a Gatehouse join.
//!
//! An agent makes a node key and a CSR, seals its join token to the JoinService key it pinned
//! (the [`gatehouse_proto::JoinTrust`] file), sends evidence from an [`EvidenceProducer`],
//! follows deferrals (waits out a pending approval, answers challenges) with the same CSR, and
//! accepts only a response signed by the pinned join signing key, bound to its CSR, whose leaf
//! certificate holds its key, chains to the pinned node CA and names the node in its SPIFFE ID.
//!
//! A joined node keeps its certificate alive with [`Lifecycle`]: it renews over TLS
//! authenticated by its current certificate ([`RenewClient`]) before the certificate runs out,
//! and re-joins as itself with x509pop ([`X509popProducer`]) when it ran out anyway.
//! [`plan_reset`] and [`apply_reset`] move an identity aside so the machine joins as new.
//!
//! The TPM (tpm joins, node keys in the TPM, the helper) is the default feature `tpm`, which
//! links the system's libtss2; without it ([`TPM_SUPPORT`] false) the agent joins with tokens,
//! user data, cloud documents and ramdisk credentials, keeping file keys.

mod cert;
mod client;
mod cloud_iid;
mod doctor;
mod identity;
pub mod install_script;
mod key;
mod lifecycle;
mod pinned;
mod producer;
mod ramdisk;
mod renew;
mod reset;
mod revocation;
mod site;
mod status;
#[cfg(test)]
mod testutil;
#[cfg(feature = "tpm")]
pub mod tpm;
mod tpm_build;
mod verify;
mod x509pop;

pub use cert::{CertError, NodeCert, ak_name};
pub use client::{
    FirstRound, JoinClient, JoinError, JoinOptions, Joined, MAX_CHALLENGES, MAX_RETRY_AFTER,
    error_line, first_round, is_tls_trust_error, join,
};
pub use cloud_iid::{CloudIidProducer, DocumentError};
pub use doctor::{Check, TPM_DEVICE, can_open_device, doctor, host_has_tpm, revocation_check};
pub use identity::{
    CERT_FILE, IDENTITY_FILE, Identity, IdentityError, KEY_FILE, LoadedIdentity, NEXT_KEY_FILE,
    TPM_CLEARED_HINT, commit_next, ensure_no_identity, load_identity, load_identity_with,
    stage_next_key, write_identity,
};
pub use key::{FileKey, KeyError, NodeKey, build_csr};
pub use lifecycle::{
    Action, AttemptError, Clock, Lifecycle, LifecycleError, LifecycleEvent, RenewPolicy, Schedule,
    Step, Validity,
};
pub use pinned::{TRUST_FILE, pinned_trust, save_trust};
pub use producer::{
    EvidenceProducer, ExternalProducer, JOIN_TOKEN, MAX_ANSWER, PRODUCER_TIMEOUT, ProducerError,
    TokenProducer,
};
pub use ramdisk::{
    BootCredentials, CmdlineError, DISCOVERY, DiscoveryProducer, local_claims, read_cmdline,
};
pub use renew::{Attester, RenewClient, RenewError};
pub use reset::{IDENTITY_FILES, ResetMove, apply_reset, plan_reset, utc_stamp};
pub use revocation::{CrlError, MAX_CRL_LEN, Revoked, check_crl, fetch_crl};
pub use site::{BootEntry, SiteClient, SiteError, SiteLoop, boot_lease_name, cmdline_file_name};
pub use status::{KeyPlace, Status, status};
pub use tpm_build::{DEFAULT_SOCKET, DEFAULT_TCTI, HostTpm, NoTpmSupport, TPM, TPM_SUPPORT};
pub use verify::{ResponseError, Verified, verify_response};
pub use x509pop::{X509POP, X509popProducer};
