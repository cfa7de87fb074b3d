-- sessiontree schema on PostgreSQL, step 11: a node of any size can be stored; its
-- search vectors take what fits.
--
-- A tsvector holds at most 1 MB (1,048,575 bytes) of words and positions, and the
-- generated columns of steps 4 and 9 took a node's texts whole: 87,382 distinct
-- 8-letter words (786 KB of text) made the insert itself fail, so a long tool result or
-- model reply could not be stored at all. SQLite's FTS5 has no such limit; whatever it
-- stores, this schema must store too.
--
-- Now each column holds sessiontree_node_vector, the vector of its text (the message
-- text, or the tool texts) bounded so that the two, joined for the nodes_search_all
-- index, stay under the limit: the texts share 1,048,000 bytes in proportion to their
-- lengths. A text that exceeds its share is indexed from its start up to a prefix, cut
-- before a word, that fits: the first try takes the whole text, each next one aims just
-- under the share from the size the last try measured. The node's payload is stored
-- whole whatever is indexed.
-- Dropping the columns and adding them again rewrites the nodes table once.

-- body's first `keep` characters, less a word the cut would split (looked for in the 100
-- characters before the cut: a longer word is cut where it is).
CREATE FUNCTION sessiontree_prefix(body text, keep integer) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    split integer;
BEGIN
    IF length(body) <= keep THEN
        RETURN body;
    END IF;
    split := length(substring(substr(body, greatest(keep - 99, 1), least(keep, 100) + 1) FROM '\S*$'));
    RETURN left(body, CASE WHEN split = 0 THEN keep ELSE keep + 1 - split END);
END
$$;

-- The search vector of a node's text (tools = false) or of its tool texts (tools = true).
-- No vector takes more than 6 bytes a character of text (a word of one 3- or 4-byte
-- character and its separator: the lexeme, its position, its entry), and the payload
-- holds both texts, so a payload of up to 174,000 characters is tokenized once, as
-- before; only a longer one is measured.
CREATE FUNCTION sessiontree_node_vector(kind text, payload text, tools boolean) RETURNS tsvector
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    whole constant integer := 1048000;  -- both vectors together: under tsvector's 1,048,575
    worst constant integer := 6;
    body text := CASE WHEN tools THEN sessiontree_node_tools(kind, payload)
                      ELSE sessiontree_node_text(kind, payload) END;
    own integer;
    other integer;
    share integer;
    keep integer;
    vector tsvector;
    size integer;
BEGIN
    IF length(payload)::bigint * worst <= whole THEN
        RETURN to_tsvector('simple'::regconfig, coalesce(body, ''));
    END IF;
    own := coalesce(length(body), 0);
    IF own = 0 THEN
        RETURN ''::tsvector;
    END IF;
    other := coalesce(length(CASE WHEN tools THEN sessiontree_node_text(kind, payload)
                                  ELSE sessiontree_node_tools(kind, payload) END), 0);
    share := (whole::bigint * own / (own + other))::integer;
    keep := own;
    LOOP
        IF keep::bigint * worst <= share THEN  -- fits whatever the words are
            RETURN to_tsvector('simple'::regconfig, sessiontree_prefix(body, keep));
        END IF;
        BEGIN
            vector := to_tsvector('simple'::regconfig, sessiontree_prefix(body, keep));
            size := pg_column_size(vector);
        EXCEPTION WHEN program_limit_exceeded THEN  -- over 1 MB: how far over is unknown
            size := NULL;
        END;
        IF size <= share THEN
            RETURN vector;
        END IF;
        -- A vector grows about as its text does: aim a little under the share.
        keep := CASE WHEN size IS NULL THEN keep / 2
                     ELSE (keep::bigint * share * 19 / 20 / size)::integer END;
        keep := greatest(keep, share / worst);
    END LOOP;
END
$$;

DROP INDEX nodes_search_all;
DROP INDEX nodes_search_text;
ALTER TABLE nodes DROP COLUMN search_text, DROP COLUMN search_tools;
ALTER TABLE nodes
    ADD COLUMN search_text tsvector GENERATED ALWAYS AS (sessiontree_node_vector(kind, payload, false)) STORED,
    ADD COLUMN search_tools tsvector GENERATED ALWAYS AS (sessiontree_node_vector(kind, payload, true)) STORED;
CREATE INDEX nodes_search_text ON nodes USING gin (search_text);
CREATE INDEX nodes_search_all ON nodes USING gin ((search_text || search_tools));
