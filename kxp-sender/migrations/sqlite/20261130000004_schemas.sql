-- Schema versions: one JSON Schema per (account, event type, api_version), checked against the
-- `data` of every event of that type and version at ingestion. `revision` changes on every
-- PUT, so a process can tell cheaply whether the validator it compiled is still current.

CREATE TABLE kxp_schemas (
    id          TEXT PRIMARY KEY,
    account_id  TEXT NOT NULL REFERENCES kxp_accounts (id),
    event_type  TEXT NOT NULL,
    api_version TEXT NOT NULL,
    schema      TEXT NOT NULL,                    -- the JSON Schema document as registered
    revision    TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    UNIQUE (account_id, event_type, api_version)
);
