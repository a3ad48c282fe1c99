-- Discovery workflows (issue 11, rule 9): an operator starts one for a MAC at a site; the
-- site's boot server may only fetch the single-use discovery token it mints, while it holds
-- the site's boot lease. token_id is the newest token the workflow minted.
CREATE TABLE discovery_workflows (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL REFERENCES tenants (id),
    site_id TEXT NOT NULL,
    mac TEXT NOT NULL,
    product_uuid TEXT,
    state TEXT NOT NULL,
    token_ttl_seconds BIGINT NOT NULL CHECK (token_ttl_seconds > 0),
    token_id TEXT,
    created_at BIGINT NOT NULL
);

CREATE INDEX discovery_workflows_site_mac ON discovery_workflows (site_id, mac, state);
