-- Certificate lifecycle for relying parties (issue 15): when a certificate was revoked, for the
-- CRL's revocationDate, and when a renewal supersedes the certificate it replaced.
--
-- revoked_at is set with every revocation from now on; certificates revoked before this
-- migration get their issuance time, the only time recorded for them (earlier than the real
-- revocation, which a CRL reader cannot tell apart from "revoked by then").
--
-- superseded_at is set by a renewal on the certificates of the node it replaces: a short grace
-- later (so a connection authenticated with the old certificate is not cut at once) the old
-- certificate counts as revoked 'superseded'. Until then it stays live; from then on a renewal
-- refuses it, the CRL lists it, and a sweep turns the row into a revoked one.
ALTER TABLE node_certs ADD COLUMN revoked_at BIGINT;
ALTER TABLE node_certs ADD COLUMN superseded_at BIGINT;
UPDATE node_certs SET revoked_at = created_at WHERE revoked = 1;
CREATE INDEX node_certs_revoked ON node_certs (revoked, not_after);
CREATE INDEX node_certs_superseded ON node_certs (superseded_at)
    WHERE superseded_at IS NOT NULL AND revoked = 0;
