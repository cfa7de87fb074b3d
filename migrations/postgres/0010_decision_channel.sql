-- sessiontree schema on PostgreSQL, step 10: the NOTIFY channel of decisions, bounded.
-- A channel name is an identifier, at most 63 bytes; 'sessiontree:' || schema passed
-- that for a schema name of 52 characters or more, and pg_notify refused every
-- decision there. The name stays 'sessiontree:<schema>' when it fits (what listeners of
-- step 3 wait on); a longer one keeps 34 characters of the schema and 16 hex digits of
-- its SHA-256, so it stays unique per schema (and cannot equal a short one: it has a
-- second ':', which a schema name cannot have). Listeners ask this function for the name.
CREATE FUNCTION sessiontree_decision_channel(schema_name text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN octet_length('sessiontree:' || schema_name) <= 63
        THEN 'sessiontree:' || schema_name
        ELSE 'sessiontree:' || left(schema_name, 34) || ':'
            || left(encode(sha256(convert_to(schema_name, 'UTF8')), 'hex'), 16)
    END
$$;

CREATE OR REPLACE FUNCTION sessiontree_notify_decision() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(
        sessiontree_decision_channel(TG_TABLE_SCHEMA), (SELECT id FROM sessions WHERE key = NEW.session)
    );
    RETURN NULL;
END
$$;
