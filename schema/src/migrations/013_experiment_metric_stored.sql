CREATE VIEW IF NOT EXISTS {db}.experiment_metric_stored{on_cluster} AS
-- One row per stored row (experiment_metric_values) of each visitor's latest refresh, with
-- `fresh`: 1 when no row of theirs came into `events` after that refresh and the metric
-- definitions and phase settings it used are still the current ones.
-- Only plain columns leave the view, and each level reads the one below only: a restart
-- attaches a view again with its columns listed, and 18.x then splits an Array(Tuple)
-- column into one per element, and drops a column another of the same SELECT is
-- computed from when the outer query does not ask for it.
SELECT
    public_key, visitor_id, row.1 AS refresh_id, row.2 AS experiment_id, row.3 AS phase,
    row.4 AS metric_id, row.5 AS variant_id, row.6 AS first_exposure_ms, row.7 AS value,
    row.8 AS denominator, row.9 AS pre_value, fresh
FROM (
    SELECT
        public_key, visitor_id, latest_rows,
        toUInt8(events = events_seen AND all_current = 1) AS fresh
    FROM (
        SELECT
            public_key, visitor_id, latest_rows,
            latest_rows[1].10 AS events_seen,
            arrayAll(r -> r.11 = 1, latest_rows) AS all_current
        FROM (
            SELECT
                public_key, visitor_id,
                arrayFilter((r, l) -> r.1 = l, rows,
                    arrayResize([latest], length(rows), latest)) AS latest_rows
            FROM (
                SELECT
                    public_key, visitor_id, max(refresh_id) AS latest,
                    groupArray((refresh_id, experiment_id, phase, metric_id, variant_id,
                        first_exposure_ms, value, denominator, pre_value, events_seen,
                        toUInt8(settings_hash = current_settings_hash))) AS rows
                FROM ({stored_with_settings_hash}) AS stored
                GROUP BY public_key, visitor_id
            ) AS per_visitor
        ) AS latest_of_visitor
    ) AS latest
    ANY LEFT JOIN (
        SELECT toString(public_key) AS public_key, visitor_id, sum(events) AS events
        FROM {db}.visitor_event_counts
        GROUP BY public_key, visitor_id
    ) AS counts USING (public_key, visitor_id)
) AS visitors
ARRAY JOIN latest_rows AS row
