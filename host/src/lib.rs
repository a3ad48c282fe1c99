//! Gatehouse: a WebAssembly-pluggable attestation host.
//!
//! A machine sends evidence to `POST /v1/join`; [`join::JoinService`] hands the evidence to an
//! attestor (a WebAssembly component run by [`runtime`], on committed reads with its writes
//! buffered), then in one short database transaction checks what the attestor read still
//! holds, enforces the policy no attestor may skip, issues the node certificate ([`pki`]) and
//! answers with a signed response.

pub mod allocator;
pub mod api;
pub mod app;
pub mod cli;
pub mod config;
pub mod imports;
pub mod join;
pub mod logging;
pub mod metrics;
pub mod ops;
pub mod outbound;
pub mod pki;
pub mod runtime;
pub mod store;
pub mod wall_clock;
