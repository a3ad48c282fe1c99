-- Scale (issue 14): the index of revoked certificates holds the revoked ones only.
--
-- Over every certificate, (revoked, not_after) was the index SQLite, which plans without
-- statistics, chose for every statement of one node's live certificates; PostgreSQL's
-- planner, which has statistics, did not, but the schemas stay the same. Holding the revoked
-- rows only, it still serves what it is for (the CRL's unexpired revoked certificates), and a
-- certificate a join or renewal issues no longer adds an entry to it. Building it reads
-- node_certs once and holds off writes to it meanwhile (about a second at a million rows).
DROP INDEX node_certs_revoked;
CREATE INDEX node_certs_revoked ON node_certs (not_after) WHERE revoked = 1;
