-- sessiontree schema, step 12: nothing to change. The PostgreSQL step pins the plans of
-- its recursive walks, which its planner chose from statistics a fast-filling store does
-- not have yet; SQLite's planner takes the index for these walks without statistics.
SELECT 1;
