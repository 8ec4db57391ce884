-- One row per exposed visitor and metric of their experiment: the values of the visitor's
-- latest refresh, as the consumer stored them (visitor_metric_values: a row per visitor,
-- experiment and phase, the metrics in arrays). Nothing is computed from the events here:
-- the results are as of the refreshes (`as_of`).
--
-- A refresh lands whole (one insert of one block), and `FINAL` reads one set of parts,
-- keeping each row of the latest refresh that landed (the table replaces a row by the one
-- inserted after it). So each visitor comes from one refresh, whole, even while refreshes
-- land and merge during the query. A metric dropped from the definitions since the
-- visitor's refresh is left out by the join with the current definitions. In a cluster each
-- shard reads its own part, which holds all of its visitors' rows.
SELECT
    public_key, experiment_id, phase, visitor_id, variant_id, metric_id, role, position,
    kind, higher_is_better, cap_value, cap_percentile, cuped_lookback_days,
    first_exposure_ms, value, denominator, pre_value, pre_seen
FROM (
    SELECT
        public_key, experiment_id, phase, visitor_id, metric_id, variant_id,
        first_exposure_ms, value, denominator, pre_value, pre_seen
    FROM ({stored_visitors}) AS stored
    ARRAY JOIN
        stored_ids AS metric_id, stored_values AS value,
        stored_denominators AS denominator, stored_pre_values AS pre_value,
        stored_pre_seen AS pre_seen
) AS metric_values
ALL INNER JOIN (
    SELECT
        experiment_id, metric_id, toString(role) AS role, position, toString(kind) AS kind,
        higher_is_better, cap_value, cap_percentile, cuped_lookback_days
    FROM {db}.experiment_metric_definitions
) AS definitions USING (experiment_id, metric_id)
