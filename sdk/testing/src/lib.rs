//! The test kit for Gatehouse attestors: run an attestor's [`verify`](gatehouse_sdk::Attestor::verify)
//! natively, in `cargo test`, against an in-memory transaction ([`MemoryTx`]) and software
//! cryptography ([`SoftCrypto`]) and TPM checks ([`SoftTpm`]), with no host and no database.
//!
//! Add it as a dev-dependency of the attestor crate (`gatehouse-sdk-test`), fill the tables the
//! attestor reads, call `verify`, and assert on the outcome and on what the round wrote:
//!
//! ```
//! use gatehouse_sdk::{Attestor, Outcome, TokenRole, reason, refuse, token};
//! use gatehouse_sdk_test::{JoinRequestExt as _, Kit, join_request, token_row};
//!
//! /// Admits a node token's machine (join-token's decision, from the SDK's helpers).
//! struct Tokens;
//! impl Attestor for Tokens {
//!     fn info() -> gatehouse_sdk::Info {
//!         gatehouse_sdk::Info { id: "tokens".into(), version: "0.1.0".into(), rounds: 1 }
//!     }
//!     fn configure(_: &str) -> Result<Self, String> { Ok(Tokens) }
//!     fn verify(&self, cx: &gatehouse_sdk::Context<'_>, request: &gatehouse_sdk::JoinRequest) -> Outcome {
//!         let decide = || -> Result<Outcome, gatehouse_sdk::Refusal> {
//!             let row = token::checked(cx, request)?;
//!             token::spend(cx, &row)?;
//!             Ok(token::admission(row).into())
//!         };
//!         decide().unwrap_or_else(Outcome::from)
//!     }
//! }
//!
//! let kit = Kit::new("tokens");
//! kit.tx.insert_token(token_row("tok_1", TokenRole::Node, b"secret", kit.tx.now() + 60_000));
//! let request = join_request("tokens").with_token("tok_1", b"secret");
//! assert!(matches!(kit.round(&Tokens, &request), Outcome::Admitted(_)));
//! assert_eq!(kit.tx.token("tok_1").map(|t| t.uses_left), Some(0));
//! // The token is spent: the second round is refused, and the refusal wrote nothing.
//! assert_eq!(
//!     kit.round(&Tokens, &request),
//!     refuse(reason::NO_USES_LEFT).token("tok_1").tenant("ten_test").into()
//! );
//! ```
//!
//! What the kit models of the host: database time you set ([`MemoryTx::set_now`]); token rows
//! locked before they are spent; the single-use ledger with expiry; join requests opened for
//! the request's CSR that an operator ([`MemoryTx::approve`], [`MemoryTx::deny`]) decides; the
//! attestor's key/value space; storage failures you inject ([`MemoryTx::fail`]); and, through
//! [`Kit::round`], what a round commits: nothing on a refusal, only the attestor's own rows (join
//! requests it opened, key/value writes) on a deferral, everything on an admission. It does
//! not model the host's per-call limits (call counts, bytes, writes) nor JoinService's policy
//! after the call (token `expect`, bindings, reclaim): the integration tests against a real host
//! do.

mod request;
mod tx;

#[cfg(feature = "crypto")]
mod crypto;
#[cfg(feature = "tpm")]
mod tpm;

pub use request::{JoinRequestExt, join_request, token_row};
pub use tx::{Clock, MemoryTx, Op};

#[cfg(feature = "crypto")]
pub use crypto::SoftCrypto;
#[cfg(feature = "tpm")]
pub use tpm::SoftTpm;

#[cfg(feature = "tpm")]
pub use kit::{Kit, START};

use gatehouse_sdk::__private::Declared;
use gatehouse_sdk::{Attestor, Context};

/// Calls `f` with `cx` held to attestor `A`'s [`Attestor::CALLS`], as its component is: a
/// transaction or crypto call that `CALLS` does not name panics here, naming the function,
/// where the component would trap in the host (or, for a function no other code calls, fail
/// to link it). [`Kit::round`] runs every round through it; a test that builds its own
/// [`Context`] wraps its `verify` the same way.
pub fn declared<A: Attestor, R>(cx: &Context<'_>, f: impl FnOnce(&Context<'_>) -> R) -> R {
    let tx = Declared::<A, _>::new(cx.tx);
    let crypto = Declared::<A, _>::new(cx.crypto);
    f(&Context {
        tx: &tx,
        crypto: &crypto,
        tpm: cx.tpm,
    })
}

#[cfg(feature = "tpm")]
mod kit {
    use gatehouse_sdk::{Attestor, Context, JoinRequest, Outcome};

    use crate::{MemoryTx, SoftCrypto, SoftTpm};

    /// Database time a new [`Kit`] starts at (2026-09-15): any fixed instant will do.
    pub const START: i64 = 1_790_000_000_000;

    /// A transaction, cryptography and TPM checks for one attestor, sharing one clock.
    pub struct Kit {
        /// The in-memory transaction.
        pub tx: MemoryTx,
        /// Software cryptography, sealing state for the kit's attestor id by the tx's clock.
        pub crypto: SoftCrypto,
        /// Software TPM checks.
        pub tpm: SoftTpm,
    }

    impl Kit {
        /// A kit for the attestor `id` (sealed state is bound to it), at database time
        /// [`START`].
        pub fn new(id: &str) -> Self {
            let tx = MemoryTx::new(START);
            let crypto = SoftCrypto::new(id, tx.clock());
            Kit {
                tx,
                crypto,
                tpm: SoftTpm::default(),
            }
        }

        /// The [`Context`] an attestor's `verify` takes. It does not hold the attestor to its
        /// [`Attestor::CALLS`]: call `verify` through [`crate::declared`] (as [`Kit::round`]
        /// does) for that.
        pub fn cx(&self) -> Context<'_> {
            Context {
                tx: &self.tx,
                crypto: &self.crypto,
                tpm: &self.tpm,
            }
        }

        /// One join round as the host runs it: `verify` with this request's CSR, then what the
        /// host would commit. A refusal leaves the tables as they were; a deferral keeps only
        /// the join requests the attestor opened and its key/value writes (no token use, no
        /// ledger row, no join request spent); an admission keeps everything.
        pub fn round<A: Attestor>(&self, attestor: &A, request: &JoinRequest) -> Outcome {
            let before = self.tx.snapshot();
            self.tx.set_csr_sha256(&request.csr_sha256);
            // Held to the attestor's `Attestor::CALLS`, as the component is.
            let outcome = crate::declared::<A, _>(&self.cx(), |cx| attestor.verify(cx, request));
            match &outcome {
                Outcome::Admitted(_) => {}
                Outcome::Refused(_) => self.tx.restore(before),
                Outcome::Deferred(_) => self.tx.restore_spends(before),
            }
            outcome
        }
    }
}
