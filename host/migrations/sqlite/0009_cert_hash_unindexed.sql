-- Scale (issue 14): a certificate's DER hash loses its unique index.
--
-- A certificate is found by its serial (the primary key, which starts with the time of issue)
-- and compared whole, not by the SHA-256 of its DER. That hash is a random key: its unique
-- index took a random page of a large B-tree for every certificate issued, written to the WAL
-- and again by the checkpoint, about twice the bytes a join writes at a million certificates.
-- The serial, part of the DER, keeps certificates unique without it. The column stays, still
-- written, so the schemas of both backends stay the same (PostgreSQL's replicas of the
-- release before look certificates up by it during a rolling upgrade).
--
-- SQLite cannot drop a column's UNIQUE constraint, so the table is made again without it (as
-- in 0004): every certificate is copied once, in this migration's transaction. No table refers
-- to node_certs.
CREATE TABLE node_certs_new (
    serial TEXT NOT NULL PRIMARY KEY,
    node_id TEXT NOT NULL REFERENCES nodes (id),
    der BLOB NOT NULL,
    der_sha256 BLOB NOT NULL CHECK (length(der_sha256) = 32),
    generation INTEGER NOT NULL CHECK (generation >= 0),
    role TEXT NOT NULL,
    not_before INTEGER NOT NULL,
    not_after INTEGER NOT NULL,
    revoked INTEGER NOT NULL DEFAULT 0 CHECK (revoked IN (0, 1)),
    statements TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    revoked_reason TEXT
        CHECK (revoked_reason IN ('superseded', 'identity-revoked', 'node-removed', 'operator')),
    revoked_at INTEGER,
    superseded_at INTEGER
) STRICT;
INSERT INTO node_certs_new SELECT serial, node_id, der, der_sha256, generation, role,
    not_before, not_after, revoked, statements, created_at, revoked_reason, revoked_at,
    superseded_at FROM node_certs;
DROP TABLE node_certs;
ALTER TABLE node_certs_new RENAME TO node_certs;
CREATE INDEX node_certs_node ON node_certs (node_id, generation);
CREATE INDEX node_certs_revoked ON node_certs (not_after) WHERE revoked = 1;
CREATE INDEX node_certs_superseded ON node_certs (superseded_at)
    WHERE superseded_at IS NOT NULL AND revoked = 0;
