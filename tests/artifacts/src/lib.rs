//! The components the integration tests load, built from this workspace by `build.rs` (one
//! nested `cargo build --target wasm32-wasip2`, see `gatehouse-build-support`).
//!
//! Each constant is the absolute path of a component: [`JOIN_TOKEN`], [`PROVISIONED`],
//! [`X509POP`], [`TPM`] and [`CLOUD_IID`] for the built-in attestors, [`EXAMPLE_ATTESTOR`] (and the executable [`EXAMPLE_AGENT`]) for the
//! third-party example, and one per directory in `tests/fixtures`
//! (`tests/fixtures/loop-forever` is [`LOOP_FOREVER`]). [`foreach_fixture!`] calls a macro
//! once per fixture, so the test crate can require a test for each:
//!
//! ```
//! macro_rules! assert_tested {
//!     ($fixture:ident) => {
//!         #[allow(unused_imports)]
//!         use tests::$fixture as _;
//!     };
//! }
//! mod tests {
//!     # pub fn alloc_forever() {} pub fn join_token_replacement() {} pub fn loop_forever() {}
//!     # pub fn malformed_result() {} pub fn other_tenant() {} pub fn panic() {} pub fn wit_major() {}
//!     # pub fn approval() {} pub fn challenge() {} pub fn kv_flood() {}
//!     # pub fn admit_by_token_id() {} pub fn downgrade_reclaim() {} pub fn foreign_binding_kind() {}
//!     # pub fn prepared() {}
//!     # pub fn reclaim_any_node() {} pub fn remember() {} pub fn replay_approval() {}
//!     # pub fn spend_then_defer() {} pub fn verify_mistyped() {}
//!     // #[test] fn loop_forever() { ... gatehouse_test_artifacts::LOOP_FOREVER ... }
//! }
//! gatehouse_test_artifacts::foreach_fixture!(assert_tested);
//! ```

include!(concat!(env!("OUT_DIR"), "/components.rs"));

#[cfg(test)]
mod tests;
