-- sessiontree schema, step 5: a trash for sessions, and recorded redactions.
--
-- sessions.trashed_at: a deleted session goes to the trash (it keeps every node,
-- ref and run, is hidden from listings and search, and can be restored) until
-- the trash is emptied. Only emptying the trash removes it for good.
--
-- redactions: the one change a node may ever undergo. A retention policy may
-- strip a large tool result: the row records which field of which node was
-- replaced, the marker text it holds now, the size of what was removed and why.
-- The payload is rewritten in the same transaction (that is what gives the
-- space back), and the schema allows exactly that rewrite and nothing else: the
-- field must now hold the recorded marker and every other field must be as it
-- was. Deleting a node deletes its redaction.

-- retention_policy: the policy a user saved (`sessiontree retention --save`), one
-- row per setting (drop_older_than, strip_older_than in seconds; strip_min_bytes),
-- applied by a later `sessiontree retention` given no policy of its own.

ALTER TABLE sessions ADD COLUMN trashed_at TEXT;

CREATE TABLE retention_policy (
    name  TEXT PRIMARY KEY,
    value REAL NOT NULL
) WITHOUT ROWID;
CREATE INDEX sessions_trashed ON sessions(trashed_at) WHERE trashed_at IS NOT NULL;

CREATE TABLE redactions (
    node        INTEGER PRIMARY KEY REFERENCES nodes(key) ON DELETE CASCADE,
    field       TEXT NOT NULL,
    bytes       INTEGER NOT NULL,
    marker      TEXT NOT NULL,
    reason      TEXT NOT NULL,
    created_at  TEXT NOT NULL
);

-- A session in the trash takes no new nodes: an agent still running on it gets an
-- error instead of writing into something about to be removed.
CREATE TRIGGER nodes_not_in_trash
BEFORE INSERT ON nodes
WHEN (SELECT trashed_at FROM sessions WHERE key = NEW.session) IS NOT NULL
BEGIN
    SELECT RAISE(ABORT, 'the session is in the trash');
END;

DROP TRIGGER nodes_immutable;

CREATE TRIGGER nodes_immutable
BEFORE UPDATE OF key, id, session, parent, depth, kind, created_at, run ON nodes
BEGIN
    SELECT RAISE(ABORT, 'nodes are immutable');
END;

CREATE TRIGGER nodes_payload_only_redacted
BEFORE UPDATE OF payload ON nodes
WHEN NOT EXISTS (
    SELECT 1 FROM redactions r WHERE r.node = OLD.key
      AND json_extract(NEW.payload, '$.' || r.field) IS r.marker
      AND json_remove(NEW.payload, '$.' || r.field) IS json_remove(OLD.payload, '$.' || r.field))
BEGIN
    SELECT RAISE(ABORT, 'nodes are immutable (a payload changes only by a recorded redaction)');
END;

-- The search index follows a redaction: the old words out, the marker in.
CREATE TRIGGER nodes_fts_redact_old BEFORE UPDATE OF payload ON nodes
BEGIN
    INSERT INTO nodes_fts (nodes_fts, rowid, text, tools)
    SELECT 'delete', key, text, tools FROM node_text WHERE key = OLD.key;
END;

CREATE TRIGGER nodes_fts_redact_new AFTER UPDATE OF payload ON nodes
BEGIN
    INSERT INTO nodes_fts (rowid, text, tools) SELECT key, text, tools FROM node_text WHERE key = NEW.key;
END;
