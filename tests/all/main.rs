//! Gatehouse's integration suite: one binary, one module per concern (STYLE: wasmtime links
//! once). Every test runs a real host on loopback TLS; database tests run on SQLite always and
//! on PostgreSQL when DATABASE_URL is set.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod admin;
mod admins;
mod agent_lifecycle;
mod approval;
mod attestors_check;
mod audit;
mod challenge;
mod cloud_iid;
mod common;
mod discovery;
mod fetch;
mod hostile;
mod join_token;
mod lists;
mod nodes;
mod ops;
mod outage;
mod policy;
mod pools;
mod process;
mod provisioned;
mod real_vectors;
mod reload;
mod renew;
mod response;
mod rotation;
mod sandbox;
mod scale;
mod shadow;
mod soak;
mod third_party;
mod tpm;
mod transactions;
mod x509pop;
