-- sessiontree schema on PostgreSQL, step 6: nothing to change. The SQLite step queues
-- nodes for its full-text index; a GIN index here already defers its work (its pending
-- list) and is always consistent with what a query sees.
SELECT 1;
