(
    -- Each experiment's metrics in arrays, an element per metric, in one order (by
    -- position, then id) wherever they are read.
    SELECT
        experiment_id,
        arrayMap(d -> d.1, definitions) AS positions,
        arrayMap(d -> d.2, definitions) AS metric_ids,
        arrayMap(d -> d.3, definitions) AS roles,
        arrayMap(d -> d.4, definitions) AS kinds,
        arrayMap(d -> d.5, definitions) AS highers,
        arrayMap(d -> d.6, definitions) AS cap_values,
        arrayMap(d -> d.7, definitions) AS cap_percentiles,
        arrayMap(d -> d.8, definitions) AS lookbacks,
        arrayMap(d -> d.9, definitions) AS n_events,
        arrayMap(d -> d.10, definitions) AS n_targets,
        arrayMap(d -> d.11, definitions) AS n_conversions,
        arrayMap(d -> d.12, definitions) AS n_fields,
        arrayMap(d -> d.13, definitions) AS n_aggregates,
        arrayMap(d -> d.14, definitions) AS d_events,
        arrayMap(d -> d.15, definitions) AS d_targets,
        arrayMap(d -> d.16, definitions) AS d_conversions,
        arrayMap(d -> d.17, definitions) AS d_fields,
        arrayMap(d -> d.18, definitions) AS d_aggregates
    FROM (
        SELECT
            experiment_id,
            arraySort(groupArray((position, metric_id, toString(role), toString(kind),
                higher_is_better, cap_value, cap_percentile, cuped_lookback_days, num_event,
                num_click_target, num_conversion, num_field, toString(num_aggregate),
                den_event, den_click_target, den_conversion, den_field,
                toString(den_aggregate)))) AS definitions
        FROM {db}.experiment_metric_definitions
        GROUP BY experiment_id
    ) AS listed
)
