-- Scale (issue 14): the index of revoked certificates holds the revoked ones only.
--
-- Over every certificate, (revoked, not_after) was the index SQLite, which plans without
-- statistics, chose for every statement of one node's live certificates (`node_id = ? AND
-- revoked = 0`): each renewal's supersession and settlement, a reclaim's and a removal's
-- revocations, and the 30-second sweep read every live certificate of the fleet, about 0.1 s
-- each at a million, under the write lock (tests/all/scale.rs finds such lookups). Holding
-- the revoked rows only, it still serves what it is for (the CRL's unexpired revoked
-- certificates), cannot be chosen for live ones, and a certificate a join or renewal issues
-- no longer adds an entry to it.
DROP INDEX node_certs_revoked;
CREATE INDEX node_certs_revoked ON node_certs (not_after) WHERE revoked = 1;
