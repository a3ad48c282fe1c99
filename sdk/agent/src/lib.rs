//! The machine side of a Gatehouse join.
//!
//! An agent makes a node key and a CSR, seals its join token to the JoinService key it pinned
//! (the [`gatehouse_proto::JoinTrust`] file), sends evidence from an [`EvidenceProducer`],
//! follows deferrals (waits out a pending approval, answers challenges) with the same CSR, and
//! accepts only a response signed by the pinned join signing key, bound to its CSR, whose leaf
//! certificate holds its key, chains to the pinned node CA and names the node in its SPIFFE ID.

mod client;
mod identity;
mod key;
mod producer;
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod testutil;
mod verify;

pub use client::{
    JoinClient, JoinError, JoinOptions, Joined, MAX_CHALLENGES, MAX_RETRY_AFTER, join,
};
pub use identity::{
    CERT_FILE, IDENTITY_FILE, Identity, IdentityError, KEY_FILE, ensure_no_identity, write_identity,
};
pub use key::{KeyError, NodeKey, build_csr};
pub use producer::{EvidenceProducer, JOIN_TOKEN, ProducerError, TokenProducer};
pub use verify::{ResponseError, Verified, verify_response};
