//! A token join's whole write as one query: on PostgreSQL one statement committed on its own, on
//! SQLite the statements of a batch member from its savepoint to its release.
//!
//! A join on a single-use or many-use token whose locked phase sent nothing before its end (the
//! token judged as the attestor read it, the database's clock known without a statement, a new
//! node with no bindings: the common join) writes five rows: the node, its first certificate,
//! the token's spend, the audit row and the event. In a transaction that is `BEGIN`, two
//! statements and `COMMIT`, four round trips; on PostgreSQL it is one statement in autocommit,
//! which the server commits when it ends. On SQLite, whose every write transaction is a savepoint
//! in a batch that commits together (`super::group`), it was three round trips to the write
//! connection's worker thread (the savepoint with the node and certificate, the spend with the
//! record, the release); here one query holds them all, the savepoint first and the release
//! last, and the join then waits for its batch's `COMMIT` as any member does.
//!
//! The spend is also the judgement: it changes the token only if the row is still the row the
//! round judged, but for its uses left (what `imports::staged` otherwise checks on the spend's
//! returned row before committing, which autocommit leaves no time for, and which on SQLite
//! would need the row back on the host before the release), and every insert depends on the
//! spend (PostgreSQL: it reads the spent row; SQLite: each runs only if the statement before it
//! wrote its row, `changes()`), so when nothing is spent nothing is written. On one many-use
//! token PostgreSQL's row lock is held from the spend to the end of this statement's own commit,
//! without a round trip to the host in between.

use sha2::{Digest as _, Sha256};

use super::decode::Fields;
use super::journal::bind_audit_and_event;
use super::nodes::{bind_cert, bind_node};
use super::{
    Backend, NewAudit, NewEvent, NewNode, NewNodeCert, StoreError, TokenRole, TokenRow, Tx,
};

/// A token as a round judged it: the columns its spend must find unchanged (all but the uses).
#[derive(Debug, Clone, Copy)]
pub struct JudgedToken<'a> {
    /// The token id.
    pub id: &'a str,
    /// What it was minted for.
    pub role: TokenRole,
    /// SHA-256 of the secret.
    pub secret_sha256: &'a [u8],
    /// Its tenant.
    pub tenant_id: &'a str,
    /// Its pool, if any.
    pub pool_id: Option<&'a str>,
    /// Its site, if any.
    pub site_id: Option<&'a str>,
    /// When it lapses.
    pub expires_at: i64,
    /// Revoked by an operator.
    pub revoked: bool,
    /// The product UUID it expects, if any.
    pub expect_product_uuid: Option<&'a str>,
    /// The MAC it expects, if any.
    pub expect_mac: Option<&'a str>,
    /// The node id it expects, if any.
    pub expect_node_id: Option<&'a str>,
    /// Whether it may re-key an existing node.
    pub reclaim: bool,
}

impl<'a> From<&'a TokenRow> for JudgedToken<'a> {
    /// The token as read.
    fn from(t: &'a TokenRow) -> Self {
        JudgedToken {
            id: &t.id,
            role: t.role,
            secret_sha256: &t.secret_sha256,
            tenant_id: &t.tenant_id,
            pool_id: t.pool_id.as_deref(),
            site_id: t.site_id.as_deref(),
            expires_at: t.expires_at,
            revoked: t.revoked,
            expect_product_uuid: t.expect.product_uuid.as_deref(),
            expect_mac: t.expect.mac.as_deref(),
            expect_node_id: t.expect.node_id.as_deref(),
            reclaim: t.reclaim,
        }
    }
}

/// How [`Tx::admit_in_one_statement`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Everything written and committed.
    Committed,
    /// Nothing written: the token has no use left, or no longer exists.
    NoUsesLeft,
    /// Nothing written: the token changed since it was judged (revoked, or replaced).
    Changed,
}

/// A use of token `$21` spent only if its row is still `$22`–`$32` (the token as judged, in
/// [`JudgedToken`]'s order) but for its uses left; up to what it returns. `IS NOT DISTINCT FROM`
/// is equality with NULL equal to NULL (SQLite has it since 3.39; the bundled one is 3.46).
macro_rules! spend_as_judged {
    () => {
        "UPDATE join_tokens SET uses_left = uses_left - 1 \
         WHERE id = $21 AND uses_left > 0 AND role = $22 AND secret_sha256 = $23 \
         AND tenant_id = $24 AND pool_id IS NOT DISTINCT FROM $25 \
         AND site_id IS NOT DISTINCT FROM $26 AND expires_at = $27 AND revoked = $28 \
         AND expect_product_uuid IS NOT DISTINCT FROM $29 AND expect_mac IS NOT DISTINCT FROM $30 \
         AND expect_node_id IS NOT DISTINCT FROM $31 AND reclaim = $32 RETURNING "
    };
}

/// PostgreSQL's statement. `$1`–`$20` the audit row and event, `$21` the token, `$22`–`$32` the
/// token as judged, `$33`–`$40` the node and `$41`–`$50` its certificate (the binds of
/// `journal::bind_audit_and_event`, `nodes::bind_node` and `nodes::bind_cert`, in that order).
/// The certificate's foreign key to the node is checked at the statement's end.
const POSTGRES_ADMIT: &str = concat!(
    "WITH spent AS (",
    spend_as_judged!(),
    "id), node AS (",
    insert_node_into!(),
    "SELECT $33, $34, $35, $36, $37, 0, 0, $38, $39, $40, $40 FROM spent RETURNING id), \
     cert AS (",
    insert_cert_into!(),
    "SELECT $41, $42, $43, $44, $45, $46, $47, $48, 0, $49, $50 FROM node), ",
    record_from_spent!(),
    " SELECT id FROM spent"
);

/// SQLite's statements, bound as [`POSTGRES_ADMIT`]'s and sent behind the member's savepoint
/// (`Tx`'s unsent begin): the spend, then each insert only if the statement before it wrote its
/// row, then, only if nothing was written, the token's uses left (so the round can say why),
/// then the release into the batch. Each returned row says `spent` (1: everything written) and
/// `uses_left`. A statement that fails stops the query before the release, and the member's
/// savepoint is rolled back as after any failed statement.
const SQLITE_ADMIT: &str = concat!(
    spend_as_judged!(),
    "1 AS spent, uses_left; ",
    insert_node_into!(),
    "SELECT $33, $34, $35, $36, $37, 0, 0, $38, $39, $40, $40 WHERE changes() = 1; ",
    insert_cert_into!(),
    "SELECT $41, $42, $43, $44, $45, $46, $47, $48, 0, $49, $50 WHERE changes() = 1; ",
    sqlite_record_after_change!(),
    "; SELECT 0 AS spent, uses_left FROM join_tokens WHERE id = $21 AND changes() = 0; ",
    super::group::release_member!()
);

impl Tx {
    /// Whether [`Tx::admit_in_one_statement`] may write this transaction's admission: while
    /// nothing of the transaction was sent (on SQLite, a batch member's savepoint not yet taken).
    pub fn admits_in_one_statement(&self) -> bool {
        self.nothing_sent()
    }

    /// Writes a token join's admission, a new node `n` with its first certificate `c`, a use
    /// of `token` spent if it is still as judged, the audit row `a` and the event `e`, in one
    /// query committed on its own (see the module documentation); how it ended. Only when
    /// [`Tx::admits_in_one_statement`] (else [`StoreError::Aborted`], nothing sent). On an
    /// error nothing was written, but for [`StoreError::BatchLost`] on SQLite, whose writes
    /// were rolled back with their batch.
    pub async fn admit_in_one_statement(
        mut self,
        token: &JudgedToken<'_>,
        n: &NewNode,
        c: &NewNodeCert,
        a: &NewAudit,
        e: &NewEvent,
    ) -> Result<Admission, StoreError> {
        if !self.admits_in_one_statement() {
            return Err(StoreError::Aborted);
        }
        let sql = self.pick(SQLITE_ADMIT, POSTGRES_ADMIT);
        let der_sha256 = Sha256::digest(&c.der);
        let q = bind_audit_and_event(sql, a, e)
            .bind(token.id)
            .bind(token.role.as_str())
            .bind(token.secret_sha256)
            .bind(token.tenant_id)
            .bind(token.pool_id)
            .bind(token.site_id)
            .bind(token.expires_at)
            .bind(super::decode::flag(token.revoked))
            .bind(token.expect_product_uuid)
            .bind(token.expect_mac)
            .bind(token.expect_node_id)
            .bind(super::decode::flag(token.reclaim));
        let q = bind_cert(bind_node(q, n), c, &der_sha256);
        let left = match self.backend() {
            Backend::Sqlite => {
                let rows = self.fetch_all_releasing(q).await?;
                match rows.first() {
                    Some(row) => {
                        let f = Fields::new(row, "join_tokens");
                        if f.i64("spent")? == 1 {
                            return Ok(Admission::Committed);
                        }
                        f.i64("uses_left")?
                    }
                    None => 0,
                }
            }
            Backend::Postgres => {
                if self.fetch_in_autocommit(q).await?.is_some() {
                    return Ok(Admission::Committed);
                }
                // Nothing spent, so nothing written: why, for the round (which runs again on a
                // changed token, and is refused on a spent one).
                let q =
                    sqlx::query("SELECT uses_left FROM join_tokens WHERE id = $1").bind(token.id);
                match self.fetch_in_autocommit(q).await? {
                    Some(row) => Fields::new(&row, "join_tokens").i64("uses_left")?,
                    None => 0,
                }
            }
        };
        Ok(if left > 0 {
            Admission::Changed
        } else {
            Admission::NoUsesLeft
        })
    }
}
