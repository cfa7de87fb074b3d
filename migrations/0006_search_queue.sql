-- sessiontree schema, step 6: the search index catches up in batches.
--
-- Step 4 indexed every node inside its own insert: FTS5 writes a new index
-- segment at every commit, which made a lone append about twice as costly. Now
-- an insert only queues the node's key in search_queue; the store indexes the
-- queue in one statement (one segment) when a writer has queued SEARCH_BATCH
-- nodes, when it closes, and before every search it runs on a store it can
-- write. A node is in exactly one of search_queue and nodes_fts. The index's
-- content view, node_text, leaves queued nodes out, so the view and the index
-- always agree (FTS5's integrity-check holds) and the delete and redaction
-- triggers only ever touch nodes the index holds (an external-content index must
-- never be told to delete what it never added). node_text_all gives every node's
-- text: the queue is indexed from it.

CREATE TABLE search_queue (key INTEGER PRIMARY KEY);

DROP VIEW node_text;

CREATE VIEW node_text_all (key, text, tools) AS
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


CREATE VIEW node_text (key, text, tools) AS
SELECT key, text, tools FROM node_text_all WHERE key NOT IN (SELECT key FROM search_queue);

DROP TRIGGER nodes_fts_insert;

CREATE TRIGGER nodes_search_queue AFTER INSERT ON nodes
BEGIN
    INSERT INTO search_queue (key) VALUES (NEW.key);
END;

DROP TRIGGER nodes_fts_delete;

CREATE TRIGGER nodes_fts_delete BEFORE DELETE ON nodes
BEGIN
    INSERT INTO nodes_fts (nodes_fts, rowid, text, tools)
    SELECT 'delete', key, text, tools FROM node_text
    WHERE key = OLD.key AND NOT EXISTS (SELECT 1 FROM search_queue q WHERE q.key = OLD.key);
    DELETE FROM search_queue WHERE key = OLD.key;
END;

DROP TRIGGER nodes_fts_redact_old;

CREATE TRIGGER nodes_fts_redact_old BEFORE UPDATE OF payload ON nodes
BEGIN
    INSERT INTO nodes_fts (nodes_fts, rowid, text, tools)
    SELECT 'delete', key, text, tools FROM node_text
    WHERE key = OLD.key AND NOT EXISTS (SELECT 1 FROM search_queue q WHERE q.key = OLD.key);
END;

DROP TRIGGER nodes_fts_redact_new;

CREATE TRIGGER nodes_fts_redact_new AFTER UPDATE OF payload ON nodes
BEGIN
    INSERT INTO nodes_fts (rowid, text, tools)
    SELECT key, text, tools FROM node_text
    WHERE key = NEW.key AND NOT EXISTS (SELECT 1 FROM search_queue q WHERE q.key = NEW.key);
END;
