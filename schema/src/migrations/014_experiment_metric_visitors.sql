CREATE VIEW IF NOT EXISTS {db}.experiment_metric_visitors{on_cluster} AS
-- One row per exposed visitor and metric of their experiment: the values stored by the
-- consumer's refresh where they are fresh (experiment_metric_freshness), computed from
-- the events for every other visitor. So the results are those of the events as they are
-- now, whether or not a refresh has run.
SELECT
    public_key, experiment_id, phase, visitor_id, variant_id, metric_id, role, position,
    kind, higher_is_better, cap_value, cap_percentile, cuped_lookback_days,
    first_exposure_ms, value, denominator, pre_value
FROM (
    -- Each column cast, for UNION ALL's same types (18.x: a function of a
    -- LowCardinality column is one).
    SELECT
        CAST(public_key AS String) AS public_key, experiment_id, phase, visitor_id,
        variant_id, metric_id, first_exposure_ms, value, denominator, pre_value
    FROM {db}.experiment_metric_values
    WHERE ({visitor_key}, refresh_id) GLOBAL IN (
        SELECT visitor_key, latest_refresh
        FROM {db}.experiment_metric_freshness
        WHERE fresh = 1
    )
    UNION ALL
    SELECT
        CAST(public_key AS String) AS public_key,
        CAST(experiment_id AS String) AS experiment_id, phase, visitor_id,
        CAST(variant_id AS String) AS variant_id, CAST(metric_id AS String) AS metric_id,
        first_exposure_ms, value, denominator, pre_value
    FROM ({metric_values_of_stale_14}) AS computed
) AS metric_values
ALL INNER JOIN (
    SELECT
        experiment_id, metric_id, toString(role) AS role, position, toString(kind) AS kind,
        higher_is_better, cap_value, cap_percentile, cuped_lookback_days
    FROM {db}.experiment_metric_definitions
) AS definitions USING (experiment_id, metric_id)
