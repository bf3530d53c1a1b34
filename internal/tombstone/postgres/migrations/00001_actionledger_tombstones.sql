-- The tombstones of gone ExternalActions (docs/tombstones.md): one row per (namespace, name), the same
-- fields as an ActionTombstone's spec. Times are whole seconds, as the API server keeps them.

-- +goose Up
CREATE TABLE IF NOT EXISTS actionledger_tombstones (
    namespace    text        NOT NULL,
    name         text        NOT NULL,
    key          text        NOT NULL,
    fingerprint  text        NOT NULL,
    phase        text        NOT NULL,
    status_code  integer     NOT NULL DEFAULT 0,
    response     jsonb,
    uid          text        NOT NULL DEFAULT '',
    completed_at timestamptz,
    expires_at   timestamptz NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, name)
);
CREATE INDEX IF NOT EXISTS actionledger_tombstones_expires_at ON actionledger_tombstones (expires_at);

-- +goose Down
DROP TABLE IF EXISTS actionledger_tombstones;
