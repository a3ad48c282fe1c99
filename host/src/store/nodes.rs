//! Nodes, the certificates issued to them, and the hardware identities bound to them.

use sha2::{Digest, Sha256};
use sqlx::any::AnyRow;

use super::decode::{Fields, flag, json_list};
use super::{NewNode, NewNodeCert, NodeCertRow, NodeRow, Revocation, StoreError, Tx};

/// The key under which `node_certs` holds the certificate `der`, if `der` is one: its serial
/// as this host writes it, the hex of the serial's 16 bytes (`pki::issue::new_serial`; DER
/// keeps every byte, since the second bit of the first is always set). `None` for bytes that
/// are no certificate, which this host never issued.
///
/// Why by serial and not by the DER's SHA-256: the serial starts with the time of issue, so
/// the lookup uses the primary key, and the hash, a random key, needs no index. Its unique
/// index took one random page of a large B-tree for every certificate issued, written to the
/// WAL and again by the checkpoint (migration 9; docs/benchmarks.md, "A certificate's hash
/// without its index"). The caller still compares the whole DER.
pub(super) fn issued_serial(der: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    Some(hex::encode(cert.raw_serial()))
}

/// The columns [`node`] reads.
macro_rules! node_columns {
    () => {
        "id, tenant_id, pool_id, site_id, role, retired, cordoned, identity_generation, \
         hardware_key, created_at, updated_at, deleted_at"
    };
}

/// The columns [`cert`] reads.
macro_rules! cert_columns {
    () => {
        "serial, node_id, der, generation, role, not_before, not_after, revoked_reason, \
         statements, created_at"
    };
}

/// A node's insert, its values bound by [`bind_node`] as `$1` to `$8`.
macro_rules! insert_node {
    () => {
        concat!(
            insert_node_into!(),
            "VALUES ($1, $2, $3, $4, $5, 0, 0, $6, $7, $8, $8)"
        )
    };
}

/// A certificate's insert, up to its values ([`bind_cert`] binds ten).
macro_rules! insert_cert {
    () => {
        concat!(insert_cert_into!(), "VALUES ")
    };
}

/// A node and its first certificate ([`Tx::insert_node_with_cert`]): on Postgres one
/// statement (the certificate's foreign key is checked at its end, when the node is in);
/// on SQLite two, sent as one query. The certificate's values are `$9` to `$18`.
const POSTGRES_NODE_WITH_CERT: &str = concat!(
    "WITH node AS (",
    insert_node!(),
    ") ",
    insert_cert!(),
    "($9, $10, $11, $12, $13, $14, $15, $16, 0, $17, $18)"
);
const SQLITE_NODE_WITH_CERT: &str = concat!(
    insert_node!(),
    "; ",
    insert_cert!(),
    "($9, $10, $11, $12, $13, $14, $15, $16, 0, $17, $18)"
);

/// `q` with a new node's eight values bound next ([`insert_node!`]).
pub(super) fn bind_node<'q>(
    q: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
    n: &'q NewNode,
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
    q.bind(&n.id)
        .bind(&n.tenant_id)
        .bind(&n.pool_id)
        .bind(&n.site_id)
        .bind(n.role.as_str())
        .bind(i64::from(n.identity_generation))
        .bind(&n.hardware_key)
        .bind(n.created_at)
}

/// `q` with a new certificate's ten values bound next ([`insert_cert!`]); `der_sha256` is its
/// DER's hash.
pub(super) fn bind_cert<'q>(
    q: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
    c: &'q NewNodeCert,
    der_sha256: &'q [u8],
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
    q.bind(&c.serial)
        .bind(&c.node_id)
        .bind(&c.der[..])
        .bind(der_sha256)
        .bind(i64::from(c.generation))
        .bind(c.role.as_str())
        .bind(c.not_before)
        .bind(c.not_after)
        .bind(json_list(&c.statements))
        .bind(c.created_at)
}

fn node(row: &AnyRow) -> Result<NodeRow, StoreError> {
    let f = Fields::new(row, "nodes");
    Ok(NodeRow {
        id: f.text("id")?,
        tenant_id: f.text("tenant_id")?,
        pool_id: f.opt_text("pool_id")?,
        site_id: f.opt_text("site_id")?,
        role: f.parse("role")?,
        retired: f.bool("retired")?,
        cordoned: f.bool("cordoned")?,
        identity_generation: f.u32("identity_generation")?,
        hardware_key: f.opt_text("hardware_key")?,
        created_at: f.i64("created_at")?,
        updated_at: f.i64("updated_at")?,
        deleted_at: f.opt_i64("deleted_at")?,
    })
}

pub(super) fn cert(row: &AnyRow) -> Result<NodeCertRow, StoreError> {
    let f = Fields::new(row, "node_certs");
    Ok(NodeCertRow {
        serial: f.text("serial")?,
        node_id: f.text("node_id")?,
        der: f.bytes("der")?,
        generation: f.u32("generation")?,
        role: f.parse("role")?,
        not_before: f.i64("not_before")?,
        not_after: f.i64("not_after")?,
        revoked: f.opt_parse("revoked_reason")?,
        statements: f.json("statements")?,
        created_at: f.i64("created_at")?,
    })
}

impl Tx {
    /// Creates a node, neither retired nor cordoned.
    pub async fn insert_node(&mut self, n: &NewNode) -> Result<(), StoreError> {
        self.execute(bind_node(sqlx::query(insert_node!()), n))
            .await
            .map(drop)
    }

    /// Inserts a new node and its first certificate ([`Tx::insert_node`], then
    /// [`Tx::insert_node_cert`]) in one round trip: a joining node's two rows.
    pub async fn insert_node_with_cert(
        &mut self,
        n: &NewNode,
        c: &NewNodeCert,
    ) -> Result<(), StoreError> {
        let sql = self.pick(SQLITE_NODE_WITH_CERT, POSTGRES_NODE_WITH_CERT);
        let der_sha256 = Sha256::digest(&c.der);
        let q = bind_cert(bind_node(sqlx::query(sql), n), c, &der_sha256);
        self.execute(q).await.map(drop)
    }

    /// Looks up a node.
    pub async fn node(&mut self, id: &str) -> Result<Option<NodeRow>, StoreError> {
        let sql = concat!("SELECT ", node_columns!(), " FROM nodes WHERE id = $1");
        let row = self.fetch_optional(sqlx::query(sql).bind(id)).await?;
        row.as_ref().map(node).transpose()
    }

    /// Reads a node, deleted or not, and locks its row until this transaction ends
    /// (`FOR UPDATE` on Postgres; SQLite's `BEGIN IMMEDIATE` already excludes other writers).
    /// While the lock is held no other transaction changes the node or adds certificates or
    /// bindings for it (their foreign-key checks wait for the row), so what an operator's
    /// action reads about the node before it acts is what it acts on. `None` if there is no
    /// such id.
    pub async fn lock_node(&mut self, id: &str) -> Result<Option<NodeRow>, StoreError> {
        let sql = self.pick(
            concat!("SELECT ", node_columns!(), " FROM nodes WHERE id = $1"),
            concat!(
                "SELECT ",
                node_columns!(),
                " FROM nodes WHERE id = $1 FOR UPDATE"
            ),
        );
        let row = self.fetch_optional(sqlx::query(sql).bind(id)).await?;
        row.as_ref().map(node).transpose()
    }

    /// Every node not deleted, oldest first.
    pub async fn list_nodes(&mut self) -> Result<Vec<NodeRow>, StoreError> {
        let sql = concat!(
            "SELECT ",
            node_columns!(),
            " FROM nodes WHERE deleted_at IS NULL ORDER BY created_at, id"
        );
        let rows = self.fetch_all(sqlx::query(sql)).await?;
        rows.iter().map(node).collect()
    }

    /// At most `limit` nodes after `after`, in the order of [`Tx::list_nodes`]: one page.
    pub async fn list_nodes_page(
        &mut self,
        after: &super::Cursor,
        limit: u32,
    ) -> Result<Vec<NodeRow>, StoreError> {
        let sql = concat!(
            "SELECT ",
            node_columns!(),
            " FROM nodes WHERE deleted_at IS NULL \
             AND (created_at > $1 OR (created_at = $1 AND id > $2)) \
             ORDER BY created_at, id LIMIT $3"
        );
        let q = sqlx::query(sql)
            .bind(after.created_at)
            .bind(after.id.as_str())
            .bind(i64::from(limit));
        let rows = self.fetch_all(q).await?;
        rows.iter().map(node).collect()
    }

    /// Moves a node to a new identity generation (a reclaim). False if there is no such node,
    /// it is retired (or deleted), or `new_generation` is not above its current one, so a
    /// generation never goes back and a node an operator removed while a reclaim of it was
    /// running is not brought back by it.
    pub async fn rekey_node(
        &mut self,
        id: &str,
        new_generation: u32,
        updated_at: i64,
    ) -> Result<bool, StoreError> {
        let q = sqlx::query(
            "UPDATE nodes SET identity_generation = $2, updated_at = $3 \
             WHERE id = $1 AND identity_generation < $2 AND retired = 0 AND deleted_at IS NULL",
        )
        .bind(id)
        .bind(i64::from(new_generation))
        .bind(updated_at);
        Ok(self.execute(q).await? > 0)
    }

    /// Records a certificate this host issued, keyed by its serial, so a renewal finds it by
    /// the serial of the bytes the client presented ([`Tx::node_cert_by_der`]). Its DER's
    /// SHA-256 is still written, unindexed, for replicas of the release before migration 9.
    pub async fn insert_node_cert(&mut self, c: &NewNodeCert) -> Result<(), StoreError> {
        let der_sha256 = Sha256::digest(&c.der);
        let sql = concat!(
            insert_cert!(),
            "($1, $2, $3, $4, $5, $6, $7, $8, 0, $9, $10)"
        );
        self.execute(bind_cert(sqlx::query(sql), c, &der_sha256))
            .await
            .map(drop)
    }

    /// The certificate whose DER is exactly `der`, if this host issued it. Found by the serial
    /// `der` names ([`issued_serial`]), then compared whole.
    pub async fn node_cert_by_der(
        &mut self,
        der: &[u8],
    ) -> Result<Option<NodeCertRow>, StoreError> {
        let Some(serial) = issued_serial(der) else {
            return Ok(None);
        };
        self.node_cert(&serial, der).await
    }

    /// The certificate of serial `serial` if its DER is exactly `der`: a certificate found
    /// by its DER ([`Tx::node_cert_by_der`]) read again, without parsing `der` again.
    pub async fn node_cert(
        &mut self,
        serial: &str,
        der: &[u8],
    ) -> Result<Option<NodeCertRow>, StoreError> {
        let sql = concat!(
            "SELECT ",
            cert_columns!(),
            " FROM node_certs WHERE serial = $1 AND der = $2"
        );
        let row = self
            .fetch_optional(sqlx::query(sql).bind(serial).bind(der))
            .await?;
        row.as_ref().map(cert).transpose()
    }

    /// Revokes a node's live certificates of generations below `generation` as superseded;
    /// how many it revoked.
    pub async fn revoke_node_certs_below(
        &mut self,
        node_id: &str,
        generation: u32,
    ) -> Result<u64, StoreError> {
        let sql = self.pick(
            concat!(
                "UPDATE node_certs SET revoked = 1, revoked_reason = $3, revoked_at = ",
                sqlite_now!(),
                " WHERE node_id = $1 AND generation < $2 AND revoked = 0"
            ),
            concat!(
                "UPDATE node_certs SET revoked = 1, revoked_reason = $3, revoked_at = ",
                postgres_now!(),
                " WHERE node_id = $1 AND generation < $2 AND revoked = 0"
            ),
        );
        let q = sqlx::query(sql)
            .bind(node_id)
            .bind(i64::from(generation))
            .bind(Revocation::Superseded.as_str());
        self.execute(q).await
    }

    /// Revokes every live certificate of a node, for `why`; how many it revoked.
    pub async fn revoke_node_certs(
        &mut self,
        node_id: &str,
        why: Revocation,
    ) -> Result<u64, StoreError> {
        let sql = self.pick(
            concat!(
                "UPDATE node_certs SET revoked = 1, revoked_reason = $2, revoked_at = ",
                sqlite_now!(),
                " WHERE node_id = $1 AND revoked = 0"
            ),
            concat!(
                "UPDATE node_certs SET revoked = 1, revoked_reason = $2, revoked_at = ",
                postgres_now!(),
                " WHERE node_id = $1 AND revoked = 0"
            ),
        );
        let q = sqlx::query(sql).bind(node_id).bind(why.as_str());
        self.execute(q).await
    }

    /// Revokes one live certificate of a node by serial (an operator's decision). False if the
    /// node has no such live certificate.
    pub async fn revoke_node_cert(
        &mut self,
        node_id: &str,
        serial: &str,
    ) -> Result<bool, StoreError> {
        let sql = self.pick(
            concat!(
                "UPDATE node_certs SET revoked = 1, revoked_reason = $3, revoked_at = ",
                sqlite_now!(),
                " WHERE node_id = $1 AND serial = $2 AND revoked = 0"
            ),
            concat!(
                "UPDATE node_certs SET revoked = 1, revoked_reason = $3, revoked_at = ",
                postgres_now!(),
                " WHERE node_id = $1 AND serial = $2 AND revoked = 0"
            ),
        );
        let q = sqlx::query(sql)
            .bind(node_id)
            .bind(serial)
            .bind(Revocation::Operator.as_str());
        Ok(self.execute(q).await? > 0)
    }

    /// A renewal issued `keep` to `node_id`: every other live certificate of the node is
    /// superseded at `at` (database time plus the grace), unless an earlier supersession is
    /// already recorded for it (a grace never grows). Until `at` they stay live, so a
    /// connection authenticated with one is not cut at once; from `at` on they count as
    /// revoked `superseded` ([`Tx::settle_superseded`], the CRL). How many it marked.
    pub async fn supersede_node_certs(
        &mut self,
        node_id: &str,
        keep: &str,
        at: i64,
    ) -> Result<u64, StoreError> {
        let q = sqlx::query(
            "UPDATE node_certs SET superseded_at = $3 \
             WHERE node_id = $1 AND serial <> $2 AND revoked = 0 AND superseded_at IS NULL",
        )
        .bind(node_id)
        .bind(keep)
        .bind(at);
        self.execute(q).await
    }

    /// Turns the certificates whose supersession time has come (of `node_id`, or of every
    /// node) into revoked `superseded` rows, revoked at that time; how many. Idempotent, so
    /// every replica may run it.
    pub async fn settle_superseded(&mut self, node_id: Option<&str>) -> Result<u64, StoreError> {
        let sql = match node_id {
            Some(_) => self.pick(
                concat!(
                    "UPDATE node_certs SET revoked = 1, revoked_reason = $1, \
                     revoked_at = superseded_at WHERE node_id = $2 AND revoked = 0 \
                     AND superseded_at <= ",
                    sqlite_now!()
                ),
                concat!(
                    "UPDATE node_certs SET revoked = 1, revoked_reason = $1, \
                     revoked_at = superseded_at WHERE node_id = $2 AND revoked = 0 \
                     AND superseded_at <= ",
                    postgres_now!()
                ),
            ),
            None => self.pick(
                concat!(
                    "UPDATE node_certs SET revoked = 1, revoked_reason = $1, \
                     revoked_at = superseded_at WHERE revoked = 0 AND superseded_at <= ",
                    sqlite_now!()
                ),
                concat!(
                    "UPDATE node_certs SET revoked = 1, revoked_reason = $1, \
                     revoked_at = superseded_at WHERE revoked = 0 AND superseded_at <= ",
                    postgres_now!()
                ),
            ),
        };
        let mut q = sqlx::query(sql).bind(Revocation::Superseded.as_str());
        if let Some(id) = node_id {
            q = q.bind(id);
        }
        self.execute(q).await
    }

    /// When the newest certificate of a node was issued (database time), if it has any: the
    /// per-node renewal interval counts from it.
    pub async fn newest_node_cert_at(&mut self, node_id: &str) -> Result<Option<i64>, StoreError> {
        let q = sqlx::query("SELECT MAX(created_at) AS at FROM node_certs WHERE node_id = $1")
            .bind(node_id);
        let row = self.fetch_one(q).await?;
        Fields::new(&row, "node_certs").opt_i64("at")
    }

    /// How many certificates of a node are live at `now`: neither revoked nor superseded by
    /// then, and not expired.
    pub async fn count_live_node_certs(
        &mut self,
        node_id: &str,
        now: i64,
    ) -> Result<u64, StoreError> {
        let q = sqlx::query(
            "SELECT COUNT(*) AS n FROM node_certs WHERE node_id = $1 AND revoked = 0 \
             AND (superseded_at IS NULL OR superseded_at > $2) AND not_after > $2",
        )
        .bind(node_id)
        .bind(now);
        let row = self.fetch_one(q).await?;
        Fields::new(&row, "node_certs").u64("n")
    }

    /// Every certificate revoked (or superseded) by `now` that has not expired yet, for the
    /// CRL: `(serial, revoked at, why)`, by serial. An expired certificate is left out, as RFC
    /// 5280 allows: no relying party accepts it anyway.
    pub async fn revoked_node_certs(
        &mut self,
        now: i64,
    ) -> Result<Vec<(String, i64, Revocation)>, StoreError> {
        // Sorted here, not by the query: asked for the whole in serial order, SQLite (which
        // plans without statistics) reads every certificate by serial rather than each half
        // through its own small partial index (`node_certs_revoked`, `node_certs_superseded`).
        let q = sqlx::query(
            "SELECT serial, COALESCE(revoked_at, created_at) AS at, revoked_reason AS why \
             FROM node_certs WHERE revoked = 1 AND not_after > $1 \
             UNION ALL \
             SELECT serial, superseded_at AS at, 'superseded' AS why FROM node_certs \
             WHERE revoked = 0 AND superseded_at <= $1 AND not_after > $1",
        )
        .bind(now);
        let rows = self.fetch_all(q).await?;
        let mut revoked = rows
            .iter()
            .map(|r| {
                let f = Fields::new(r, "node_certs");
                let why: Option<Revocation> = f.opt_parse("why")?;
                Ok((
                    f.text("serial")?,
                    f.i64("at")?,
                    why.unwrap_or(Revocation::Operator),
                ))
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        revoked.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        Ok(revoked)
    }

    /// A node's certificates, newest first.
    pub async fn node_certs(&mut self, node_id: &str) -> Result<Vec<NodeCertRow>, StoreError> {
        let sql = concat!(
            "SELECT ",
            cert_columns!(),
            " FROM node_certs WHERE node_id = $1 ORDER BY created_at DESC, serial"
        );
        let rows = self.fetch_all(sqlx::query(sql).bind(node_id)).await?;
        rows.iter().map(cert).collect()
    }

    /// Sets or clears a node's cordon. False if there is no such node (or it is deleted).
    pub async fn set_cordoned(
        &mut self,
        id: &str,
        cordoned: bool,
        updated_at: i64,
    ) -> Result<bool, StoreError> {
        let q = sqlx::query(
            "UPDATE nodes SET cordoned = $2, updated_at = $3 \
             WHERE id = $1 AND deleted_at IS NULL",
        )
        .bind(id)
        .bind(flag(cordoned))
        .bind(updated_at);
        Ok(self.execute(q).await? > 0)
    }

    /// Retires a node: it never joins or renews again, and its certificates are revoked.
    /// False if there is no such node or it is retired already.
    pub async fn retire_node(&mut self, id: &str, updated_at: i64) -> Result<bool, StoreError> {
        let q = sqlx::query(
            "UPDATE nodes SET retired = 1, updated_at = $2 WHERE id = $1 AND retired = 0",
        )
        .bind(id)
        .bind(updated_at);
        if self.execute(q).await? == 0 {
            return Ok(false);
        }
        self.revoke_node_certs(id, Revocation::NodeRemoved).await?;
        Ok(true)
    }

    /// Deletes a node: retires it, revokes its certificates, frees its hardware bindings and
    /// its hardware key so the machine can join again as a new node, and hides it from
    /// listings. The row stays, since certificates and audit rows name it. False if there is no
    /// such node or it is deleted already.
    pub async fn delete_node(&mut self, id: &str, at: i64) -> Result<bool, StoreError> {
        let q = sqlx::query(
            "UPDATE nodes SET retired = 1, hardware_key = NULL, deleted_at = $2, updated_at = $2 \
             WHERE id = $1 AND deleted_at IS NULL",
        )
        .bind(id)
        .bind(at);
        if self.execute(q).await? == 0 {
            return Ok(false);
        }
        self.revoke_node_certs(id, Revocation::NodeRemoved).await?;
        let q = sqlx::query("DELETE FROM node_bindings WHERE node_id = $1").bind(id);
        self.execute(q).await?;
        Ok(true)
    }

    /// Revokes a node's identity: raises its identity generation and revokes every
    /// certificate it holds, so none renews or re-joins with x509pop; the machine joins again
    /// only through an attestor that proves it afresh (a reclaim token, its TPM). The new
    /// generation, or `None` if there is no such live node (unknown, retired or deleted).
    ///
    /// The generation is raised by one conditional update, so two concurrent revocations
    /// raise it twice rather than one of them finding the node "missing".
    pub async fn revoke_identity(&mut self, id: &str, at: i64) -> Result<Option<u32>, StoreError> {
        let q = sqlx::query(
            "UPDATE nodes SET identity_generation = identity_generation + 1, updated_at = $2 \
             WHERE id = $1 AND retired = 0 AND deleted_at IS NULL \
             AND identity_generation < $3 RETURNING identity_generation",
        )
        .bind(id)
        .bind(at)
        .bind(i64::from(u32::MAX));
        let Some(row) = self.fetch_optional(q).await? else {
            return Ok(None);
        };
        let generation = Fields::new(&row, "nodes").u32("identity_generation")?;
        self.revoke_node_certs(id, Revocation::IdentityRevoked)
            .await?;
        Ok(Some(generation))
    }

    /// The live node holding a trusted hardware key, if any (retiring or deleting a node
    /// frees its key).
    pub async fn hardware_key_holder(&mut self, key: &str) -> Result<Option<String>, StoreError> {
        let q = sqlx::query("SELECT id FROM nodes WHERE hardware_key = $1").bind(key);
        let row = self.fetch_optional(q).await?;
        row.map(|r| Fields::new(&r, "nodes").text("id")).transpose()
    }

    /// Records a node's trusted hardware key when it has none yet (a node keeps the key it
    /// first joined with). False when the node already had one.
    pub async fn fill_hardware_key(
        &mut self,
        node_id: &str,
        key: &str,
    ) -> Result<bool, StoreError> {
        let q = sqlx::query(
            "UPDATE nodes SET hardware_key = $2 WHERE id = $1 AND hardware_key IS NULL",
        )
        .bind(node_id)
        .bind(key);
        Ok(self.execute(q).await? > 0)
    }

    /// The hardware identities bound to a node, as `(kind, value)`, ordered.
    pub async fn node_bindings(
        &mut self,
        node_id: &str,
    ) -> Result<Vec<(String, String)>, StoreError> {
        let q = sqlx::query(
            "SELECT kind, value FROM node_bindings WHERE node_id = $1 ORDER BY kind, value",
        )
        .bind(node_id);
        let rows = self.fetch_all(q).await?;
        rows.iter()
            .map(|r| {
                let f = Fields::new(r, "node_bindings");
                Ok((f.text("kind")?, f.text("value")?))
            })
            .collect()
    }

    /// The node a hardware identity (`kind`, for example `tpm-ek-sha256`, and its `value`) is
    /// bound to, if any.
    pub async fn bound_node(
        &mut self,
        kind: &str,
        value: &str,
    ) -> Result<Option<String>, StoreError> {
        let q = sqlx::query("SELECT node_id FROM node_bindings WHERE kind = $1 AND value = $2")
            .bind(kind)
            .bind(value);
        let row = self.fetch_optional(q).await?;
        row.map(|r| Fields::new(&r, "node_bindings").text("node_id"))
            .transpose()
    }

    /// Binds a hardware identity to a node. Binding it to the node it is bound to already is
    /// a no-op; [`StoreError::BoundElsewhere`] if another node holds it, including one a
    /// concurrent transaction bound first. Never fails on the unique key, so a Postgres
    /// transaction stays usable.
    pub async fn bind(&mut self, kind: &str, value: &str, node_id: &str) -> Result<(), StoreError> {
        // The no-op update makes the conflicting row come back through RETURNING.
        let q = sqlx::query(
            "INSERT INTO node_bindings (kind, value, node_id) VALUES ($1, $2, $3) \
             ON CONFLICT (kind, value) DO UPDATE SET node_id = node_bindings.node_id \
             RETURNING node_id",
        )
        .bind(kind)
        .bind(value)
        .bind(node_id);
        let row = self.fetch_one(q).await?;
        let bound = Fields::new(&row, "node_bindings").text("node_id")?;
        if bound == node_id {
            Ok(())
        } else {
            Err(StoreError::BoundElsewhere(bound))
        }
    }
}
