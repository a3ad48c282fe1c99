-- Named admin identities (issue 15): each operator authenticates with a key of their own, and
-- every event an operator's action writes names them.
--
-- Only the SHA-256 of a key's secret is stored; the key id is the public part a request's key
-- is looked up by. A name is never reused, revoked or not, so an event's actor always means
-- one key holder. The configured admin_key_file stays valid as the identity `admin`, which
-- is not a row here.
CREATE TABLE admins (
    name TEXT PRIMARY KEY,
    key_id TEXT NOT NULL UNIQUE,
    key_sha256 BLOB NOT NULL CHECK (length(key_sha256) = 32),
    created_at INTEGER NOT NULL,
    created_by TEXT NOT NULL,
    revoked_at INTEGER,
    revoked_by TEXT
);

-- Who did it: the admin identity of an operator's action; NULL for what the host did itself.
ALTER TABLE events ADD COLUMN actor TEXT;
