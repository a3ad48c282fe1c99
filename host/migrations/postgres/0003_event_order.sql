-- The transaction that wrote each event, so that the event feed can be read in an order no
-- late commit can slip behind (see Tx::list_events). Existing rows get this migration's.
ALTER TABLE events ADD COLUMN txid BIGINT NOT NULL DEFAULT (pg_current_xact_id()::text::bigint);

CREATE INDEX events_feed ON events (txid, id);
