-- sessiontree schema, step 10: nothing to change. The PostgreSQL step names the NOTIFY
-- channel of decisions so that it fits PostgreSQL's 63-byte identifiers whatever the
-- schema's name; SQLite's workers poll.
SELECT 1;
