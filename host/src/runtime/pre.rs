//! An attestor ready to instantiate: wasmtime's pre-instance, and its `verify` export found and
//! type-checked once, at load.
//!
//! Why not the world's bindings for the call: their `instantiate_async` looks up and
//! type-checks every export of the verifier interface in each new instance, which was about
//! 0.25 µs of a 10 µs join-token call (issue 14; docs/benchmarks.md). A component's export
//! types are fixed when it is compiled, so checking `verify` in the one instance the load makes
//! proves it for every later instance of the same component. The load-time calls (`describe`,
//! `configure`) still go through the bindings.

use wasmtime::component::{ComponentExportIndex, Instance, Resource, TypedFunc};
use wasmtime::{Engine, Store};

use super::bindings::AttestorPre;
use super::bindings::transaction::Tx;
use super::bindings::types::{JoinRequest, Outcome};
use super::{WIT_PACKAGE, WIT_VERSION};
use crate::imports::{CallState, TxBackend};

/// `verify`'s signature, as the world's bindings give it.
pub(super) type Verify<'a> = TypedFunc<(Resource<Tx>, &'a str, &'a JoinRequest), (Outcome,)>;

/// Shared by the loader and the call path. Made only by [`Pre::check`].
pub(crate) struct Pre<B: TxBackend> {
    bindings: AttestorPre<CallState<B>>,
    /// `verify` in the verifier interface, with [`Verify`]'s signature.
    verify: ComponentExportIndex,
}

// Not derived: a derive would ask for `B: Clone`, which a backend need not be.
impl<B: TxBackend> Clone for Pre<B> {
    fn clone(&self) -> Self {
        Self {
            bindings: self.bindings.clone(),
            verify: self.verify,
        }
    }
}

impl<B: TxBackend> Pre<B> {
    /// Finds `verify` in `bindings`' component and checks its signature in `instance`, an
    /// instance of that component in `store`.
    pub(super) fn check(
        bindings: AttestorPre<CallState<B>>,
        store: &mut Store<CallState<B>>,
        instance: &Instance,
    ) -> wasmtime::Result<Self> {
        let component = bindings.instance_pre().component();
        let interface_name = format!("{WIT_PACKAGE}/verifier@{WIT_VERSION}");
        let interface = component
            .get_export_index(None, interface_name.as_str())
            .ok_or_else(|| {
                wasmtime::format_err!("no exported instance named `{interface_name}`")
            })?;
        let verify = component
            .get_export_index(Some(&interface), "verify")
            .ok_or_else(|| wasmtime::format_err!("`{interface_name}` does not export `verify`"))?;
        // The very type `instantiate` hands the call: checking it here is what makes that sound.
        let _: Verify<'_> = instance.get_typed_func(&mut *store, verify)?;
        Ok(Self { bindings, verify })
    }

    /// The world's bindings, for the load-time calls.
    pub(super) fn bindings(&self) -> &AttestorPre<CallState<B>> {
        &self.bindings
    }

    pub(super) fn engine(&self) -> &Engine {
        self.bindings.engine()
    }

    /// A fresh instance in `store`, and its `verify`.
    pub(super) async fn instantiate<'a>(
        &self,
        store: &mut Store<CallState<B>>,
    ) -> wasmtime::Result<Verify<'a>> {
        let instance = self
            .bindings
            .instance_pre()
            .instantiate_async(&mut *store)
            .await?;
        let verify = instance
            .get_func(&mut *store, self.verify)
            .ok_or_else(|| wasmtime::format_err!("the instance has no `verify`"))?;
        // SAFETY: `check`, the only constructor, found `Verify`'s signature on this export of
        // this component, and every instance of a component has its export types.
        #[allow(unsafe_code)]
        Ok(unsafe { Verify::new_unchecked(verify) })
    }
}
