CREATE TABLE IF NOT EXISTS {table} (
    public_key        LowCardinality(String),
    experiment_id     String,
    phase             UInt32,
    visitor_id        String,
    variant_id        String,
    first_exposure_ms Int64,
    -- One element per metric of the experiment that the refresh stored; none for a visitor
    -- with no exposure, or of an experiment with no metric definition.
    metrics Nested(
        metric_id   String,
        value       Float64,
        denominator Float64,
        pre_value   Float64
    ),
    -- The visitor's rows in `events` that the refresh read (visitor_event_counts.events
    -- when nothing came after), and the hash of the experiment's metric definitions and
    -- phase settings it used.
    events_seen       UInt64,
    settings_hash     UInt64,
    -- Which refresh wrote the row: a visitor's rows are those of their largest.
    refresh_id        UInt64
)
ENGINE = {engine}
ORDER BY (public_key, visitor_id, experiment_id, phase)
