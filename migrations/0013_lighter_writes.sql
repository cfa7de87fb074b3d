-- sessiontree schema, step 13: nothing to change. The PostgreSQL step makes its writes
-- lighter (one stored search vector, one insert trigger); SQLite's FTS5 index and its
-- triggers are already one of each.
SELECT 1;
