-- sessiontree schema on PostgreSQL, step 13: lighter writes, one stored search vector.
--
-- Measured on a quiet machine (pg_stat_user_functions), appending a turn of 4 ~1 KB
-- messages cost the server 1.1 ms, most of it in what each row does besides being
-- stored: two generated vectors, each of which parsed the payload as JSON two or three
-- times (sessiontree_json runs a regular expression over the whole payload on every
-- call), and two BEFORE INSERT triggers, each a function call and a lookup of the
-- session. And the stored vectors, with the one index, were 5.3 KB of the 7 KB a
-- message cost with prose-like text.

-- The whole search vector of a node, parsed once: the text's words weighted A, the tool
-- texts' the default (D), positions as `search_text || search_tools` had them. A payload
-- too long for the one-pass bound is split between the two as step 11 does.
CREATE FUNCTION sessiontree_node_vectors(kind text, payload text) RETURNS tsvector
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    j json;
    body text;
    tools text;
BEGIN
    IF length(payload)::bigint * 6 > 1048000 THEN
        RETURN setweight(sessiontree_node_vector(kind, payload, false), 'A')
               || sessiontree_node_vector(kind, payload, true);
    END IF;
    IF kind = 'message' THEN
        j := sessiontree_json(payload);
        IF j ->> 'role' = 'tool' THEN
            tools := coalesce((j ->> 'name') || ' ', '') || coalesce(j ->> 'content', '');
        ELSE
            body := j ->> 'content';
            tools := j ->> 'tool_calls';
        END IF;
    ELSIF kind IN ('pause', 'tool_start') THEN
        j := sessiontree_json(payload);
        body := j ->> 'reason';
        tools := j ->> 'calls';
    ELSIF kind = 'summary' THEN
        body := sessiontree_json(payload) ->> 'summary';
    ELSIF kind = 'error' THEN
        body := sessiontree_json(payload) ->> 'message';
    ELSE
        body := payload;
    END IF;
    RETURN setweight(to_tsvector('simple'::regconfig, coalesce(body, '')), 'A')
           || to_tsvector('simple'::regconfig, coalesce(tools, ''));
END
$$;

-- One column and its index, in place of two columns and an expression index over them.
-- A GIN index takes new entries into its pending list and merges them into the tree
-- when the list passes gin_pending_list_limit. At a few turns' worth (64 kB, against
-- the 4 MB default) the list's pages stay few: the pages a long list once took stay in
-- the index after it is merged (free for its reuse, but on disk: at 200 turns of
-- prose-like text most of the index's 3.5 KB a message), and no search scans a long
-- unmerged list. The list's size costs an append nothing measurable. Adding the column
-- rewrites `nodes` once, which also drops the bytes of the two old columns.
CREATE OR REPLACE FUNCTION sessiontree_search(enabled boolean) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF enabled THEN
        ALTER TABLE nodes ADD COLUMN IF NOT EXISTS search_vector tsvector
            GENERATED ALWAYS AS (sessiontree_node_vectors(kind, payload)) STORED;
        CREATE INDEX IF NOT EXISTS nodes_search_all ON nodes
            USING gin (search_vector) WITH (gin_pending_list_limit = 64);
    ELSE
        DROP INDEX IF EXISTS nodes_search_all;
        ALTER TABLE nodes DROP COLUMN IF EXISTS search_vector;
    END IF;
END
$$;

DO $$
DECLARE
    was_on constant boolean := to_regclass('nodes_search_all') IS NOT NULL;
BEGIN
    DROP INDEX IF EXISTS nodes_search_all;
    ALTER TABLE nodes DROP COLUMN IF EXISTS search_text, DROP COLUMN IF EXISTS search_tools;
    IF was_on THEN  -- on stays on, off stays off
        PERFORM sessiontree_search(true);
    END IF;
END
$$;

-- One BEFORE INSERT trigger, in place of nodes_in_session and nodes_not_in_trash: one
-- function call and one read of the session a row. The checks, their order (the
-- parent's first, as the two triggers fired by name) and their messages are theirs.
CREATE FUNCTION sessiontree_node_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    trashed text;
BEGIN
    IF NEW.parent IS NOT NULL THEN
        IF NOT EXISTS (SELECT 1 FROM nodes p
                       WHERE p.key = NEW.parent AND p.session = NEW.session AND p.depth = NEW.depth - 1) THEN
            RAISE EXCEPTION 'a parent must be a node of the same session, one level up'
                USING ERRCODE = 'integrity_constraint_violation';
        END IF;
        trashed := (SELECT s.trashed_at FROM sessions s WHERE s.key = NEW.session);
    ELSE
        SELECT s.trashed_at INTO trashed FROM sessions s WHERE s.key = NEW.session;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'a node must belong to an existing session'
                USING ERRCODE = 'integrity_constraint_violation';
        END IF;
    END IF;
    IF trashed IS NOT NULL THEN
        RAISE EXCEPTION 'the session is in the trash' USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END
$$;

DROP TRIGGER nodes_in_session ON nodes;
DROP TRIGGER nodes_not_in_trash ON nodes;
DROP FUNCTION sessiontree_node_in_session();
DROP FUNCTION sessiontree_not_in_trash();
CREATE TRIGGER nodes_in_session BEFORE INSERT ON nodes
FOR EACH ROW EXECUTE FUNCTION sessiontree_node_insert();

-- The write functions keep one plan per statement from their first call on a connection
-- (a custom plan for each of the first five calls was planning work on every turn of a
-- young connection), and never compile a statement to machine code: with the scans
-- they turn off, a plan's cost estimate can pass jit_above_cost whatever it does. The
-- append inserts its chain in one statement instead of one a node; the rest is step
-- 12's, unchanged.
CREATE OR REPLACE FUNCTION sessiontree_append(
    lock_class integer, session_key bigint, branch_name text, expect text, parent_id text,
    node_kind text, ids text[], payloads text[], created text,
    run_id text, run_new boolean, run_model text, run_provider text, run_params text,
    run_usage text, run_latency double precision, run_finish text
) RETURNS TABLE (head_id text, head_depth integer)
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
SET plan_cache_mode = force_generic_plan SET jit = off
AS $$
DECLARE
    head bigint;
    head_kind text;
    run_key bigint;
    first bigint;
    count integer := cardinality(ids);
BEGIN
    PERFORM pg_advisory_xact_lock_shared(lock_class, -2), pg_advisory_xact_lock(lock_class, (session_key % 2147483648)::integer);
    SELECT b.head, n.id, n.depth, n.kind INTO head, head_id, head_depth, head_kind
    FROM branches b LEFT JOIN nodes n ON n.key = b.head
    WHERE b.session = session_key AND b.name = branch_name;
    IF NOT FOUND THEN
        PERFORM sessiontree_long_way('no such branch');
    END IF;
    IF expect IS NOT NULL AND expect IS DISTINCT FROM head_id THEN
        PERFORM sessiontree_long_way('the head moved');
    END IF;
    IF parent_id IS NOT NULL AND parent_id IS DISTINCT FROM head_id THEN
        PERFORM sessiontree_long_way('the parent is not the head');
    END IF;
    IF node_kind = 'decision' AND head_kind IS DISTINCT FROM 'pause' THEN
        PERFORM sessiontree_long_way('a decision not under a pause');
    END IF;
    IF run_new THEN
        INSERT INTO runs (id, session, model, provider, params, usage, latency_ms, finish_reason, created_at)
        VALUES (run_id, session_key, run_model, run_provider, run_params, run_usage, run_latency, run_finish, created)
        RETURNING key INTO run_key;
    ELSIF run_id IS NOT NULL THEN
        SELECT r.key INTO run_key FROM runs r WHERE r.id = run_id AND r.session = session_key;
        IF NOT FOUND THEN
            PERFORM sessiontree_long_way('no such run in the session');
        END IF;
    END IF;
    head_depth := coalesce(head_depth, -1);
    first := sessiontree_reserve_node_keys(count);
    -- In order of i, so that each row's parent is in the table before its trigger looks.
    INSERT INTO nodes (key, id, session, parent, depth, kind, payload, created_at, run)
    SELECT first + c.i - 1, c.id, session_key, CASE WHEN c.i = 1 THEN head ELSE first + c.i - 2 END,
           head_depth + c.i, node_kind, c.payload, created, run_key
    FROM unnest(ids, payloads) WITH ORDINALITY AS c(id, payload, i) ORDER BY c.i;
    UPDATE branches SET head = first + count - 1, updated_at = created
    WHERE session = session_key AND name = branch_name;
    RETURN NEXT;
END
$$;

ALTER FUNCTION sessiontree_fork(integer, bigint, text, text, boolean, text, text, boolean)
    SET plan_cache_mode = force_generic_plan SET jit = off;
ALTER FUNCTION sessiontree_path(bigint, text[]) SET jit = off;
ALTER FUNCTION sessiontree_tree(bigint) SET jit = off;

-- A read of a branch or checkpoint, `ref_name` of session `s`: its node's key, the
-- redaction count when asked for (the path cache checks it), and the walk up from the
-- node to the nearest of `stop_ids` (sessiontree_path). No rows: no such ref, or a
-- branch with no node yet. Until step 12 this was a statement of the client's, which
-- the server planned again on every call (0.13 ms, twice what running it took): as a
-- function its plan is made once a connection.
CREATE FUNCTION sessiontree_ref_walk(s bigint, ref_name text, stop_ids text[], with_redactions boolean)
RETURNS TABLE (key bigint, redactions bigint, id text, depth integer, kind text, payload text,
               created_at text, run text, stop boolean)
LANGUAGE plpgsql STABLE
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
SET plan_cache_mode = force_generic_plan SET jit = off
AS $$
DECLARE
    at bigint;
BEGIN
    SELECT b.head INTO at FROM branches b WHERE b.session = s AND b.name = ref_name;
    IF NOT FOUND THEN
        SELECT c.node INTO at FROM checkpoints c WHERE c.session = s AND c.name = ref_name;
    END IF;
    IF at IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT at, CASE WHEN with_redactions THEN (SELECT c.redactions::bigint FROM change_counts c) END, p.*
    FROM sessiontree_path(at, stop_ids) p;
END
$$;

-- A decision in one round trip (it took 20 statements, 25 with a second branch at the
-- pause): the decision node `decision_id` under pause `pause_id` of session `session_id`,
-- and every branch standing at the pause moved to it, under the locks an append takes.
-- Returns how many branches moved. The caller has checked the decision against the pause
-- and its deadline; anything else (no such pause in the session, not a pause, no branch
-- at it) takes the long way, which says what is wrong, and a second decision is refused
-- by the unique index (nodes_one_decision), the trash by the insert trigger.
CREATE FUNCTION sessiontree_decide(
    lock_class integer, session_id text, pause_id text, decision_id text, payload text, created text
) RETURNS integer
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
SET plan_cache_mode = force_generic_plan SET jit = off
AS $$
DECLARE
    s bigint;
    pause_key bigint;
    pause_depth integer;
    pause_kind text;
    decision_key bigint;
    moved integer;
BEGIN
    SELECT ss.key INTO s FROM sessions ss WHERE ss.id = session_id;
    IF NOT FOUND THEN
        PERFORM sessiontree_long_way('no such session');
    END IF;
    PERFORM pg_advisory_xact_lock_shared(lock_class, -2), pg_advisory_xact_lock(lock_class, (s % 2147483648)::integer);
    SELECT n.key, n.depth, n.kind INTO pause_key, pause_depth, pause_kind
    FROM nodes n WHERE n.id = pause_id AND n.session = s;
    IF NOT FOUND OR pause_kind <> 'pause' THEN
        PERFORM sessiontree_long_way('no such pause in the session');
    END IF;
    IF NOT EXISTS (SELECT 1 FROM branches b WHERE b.session = s AND b.head = pause_key) THEN
        PERFORM sessiontree_long_way('no branch stands at the pause');
    END IF;
    decision_key := sessiontree_reserve_node_keys(1);
    INSERT INTO nodes (key, id, session, parent, depth, kind, payload, created_at, run)
    VALUES (decision_key, decision_id, s, pause_key, pause_depth + 1, 'decision', payload, created, NULL);
    UPDATE branches SET head = decision_key, updated_at = created WHERE session = s AND head = pause_key;
    GET DIAGNOSTICS moved = ROW_COUNT;
    RETURN moved;
END
$$;
