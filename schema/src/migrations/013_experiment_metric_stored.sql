CREATE VIEW IF NOT EXISTS {db}.experiment_metric_stored{on_cluster} AS
-- One row per visitor with stored values (experiment_metric_values): the rows of their
-- latest refresh, and `fresh`: 1 when no row of theirs came into `events` after it and
-- the metric definitions and phase settings it used are still the current ones.
SELECT
    public_key, visitor_id, latest_rows,
    toUInt8(events = events_seen AND all_current = 1) AS fresh
FROM (
    SELECT
        public_key, visitor_id,
        arrayFilter((r, l) -> r.1 = l, rows, arrayResize([latest], length(rows), latest))
            AS latest_rows,
        latest_rows[1].10 AS events_seen,
        arrayAll(r -> r.11 = 1, latest_rows) AS all_current
    FROM (
        SELECT
            public_key, visitor_id, max(refresh_id) AS latest,
            groupArray((refresh_id, experiment_id, phase, metric_id, variant_id,
                first_exposure_ms, value, denominator, pre_value, events_seen,
                toUInt8(settings_hash = current_settings_hash))) AS rows
        FROM ({stored_with_settings_hash}) AS stored
        GROUP BY public_key, visitor_id
    ) AS per_visitor
) AS latest
ANY LEFT JOIN (
    SELECT toString(public_key) AS public_key, visitor_id, sum(events) AS events
    FROM {db}.visitor_event_counts
    GROUP BY public_key, visitor_id
) AS counts USING (public_key, visitor_id)
