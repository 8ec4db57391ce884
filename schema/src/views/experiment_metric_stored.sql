-- One row per stored metric (visitor_metric_values) of each visitor's latest refresh, or
-- one of metric '' for a visitor with none, with the visitor's `fresh`
-- (experiment_metric_freshness).
SELECT
    public_key, visitor_id, refresh_id, experiment_id, phase, metric_id, variant_id,
    first_exposure_ms, value, denominator, pre_value, pre_seen, fresh
FROM (
    SELECT
        CAST(public_key AS String) AS public_key, visitor_id, refresh_id, experiment_id,
        phase, metric_id, variant_id, first_exposure_ms, value, denominator, pre_value,
        pre_seen, visitor_key
    FROM (
        SELECT
            *, {visitor_key} AS visitor_key, metrics.metric_id AS metric_id,
            metrics.value AS value, metrics.denominator AS denominator,
            metrics.pre_value AS pre_value, metrics.pre_seen AS pre_seen
        FROM {db}.visitor_metric_values
        LEFT ARRAY JOIN metrics
    ) AS keyed
) AS stored
ANY INNER JOIN (
    SELECT visitor_key, latest_refresh AS refresh_id, fresh
    FROM {db}.experiment_metric_freshness
) AS latest USING (visitor_key, refresh_id)
