//! What a Gatehouse attestor author depends on.
//!
//! An attestor is a WebAssembly component (target `wasm32-wasip2`) that Gatehouse's JoinService
//! hands the evidence of one join round, inside the database transaction it holds. This crate
//! hides the generated bindings of the `better-compute:attestor` world behind one trait,
//! [`Attestor`], and one macro, [`export_attestor!`]: the attestor decides with the
//! transaction and the host's cryptography reached through a [`Context`], and the same code
//! runs natively: an attestor's unit tests run it with the in-memory transaction and software
//! cryptography of the `gatehouse-sdk-test` crate, no host needed.
//!
//! Helpers cover what every attestor needs: stable [`reason`] codes and the [`refuse`]
//! builder, bounded JSON [`evidence`] and [`config`] parsing, the join-token checks any
//! token-based attestor shares ([`token`]), the operator-approval protocol ([`approval`]),
//! [`b64url`], [`hex`] and [`constant_time_eq`].
//!
//! # Versions
//!
//! The crate carries the WIT it is built from (`wit/`, the package
//! `better-compute:attestor`); a component built with SDK 0.x imports that WIT version. The
//! host loads components of its own WIT major (for 0.x, its own minor) and links only what a
//! component imports, so an attestor keeps loading when a later host adds functions; see the
//! README's "WIT version policy".
//!
//! # A minimal attestor
//!
//! ```
//! use gatehouse_sdk::{export_attestor, refuse, reason, Attestor, AttestationResult, Context,
//!     Info, JoinRequest, Outcome};
//!
//! /// Admits any machine into the tenant its configuration names (a demonstration only).
//! pub struct Open {
//!     tenant: String,
//! }
//!
//! #[derive(serde::Deserialize)]
//! #[serde(deny_unknown_fields)]
//! struct Config {
//!     tenant: String,
//! }
//!
//! impl Attestor for Open {
//!     fn info() -> Info {
//!         Info { id: "open".into(), version: "0.1.0".into(), rounds: 1 }
//!     }
//!
//!     fn configure(config: &str) -> Result<Self, String> {
//!         let config: Config = gatehouse_sdk::config::parse(config)?;
//!         Ok(Open { tenant: config.tenant })
//!     }
//!
//!     fn verify(&self, cx: &Context<'_>, request: &JoinRequest) -> Outcome {
//!         if request.claims.product_uuid.is_none() {
//!             return refuse(reason::NO_PRODUCT_UUID).tenant(&self.tenant).into();
//!         }
//!         let _now = cx.tx.now();
//!         Outcome::Admitted(AttestationResult {
//!             tenant_id: Some(self.tenant.clone()),
//!             subject: request.claims.product_uuid.clone(),
//!             ..AttestationResult::default()
//!         })
//!     }
//! }
//!
//! export_attestor!(Open);
//! # fn main() {}
//! ```

#![cfg_attr(not(test), no_std)]

extern crate alloc;

pub mod approval;
mod attestor;
pub mod b64url;
mod calls;
pub mod config;
mod ct;
pub mod evidence;
mod export;
pub mod hex;
mod no_std;
mod outcome;
pub mod reason;
pub mod token;

/// The generated bindings of the `attestor` world. Not part of the API: use the re-exports at
/// the crate root; this module is public only because [`export_attestor!`] expands to paths in
/// it.
#[doc(hidden)]
#[allow(unsafe_code, missing_docs, clippy::all)]
pub mod wit {
    wit_bindgen::generate!({
        path: "wit",
        world: "attestor",
        pub_export_macro: true,
        default_bindings_module: "gatehouse_sdk::wit",
        export_macro_name: "__export_attestor_world",
        additional_derives: [PartialEq, Eq],
        generate_all,
    });
}

pub use attestor::{Attestor, Context, Crypto, MAX_EK_ROOTS, NoTpm, Tpm, Tx};
pub use calls::Calls;
pub use ct::constant_time_eq;
pub use outcome::refuse;

pub use wit::better_compute::attestor::crypto::{CryptoError, SignatureScheme, VerifiedChain};
pub use wit::better_compute::attestor::tpm::{
    Credential as TpmCredential, PcrValue as TpmPcrValue, PublicInfo as TpmPublicInfo, TpmError,
};
pub use wit::better_compute::attestor::transaction::{
    Inventory, JoinRequestRow, JoinRequestState, Lease, Node, NodeCert, Revocation, Token,
    TokenExpect, TxError, UseError, Workflow,
};
pub use wit::better_compute::attestor::types::{
    Approval, AttestationResult, Binding, Challenge, Deferral, HardwareClaims, Info, JoinRequest,
    JoinRole, NodeKeyAttestation, OpenedToken, Outcome, Refusal, TimestampMs, TokenRole,
};

#[doc(hidden)]
pub mod __private {
    //! What [`export_attestor!`](crate::export_attestor) and
    //! [`no_std_runtime!`](crate::no_std_runtime) expand to. Not part of the API.
    pub use crate::calls::Declared;
    pub use crate::export::Export;
    #[cfg(target_arch = "wasm32")]
    pub use crate::no_std::{LibcMalloc, cabi_realloc};
}

/// Exports a type implementing [`Attestor`] as the component's `verifier`.
///
/// Invoke it once, in the crate that builds the component (a `cdylib` for `wasm32-wasip2`):
///
/// ```
/// # use gatehouse_sdk::{Attestor, Context, Info, JoinRequest, Outcome, refuse, reason};
/// # pub struct Mine;
/// # impl Attestor for Mine {
/// #     fn info() -> Info { Info { id: "mine".into(), version: "0.1.0".into(), rounds: 1 } }
/// #     fn configure(_: &str) -> Result<Self, String> { Ok(Mine) }
/// #     fn verify(&self, _: &Context<'_>, _: &JoinRequest) -> Outcome { refuse(reason::NO_TOKEN).into() }
/// # }
/// gatehouse_sdk::export_attestor!(Mine);
/// # fn main() {}
/// ```
///
/// The generated `describe` returns [`Attestor::info`], `configure` runs
/// [`Attestor::configure`] and drops the value, and `verify` configures a fresh value with the
/// configuration text the host passes and calls [`Attestor::verify`] with a [`Context`] whose
/// [`Tx`] and [`Crypto`] call the host's imports. A type that does not implement [`Attestor`]
/// is a compile error at the invocation (``error[E0277]: `NotAnAttestor` is not an attestor``):
///
/// ```compile_fail,E0277
/// struct NotAnAttestor;
/// gatehouse_sdk::export_attestor!(NotAnAttestor);
/// # fn main() {}
/// ```
///
/// On targets other than `wasm32` it only checks the type, so an attestor crate that is also an
/// `rlib` the host calls natively carries no component exports there.
#[macro_export]
macro_rules! export_attestor {
    ($ty:ty $(,)?) => {
        const _: () = {
            #[allow(dead_code)]
            fn __gatehouse_assert_attestor<T: $crate::Attestor>() {}
            #[allow(dead_code)]
            fn __gatehouse_check() {
                __gatehouse_assert_attestor::<$ty>();
            }
        };
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            type __GatehouseExport = $crate::__private::Export<$ty>;
    $crate::wit::__export_attestor_world!(__GatehouseExport with_types_in $crate::wit);
        };
    };
}
