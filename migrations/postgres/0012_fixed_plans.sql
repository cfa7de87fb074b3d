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
-- id is in `stop_ids` (that row flagged, `from_key`'s own included, and without its
-- payload: the caller has it cached). It carries only keys (a recursive query copies
-- what it carries); each node's columns are read once at the end.
CREATE FUNCTION sessiontree_path(from_key bigint, stop_ids text[])
RETURNS TABLE (id text, depth integer, kind text, payload text, created_at text, run text, stop boolean)
LANGUAGE sql STABLE
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
    WITH RECURSIVE p(key, parent, stop) AS (
        SELECT key, parent, id = ANY(stop_ids) FROM nodes WHERE key = from_key
        UNION ALL
        SELECT n.key, n.parent, n.id = ANY(stop_ids)
        FROM p JOIN nodes n ON n.key = p.parent WHERE NOT p.stop
    )
    SELECT n.id, n.depth, n.kind, CASE WHEN p.stop THEN NULL ELSE n.payload END, n.created_at,
           (SELECT r.id FROM runs r WHERE r.key = n.run), p.stop
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
