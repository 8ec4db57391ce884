SELECT
    public_key,
    experiment_id,
    variant_id,
    toDate(received_at) AS day,
    countIf(event_name = 'impression') AS impressions,
    countIf(conversion = 1 OR event_name = 'conversion') AS conversions,
    uniqExact(session_id) AS sessions,
    count() AS events
FROM {db}.events FINAL
WHERE test = 0
GROUP BY public_key, experiment_id, variant_id, day
