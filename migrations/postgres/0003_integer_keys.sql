-- sessiontree schema on PostgreSQL, as of step 3 (the SQLite steps 1 and 2 have no
-- PostgreSQL counterpart: a PostgreSQL store starts here).
--
-- The same tables, keys and invariants as the SQLite schema: UUIDv7 text ids
-- outside, bigint row keys inside; payloads, metadata and times stored as the
-- exact text sessiontree wrote (jsonb would reorder keys and refuse \u0000).
-- Ids and names use the C collation: byte order, as in SQLite, so sorting agrees
-- between backends and an id prefix is a range scan on the id index.
-- Node keys come from one sequence, handed out in blocks by
-- sessiontree_reserve_node_keys so a chain can name its parents before they exist.

CREATE TABLE sessions (
    key         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id          text COLLATE "C" NOT NULL UNIQUE,
    title       text,
    metadata    text NOT NULL DEFAULT '{}',
    created_at  text NOT NULL,
    archived_at text
);

CREATE FUNCTION sessiontree_usage_tokens(usage text, a text, b text) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN jsonb_typeof(usage::jsonb -> a) = 'number' THEN (usage::jsonb ->> a)::numeric::bigint
        WHEN jsonb_typeof(usage::jsonb -> b) = 'number' THEN (usage::jsonb ->> b)::numeric::bigint
    END
$$;

CREATE TABLE runs (
    key           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id            text COLLATE "C" NOT NULL UNIQUE,
    session       bigint NOT NULL REFERENCES sessions(key),
    model         text,
    provider      text,
    params        text NOT NULL DEFAULT '{}',
    usage         text NOT NULL DEFAULT '{}',
    latency_ms    double precision,
    finish_reason text,
    created_at    text NOT NULL,
    input_tokens  bigint GENERATED ALWAYS AS
        (sessiontree_usage_tokens(usage, 'prompt_tokens', 'input_tokens')) STORED,
    output_tokens bigint GENERATED ALWAYS AS
        (sessiontree_usage_tokens(usage, 'completion_tokens', 'output_tokens')) STORED
);

CREATE SEQUENCE nodes_key_seq;

CREATE TABLE nodes (
    key         bigint PRIMARY KEY,
    id          text COLLATE "C" NOT NULL UNIQUE,
    session     bigint NOT NULL,
    parent      bigint REFERENCES nodes(key),
    depth       integer NOT NULL CHECK (depth >= 0),
    kind        text NOT NULL,
    payload     text NOT NULL,
    created_at  text NOT NULL,
    run         bigint REFERENCES runs(key),
    CHECK ((parent IS NULL) = (depth = 0))
);

CREATE TABLE branches (
    session     bigint NOT NULL REFERENCES sessions(key),
    name        text COLLATE "C" NOT NULL,
    head        bigint,
    metadata    text NOT NULL DEFAULT '{}',
    created_at  text NOT NULL,
    updated_at  text NOT NULL,
    PRIMARY KEY (session, name)
);

CREATE TABLE checkpoints (
    session     bigint NOT NULL REFERENCES sessions(key),
    name        text COLLATE "C" NOT NULL,
    node        bigint NOT NULL REFERENCES nodes(key),
    created_at  text NOT NULL,
    PRIMARY KEY (session, name)
);

CREATE INDEX runs_session ON runs(session);
CREATE INDEX nodes_parent ON nodes(parent);
CREATE INDEX nodes_roots ON nodes(session) WHERE parent IS NULL;
CREATE INDEX nodes_pause ON nodes(session) WHERE kind = 'pause';
CREATE UNIQUE INDEX nodes_one_decision ON nodes(parent) WHERE kind = 'decision';
CREATE INDEX nodes_run ON nodes(run) WHERE run IS NOT NULL;
CREATE INDEX checkpoints_node ON checkpoints(node);
CREATE INDEX branches_head ON branches(head);

-- A block of consecutive node keys. The sequence is non-transactional, so the block
-- stays taken even if the caller rolls back; the short lock makes nextval + setval one
-- step against other reservers (every node key is taken through this function).
CREATE FUNCTION sessiontree_reserve_node_keys(count integer) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    first bigint;
BEGIN
    PERFORM pg_advisory_lock(1936029285, 1);
    first := nextval('nodes_key_seq');
    IF count > 1 THEN
        PERFORM setval('nodes_key_seq', first + count - 1);
    END IF;
    PERFORM pg_advisory_unlock(1936029285, 1);
    RETURN first;
END
$$;

CREATE FUNCTION sessiontree_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '%', TG_ARGV[0] USING ERRCODE = 'integrity_constraint_violation';
END
$$;

CREATE TRIGGER nodes_immutable BEFORE UPDATE ON nodes
FOR EACH ROW EXECUTE FUNCTION sessiontree_refuse('nodes are immutable');

CREATE TRIGGER checkpoints_immutable BEFORE UPDATE ON checkpoints
FOR EACH ROW EXECUTE FUNCTION sessiontree_refuse('checkpoints never move');

CREATE FUNCTION sessiontree_node_in_session() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.parent IS NOT NULL THEN
        IF NOT EXISTS (SELECT 1 FROM nodes p
                       WHERE p.key = NEW.parent AND p.session = NEW.session AND p.depth = NEW.depth - 1) THEN
            RAISE EXCEPTION 'a parent must be a node of the same session, one level up'
                USING ERRCODE = 'integrity_constraint_violation';
        END IF;
    ELSIF NOT EXISTS (SELECT 1 FROM sessions WHERE key = NEW.session) THEN
        RAISE EXCEPTION 'a node must belong to an existing session'
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER nodes_in_session BEFORE INSERT ON nodes
FOR EACH ROW EXECUTE FUNCTION sessiontree_node_in_session();

CREATE FUNCTION sessiontree_session_keeps_nodes() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM nodes WHERE session = OLD.key AND parent IS NULL) THEN
        RAISE EXCEPTION 'delete a session''s nodes before the session'
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN OLD;
END
$$;

CREATE TRIGGER sessions_keep_nodes BEFORE DELETE ON sessions
FOR EACH ROW EXECUTE FUNCTION sessiontree_session_keeps_nodes();

CREATE FUNCTION sessiontree_head_in_session() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.head IS NOT NULL AND NOT EXISTS (SELECT 1 FROM nodes WHERE key = NEW.head AND session = NEW.session) THEN
        RAISE EXCEPTION 'a branch head must be a node of its session'
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER branches_head_in_session BEFORE INSERT OR UPDATE OF head ON branches
FOR EACH ROW EXECUTE FUNCTION sessiontree_head_in_session();

CREATE FUNCTION sessiontree_checkpoint_in_session() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM nodes WHERE key = NEW.node AND session = NEW.session) THEN
        RAISE EXCEPTION 'a checkpoint must mark a node of its session'
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER checkpoints_in_session BEFORE INSERT ON checkpoints
FOR EACH ROW EXECUTE FUNCTION sessiontree_checkpoint_in_session();

-- A decision wakes the workers (LISTEN "sessiontree:<schema>"); the payload is the
-- session id, a hint only: a worker re-reads what is resumable.
CREATE FUNCTION sessiontree_notify_decision() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('sessiontree:' || TG_TABLE_SCHEMA, (SELECT id FROM sessions WHERE key = NEW.session));
    RETURN NULL;
END
$$;

CREATE TRIGGER nodes_decision_notify AFTER INSERT ON nodes
FOR EACH ROW WHEN (NEW.kind = 'decision') EXECUTE FUNCTION sessiontree_notify_decision();

-- Is this text valid JSON? (PostgreSQL 15 has no pg_input_is_valid.) For verify.
CREATE FUNCTION sessiontree_json_valid(value text) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    PERFORM value::json;
    RETURN true;
EXCEPTION WHEN others THEN
    RETURN false;
END
$$;
