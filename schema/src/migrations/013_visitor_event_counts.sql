CREATE TABLE IF NOT EXISTS {table} (
    public_key LowCardinality(String),
    visitor_id String,
    -- Rows of `events` inserted for the visitor, a redelivered copy included: it only
    -- grows, but for an erasure, so a stored value computed from fewer rows is stale.
    events     UInt64
)
ENGINE = {engine}
ORDER BY (public_key, visitor_id)
