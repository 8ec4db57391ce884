SELECT
    *,
    -- Everything besides the events that a visitor's stored values depend on, and the
    -- migration that last changed what a refresh stores (21: `pre_seen`): a stored value
    -- of an older one is stale, and the sweep computes it again.
    sipHash64(definitions_hash, conversion_window_hours, phase_end_ms, 21)
        AS current_settings_hash
FROM (
    SELECT *
    FROM ({rows}) AS hashed_rows
    ANY LEFT JOIN (
        SELECT
            experiment_id,
            sipHash64(toString(arraySort(groupArray((metric_id, num_event, num_click_target,
                num_conversion, num_field, toString(num_aggregate), den_event,
                den_click_target, den_conversion, den_field, toString(den_aggregate),
                cuped_lookback_days))))) AS definitions_hash
        FROM {db}.experiment_metric_definitions
        GROUP BY experiment_id
    ) AS definitions USING (experiment_id)
) AS with_definitions
ANY LEFT JOIN (
    SELECT experiment_id, phase, conversion_window_hours, phase_end_ms
    FROM {db}.experiment_phase_settings
) AS settings USING (experiment_id, phase)
