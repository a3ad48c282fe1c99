//! The host side of the WIT `prepared` interface: what `configure` derived from its
//! configuration, kept by the host and handed to every `verify` of the same configuration, so
//! a join does not parse keys and certificates again.
//!
//! Only `configure` may keep bytes. It runs at load, with no transaction, and its bytes are
//! tied to the configuration text (a changed configuration is configured again), so they can
//! carry nothing from one join to the next: `verify` reads them and cannot write them.

use std::sync::Arc;

use super::{CallState, TxBackend};
use crate::runtime::bindings::prepared::Host;

/// The most bytes `configure` may keep (a vendor trust bundle of hundreds of CAs is well under
/// it). Each `verify` that asks copies them into its instance's memory.
pub const MAX_PREPARED_BYTES: usize = 1 << 20;

/// What the `prepared` import sees in one call.
#[derive(Debug, Clone, Default)]
pub(crate) enum Prepared {
    /// `configure` is running: what it kept so far.
    Configuring(Option<Vec<u8>>),
    /// Any other call: what `configure` kept for the configuration in force.
    Kept(Option<Arc<[u8]>>),
    /// `describe`, or a call with nothing kept.
    #[default]
    None,
}

impl Prepared {
    /// What a `configure` call kept, once it returned.
    pub(crate) fn into_kept(self) -> Option<Arc<[u8]>> {
        match self {
            Prepared::Configuring(bytes) => bytes.map(Arc::from),
            Prepared::Kept(bytes) => bytes,
            Prepared::None => None,
        }
    }
}

impl<B: TxBackend> Host for CallState<B> {
    async fn keep(&mut self, bytes: Vec<u8>) -> wasmtime::Result<Result<(), String>> {
        let Prepared::Configuring(kept) = &mut self.prepared else {
            return Ok(Err("prepared.keep is only allowed during configure".into()));
        };
        if bytes.len() > MAX_PREPARED_BYTES {
            return Ok(Err(format!(
                "prepared.keep: {} bytes, over the limit of {MAX_PREPARED_BYTES}",
                bytes.len()
            )));
        }
        *kept = Some(bytes);
        Ok(Ok(()))
    }

    async fn kept(&mut self) -> wasmtime::Result<Option<Vec<u8>>> {
        Ok(match &self.prepared {
            Prepared::Kept(Some(bytes)) => Some(bytes.to_vec()),
            _ => None,
        })
    }
}
