//! [`TxBackend`] on the store's open transaction: the join path's backend. Converts store rows
//! into the WIT records the guest sees, and logs storage failures with their detail (the guest
//! only learns `tx-error.storage`).

use sha2::Digest as _;

use super::{BackendError, ConsumeOutcome, TxBackend, UseOutcome};
use crate::runtime::bindings::transaction::{
    Inventory, JoinRequestRow, JoinRequestState, Lease, Node, NodeCert, Revocation, Token,
    TokenExpect, Workflow,
};
use crate::runtime::bindings::types::{JoinRole, TokenRole};
use crate::store::{self, StoreError, Tx};

/// How long an operator has to decide a join request.
pub(super) const JOIN_REQUEST_TTL_MS: i64 = 24 * 3600 * 1000;

fn fail(e: StoreError) -> BackendError {
    BackendError(e.to_string())
}

pub(super) fn token(t: store::TokenRow) -> Token {
    Token {
        id: t.id,
        role: match t.role {
            store::TokenRole::Node => TokenRole::Node,
            store::TokenRole::Site => TokenRole::Site,
            store::TokenRole::Provisioned => TokenRole::Provisioned,
            store::TokenRole::Discovery => TokenRole::Discovery,
        },
        secret_sha256: t.secret_sha256.to_vec(),
        tenant_id: t.tenant_id,
        pool_id: t.pool_id,
        site_id: t.site_id,
        expires_at: t.expires_at,
        revoked: t.revoked,
        uses_left: t.uses_left,
        expect: TokenExpect {
            product_uuid: t.expect.product_uuid,
            mac: t.expect.mac,
            node_id: t.expect.node_id,
        },
        reclaim: t.reclaim,
    }
}

/// A token role as the store names it: [`token`]'s mapping, backwards.
pub(super) fn store_token_role(role: TokenRole) -> store::TokenRole {
    match role {
        TokenRole::Node => store::TokenRole::Node,
        TokenRole::Site => store::TokenRole::Site,
        TokenRole::Provisioned => store::TokenRole::Provisioned,
        TokenRole::Discovery => store::TokenRole::Discovery,
    }
}

/// The role a node's certificates carry, as the WIT names join roles (a lessee's node-tenant
/// certificate re-joins as a node).
pub(crate) fn join_role(r: store::NodeRole) -> JoinRole {
    match r {
        store::NodeRole::Node | store::NodeRole::NodeTenant => JoinRole::Node,
        store::NodeRole::Site => JoinRole::Site,
        store::NodeRole::Ramdisk => JoinRole::Ramdisk,
    }
}

fn revocation(r: store::Revocation) -> Revocation {
    match r {
        store::Revocation::Superseded => Revocation::Superseded,
        store::Revocation::IdentityRevoked => Revocation::IdentityRevoked,
        store::Revocation::NodeRemoved => Revocation::NodeRemoved,
        store::Revocation::Operator => Revocation::Operator,
    }
}

/// A `node_certs` row as the guest sees it, with the key its DER carries.
fn node_cert(c: store::NodeCertRow) -> Result<NodeCert, BackendError> {
    // The row's DER is the host's own issuance; a failure to parse it is corruption.
    let spki = crate::pki::identity::cert_spki(&c.der)
        .map_err(|e| BackendError(format!("node_certs {}: {e}", c.serial)))?;
    Ok(NodeCert {
        node_id: c.node_id,
        serial: c.serial,
        generation: c.generation,
        not_before: c.not_before,
        not_after: c.not_after,
        revoked: c.revoked.map(revocation),
        role: c.role.as_str().to_owned(),
        spki,
        statements: c.statements,
    })
}

fn node(n: store::NodeRow) -> Node {
    Node {
        id: n.id,
        tenant_id: n.tenant_id,
        pool_id: n.pool_id,
        site_id: n.site_id,
        role: join_role(n.role),
        retired: n.retired,
        identity_generation: n.identity_generation,
    }
}

pub(super) fn join_request(r: store::JoinRequestRow) -> JoinRequestRow {
    JoinRequestRow {
        id: r.id,
        state: match r.state {
            store::JoinRequestState::Pending => JoinRequestState::Pending,
            store::JoinRequestState::Approved => JoinRequestState::Approved,
            store::JoinRequestState::Denied => JoinRequestState::Denied,
            store::JoinRequestState::Expired => JoinRequestState::Expired,
            store::JoinRequestState::Used => JoinRequestState::Used,
        },
        subject: r.subject,
        csr_sha256: r.csr_sha256.to_vec(),
        tenant_id: r.tenant_id,
        pool_id: r.pool_id,
        site_id: r.site_id,
    }
}

impl TxBackend for Tx {
    async fn now(&mut self) -> Result<i64, BackendError> {
        Tx::now(self).await.map_err(fail)
    }

    async fn lock_token(&mut self, id: &str) -> Result<Option<Token>, BackendError> {
        Ok(Tx::lock_token(self, id).await.map_err(fail)?.map(token))
    }

    async fn consume_token(&mut self, id: &str) -> Result<ConsumeOutcome, BackendError> {
        match Tx::consume_token(self, id).await {
            Ok(left) => Ok(ConsumeOutcome::Consumed(left)),
            Err(StoreError::NoUsesLeft) => Ok(ConsumeOutcome::NoneLeft),
            Err(e) => Err(fail(e)),
        }
    }

    async fn node(&mut self, id: &str) -> Result<Option<Node>, BackendError> {
        Ok(Tx::node(self, id).await.map_err(fail)?.map(node))
    }

    async fn node_cert(&mut self, der: &[u8]) -> Result<Option<NodeCert>, BackendError> {
        let Some(c) = Tx::node_cert_by_der(self, der).await.map_err(fail)? else {
            return Ok(None);
        };
        node_cert(c).map(Some)
    }

    async fn node_cert_for_key(
        &mut self,
        node_id: &str,
        spki_sha256: &[u8],
    ) -> Result<Option<NodeCert>, BackendError> {
        let now = Tx::now(self).await.map_err(fail)?;
        let live = Tx::live_node_certs(self, node_id, now)
            .await
            .map_err(fail)?;
        for c in live {
            let cert = node_cert(c)?;
            let digest: [u8; 32] = sha2::Sha256::digest(&cert.spki).into();
            if digest[..] == *spki_sha256 {
                return Ok(Some(cert));
            }
        }
        Ok(None)
    }

    async fn inventory_by_mac(&mut self, mac: &str) -> Result<Option<Inventory>, BackendError> {
        Ok(Tx::inventory_by_mac(self, mac)
            .await
            .map_err(fail)?
            .map(|i| Inventory {
                node_id: i.node_id,
                product_uuid: i.product_uuid,
                macs: i.macs,
                recorded_at: i.recorded_at,
            }))
    }

    async fn bound_node(
        &mut self,
        kind: &str,
        value: &str,
    ) -> Result<Option<String>, BackendError> {
        Tx::bound_node(self, kind, value).await.map_err(fail)
    }

    async fn lease(&mut self, name: &str) -> Result<Option<Lease>, BackendError> {
        Ok(Tx::lease(self, name).await.map_err(fail)?.map(|l| Lease {
            name: l.name,
            holder: l.holder,
            epoch: l.epoch,
            expires_at: l.expires_at,
        }))
    }

    async fn newest_inventory(&mut self, node_id: &str) -> Result<Option<Inventory>, BackendError> {
        Ok(Tx::newest_inventory(self, node_id)
            .await
            .map_err(fail)?
            .map(|i| Inventory {
                node_id: i.node_id,
                product_uuid: i.product_uuid,
                macs: i.macs,
                recorded_at: i.recorded_at,
            }))
    }

    async fn token_workflow(&mut self, token_id: &str) -> Result<Option<Workflow>, BackendError> {
        Ok(Tx::token_workflow(self, token_id)
            .await
            .map_err(fail)?
            .map(|w| Workflow {
                id: w.id,
                node_id: w.node_id,
                state: w.state,
                step: w.step,
            }))
    }

    async fn record_use(
        &mut self,
        attestor: &str,
        subject: &str,
        expires_at: i64,
    ) -> Result<UseOutcome, BackendError> {
        let now = Tx::now(self).await.map_err(fail)?;
        Ok(
            match Tx::record_use(self, attestor, subject, expires_at, now)
                .await
                .map_err(fail)?
            {
                store::UseOutcome::Recorded => UseOutcome::Recorded,
                store::UseOutcome::Reused => UseOutcome::Reused,
            },
        )
    }

    async fn open_join_request(
        &mut self,
        attestor: &str,
        subject: &str,
        csr_sha256: &[u8],
        details: &str,
    ) -> Result<JoinRequestRow, BackendError> {
        let csr: [u8; 32] = csr_sha256
            .try_into()
            .map_err(|_| BackendError("CSR hash is not 32 bytes".into()))?;
        let now = Tx::now(self).await.map_err(fail)?;
        let row = Tx::open_join_request(
            self,
            attestor,
            subject,
            &csr,
            details,
            now,
            now + JOIN_REQUEST_TTL_MS,
        )
        .await
        .map_err(fail)?;
        Ok(join_request(row))
    }

    async fn join_request(
        &mut self,
        attestor: &str,
        id: &str,
    ) -> Result<Option<JoinRequestRow>, BackendError> {
        Ok(Tx::join_request(self, attestor, id)
            .await
            .map_err(fail)?
            .map(join_request))
    }

    async fn consume_join_request(
        &mut self,
        attestor: &str,
        id: &str,
    ) -> Result<bool, BackendError> {
        Tx::consume_join_request(self, attestor, id)
            .await
            .map_err(fail)
    }

    async fn kv_get(&mut self, attestor: &str, key: &str) -> Result<Option<Vec<u8>>, BackendError> {
        Tx::kv_get(self, attestor, key).await.map_err(fail)
    }

    async fn kv_put(
        &mut self,
        attestor: &str,
        key: &str,
        value: &[u8],
    ) -> Result<(), BackendError> {
        Tx::kv_put(self, attestor, key, value).await.map_err(fail)
    }

    async fn kv_delete(&mut self, attestor: &str, key: &str) -> Result<(), BackendError> {
        Tx::kv_delete(self, attestor, key).await.map_err(fail)
    }
}
