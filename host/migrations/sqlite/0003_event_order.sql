-- Postgres records each event's transaction id (see Tx::list_events); SQLite serialises writers,
-- so ids already appear in commit order and the column stays 0.
ALTER TABLE events ADD COLUMN txid INTEGER NOT NULL DEFAULT 0;

CREATE INDEX events_feed ON events (txid, id);
