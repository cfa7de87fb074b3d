-- sessiontree schema, step 11: nothing to change. The PostgreSQL step bounds its search
-- vectors, which a tsvector's 1 MB limit made a limit on what a node could hold; FTS5
-- indexes a text of any length.
SELECT 1;
