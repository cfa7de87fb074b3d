-- sessiontree schema on PostgreSQL, step 9: each text is tokenized once per insert.
--
-- Step 4's search_all held the message text and the tool texts as one generated
-- tsvector, so every insert ran to_tsvector over the message text twice (once for
-- search_text, once for search_all): about 130 µs of a 1 KB message, and the text's
-- words were stored twice in the row. Now search_tools holds the tool texts alone,
-- and the index behind tools=True is an expression index on search_text ||
-- search_tools: joining two vectors only shifts the right one's positions, so
-- phrases, ranking and snippets are as before. The index keeps its name.
-- Dropping the column and adding the new one rewrites the nodes table once.

DROP INDEX nodes_search_all;
ALTER TABLE nodes DROP COLUMN search_all;
ALTER TABLE nodes ADD COLUMN search_tools tsvector GENERATED ALWAYS AS (
    to_tsvector('simple'::regconfig, coalesce(sessiontree_node_tools(kind, payload), ''))
) STORED;
CREATE INDEX nodes_search_all ON nodes USING gin ((search_text || search_tools));
