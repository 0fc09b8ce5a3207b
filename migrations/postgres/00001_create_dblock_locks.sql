-- dblock: one row per lock name, shared by every mode.
-- Fencing tokens (version) come from dblock_token_seq, so a name whose idle row the
-- reaper deleted still gets a token greater than every token issued before.

-- +goose Up
CREATE SEQUENCE dblock_token_seq AS bigint;

CREATE TABLE dblock_locks (
    name        text        NOT NULL PRIMARY KEY,
    owner       text,
    reentry     integer     NOT NULL DEFAULT 0,
    version     bigint      NOT NULL,
    mode        text,
    acquired_at timestamptz,
    expires_at  timestamptz,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    metadata    text,
    CONSTRAINT dblock_locks_name_len CHECK (octet_length(name) BETWEEN 1 AND 255),
    CONSTRAINT dblock_locks_owner_reentry CHECK ((owner IS NULL) = (reentry = 0))
);

CREATE INDEX dblock_locks_expires_at_idx ON dblock_locks (expires_at) WHERE expires_at IS NOT NULL;

-- +goose Down
DROP TABLE dblock_locks;
DROP SEQUENCE dblock_token_seq;
