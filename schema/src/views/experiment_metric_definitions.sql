-- Each experiment's metrics as last loaded: a metric added or changed applies to the
-- events already stored.
SELECT
    experiment_id, metric_id, role, position, kind,
    num_event, num_click_target, num_conversion, num_field, num_aggregate,
    den_event, den_click_target, den_conversion, den_field, den_aggregate,
    cap_value, cap_percentile, higher_is_better, cuped_lookback_days, definition,
    version, loaded_at
FROM {db}.experiment_metrics FINAL
WHERE (experiment_id, loaded_at) IN (
    SELECT experiment_id, max(loaded_at)
    FROM {db}.experiment_metrics FINAL
    GROUP BY experiment_id
)
