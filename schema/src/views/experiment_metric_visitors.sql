-- One row per exposed visitor and metric of their experiment: each visitor's values of
-- their latest stored refresh (experiment_metric_values), but where they are computed
-- from the events: the visitors whose stored values are not fresh, or whose latest
-- refresh is younger than the settling time. So the results are those of the events as
-- they are now, whether or not a refresh has run.
--
-- Each visitor comes from one side even when a refresh or an event lands while the query
-- runs, though the stored rows, the latest refreshes and the stale visitors are each read
-- at their own moment:
-- - A visitor computed from the events wins over their stored rows (the join on every
--   column of a row's identity): an event landing after the stale list counts them once.
-- - A visitor left out of the computed ones had a fresh refresh older than the settling
--   time: it landed before the stored rows were read (the query's start), and it is the
--   latest settled refresh when the latest refreshes are read (after the stale list, the
--   join being built first).
SELECT
    public_key, experiment_id, phase, visitor_id, variant_id, metric_id, role, position,
    kind, higher_is_better, cap_value, cap_percentile, cuped_lookback_days,
    first_exposure_ms, value, denominator, pre_value
FROM (
    SELECT
        public_key, experiment_id, phase, visitor_id, metric_id,
        if(computed = 1, computed_variant_id, variant_id) AS variant_id,
        if(computed = 1, computed_first_exposure_ms, first_exposure_ms)
            AS first_exposure_ms,
        if(computed = 1, computed_value, value) AS value,
        if(computed = 1, computed_denominator, denominator) AS denominator,
        if(computed = 1, computed_pre_value, pre_value) AS pre_value
    FROM (
        -- Each column cast, for the join's same types (18.x: a function of a
        -- LowCardinality column is one).
        SELECT
            CAST(public_key AS String) AS public_key, experiment_id, phase, visitor_id,
            metric_id, variant_id, first_exposure_ms, value, denominator, pre_value
        FROM {db}.experiment_metric_values
        WHERE ({visitor_key}, refresh_id) GLOBAL IN (
            SELECT {visitor_key} AS visitor_key, max(refresh_id)
            FROM {db}.experiment_metric_values
            WHERE refresh_id < {settled_before}
            GROUP BY visitor_key
        )
    ) AS stored
    ALL FULL OUTER JOIN (
        SELECT
            CAST(public_key AS String) AS public_key,
            CAST(experiment_id AS String) AS experiment_id, phase, visitor_id,
            CAST(metric_id AS String) AS metric_id, toUInt8(1) AS computed,
            CAST(variant_id AS String) AS computed_variant_id,
            first_exposure_ms AS computed_first_exposure_ms, value AS computed_value,
            denominator AS computed_denominator, pre_value AS computed_pre_value
        FROM ({metric_values_select}) AS from_events
    ) AS unsettled USING (public_key, visitor_id, experiment_id, phase, metric_id)
) AS metric_values
ALL INNER JOIN (
    SELECT
        experiment_id, metric_id, toString(role) AS role, position, toString(kind) AS kind,
        higher_is_better, cap_value, cap_percentile, cuped_lookback_days
    FROM {db}.experiment_metric_definitions
) AS definitions USING (experiment_id, metric_id)
