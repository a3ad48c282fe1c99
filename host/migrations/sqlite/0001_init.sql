-- The first schema (SQLite). Times are ms since the Unix epoch; booleans are INTEGER 0/1;
-- JSON is TEXT. STRICT tables refuse values of the wrong type.

CREATE TABLE tenants (
    id TEXT NOT NULL PRIMARY KEY
) STRICT;

INSERT INTO tenants (id) VALUES ('root');

CREATE TABLE pools (
    tenant_id TEXT NOT NULL REFERENCES tenants (id),
    id TEXT NOT NULL,
    join_attestors TEXT,
    owner TEXT,
    PRIMARY KEY (tenant_id, id)
) STRICT;

CREATE TABLE join_tokens (
    id TEXT NOT NULL PRIMARY KEY,
    role TEXT NOT NULL,
    secret_sha256 BLOB NOT NULL CHECK (length(secret_sha256) = 32),
    tenant_id TEXT NOT NULL REFERENCES tenants (id),
    pool_id TEXT,
    site_id TEXT,
    expires_at INTEGER NOT NULL,
    revoked INTEGER NOT NULL DEFAULT 0 CHECK (revoked IN (0, 1)),
    uses_total INTEGER NOT NULL CHECK (uses_total >= 0),
    uses_left INTEGER NOT NULL CHECK (uses_left >= 0 AND uses_left <= uses_total),
    expect_product_uuid TEXT,
    expect_mac TEXT,
    expect_node_id TEXT,
    reclaim INTEGER NOT NULL DEFAULT 0 CHECK (reclaim IN (0, 1)),
    created_at INTEGER NOT NULL,
    FOREIGN KEY (tenant_id, pool_id) REFERENCES pools (tenant_id, id)
) STRICT;

CREATE INDEX join_tokens_pool ON join_tokens (tenant_id, pool_id);

CREATE TABLE nodes (
    id TEXT NOT NULL PRIMARY KEY,
    tenant_id TEXT NOT NULL REFERENCES tenants (id),
    pool_id TEXT,
    site_id TEXT,
    role TEXT NOT NULL,
    retired INTEGER NOT NULL DEFAULT 0 CHECK (retired IN (0, 1)),
    cordoned INTEGER NOT NULL DEFAULT 0 CHECK (cordoned IN (0, 1)),
    identity_generation INTEGER NOT NULL CHECK (identity_generation >= 0),
    hardware_key TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    FOREIGN KEY (tenant_id, pool_id) REFERENCES pools (tenant_id, id)
) STRICT;

CREATE INDEX nodes_pool ON nodes (tenant_id, pool_id);

CREATE TABLE node_certs (
    serial TEXT NOT NULL PRIMARY KEY,
    node_id TEXT NOT NULL REFERENCES nodes (id),
    der BLOB NOT NULL,
    der_sha256 BLOB NOT NULL UNIQUE CHECK (length(der_sha256) = 32),
    generation INTEGER NOT NULL CHECK (generation >= 0),
    role TEXT NOT NULL,
    not_before INTEGER NOT NULL,
    not_after INTEGER NOT NULL,
    revoked INTEGER NOT NULL DEFAULT 0 CHECK (revoked IN (0, 1)),
    statements TEXT NOT NULL,
    created_at INTEGER NOT NULL
) STRICT;

CREATE INDEX node_certs_node ON node_certs (node_id, generation);

CREATE TABLE node_bindings (
    kind TEXT NOT NULL,
    value TEXT NOT NULL,
    node_id TEXT NOT NULL REFERENCES nodes (id),
    PRIMARY KEY (kind, value)
) STRICT;

CREATE INDEX node_bindings_node ON node_bindings (node_id);

CREATE TABLE attestation_uses (
    attestor TEXT NOT NULL,
    subject TEXT NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (attestor, subject)
) STRICT;

CREATE INDEX attestation_uses_expiry ON attestation_uses (expires_at);

CREATE TABLE join_requests (
    id TEXT NOT NULL PRIMARY KEY,
    attestor TEXT NOT NULL,
    subject TEXT NOT NULL,
    csr_sha256 BLOB NOT NULL CHECK (length(csr_sha256) = 32),
    details TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('pending', 'approved', 'denied', 'expired')),
    tenant_id TEXT REFERENCES tenants (id),
    pool_id TEXT,
    site_id TEXT,
    created_at INTEGER NOT NULL,
    decided_at INTEGER,
    expires_at INTEGER NOT NULL
) STRICT;

-- At most one open request per attestor, subject and CSR.
CREATE UNIQUE INDEX join_requests_open ON join_requests (attestor, subject, csr_sha256)
    WHERE state IN ('pending', 'approved');
CREATE INDEX join_requests_state ON join_requests (state, created_at);

CREATE TABLE leases (
    name TEXT NOT NULL PRIMARY KEY,
    holder TEXT NOT NULL,
    epoch INTEGER NOT NULL CHECK (epoch >= 0),
    expires_at INTEGER NOT NULL
) STRICT;

CREATE TABLE inventories (
    id TEXT NOT NULL PRIMARY KEY,
    node_id TEXT NOT NULL REFERENCES nodes (id),
    product_uuid TEXT,
    macs TEXT NOT NULL,
    recorded_at INTEGER NOT NULL
) STRICT;

CREATE INDEX inventories_node ON inventories (node_id, recorded_at, id);

CREATE TABLE workflows (
    id TEXT NOT NULL PRIMARY KEY,
    node_id TEXT NOT NULL REFERENCES nodes (id),
    state TEXT NOT NULL,
    step TEXT NOT NULL,
    token_id TEXT,
    created_at INTEGER NOT NULL
) STRICT;

CREATE INDEX workflows_token ON workflows (token_id, created_at, id);
CREATE INDEX workflows_node ON workflows (node_id);

CREATE TABLE events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at INTEGER NOT NULL,
    kind TEXT NOT NULL,
    tenant_id TEXT,
    node_id TEXT,
    attestor TEXT,
    reason TEXT,
    token_id TEXT,
    payload TEXT NOT NULL
) STRICT;

CREATE TABLE audits (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at INTEGER NOT NULL,
    attestor TEXT NOT NULL,
    round INTEGER NOT NULL CHECK (round >= 0),
    result TEXT NOT NULL,
    reason TEXT,
    node_id TEXT,
    token_id TEXT,
    subject TEXT,
    node_key TEXT,
    csr_sha256 BLOB CHECK (csr_sha256 IS NULL OR length(csr_sha256) = 32),
    client_addr TEXT
) STRICT;

CREATE TABLE attestor_kv (
    attestor TEXT NOT NULL,
    key TEXT NOT NULL,
    value BLOB NOT NULL,
    PRIMARY KEY (attestor, key)
) STRICT;
