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
-- size (a SET clause applies to the planning of the function's body, and keeps the
-- function from being inlined into a caller planned without it).

-- The walk up from node `from_key`, head first, to the root or to the first node whose
-- id is in `stop_ids` (that row flagged). It carries only keys (a recursive query
-- copies what it carries); each node's columns are read once at the end.
CREATE FUNCTION sessiontree_path(from_key bigint, stop_ids text[])
RETURNS TABLE (id text, depth integer, kind text, payload text, created_at text, run text, stop boolean)
LANGUAGE sql STABLE
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
    WITH RECURSIVE p(key, parent, stop) AS (
        SELECT key, parent, false FROM nodes WHERE key = from_key
        UNION ALL
        SELECT n.key, n.parent, n.id = ANY(stop_ids)
        FROM p JOIN nodes n ON n.key = p.parent WHERE NOT p.stop
    )
    SELECT n.id, n.depth, n.kind, n.payload, n.created_at, (SELECT r.id FROM runs r WHERE r.key = n.run), p.stop
    FROM p JOIN nodes n ON n.key = p.key ORDER BY n.depth DESC
$$;

-- The keys of every node of session `s`, walked down from its roots. ROWS: the caller's
-- own join to nodes is planned from this estimate, and a small one keeps it a lookup
-- per key.
CREATE FUNCTION sessiontree_tree(s bigint) RETURNS TABLE (key bigint)
LANGUAGE sql STABLE ROWS 100
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
    WITH RECURSIVE t(key) AS (
        SELECT n.key FROM nodes n WHERE n.session = s AND n.parent IS NULL
        UNION ALL
        SELECT n.key FROM t JOIN nodes n ON n.parent = t.key
    )
    SELECT t.key FROM t
$$;
