-- sessiontree schema, step 4: full-text search over nodes.
--
-- node_text is a view giving each node's searchable text in two columns:
--   text   what people wrote and read: a message's content, a summary's
--          summary, an error's message, a pause's reason, a note or a
--          decision whole;
--   tools  what tools saw and said: an assistant message's tool calls (names
--          and JSON arguments), a tool message's name and result, the calls a
--          pause or tool_start lists.
-- A tool message has no text column, so searching `text` alone (tools=False)
-- leaves tool names, arguments and results out. Content that is a list of
-- parts, tool calls and notes are indexed as their JSON text: the tokenizer
-- splits on the quotes and braces, so every word in them is found.
--
-- A payload that is not JSON (only a file edited by hand can hold one) has no
-- row in the view: it is not indexed, and inserting or deleting it still works.
-- The view uses json_extract only: FTS5 reads an external-content table with
-- virtual tables disabled, so json_each/json_tree cannot appear in it.
--
-- nodes_fts indexes that view as an external-content FTS5 table: the text is
-- not stored twice, snippets are cut from the view, and the index holds only
-- tokens. Nodes never change, so the view gives the same text for a node
-- whenever it is read: the delete trigger removes exactly the tokens the
-- insert trigger added. Existing nodes are indexed by 'rebuild' below.

CREATE VIEW node_text (key, text, tools) AS
SELECT key,
    CASE
        WHEN kind = 'message' AND json_extract(payload, '$.role') = 'tool' THEN NULL
        WHEN kind = 'message' THEN json_extract(payload, '$.content')
        WHEN kind IN ('pause', 'tool_start') THEN json_extract(payload, '$.reason')
        WHEN kind = 'summary' THEN json_extract(payload, '$.summary')
        WHEN kind = 'error' THEN json_extract(payload, '$.message')
        ELSE payload
    END,
    CASE
        WHEN kind = 'message' AND json_extract(payload, '$.role') = 'tool' THEN
            coalesce(json_extract(payload, '$.name') || ' ', '') || coalesce(json_extract(payload, '$.content'), '')
        WHEN kind = 'message' THEN json_extract(payload, '$.tool_calls')
        WHEN kind IN ('pause', 'tool_start') THEN json_extract(payload, '$.calls')
    END
FROM nodes
WHERE json_valid(payload);

CREATE VIRTUAL TABLE nodes_fts USING fts5(
    text, tools,
    content = 'node_text', content_rowid = 'key',
    tokenize = 'unicode61 remove_diacritics 2'
);

CREATE TRIGGER nodes_fts_insert AFTER INSERT ON nodes
BEGIN
    INSERT INTO nodes_fts (rowid, text, tools) SELECT key, text, tools FROM node_text WHERE key = NEW.key;
END;

-- BEFORE: the view still has the row, so the tokens to remove can be read.
CREATE TRIGGER nodes_fts_delete BEFORE DELETE ON nodes
BEGIN
    INSERT INTO nodes_fts (nodes_fts, rowid, text, tools)
    SELECT 'delete', key, text, tools FROM node_text WHERE key = OLD.key;
END;

INSERT INTO nodes_fts (nodes_fts) VALUES ('rebuild');
