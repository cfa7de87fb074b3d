-- sessiontree schema, step 1: sessions, runs, nodes, branches, checkpoints.
-- Nodes are immutable; branches are mutable pointers; checkpoints never move.
-- Composite foreign keys on (session_id, node id) keep every parent, head and
-- checkpoint inside its own session without a trigger.

CREATE TABLE sessions (
    id          TEXT PRIMARY KEY,
    title       TEXT,
    metadata    TEXT NOT NULL DEFAULT '{}',
    created_at  TEXT NOT NULL,
    archived_at TEXT
);

CREATE TABLE runs (
    id            TEXT PRIMARY KEY,
    session_id    TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    model         TEXT,
    provider      TEXT,
    params        TEXT NOT NULL DEFAULT '{}',
    usage         TEXT NOT NULL DEFAULT '{}',
    latency_ms    REAL,
    finish_reason TEXT,
    created_at    TEXT NOT NULL
);
CREATE INDEX runs_session ON runs(session_id);

CREATE TABLE nodes (
    id          TEXT PRIMARY KEY,
    session_id  TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    parent_id   TEXT,
    depth       INTEGER NOT NULL CHECK (depth >= 0),
    kind        TEXT NOT NULL,
    payload     TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    run_id      TEXT REFERENCES runs(id),
    FOREIGN KEY (session_id, parent_id) REFERENCES nodes(session_id, id),
    CHECK ((parent_id IS NULL) = (depth = 0))
);
-- Target of the composite foreign keys; also lists a session's nodes.
CREATE UNIQUE INDEX nodes_session_id ON nodes(session_id, id);
-- children(id), and the child side of the parent foreign key.
CREATE INDEX nodes_parent ON nodes(parent_id, session_id);
CREATE INDEX nodes_run ON nodes(run_id) WHERE run_id IS NOT NULL;
-- pending(): pauses are few, so a partial index finds them at once.
CREATE INDEX nodes_pause ON nodes(session_id) WHERE kind = 'pause';
-- Exactly one decision per pause: a second decider loses inside SQLite.
CREATE UNIQUE INDEX nodes_one_decision ON nodes(parent_id) WHERE kind = 'decision';

CREATE TRIGGER nodes_immutable
BEFORE UPDATE OF id, session_id, parent_id, depth, kind, payload, created_at, run_id ON nodes
BEGIN
    SELECT RAISE(ABORT, 'nodes are immutable');
END;

CREATE TABLE branches (
    session_id  TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    head_id     TEXT,
    metadata    TEXT NOT NULL DEFAULT '{}',
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    PRIMARY KEY (session_id, name),
    FOREIGN KEY (session_id, head_id) REFERENCES nodes(session_id, id)
);
CREATE INDEX branches_head ON branches(head_id);

CREATE TABLE checkpoints (
    session_id  TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    node_id     TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    PRIMARY KEY (session_id, name),
    FOREIGN KEY (session_id, node_id) REFERENCES nodes(session_id, id)
);
CREATE INDEX checkpoints_node ON checkpoints(node_id);

CREATE TRIGGER checkpoints_immutable
BEFORE UPDATE ON checkpoints
BEGIN
    SELECT RAISE(ABORT, 'checkpoints never move');
END;
