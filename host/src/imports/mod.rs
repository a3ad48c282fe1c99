//! The host side of the attestor world's imports.
//!
//! One [`CallState`] is the data of one wasmtime `Store`: a single attestor call. It holds the
//! deny-by-default WASI context, the memory limiter, and the [`Session`]: the join's storage
//! (behind [`TxBackend`]; on the join path [`Staged`], which reads committed state and buffers
//! writes until JoinService's short locked phase), the PKI (for sealed challenge state) and the
//! [`Effects`] JoinService checks after the call (which tokens were locked and consumed, which
//! evidence recorded, whether storage failed, whether a write limit was met).

mod backend;
mod crypto;
mod limits;
mod prepared;
mod staged;
mod store_tx;
pub mod tpm;
mod transaction;

use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

pub use backend::{BackendError, ConsumeOutcome, TxBackend, UseOutcome};
pub(crate) use limits::MemoryLimiter;
pub use prepared::MAX_PREPARED_BYTES;
pub(crate) use prepared::Prepared;
pub use staged::{Apply, Settle, Spends, Staged};

/// The representation of the `tx` borrow every `verify` call is given.
pub(crate) fn transaction_rep() -> u32 {
    transaction::TX_REP
}

use crate::pki::Pki;
use crate::runtime::bindings::transaction::Token;

/// The most bytes of guest stderr kept per call (then logged with the attestor id).
const STDERR_CAPACITY: usize = 16 * 1024;

/// The most transaction calls one attestor call may make. Host time does not count against the
/// call's deadline, so without this a guest could keep a transaction open by calling the host
/// in a loop.
pub(crate) const MAX_TX_CALLS: u32 = 256;

/// The most bytes one attestor call may pass through the `transaction` interface, arguments
/// and values read together (the per-call copy limit). Past it the call traps.
pub(crate) const MAX_TX_BYTES: usize = 4 << 20;

/// The most writes one call may make (kv-put, kv-delete, record-use, open-join-request,
/// consume-token, consume-join-request). A round applies one call's writes, so this is also
/// the per-round limit, deferral rounds included.
pub(crate) const MAX_WRITES: u32 = 32;

/// The most bytes one call may write (keys, values, ledger subjects, join request subjects
/// and details).
pub(crate) const MAX_WRITE_BYTES: usize = 256 * 1024;

/// The most single-use records one call may make.
pub(crate) const MAX_RECORDED_USES: usize = 8;

/// What one attestor call may reach: the transaction of the join round it decides.
pub struct Session<B> {
    /// The attestor being called; scopes the single-use ledger, join requests, the key/value
    /// space and sealed state.
    pub attestor: String,
    /// The open transaction.
    pub backend: B,
    /// The host's keys (challenge key for `seal-state`).
    pub pki: Arc<Pki>,
    /// SHA-256 of the round's CSR: join requests are opened for it.
    pub csr_sha256: Vec<u8>,
    /// What the attestor did through the transaction.
    pub effects: Effects,
}

impl<B> Session<B> {
    /// A session for one call of `attestor` over `backend`.
    pub fn new(
        attestor: impl Into<String>,
        backend: B,
        pki: Arc<Pki>,
        csr_sha256: Vec<u8>,
    ) -> Self {
        Self {
            attestor: attestor.into(),
            backend,
            pki,
            csr_sha256,
            effects: Effects::default(),
        }
    }
}

/// What an attestor did through the transaction, for JoinService's checks after the call.
#[derive(Debug, Default, Clone)]
pub struct Effects {
    /// Tokens the attestor locked, as read.
    pub locked_tokens: Vec<Token>,
    /// Tokens the attestor spent a use of, in order.
    pub consumed_tokens: Vec<String>,
    /// Single-use subjects the attestor recorded.
    pub recorded_uses: Vec<String>,
    /// Join requests the attestor marked used.
    pub consumed_join_requests: Vec<String>,
    /// Storage operations that failed. A call with any cannot admit: its transaction may be
    /// aborted (Postgres) or missing writes the attestor believes it made.
    pub storage_failures: u32,
    /// Transaction calls made (bounded by [`MAX_TX_CALLS`]).
    pub tx_calls: u32,
    /// Bytes passed through the transaction interface (bounded by [`MAX_TX_BYTES`]).
    pub tx_bytes: usize,
    /// Writes made (bounded by [`MAX_WRITES`]).
    pub writes: u32,
    /// Bytes written (bounded by [`MAX_WRITE_BYTES`]).
    pub write_bytes: usize,
    /// The write limit the attestor met, if any. A call that met one cannot admit or defer:
    /// JoinService refuses it and applies none of its writes.
    pub write_limit: Option<&'static str>,
    /// Keys the host itself verified a TPM2_Certify of during the call (`tpm.verify-certify`
    /// succeeded): what a `node-key: tpm` result and a `urn:bc:tpm-ak:` statement must match.
    pub tpm_certified: Vec<TpmCertified>,
}

/// A TPM2_Certify the host verified during a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TpmCertified {
    /// The TPM name of the AK that signed it (nameAlg ‖ digest).
    pub ak_name: Vec<u8>,
    /// SHA-256 of the certified key's SubjectPublicKeyInfo (DER).
    pub key_spki_sha256: [u8; 32],
}

/// The data of one attestor call's `Store`.
pub struct CallState<B> {
    table: ResourceTable,
    /// Made at the guest's first WASI call: a component built without the standard library
    /// imports no WASI (join-token, the attestor most joins go through), and a call that
    /// never reaches WASI should not pay for a context.
    wasi: Option<Wasi>,
    pub(crate) limiter: MemoryLimiter,
    /// Time spent inside host imports (awaiting the database), which the guest's execution
    /// deadline does not count: the database has its own timeouts.
    pub(crate) host_time: Duration,
    /// None while the host loads the component (`describe`, `configure`): no transaction then.
    pub(crate) session: Option<Session<B>>,
    /// What the `prepared` import keeps (during `configure`) or hands out (during `verify`).
    pub(crate) prepared: Prepared,
}

impl<B: TxBackend> CallState<B> {
    /// State for one call with a memory cap of `memory_bytes`.
    pub(crate) fn new(session: Option<Session<B>>, memory_bytes: usize) -> Self {
        Self {
            table: ResourceTable::new(),
            wasi: None,
            limiter: MemoryLimiter::new(memory_bytes),
            host_time: Duration::ZERO,
            session,
            prepared: Prepared::None,
        }
    }

    /// The session back, once the call is over.
    pub(crate) fn into_session(self) -> Option<Session<B>> {
        self.session
    }

    /// Whatever the guest wrote to stderr during the call.
    pub(crate) fn stderr(&self) -> bytes_text::Text {
        bytes_text::Text(
            self.wasi
                .as_ref()
                .map(|wasi| wasi.stderr.contents().to_vec())
                .unwrap_or_default(),
        )
    }

    /// The session for one transaction operation: counts it and bounds the number of calls.
    /// Callers add the operation's duration to `host_time` (see `transaction::timed`).
    fn enter(&mut self) -> wasmtime::Result<&mut Session<B>> {
        let Some(session) = self.session.as_mut() else {
            wasmtime::bail!("the transaction is only available inside verify");
        };
        session.effects.tx_calls += 1;
        if session.effects.tx_calls > MAX_TX_CALLS {
            wasmtime::bail!("attestor made more than {MAX_TX_CALLS} transaction calls");
        }
        Ok(session)
    }

    /// Counts `bytes` copied through the transaction interface against [`MAX_TX_BYTES`].
    fn copied(&mut self, bytes: usize) -> wasmtime::Result<()> {
        if let Some(session) = self.session.as_mut() {
            session.effects.tx_bytes = session.effects.tx_bytes.saturating_add(bytes);
            if session.effects.tx_bytes > MAX_TX_BYTES {
                wasmtime::bail!(
                    "attestor passed more than {MAX_TX_BYTES} bytes through the transaction"
                );
            }
        }
        Ok(())
    }

    /// Counts one write of `bytes` against the per-call write limits; the limit met, if any
    /// (also remembered in [`Effects::write_limit`], so the call cannot admit or defer).
    fn write(&mut self, bytes: usize, ledger: bool) -> Option<&'static str> {
        let session = self.session.as_mut()?;
        let e = &mut session.effects;
        let met = if e.writes >= MAX_WRITES {
            Some("writes per call")
        } else if e.write_bytes.saturating_add(bytes) > MAX_WRITE_BYTES {
            Some("bytes written per call")
        } else if ledger && e.recorded_uses.len() >= MAX_RECORDED_USES {
            Some("single-use records per call")
        } else {
            None
        };
        match met {
            Some(limit) => {
                e.write_limit.get_or_insert(limit);
            }
            None => {
                e.writes += 1;
                e.write_bytes += bytes;
            }
        }
        met
    }
}

/// The `types` interface holds only types; linking it names the instance components import.
impl<B: TxBackend> crate::runtime::bindings::types::Host for CallState<B> {}

impl<B: Send> WasiView for CallState<B> {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi.get_or_insert_with(Wasi::new).ctx,
            table: &mut self.table,
        }
    }
}

/// A call's WASI context and the stderr it captures.
struct Wasi {
    ctx: WasiCtx,
    stderr: MemoryOutputPipe,
}

impl Wasi {
    fn new() -> Self {
        let stderr = MemoryOutputPipe::new(STDERR_CAPACITY);
        // Deny by default: no preopened directories, no environment or arguments, no stdin,
        // no sockets or name lookups; stdout is discarded and stderr is captured for the log.
        let ctx = WasiCtxBuilder::new()
            .stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        Self { ctx, stderr }
    }
}

/// Guest output as text for the log.
mod bytes_text {
    /// Lossy UTF-8 view of captured bytes.
    pub struct Text(pub Vec<u8>);

    impl Text {
        /// The non-empty lines, lossily decoded.
        pub fn lines(&self) -> impl Iterator<Item = String> + '_ {
            self.0
                .split(|b| *b == b'\n')
                .filter(|l| !l.is_empty())
                .map(|l| String::from_utf8_lossy(l).into_owned())
        }
    }
}
