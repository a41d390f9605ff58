-- name: create_versions
CREATE TABLE IF NOT EXISTS schema_migrations (
    version     INTEGER PRIMARY KEY,
    applied_at  TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP
);

-- name: applied
SELECT version FROM schema_migrations ORDER BY version;

-- name: record
INSERT INTO schema_migrations (version) VALUES (:version);
