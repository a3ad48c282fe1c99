-- Scale (issue 14): a certificate's DER hash loses its unique index.
--
-- A certificate is found by its serial (the primary key, which starts with the time of issue)
-- and compared whole, not by the SHA-256 of its DER. That hash is a random key: its unique
-- index took a random page of a large B-tree for every certificate issued (on PostgreSQL a
-- whole page in the WAL, the first time it changes after each checkpoint). The serial, part of
-- the DER, keeps certificates unique without it. The column stays, still written: replicas of
-- the release before look certificates up by it during a rolling upgrade (then by reading
-- node_certs whole, for a renewal: replace them promptly).
ALTER TABLE node_certs DROP CONSTRAINT node_certs_der_sha256_key;
