-- memfleet invalidation helpers for PostgreSQL (load once per database; safe to reload).
--
-- The invalidator (`memfleet invalidator`) reads transactional logical-decoding messages
-- with the prefix 'memfleet' from a replication slot. PostgreSQL decodes a transaction's
-- messages only if it commits, in commit order, so a key is invalidated exactly when the
-- write that made it stale is durable -- never for a rolled-back write.

-- Invalidate keys when the current transaction commits:
--   SELECT memfleet_invalidate('user:42', 'profile:42');
CREATE OR REPLACE FUNCTION memfleet_invalidate(VARIADIC keys text[]) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF array_length(keys, 1) > 0 THEN
        PERFORM pg_logical_emit_message(true, 'memfleet', array_to_string(keys, ' '));
    END IF;
END
$$;

-- A key from a template and a row: memfleet_key('user:{id}', to_jsonb(NEW)) = 'user:42'.
CREATE OR REPLACE FUNCTION memfleet_key(template text, row_data jsonb) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    m text[];
    key text := template;
BEGIN
    FOR m IN SELECT regexp_matches(template, '\{([A-Za-z_][A-Za-z0-9_]*)\}', 'g') LOOP
        key := replace(key, '{' || m[1] || '}', coalesce(row_data ->> m[1], ''));
    END LOOP;
    RETURN key;
END
$$;

-- A row trigger that invalidates the keys its templates name, for the old row (UPDATE,
-- DELETE) and the new one (INSERT, UPDATE):
--   CREATE TRIGGER users_memfleet AFTER INSERT OR UPDATE OR DELETE ON users
--       FOR EACH ROW EXECUTE FUNCTION memfleet_invalidate_row('user:{id}', 'profile:{id}');
CREATE OR REPLACE FUNCTION memfleet_invalidate_row() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    template text;
    keys text[] := '{}';
BEGIN
    FOREACH template IN ARRAY TG_ARGV LOOP
        IF TG_OP IN ('UPDATE', 'DELETE') THEN
            keys := keys || memfleet_key(template, to_jsonb(OLD));
        END IF;
        IF TG_OP IN ('INSERT', 'UPDATE') THEN
            keys := keys || memfleet_key(template, to_jsonb(NEW));
        END IF;
    END LOOP;
    PERFORM memfleet_invalidate(VARIADIC ARRAY(SELECT DISTINCT k FROM unnest(keys) AS k));
    RETURN NULL;
END
$$;
