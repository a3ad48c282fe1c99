//! Admin commands: a small HTTPS client of the admin API, one module per resource, every
//! request and answer one of the shared types of [`crate::ops::types`] (so the CLI and the
//! server cannot disagree on a field without the build failing), every command printing a
//! table for people or, with `-o json`, the API's JSON.

mod admins;
mod attestors;
mod client;
mod join_requests;
mod journal;
mod nodes;
mod output;
mod pools;
mod provisioning;
mod prune;
mod tenants;
mod tokens;

pub(super) use admins::{AdminsCommand, admins};
pub(super) use attestors::{AttestorsCommand, attestors};
pub(super) use join_requests::{JoinRequestsCommand, join_requests};
pub(super) use journal::{AuditsArgs, EventsArgs, audits, events};
pub(super) use nodes::{NodesCommand, nodes};
pub(super) use pools::{PoolsCommand, pools};
pub(super) use provisioning::{WorkflowsCommand, workflows};
pub(super) use prune::{PruneCommand, PruneUsesArgs, prune, prune_uses};
pub(super) use tenants::{TenantsCommand, tenants};
pub(super) use tokens::{TokenCommand, token};
