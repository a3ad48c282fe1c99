//! Renewal: a node with a live certificate gets the next one over mTLS.
//!
//! The TLS handshake proved the client holds the presented leaf's key (see `api::mtls`). The
//! leaf must be byte for byte a `node_certs` row of the node's current identity generation,
//! live (neither revoked nor expired: an expired certificate re-joins with x509pop instead),
//! of a node that is not retired. The new certificate keeps the node id, the role and the
//! `urn:bc:` statements of that row, which is the leaf itself, never anything from the CSR:
//! a CSR that asks for no SAN still gets the statements back and cannot remove them.
//!
//! Renewal cannot run away: a node is issued at most one certificate per
//! [`super::JoinSettings::node_issue_interval_ms`] (a renewal sooner is refused `rate-limited`
//! and answered 429 with Retry-After, spending nothing), and each renewal supersedes the
//! node's other live certificates [`super::JoinSettings::renewal_grace_ms`] later, so a node
//! renewing in a loop holds at most grace / interval + 1 live certificates.

use gatehouse_proto::{JoinResponse, RenewRequest};

use super::record::{self, Decision, Round};
use super::{Issue, JoinError, JoinService, MAX_ATTEMPTS, Stop, storage};
use crate::pki::{VerifiedCsr, verify_csr};
use crate::store::{NodeCertRow, NodeRole, NodeRow, Revocation, Tx};

/// Why a renewal was refused: the reason in `security.renew.refused` and the audit row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RenewRefusal {
    /// The connection carried no client certificate.
    #[error("no-client-certificate")]
    NoClientCertificate,
    /// The CSR does not parse or verify.
    #[error("bad-csr")]
    BadCsr,
    /// The presented leaf is not a certificate this host issued.
    #[error("unknown-certificate")]
    UnknownCertificate,
    /// Its node does not exist.
    #[error("unknown-node")]
    UnknownNode,
    /// Its node is retired (or deleted).
    #[error("retired")]
    Retired,
    /// An operator revoked the node's identity after the certificate was issued.
    #[error("identity-revoked")]
    IdentityRevoked,
    /// A reclaim moved the node to a later identity generation.
    #[error("old-generation")]
    OldGeneration,
    /// A renewal replaced this certificate and the grace after it is over
    /// (`[join] renewal_grace_seconds`).
    #[error("superseded")]
    Superseded,
    /// The certificate was revoked (on its own, by an operator).
    #[error("revoked")]
    Revoked,
    /// The certificate expired (database time): the node re-joins with x509pop.
    #[error("expired")]
    Expired,
    /// The certificate is not valid yet.
    #[error("not-yet-valid")]
    NotYetValid,
    /// The certificate's node CA was rotated out and its overlap window is over
    /// (`gatehouse pki rotate`): the node missed every renewal of the window and re-joins.
    #[error("retired-ca")]
    RetiredCa,
    /// The leaf names a TPM attestation key and the request carries no key attestation: there
    /// is no downgrade to an unattested key.
    #[error("key-attestation-required")]
    KeyAttestationRequired,
    /// The key attestation's AK is not the one the leaf names (another TPM, or its
    /// endorsement seed changed), or the leaf's statement is malformed.
    #[error("key-attestation-ak-name")]
    KeyAttestationAkName,
    /// The key attestation's AK does not have attestation-key attributes.
    #[error("key-attestation-ak-attributes")]
    KeyAttestationAkAttributes,
    /// The key attestation does not parse.
    #[error("node-key-malformed")]
    NodeKeyMalformed,
    /// The certification's signature does not verify with the AK.
    #[error("node-key-signature")]
    NodeKeySignature,
    /// The certification is not qualified by this CSR's hash.
    #[error("node-key-nonce")]
    NodeKeyNonce,
    /// The certified name is not the name of the key public area sent.
    #[error("node-key-name")]
    NodeKeyName,
    /// The certified key is not a TPM-resident signing key.
    #[error("node-key-attributes")]
    NodeKeyAttributes,
    /// The certified key is not the CSR's.
    #[error("node-key-not-csr")]
    NodeKeyNotCsr,
    /// A ramdisk certificate without its `urn:bc:kinds:` statement: renewal never turns a
    /// restricted identity into an unrestricted one (none is issued; this guards old rows).
    #[error("unrestricted-ramdisk")]
    UnrestrictedRamdisk,
}

/// Whether `cert` (the row the presented leaf matched) may renew at `now`.
pub fn check(cert: &NodeCertRow, node: Option<&NodeRow>, now: i64) -> Result<(), RenewRefusal> {
    let node = node.ok_or(RenewRefusal::UnknownNode)?;
    if node.retired {
        return Err(RenewRefusal::Retired);
    }
    match cert.revoked {
        Some(Revocation::IdentityRevoked) => return Err(RenewRefusal::IdentityRevoked),
        // Superseded in its own generation: a renewal replaced it.
        Some(Revocation::Superseded) if cert.generation == node.identity_generation => {
            return Err(RenewRefusal::Superseded);
        }
        Some(Revocation::Superseded) => return Err(RenewRefusal::OldGeneration),
        _ if cert.generation != node.identity_generation => {
            return Err(RenewRefusal::OldGeneration);
        }
        Some(_) => return Err(RenewRefusal::Revoked),
        None => {}
    }
    if now >= cert.not_after {
        return Err(RenewRefusal::Expired);
    }
    if now < cert.not_before {
        return Err(RenewRefusal::NotYetValid);
    }
    // The kinds statement is copied below with the others; the role's 2-hour cap applies
    // to every renewal (`JoinService::issue`).
    if cert.role == NodeRole::Ramdisk
        && !cert
            .statements
            .iter()
            .any(|s| gatehouse_proto::kinds::parse_statement(s).is_some())
    {
        return Err(RenewRefusal::UnrestrictedRamdisk);
    }
    Ok(())
}

impl JoinService {
    /// Renews the certificate `leaf` (the DER the client presented and proved the key of).
    pub async fn renew(
        &self,
        leaf: Option<&[u8]>,
        request: RenewRequest,
        client: &record::ClientInfo,
    ) -> Result<JoinResponse, JoinError> {
        let started = std::time::Instant::now();
        let mut round = Round::renewal(client.clone());
        let outcome = self.renew_round(&mut round, leaf, request).await;
        let answer = self.recorded(&mut round, outcome).await;
        self.metrics()
            .round_duration(crate::metrics::Op::Renew, record::RENEW, started.elapsed());
        answer
    }

    /// The renewal itself; [`JoinService::recorded`] makes sure it leaves its record.
    async fn renew_round(
        &self,
        round: &mut Round,
        leaf: Option<&[u8]>,
        request: RenewRequest,
    ) -> Result<JoinResponse, JoinError> {
        let Some(leaf) = leaf else {
            return Err(self
                .refuse(round, refused(RenewRefusal::NoClientCertificate))
                .await);
        };
        let csr = match verify_csr(&request.csr) {
            Ok(csr) => csr,
            Err(e) => {
                let decision = refused(RenewRefusal::BadCsr).detail(e.to_string());
                return Err(self.refuse(round, decision).await);
            }
        };
        round.csr_sha256 = Some(csr.sha256);

        let mut attempt = 1;
        loop {
            match self.renew_locked(round, leaf, &request, &csr).await {
                Ok(response) => return Ok(response),
                // Another transaction held the node or its certificate: try again.
                Err(Stop::Storage(failure)) if failure.contention && attempt < MAX_ATTEMPTS => {
                    tracing::info!(attempt, %failure, "renewal run again");
                    attempt += 1;
                }
                Err(stop) => return Err(self.stopped(round, stop).await),
            }
        }
    }

    /// One attempt of a renewal, in one write transaction.
    async fn renew_locked(
        &self,
        round: &mut Round,
        leaf: &[u8],
        request: &RenewRequest,
        csr: &VerifiedCsr,
    ) -> Result<JoinResponse, Stop> {
        let mut tx = self.begin().await.map_err(storage("begin"))?;
        let Some((cert, node, now)) = lookup(&mut tx, leaf).await? else {
            drop(tx);
            return Err(self
                .refused(round, refused(RenewRefusal::UnknownCertificate))
                .await);
        };
        round.node_id = Some(cert.node_id.clone());
        round.tenant_id = node.as_ref().map(|n| n.tenant_id.clone());
        round.subject = Some(format!("cert:{}", cert.serial));
        // A leaf naming a TPM AK renews only with that AK's certification of the CSR's key
        // (see `key_attestation`); its statements are carried into the new certificate.
        // The leaf must also come from a node CA that is live now: a rotation's retiring CA
        // only until its window ends.
        if let Err(refusal) = check(&cert, node.as_ref(), now)
            .and_then(|()| {
                self.pki()
                    .check_issuer(leaf, now)
                    .map_err(|_| RenewRefusal::RetiredCa)
            })
            .and_then(|()| {
                super::key_attestation::check(
                    &cert.statements,
                    request.key_attestation.as_ref(),
                    csr,
                )
            })
        {
            drop(tx);
            return Err(self.refused(round, refused(refusal)).await);
        }

        let (response, issued) = self
            .issue(
                &mut tx,
                &Issue {
                    node_id: &cert.node_id,
                    role: cert.role,
                    generation: cert.generation,
                    statements: &cert.statements,
                    shorter_ttl_seconds: renewal_ttl_seconds(&cert),
                    now,
                    new_node: false,
                },
                csr,
            )
            .await?;
        // The certificate presented, and any other the node still holds, is replaced by the
        // new one: superseded after the grace.
        tx.supersede_node_certs(
            &cert.node_id,
            &issued.serial,
            now.saturating_add(self.settings.renewal_grace_ms),
        )
        .await
        .map_err(storage("supersede"))?;
        let decision = Decision::admitted();
        let at = tx.now().await.map_err(storage("now"))?;
        record::write_and_commit(tx, round, &decision, at)
            .await
            .map_err(storage("record and commit"))?;
        self.log(round, &decision);
        Ok(response)
    }
}

/// The lifetime a renewal keeps: a ramdisk's certificate lasts no longer than the one it
/// replaces, so the attestor's `certTtlSeconds` (say 15 minutes) holds for every renewal, not
/// only the role's 2-hour cap. Issued certificates are back-dated
/// ([`gatehouse_proto::ISSUANCE_BACKDATE_MS`]), which is taken off again. Other roles get the configured lifetime.
fn renewal_ttl_seconds(cert: &NodeCertRow) -> Option<u32> {
    if cert.role != NodeRole::Ramdisk {
        return None;
    }
    let lived = (cert.not_after - cert.not_before - gatehouse_proto::ISSUANCE_BACKDATE_MS) / 1000;
    Some(u32::try_from(lived.max(0)).unwrap_or(u32::MAX))
}

fn refused(r: RenewRefusal) -> Decision {
    Decision::refused(&r.to_string())
}

/// The row the leaf matches, its node, and database time.
async fn lookup(
    tx: &mut Tx,
    leaf: &[u8],
) -> Result<Option<(NodeCertRow, Option<NodeRow>, i64)>, Stop> {
    let Some(first) = tx
        .node_cert_by_der(leaf)
        .await
        .map_err(storage("node_cert"))?
    else {
        return Ok(None);
    };
    // Locked (FOR UPDATE on Postgres; SQLite serialises writers), so an operator's retire,
    // delete or revoke-identity either commits first and is seen here, or waits for this
    // renewal and then revokes the certificate it issued too. The certificate is read again
    // under the lock: an operator's change to it committed while this waited is seen.
    let node = tx
        .lock_node(&first.node_id)
        .await
        .map_err(storage("node"))?;
    // Certificates whose supersession grace is over are revoked now, so the row read below
    // says so (the host's sweep does the same for every node, in the background).
    tx.settle_superseded(Some(&first.node_id))
        .await
        .map_err(storage("settle superseded"))?;
    let Some(cert) = tx
        .node_cert(&first.serial, leaf)
        .await
        .map_err(storage("node_cert"))?
    else {
        return Ok(None);
    };
    let now = tx.now().await.map_err(storage("now"))?;
    Ok(Some((cert, node, now)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node() -> NodeRow {
        NodeRow {
            id: "node_a".into(),
            tenant_id: "root".into(),
            pool_id: None,
            site_id: None,
            role: NodeRole::Node,
            retired: false,
            cordoned: false,
            identity_generation: 2,
            hardware_key: None,
            created_at: 0,
            updated_at: 0,
            deleted_at: None,
        }
    }

    fn cert() -> NodeCertRow {
        NodeCertRow {
            serial: "01".into(),
            node_id: "node_a".into(),
            der: vec![],
            generation: 2,
            role: NodeRole::Node,
            not_before: 100,
            not_after: 200,
            revoked: None,
            statements: vec![],
            created_at: 100,
        }
    }

    #[test]
    fn a_ramdisk_renewal_keeps_its_lifetime() {
        // Issued for 15 minutes (back-dated a minute).
        let ramdisk = NodeCertRow {
            role: NodeRole::Ramdisk,
            not_before: 1_000_000 - 60_000,
            not_after: 1_000_000 + 900_000,
            ..cert()
        };
        assert_eq!(renewal_ttl_seconds(&ramdisk), Some(900));
        assert_eq!(renewal_ttl_seconds(&cert()), None);
        let inverted = NodeCertRow {
            not_after: 0,
            ..ramdisk
        };
        assert_eq!(renewal_ttl_seconds(&inverted), Some(0));
    }

    #[test]
    fn a_live_current_certificate_renews() {
        assert_eq!(check(&cert(), Some(&node()), 150), Ok(()));
    }

    #[test]
    fn each_refusal_has_its_reason() {
        let n = node();
        assert_eq!(check(&cert(), None, 150), Err(RenewRefusal::UnknownNode));
        let mut retired = node();
        retired.retired = true;
        assert_eq!(
            check(&cert(), Some(&retired), 150),
            Err(RenewRefusal::Retired)
        );
        let with = |revoked, generation| NodeCertRow {
            revoked,
            generation,
            ..cert()
        };
        assert_eq!(
            check(&with(Some(Revocation::IdentityRevoked), 1), Some(&n), 150),
            Err(RenewRefusal::IdentityRevoked)
        );
        assert_eq!(
            check(&with(Some(Revocation::Superseded), 1), Some(&n), 150),
            Err(RenewRefusal::OldGeneration)
        );
        // Superseded in the node's current generation: a renewal replaced it.
        assert_eq!(
            check(&with(Some(Revocation::Superseded), 2), Some(&n), 150),
            Err(RenewRefusal::Superseded)
        );
        assert_eq!(
            check(&with(None, 1), Some(&n), 150),
            Err(RenewRefusal::OldGeneration)
        );
        assert_eq!(
            check(&with(Some(Revocation::Operator), 2), Some(&n), 150),
            Err(RenewRefusal::Revoked)
        );
        assert_eq!(check(&cert(), Some(&n), 200), Err(RenewRefusal::Expired));
        assert_eq!(check(&cert(), Some(&n), 99), Err(RenewRefusal::NotYetValid));
        // A TPM statement is checked by `key_attestation`, after these.
        let tpm = NodeCertRow {
            statements: vec!["urn:bc:tpm-ak:000b:00".into()],
            ..cert()
        };
        assert_eq!(check(&tpm, Some(&n), 150), Ok(()));
        let ramdisk = NodeCertRow {
            role: NodeRole::Ramdisk,
            ..cert()
        };
        assert_eq!(
            check(&ramdisk, Some(&n), 150),
            Err(RenewRefusal::UnrestrictedRamdisk)
        );
        let restricted = NodeCertRow {
            statements: vec!["urn:bc:kinds:disk.wipe".into()],
            ..ramdisk
        };
        assert_eq!(check(&restricted, Some(&n), 150), Ok(()));
        assert_eq!(RenewRefusal::OldGeneration.to_string(), "old-generation");
    }
}
