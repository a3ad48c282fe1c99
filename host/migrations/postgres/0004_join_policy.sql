-- JoinService holds the line (issue 11).
--
-- One machine, one node: a node's hardware_key is the machine's trusted hardware key (what
-- evidence backs: a token's expect.productUuid; see join::policy), held by at
-- most one live node (retiring or deleting a node frees it). Keys recorded before this were
-- the agent's bare product-UUID claim, which is not trusted: they are dropped.
UPDATE nodes SET hardware_key = NULL;
CREATE UNIQUE INDEX nodes_hardware_key ON nodes (hardware_key) WHERE hardware_key IS NOT NULL;

-- A join request whose approval admitted a machine reads 'used', distinct from 'expired'.
ALTER TABLE join_requests DROP CONSTRAINT join_requests_state_check;
ALTER TABLE join_requests ADD CONSTRAINT join_requests_state_check
    CHECK (state IN ('pending', 'approved', 'denied', 'expired', 'used'));
