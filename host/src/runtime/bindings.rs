#![allow(missing_docs)] // generated code; the WIT carries the documentation
//! The one host-side `bindgen!` site for the attestor world (STYLE: a single place that names
//! the WIT, so every generated type has one path).

wasmtime::component::bindgen!({
    path: "../wit",
    world: "attestor",
    // Transaction imports await the database; every import may trap (a guest handing back a
    // resource it does not own, a storage failure the host turns into a fault).
    imports: { default: async | trappable },
    exports: { default: async },
    // The locked phase compares each row a guest read with the same row read again.
    additional_derives: [PartialEq],
});

pub use better_compute::attestor::{crypto, prepared, tpm, transaction, types};
pub use exports::better_compute::attestor::verifier;
