CREATE TABLE IF NOT EXISTS {table} (
    public_key        LowCardinality(String),
    experiment_id     String,
    phase             UInt32,
    visitor_id        String,
    -- '' for the row that records a refresh of a visitor with no metric to store there
    -- (no exposure, or an experiment with no metric definition).
    metric_id         String,
    variant_id        String,
    first_exposure_ms Int64,
    value             Float64,
    denominator       Float64,
    pre_value         Float64,
    -- The visitor's rows in `events` that the refresh read (visitor_event_counts.events
    -- when nothing came after), and the hash of the experiment's metric definitions and
    -- phase settings it used.
    events_seen       UInt64,
    settings_hash     UInt64,
    -- Which refresh wrote the row: a visitor's rows are those of their largest.
    refresh_id        UInt64
)
ENGINE = {engine}
ORDER BY (public_key, visitor_id, experiment_id, phase, metric_id)
