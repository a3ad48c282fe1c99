-- JoinService holds the line (issue 11).
--
-- One machine, one node: a node's hardware_key is the machine's trusted hardware key (what
-- evidence backs: a token's expect.productUuid; see join::policy), held by at
-- most one live node (retiring or deleting a node frees it). Keys recorded before this were
-- the agent's bare product-UUID claim, which is not trusted: they are dropped.
UPDATE nodes SET hardware_key = NULL;
CREATE UNIQUE INDEX nodes_hardware_key ON nodes (hardware_key) WHERE hardware_key IS NOT NULL;

-- A join request whose approval admitted a machine reads 'used', distinct from 'expired'.
CREATE TABLE join_requests_new (
    id TEXT NOT NULL PRIMARY KEY,
    attestor TEXT NOT NULL,
    subject TEXT NOT NULL,
    csr_sha256 BLOB NOT NULL CHECK (length(csr_sha256) = 32),
    details TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('pending', 'approved', 'denied', 'expired', 'used')),
    tenant_id TEXT REFERENCES tenants (id),
    pool_id TEXT,
    site_id TEXT,
    created_at INTEGER NOT NULL,
    decided_at INTEGER,
    expires_at INTEGER NOT NULL
) STRICT;
INSERT INTO join_requests_new SELECT id, attestor, subject, csr_sha256, details, state,
    tenant_id, pool_id, site_id, created_at, decided_at, expires_at FROM join_requests;
DROP TABLE join_requests;
ALTER TABLE join_requests_new RENAME TO join_requests;
CREATE UNIQUE INDEX join_requests_open ON join_requests (attestor, subject, csr_sha256)
    WHERE state IN ('pending', 'approved');
CREATE INDEX join_requests_state ON join_requests (state, created_at);
