-- The visitors whose stored values are missing or stale (experiment_metric_freshness),
-- with their latest refresh (0: none): what the consumer refreshes.
SELECT public_key, visitor_id, latest_refresh
FROM (
    SELECT public_key, visitor_id, {visitor_key} AS visitor_key
    FROM (
        SELECT toString(public_key) AS public_key, visitor_id
        FROM {db}.visitor_event_counts
        GROUP BY public_key, visitor_id
    ) AS visitors
) AS counted
ANY LEFT JOIN (
    SELECT visitor_key, latest_refresh, fresh
    FROM {db}.experiment_metric_freshness
) AS stored USING (visitor_key)
WHERE fresh = 0
