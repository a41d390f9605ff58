-- name: create_versions
CREATE TABLE IF NOT EXISTS schema_migrations (
    version     integer PRIMARY KEY,
    applied_at  timestamptz NOT NULL DEFAULT now()
);

-- name: applied
SELECT version FROM schema_migrations ORDER BY version;

-- name: record
INSERT INTO schema_migrations (version) VALUES (%(version)s);
