-- sessiontree schema, step 7: the search index catches up to a watermark.
--
-- Step 6 queued each inserted node's key in a table: one more B-tree write and a
-- trigger for every node, which made an append a fifth dearer. Node keys only
-- grow (a new key is one past the largest), so "not yet indexed" needs no list:
-- it is every node above search_state.indexed_through. An insert writes nothing
-- for search; the store indexes the nodes above the watermark in one statement
-- (one FTS5 segment) and moves the watermark, when a writer has inserted
-- SEARCH_BATCH nodes, when it closes, and before a search. A node is indexed
-- exactly when its key is at or below the watermark; the content view
-- (node_text) holds exactly those, so the index and its view always agree.
--
-- The watermark never passes the largest key: when a delete removes the top of
-- the key range, the watermark follows it down, so a freed key given again to a
-- new node is above the watermark (not indexed) and never mistaken for an
-- indexed one. Deletes and redactions touch the index only for indexed nodes
-- (an external-content index must never be told to delete what it never added).
--
-- A NULL watermark means the index is off (`sessiontree search-index off`): the index
-- is empty, the view is empty, every comparison with NULL is false, so no trigger
-- touches the index, and nothing is pending. Turning it on sets the watermark to 0,
-- which makes every node pending, and indexes them.

CREATE TABLE search_state (
    one             INTEGER PRIMARY KEY CHECK (one = 1),
    indexed_through INTEGER
);

-- What step 6 left queued is indexed now, so every node is at or below the watermark.
INSERT INTO nodes_fts (rowid, text, tools)
SELECT key, text, tools FROM node_text_all WHERE key IN (SELECT key FROM search_queue);
INSERT INTO search_state (one, indexed_through) SELECT 1, coalesce(max(key), 0) FROM nodes;

DROP TRIGGER nodes_search_queue;
DROP TRIGGER nodes_fts_delete;
DROP TRIGGER nodes_fts_redact_old;
DROP TRIGGER nodes_fts_redact_new;
DROP VIEW node_text;
DROP TABLE search_queue;

CREATE VIEW node_text (key, text, tools) AS
SELECT key, text, tools FROM node_text_all WHERE key <= (SELECT indexed_through FROM search_state);

-- BEFORE: the view still has the row, so the tokens to remove can be read.
CREATE TRIGGER nodes_fts_delete BEFORE DELETE ON nodes
WHEN OLD.key <= (SELECT indexed_through FROM search_state)
BEGIN
    INSERT INTO nodes_fts (nodes_fts, rowid, text, tools)
    SELECT 'delete', key, text, tools FROM node_text WHERE key = OLD.key;
END;

CREATE TRIGGER nodes_watermark_follows AFTER DELETE ON nodes
WHEN OLD.key >= (SELECT indexed_through FROM search_state)
BEGIN
    UPDATE search_state SET indexed_through = (SELECT coalesce(max(key), 0) FROM nodes)
    WHERE indexed_through > (SELECT coalesce(max(key), 0) FROM nodes);
END;

CREATE TRIGGER nodes_fts_redact_old BEFORE UPDATE OF payload ON nodes
WHEN OLD.key <= (SELECT indexed_through FROM search_state)
BEGIN
    INSERT INTO nodes_fts (nodes_fts, rowid, text, tools)
    SELECT 'delete', key, text, tools FROM node_text WHERE key = OLD.key;
END;

CREATE TRIGGER nodes_fts_redact_new AFTER UPDATE OF payload ON nodes
WHEN NEW.key <= (SELECT indexed_through FROM search_state)
BEGIN
    INSERT INTO nodes_fts (rowid, text, tools) SELECT key, text, tools FROM node_text WHERE key = NEW.key;
END;
