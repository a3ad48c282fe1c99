//! The admin surface's business logic, below HTTP: tokens, nodes, tenants, pools, join
//! requests, workflows, events and audits, pruning, and admin identities, one module each;
//! and what a site node may do over mTLS (its boot lease and discovery tokens, [`site`]).
//!
//! The axum handlers in [`crate::api`] only parse, authenticate (which yields the [`Actor`])
//! and call a function here; every function takes checked input ([`Id`], the typed bodies of
//! [`types`]), runs one transaction, and, when it changes something, appends in that same
//! transaction the event that says what changed and which admin identity changed it. So the
//! rules (what may be minted, which node states allow which action) live in one place, the
//! same for every caller.

pub mod admins;
pub mod attestors;
mod error;
mod hardware;
pub mod id;
pub mod join_requests;
pub mod journal;
pub mod nodes;
mod page;
pub mod pools;
pub mod prune;
pub mod site;
pub mod tenants;
pub mod tokens;
pub mod types;
pub mod workflows;

pub use error::OpsError;
pub use hardware::{mac, product_uuid};
pub use id::{Id, InvalidId, is_id};
pub use page::{DEFAULT_PAGE, MAX_PAGE, Page, PageRequest};

use crate::store::{NewEvent, StoreError, Tx};

/// Who an admin action is done by: the name of the admin identity whose key authenticated the
/// request. Every event an action writes names it (`actor`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor(Id);

impl Actor {
    /// The identity of the configured `admin_key_file`, the key every host had before named
    /// admin keys: it keeps working, as this name.
    pub const BOOTSTRAP: &'static str = "admin";

    /// The identity of the configured `admin_key_file`.
    pub fn bootstrap() -> Self {
        Self(Id::bootstrap_actor())
    }

    /// A named admin identity.
    pub fn named(name: Id) -> Self {
        Self(name)
    }

    /// The identity's name.
    pub fn name(&self) -> &str {
        self.0.as_str()
    }
}

impl std::fmt::Display for Actor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Appends the event of an admin action, naming its actor.
pub(crate) async fn record(tx: &mut Tx, actor: &Actor, event: &NewEvent) -> Result<(), StoreError> {
    tx.insert_event_by(event, Some(actor.name()))
        .await
        .map(drop)
}

/// An event of `kind` at `at` about nothing yet: the caller fills in the tenant, node, token or
/// attestor it concerns.
pub(crate) fn event(at: i64, kind: &str, payload: serde_json::Value) -> NewEvent {
    NewEvent {
        at,
        kind: kind.to_owned(),
        tenant_id: None,
        node_id: None,
        attestor: None,
        reason: None,
        token_id: None,
        payload,
    }
}
