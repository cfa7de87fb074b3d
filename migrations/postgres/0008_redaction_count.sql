-- sessiontree schema on PostgreSQL, step 8: a count of redactions, for other processes'
-- caches (see migrations/0008_redaction_count.sql for the design; the same rules here).

CREATE TABLE change_counts (
    one        integer PRIMARY KEY CHECK (one = 1),
    redactions bigint NOT NULL
);
INSERT INTO change_counts (one, redactions) SELECT 1, count(*) FROM redactions;

CREATE FUNCTION sessiontree_count_redaction() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE change_counts SET redactions = redactions + 1;
    RETURN NULL;
END
$$;

CREATE TRIGGER redactions_counted AFTER INSERT ON redactions
FOR EACH ROW EXECUTE FUNCTION sessiontree_count_redaction();
