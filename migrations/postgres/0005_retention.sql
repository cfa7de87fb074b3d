-- sessiontree schema on PostgreSQL, step 5: a trash for sessions, and recorded
-- redactions (see migrations/0005_retention.sql for the design; the same rules here).

ALTER TABLE sessions ADD COLUMN trashed_at text;
CREATE INDEX sessions_trashed ON sessions(trashed_at) WHERE trashed_at IS NOT NULL;

CREATE TABLE retention_policy (
    name  text COLLATE "C" PRIMARY KEY,
    value double precision NOT NULL
);

CREATE TABLE redactions (
    node        bigint PRIMARY KEY REFERENCES nodes(key) ON DELETE CASCADE,
    field       text NOT NULL,
    bytes       bigint NOT NULL,
    marker      text NOT NULL,
    reason      text NOT NULL,
    created_at  text NOT NULL
);

-- A session in the trash takes no new nodes.
CREATE FUNCTION sessiontree_not_in_trash() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT trashed_at FROM sessions WHERE key = NEW.session) IS NOT NULL THEN
        RAISE EXCEPTION 'the session is in the trash' USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER nodes_not_in_trash BEFORE INSERT ON nodes
FOR EACH ROW EXECUTE FUNCTION sessiontree_not_in_trash();

-- Nodes stay immutable, but for the one change a recorded redaction allows: the
-- payload's field now holds the recorded marker and every other field is as it was.
DROP TRIGGER nodes_immutable ON nodes;

CREATE FUNCTION sessiontree_node_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- Any update but a payload change is refused, a no-op one too (as in SQLite).
    IF (NEW.key, NEW.id, NEW.session, NEW.parent, NEW.depth, NEW.kind, NEW.created_at, NEW.run)
       IS DISTINCT FROM (OLD.key, OLD.id, OLD.session, OLD.parent, OLD.depth, OLD.kind, OLD.created_at, OLD.run)
       OR NEW.payload IS NOT DISTINCT FROM OLD.payload
    THEN
        RAISE EXCEPTION 'nodes are immutable' USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    IF NEW.payload IS DISTINCT FROM OLD.payload AND NOT EXISTS (
        SELECT 1 FROM redactions r WHERE r.node = OLD.key
          AND sessiontree_json(NEW.payload) ->> r.field = r.marker
          AND sessiontree_json(NEW.payload)::jsonb - r.field = sessiontree_json(OLD.payload)::jsonb - r.field)
    THEN
        RAISE EXCEPTION 'nodes are immutable (a payload changes only by a recorded redaction)'
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER nodes_immutable BEFORE UPDATE ON nodes
FOR EACH ROW EXECUTE FUNCTION sessiontree_node_update();
