CREATE VIEW IF NOT EXISTS {db}.experiment_metric_stale{on_cluster} AS
-- The visitors whose stored values are missing or stale (experiment_metric_stored), with
-- their latest refresh (0: none): what the consumer refreshes.
SELECT public_key, visitor_id, latest_refresh
FROM (
    SELECT toString(public_key) AS public_key, visitor_id
    FROM {db}.visitor_event_counts
    GROUP BY public_key, visitor_id
) AS counted
ANY LEFT JOIN (
    -- Any one of a visitor's rows: they all have the visitor's refresh and freshness.
    SELECT public_key, visitor_id, fresh, refresh_id AS latest_refresh
    FROM {db}.experiment_metric_stored
) AS stored USING (public_key, visitor_id)
WHERE fresh = 0
