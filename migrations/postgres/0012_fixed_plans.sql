-- sessiontree schema on PostgreSQL, step 12: walks whose plan cannot go wrong.
--
-- A path or a tree is a recursive walk: one index lookup per step, nothing else is
-- O(depth). The planner chooses the join of each step from the table's statistics,
-- and on a store that fills faster than autovacuum analyzes it those say nothing true:
-- a never-analyzed nodes table of 20,000 rows made it guess 315 children per node and
-- hash-join every step of a session's tree against a scan of the whole table (14.8 s
-- for a 2,100-node session, 24 ms once analyzed), and a plan kept from when the table
-- was tiny did the same to the path (8.8 s against 23 ms). These functions run the
-- walks with sequential scans, hash joins and merge joins off: each step is then an
-- index lookup whatever the statistics, which is the one plan that is right at every
-- size. A SET clause applies to the planning of the function's body; the plan, right by
-- construction, is made once per connection and kept (a generic plan). The write
-- functions below take the same settings for their lookups by key.

-- The walk up from node `from_key`, head first, to the root or to the first node whose
-- id is in `stop_ids` (that row flagged, `from_key`'s own included, and without its
-- payload: the caller has it cached). It carries only keys (a recursive query copies
-- what it carries); each node's columns are read once at the end.
CREATE FUNCTION sessiontree_path(from_key bigint, stop_ids text[])
RETURNS TABLE (id text, depth integer, kind text, payload text, created_at text, run text, stop boolean)
LANGUAGE plpgsql STABLE
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    RETURN QUERY
    WITH RECURSIVE p(key, parent, stop) AS (
        SELECT n.key, n.parent, n.id = ANY(stop_ids) FROM nodes n WHERE n.key = from_key
        UNION ALL
        SELECT n.key, n.parent, n.id = ANY(stop_ids)
        FROM p JOIN nodes n ON n.key = p.parent WHERE NOT p.stop
    )
    SELECT n.id, n.depth, n.kind, CASE WHEN p.stop THEN NULL ELSE n.payload END, n.created_at,
           (SELECT r.id FROM runs r WHERE r.key = n.run), p.stop
    FROM p JOIN nodes n ON n.key = p.key ORDER BY n.depth DESC;
END
$$;

-- The keys of every node of session `s`, walked down from its roots. ROWS: the caller's
-- own join to nodes is planned from this estimate, and a small one keeps it a lookup
-- per key.
CREATE FUNCTION sessiontree_tree(s bigint) RETURNS TABLE (key bigint)
LANGUAGE plpgsql STABLE ROWS 100
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    RETURN QUERY
    WITH RECURSIVE t(key) AS (
        SELECT n.key FROM nodes n WHERE n.session = s AND n.parent IS NULL
        UNION ALL
        SELECT n.key FROM t JOIN nodes n ON n.parent = t.key
    )
    SELECT t.key FROM t;
END
$$;

-- One search index, not two. Steps 4 to 11 kept a GIN index on search_text for
-- tools=False and one on search_text || search_tools for tools=True, so every word of
-- a message's text was indexed twice: with prose-like text the two took 5.3 KB of the
-- 8.5 KB a message cost. Now the one index, nodes_search_all, holds both vectors with
-- the text's words weighted A (the tool texts keep the default, D): tools=True matches
-- it as before (a query without weights ignores them), and tools=False matches the same
-- index with every word of its query restricted to weight A, which only the text's
-- words carry (sessiontree_text_query). The index keeps its name, the columns and every
-- stored byte stay as they are, and ranking still reads the unweighted vectors.
--
-- sessiontree_search(false) drops the index and both columns (no rewrite: the old rows
-- keep their dead bytes until the table is next rewritten, new ones have none);
-- sessiontree_search(true) adds them back, which rewrites the table once to compute them.

-- q with every lexeme restricted to weight A. A tsquery's text quotes each lexeme, doubling
-- the quotes and backslashes in it, so the pattern finds each whole quoted lexeme.
CREATE FUNCTION sessiontree_text_query(q tsquery) RETURNS tsquery
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT regexp_replace(q::text, '''(?:[^''\\]|''''|\\.)*''', '\&:A', 'g')::tsquery
$$;

CREATE FUNCTION sessiontree_search(enabled boolean) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF enabled THEN
        ALTER TABLE nodes
            ADD COLUMN IF NOT EXISTS search_text tsvector
                GENERATED ALWAYS AS (sessiontree_node_vector(kind, payload, false)) STORED,
            ADD COLUMN IF NOT EXISTS search_tools tsvector
                GENERATED ALWAYS AS (sessiontree_node_vector(kind, payload, true)) STORED;
        CREATE INDEX IF NOT EXISTS nodes_search_all ON nodes
            USING gin ((setweight(search_text, 'A') || search_tools));
    ELSE
        DROP INDEX IF EXISTS nodes_search_all;
        ALTER TABLE nodes DROP COLUMN IF EXISTS search_text, DROP COLUMN IF EXISTS search_tools;
    END IF;
END
$$;

DROP INDEX nodes_search_text;
DROP INDEX nodes_search_all;
SELECT sessiontree_search(true);

-- Writes in one round trip. An append was seven (BEGIN, the locks, the head, the key
-- reservation, the inserts, the head update, COMMIT) and a fork six; across a network
-- each costs what the network does. These functions do the common case of each whole,
-- in the one statement (its own transaction) that calls them, under the same advisory
-- locks as the statements they replace (the store's, shared, then the session's:
-- lock_class is the schema's first half of every lock key), through the same triggers
-- and constraints. Whatever is not the common case (no such branch yet, a head that is
-- not the one expected, a decision whose parent is not a pause, a name taken, a run of
-- another session) raises SQLSTATE SW001 having written nothing, and the caller then
-- takes the long way, which decides it again under its own locks and raises the error
-- it always did. A trigger's refusal (the trash, a second decision, a session deleted
-- meanwhile) reaches the caller as it is, and it does the same.

CREATE FUNCTION sessiontree_long_way(why text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'sessiontree: the long way: %', why USING ERRCODE = 'SW001';
END
$$;

-- Append nodes (ids, payloads: a chain, each the child of the one before) to branch
-- `branch_name`, under its head (which must be `expect` when that is given, and
-- `parent_id` when that is), moving the head to the last one. A run is recorded first
-- when `run_new`; else `run_id`, when given, names one of the session's. Returns the
-- head the chain went under (NULL for a branch with no node yet) and its depth.
CREATE FUNCTION sessiontree_append(
    lock_class integer, session_key bigint, branch_name text, expect text, parent_id text,
    node_kind text, ids text[], payloads text[], created text,
    run_id text, run_new boolean, run_model text, run_provider text, run_params text,
    run_usage text, run_latency double precision, run_finish text
) RETURNS TABLE (head_id text, head_depth integer)
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
DECLARE
    head bigint;
    head_kind text;
    run_key bigint;
    first bigint;
    i integer;
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
    first := sessiontree_reserve_node_keys(cardinality(ids));
    FOR i IN 1 .. cardinality(ids) LOOP
        INSERT INTO nodes (key, id, session, parent, depth, kind, payload, created_at, run)
        VALUES (first + i - 1, ids[i], session_key, CASE WHEN i = 1 THEN head ELSE first + i - 2 END,
                head_depth + i, node_kind, payloads[i], created, run_key);
    END LOOP;
    UPDATE branches SET head = first + cardinality(ids) - 1, updated_at = created
    WHERE session = session_key AND name = branch_name;
    RETURN NEXT;
END
$$;

-- A new branch `branch_name` (with `as_checkpoint`, a checkpoint of that name) at node
-- `at_ref` (a whole node id when `at_is_id`, else the name of a branch or checkpoint of
-- the session). Returns the node's id.
CREATE FUNCTION sessiontree_fork(
    lock_class integer, session_key bigint, branch_name text, at_ref text, at_is_id boolean,
    meta text, created text, as_checkpoint boolean
) RETURNS text
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
DECLARE
    node_key bigint;
    node_id text;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(lock_class, -2), pg_advisory_xact_lock(lock_class, (session_key % 2147483648)::integer);
    IF at_is_id THEN
        SELECT n.key, n.id INTO node_key, node_id FROM nodes n WHERE n.id = at_ref AND n.session = session_key;
    ELSE
        SELECT r.key, n.id INTO node_key, node_id FROM (
            SELECT b.head AS key FROM branches b WHERE b.session = session_key AND b.name = at_ref
            UNION ALL SELECT c.node FROM checkpoints c WHERE c.session = session_key AND c.name = at_ref
            LIMIT 1
        ) r JOIN nodes n ON n.key = r.key;
    END IF;
    IF node_key IS NULL THEN
        PERFORM sessiontree_long_way('no such node');
    END IF;
    IF EXISTS (SELECT 1 FROM branches b WHERE b.session = session_key AND b.name = branch_name)
       OR EXISTS (SELECT 1 FROM checkpoints c WHERE c.session = session_key AND c.name = branch_name) THEN
        PERFORM sessiontree_long_way('the name is taken');
    END IF;
    IF as_checkpoint THEN
        INSERT INTO checkpoints (session, name, node, created_at) VALUES (session_key, branch_name, node_key, created);
    ELSE
        INSERT INTO branches (session, name, head, metadata, created_at, updated_at)
        VALUES (session_key, branch_name, node_key, meta, created, created);
    END IF;
    RETURN node_id;
END
$$;
