-- sessiontree schema on PostgreSQL, step 7: nothing to change. The SQLite step replaces
-- its search queue with a watermark; the generated tsvector columns and GIN indexes here
-- never had a queue.
SELECT 1;
