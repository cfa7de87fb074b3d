-- sessiontree schema, step 9: nothing to change. The PostgreSQL step gives the tool
-- texts a tsvector of their own, so that a node's message text is tokenized once per
-- insert; the FTS5 index here already reads each text once.
SELECT 1;
