-- Certificate lifecycle (issue 3): why a certificate was revoked, and deleted nodes.
--
-- revoked_reason is NULL while a certificate is live and names why it stopped: 'superseded'
-- (a reclaim raised the identity generation), 'identity-revoked' (an operator's
-- revoke-identity), 'node-removed' (the node was retired or deleted) or 'operator' (this one
-- certificate). The revoked flag stays and always agrees with it.
ALTER TABLE node_certs ADD COLUMN revoked_reason TEXT
    CHECK (revoked_reason IN ('superseded', 'identity-revoked', 'node-removed', 'operator'));
UPDATE node_certs SET revoked_reason = 'superseded' WHERE revoked = 1;

-- A deleted node keeps its row (its certificates and audit rows name it) but is retired, has
-- no bindings and no hardware key, and is hidden from listings.
ALTER TABLE nodes ADD COLUMN deleted_at INTEGER;
