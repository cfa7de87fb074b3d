-- sessiontree schema on PostgreSQL, step 4: full-text search over nodes.
--
-- The same two texts as the SQLite step (migrations/0004_search.sql): `text`, what
-- people wrote and read, and `tools`, what tools saw and said. Two generated
-- tsvector columns, each with a GIN index: search_text (text only, for
-- tools=False) and search_all (both). They are computed from the payload, so a
-- new node is indexed as it is inserted and a redaction re-indexes its node.
-- The 'simple' configuration: lower-cased words, no stemming and no stop words,
-- as SQLite's unicode61 tokenizer (which also folds diacritics; this does not).

-- PostgreSQL's JSON parser refuses what sessiontree's payloads may hold: the escape
-- \u0000 (jsonb and text cannot hold NUL) and escapes of lone surrogates. The payload
-- is parsed through sessiontree_json, which turns exactly those escapes into a space
-- (a backslash before them that is itself escaped is kept), so every payload parses.
CREATE FUNCTION sessiontree_json(payload text) RETURNS json
LANGUAGE sql IMMUTABLE AS $$
    SELECT regexp_replace(payload, '(?<!\\)((?:\\\\)*)\\u(0000|d[89a-f][0-9a-f]{2})', '\1 ', 'gi')::json
$$;

-- verify's check: sessiontree's payloads (with those escapes) are valid JSON.
CREATE OR REPLACE FUNCTION sessiontree_json_valid(value text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    PERFORM sessiontree_json(value);
    RETURN true;
EXCEPTION WHEN others THEN
    RETURN false;
END
$$;

CREATE FUNCTION sessiontree_node_text(kind text, payload text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN kind = 'message' AND sessiontree_json(payload) ->> 'role' = 'tool' THEN NULL
        WHEN kind = 'message' THEN sessiontree_json(payload) ->> 'content'
        WHEN kind IN ('pause', 'tool_start') THEN sessiontree_json(payload) ->> 'reason'
        WHEN kind = 'summary' THEN sessiontree_json(payload) ->> 'summary'
        WHEN kind = 'error' THEN sessiontree_json(payload) ->> 'message'
        ELSE payload
    END
$$;

CREATE FUNCTION sessiontree_node_tools(kind text, payload text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN kind = 'message' AND sessiontree_json(payload) ->> 'role' = 'tool' THEN
            coalesce((sessiontree_json(payload) ->> 'name') || ' ', '')
            || coalesce(sessiontree_json(payload) ->> 'content', '')
        WHEN kind = 'message' THEN sessiontree_json(payload) ->> 'tool_calls'
        WHEN kind IN ('pause', 'tool_start') THEN sessiontree_json(payload) ->> 'calls'
    END
$$;

ALTER TABLE nodes ADD COLUMN search_text tsvector GENERATED ALWAYS AS (
    to_tsvector('simple'::regconfig, coalesce(sessiontree_node_text(kind, payload), ''))
) STORED;

ALTER TABLE nodes ADD COLUMN search_all tsvector GENERATED ALWAYS AS (
    to_tsvector('simple'::regconfig,
        coalesce(sessiontree_node_text(kind, payload), '') || ' '
        || coalesce(sessiontree_node_tools(kind, payload), ''))
) STORED;

CREATE INDEX nodes_search_text ON nodes USING gin (search_text);
CREATE INDEX nodes_search_all ON nodes USING gin (search_all);
