-- sessiontree schema, step 8: a count of redactions, for other processes' caches.
--
-- Nodes never change, so a Store keeps the paths it has read in memory (the path
-- cache) and only ever reads pointers fresh. A recorded redaction (step 5) is the
-- one change a node may undergo: the process that makes it clears its own cache,
-- but another process's cache would go on handing out the old payload. Every
-- redaction now counts up change_counts.redactions (it never counts down, not even
-- when a redacted node is deleted), so a store that sees the count differ from the
-- one it last saw clears its cache before it reads.

CREATE TABLE change_counts (
    one        INTEGER PRIMARY KEY CHECK (one = 1),
    redactions INTEGER NOT NULL
);
INSERT INTO change_counts (one, redactions) SELECT 1, count(*) FROM redactions;

CREATE TRIGGER redactions_counted AFTER INSERT ON redactions
BEGIN
    UPDATE change_counts SET redactions = redactions + 1;
END;
