-- sessiontree: foreign-keys off
-- sessiontree schema, step 3: integer row keys inside the file.
--
-- The UUIDv7 strings stay the public ids (one UNIQUE index each); every link
-- between rows (a node's session, parent and run; a ref's node) is the integer
-- row key, so walking a path is one B-tree lookup per step and every index
-- entry is a few bytes. Only the indexes the queries use are kept:
--   nodes: id (lookups, prefixes), parent (children, and the foreign key),
--          roots per session (a session's tree is walked down from them),
--          pauses per session, one decision per pause, and the run of a node.
-- The invariants stay in the schema: nodes are immutable; a parent is a node of
-- the same session one level up; a branch head and a checkpoint are nodes of
-- their own session; checkpoints never move; one decision per pause; a session
-- with nodes cannot be deleted.
--
-- The runner applies this step with foreign keys off (tables are rebuilt and
-- renamed) and runs PRAGMA foreign_key_check before it commits.

-- AUTOINCREMENT: a session key is never given again, so a handle on a deleted
-- session can never reach a newer one.
CREATE TABLE new_sessions (
    key         INTEGER PRIMARY KEY AUTOINCREMENT,
    id          TEXT NOT NULL UNIQUE,
    title       TEXT,
    metadata    TEXT NOT NULL DEFAULT '{}',
    created_at  TEXT NOT NULL,
    archived_at TEXT
);
INSERT INTO new_sessions (id, title, metadata, created_at, archived_at)
SELECT id, title, metadata, created_at, archived_at FROM sessions ORDER BY id;

CREATE TABLE new_runs (
    key           INTEGER PRIMARY KEY,
    id            TEXT NOT NULL UNIQUE,
    session       INTEGER NOT NULL REFERENCES sessions(key),
    model         TEXT,
    provider      TEXT,
    params        TEXT NOT NULL DEFAULT '{}',
    usage         TEXT NOT NULL DEFAULT '{}',
    latency_ms    REAL,
    finish_reason TEXT,
    created_at    TEXT NOT NULL,
    input_tokens  INTEGER GENERATED ALWAYS AS (
        coalesce(json_extract(usage, '$.prompt_tokens'), json_extract(usage, '$.input_tokens'))
    ) VIRTUAL,
    output_tokens INTEGER GENERATED ALWAYS AS (
        coalesce(json_extract(usage, '$.completion_tokens'), json_extract(usage, '$.output_tokens'))
    ) VIRTUAL
);
INSERT INTO new_runs (id, session, model, provider, params, usage, latency_ms, finish_reason, created_at)
SELECT r.id, s.key, r.model, r.provider, r.params, r.usage, r.latency_ms, r.finish_reason, r.created_at
FROM runs r JOIN new_sessions s ON s.id = r.session_id ORDER BY r.id;

-- Keys for the nodes: a session's nodes together, parents before children.
CREATE TEMP TABLE node_keys (id TEXT PRIMARY KEY, key INTEGER NOT NULL) WITHOUT ROWID;
INSERT INTO node_keys (id, key)
SELECT id, row_number() OVER (ORDER BY session_id, depth, id) FROM nodes;

CREATE TABLE new_nodes (
    key         INTEGER PRIMARY KEY,
    id          TEXT NOT NULL UNIQUE,
    session     INTEGER NOT NULL,
    parent      INTEGER REFERENCES nodes(key),
    depth       INTEGER NOT NULL CHECK (depth >= 0),
    kind        TEXT NOT NULL,
    payload     TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    run         INTEGER REFERENCES runs(key),
    CHECK ((parent IS NULL) = (depth = 0))
);
INSERT INTO new_nodes (key, id, session, parent, depth, kind, payload, created_at, run)
SELECT k.key, n.id, s.key, pk.key, n.depth, n.kind, n.payload, n.created_at, r.key
FROM nodes n
JOIN node_keys k ON k.id = n.id
JOIN new_sessions s ON s.id = n.session_id
LEFT JOIN node_keys pk ON pk.id = n.parent_id
LEFT JOIN new_runs r ON r.id = n.run_id
ORDER BY k.key;

CREATE TABLE new_branches (
    session     INTEGER NOT NULL REFERENCES sessions(key),
    name        TEXT NOT NULL,
    head        INTEGER,
    metadata    TEXT NOT NULL DEFAULT '{}',
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    PRIMARY KEY (session, name)
) WITHOUT ROWID;
INSERT INTO new_branches (session, name, head, metadata, created_at, updated_at)
SELECT s.key, b.name, k.key, b.metadata, b.created_at, b.updated_at
FROM branches b JOIN new_sessions s ON s.id = b.session_id LEFT JOIN node_keys k ON k.id = b.head_id;

CREATE TABLE new_checkpoints (
    session     INTEGER NOT NULL REFERENCES sessions(key),
    name        TEXT NOT NULL,
    node        INTEGER NOT NULL REFERENCES nodes(key),
    created_at  TEXT NOT NULL,
    PRIMARY KEY (session, name)
) WITHOUT ROWID;
INSERT INTO new_checkpoints (session, name, node, created_at)
SELECT s.key, c.name, k.key, c.created_at
FROM checkpoints c JOIN new_sessions s ON s.id = c.session_id JOIN node_keys k ON k.id = c.node_id;

DROP TABLE node_keys;
DROP TABLE checkpoints;
DROP TABLE branches;
DROP TABLE nodes;
DROP TABLE runs;
DROP TABLE sessions;
ALTER TABLE new_sessions RENAME TO sessions;
ALTER TABLE new_runs RENAME TO runs;
ALTER TABLE new_nodes RENAME TO nodes;
ALTER TABLE new_branches RENAME TO branches;
ALTER TABLE new_checkpoints RENAME TO checkpoints;

CREATE INDEX runs_session ON runs(session);
-- children(key), and the child side of the parent foreign key (prune deletes).
CREATE INDEX nodes_parent ON nodes(parent);
-- A session's tree is walked down from its roots; tiny, as roots are few.
CREATE INDEX nodes_roots ON nodes(session) WHERE parent IS NULL;
-- pending(): pauses are few, so a partial index finds them at once.
CREATE INDEX nodes_pause ON nodes(session) WHERE kind = 'pause';
-- Exactly one decision per pause: a second decider loses inside SQLite.
CREATE UNIQUE INDEX nodes_one_decision ON nodes(parent) WHERE kind = 'decision';
-- The child side of the run foreign key (prune removes runs).
CREATE INDEX nodes_run ON nodes(run) WHERE run IS NOT NULL;
-- The child side of the checkpoint foreign key (prune removes nodes).
CREATE INDEX checkpoints_node ON checkpoints(node);

CREATE TRIGGER nodes_immutable
BEFORE UPDATE OF key, id, session, parent, depth, kind, payload, created_at, run ON nodes
BEGIN
    SELECT RAISE(ABORT, 'nodes are immutable');
END;

CREATE TRIGGER nodes_parent_in_session
BEFORE INSERT ON nodes
WHEN NEW.parent IS NOT NULL AND NOT EXISTS (
    SELECT 1 FROM nodes p WHERE p.key = NEW.parent AND p.session = NEW.session AND p.depth = NEW.depth - 1)
BEGIN
    SELECT RAISE(ABORT, 'a parent must be a node of the same session, one level up');
END;

CREATE TRIGGER nodes_root_in_session
BEFORE INSERT ON nodes
WHEN NEW.parent IS NULL AND NOT EXISTS (SELECT 1 FROM sessions WHERE key = NEW.session)
BEGIN
    SELECT RAISE(ABORT, 'a node must belong to an existing session');
END;

CREATE TRIGGER sessions_keep_nodes
BEFORE DELETE ON sessions
WHEN EXISTS (SELECT 1 FROM nodes WHERE session = OLD.key AND parent IS NULL)
BEGIN
    SELECT RAISE(ABORT, 'delete a session''s nodes before the session');
END;

CREATE TRIGGER branches_head_in_session
BEFORE INSERT ON branches
WHEN NEW.head IS NOT NULL AND NOT EXISTS (SELECT 1 FROM nodes WHERE key = NEW.head AND session = NEW.session)
BEGIN
    SELECT RAISE(ABORT, 'a branch head must be a node of its session');
END;

CREATE TRIGGER branches_head_moves_in_session
BEFORE UPDATE OF head ON branches
WHEN NEW.head IS NOT NULL AND NOT EXISTS (SELECT 1 FROM nodes WHERE key = NEW.head AND session = NEW.session)
BEGIN
    SELECT RAISE(ABORT, 'a branch head must be a node of its session');
END;

CREATE TRIGGER checkpoints_in_session
BEFORE INSERT ON checkpoints
WHEN NOT EXISTS (SELECT 1 FROM nodes WHERE key = NEW.node AND session = NEW.session)
BEGIN
    SELECT RAISE(ABORT, 'a checkpoint must mark a node of its session');
END;

CREATE TRIGGER checkpoints_immutable
BEFORE UPDATE ON checkpoints
BEGIN
    SELECT RAISE(ABORT, 'checkpoints never move');
END;
