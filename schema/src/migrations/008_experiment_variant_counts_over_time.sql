CREATE VIEW IF NOT EXISTS {db}.experiment_variant_counts_over_time{on_cluster} AS
SELECT
    public_key, experiment_id, phase, hour, variant_id,
    arraySum(arrayFilter((n, h) -> h <= hour, new_exposed, variant_hours)) AS exposed,
    arraySum(arrayFilter((n, h) -> h <= hour, new_converted, variant_hours)) AS converted,
    is_control, weight, defined
FROM (
    -- Each variant's first exposures per hour beside every hour of its experiment and
    -- phase that has one, so that each variant has a row at each of them.
    SELECT
        public_key, experiment_id, phase, variant_id, variant_hours, new_exposed,
        new_converted, hours
    FROM (
        SELECT
            public_key, experiment_id, phase, variant_id,
            groupArray(hour) AS variant_hours,
            groupArray(exposed) AS new_exposed,
            groupArray(converted) AS new_converted
        FROM (
            SELECT
                public_key, experiment_id, phase, variant_id,
                {first_exposure_hour} AS hour,
                count() AS exposed,
                countIf(converted) AS converted
            FROM {db}.experiment_visitor_exposures
            GROUP BY public_key, experiment_id, phase, variant_id, hour
        ) AS per_hour
        GROUP BY public_key, experiment_id, phase, variant_id
    ) AS per_variant
    -- ALL, not ANY: from 20.x an ANY INNER JOIN keeps one left row per key too (one
    -- variant per phase); the right side has one row per key, so ALL adds none.
    ALL INNER JOIN (
        SELECT public_key, experiment_id, phase, groupUniqArray(hour) AS hours
        FROM (
            SELECT public_key, experiment_id, phase, {first_exposure_hour} AS hour
            FROM {db}.experiment_visitor_exposures
        ) AS exposure_hours
        GROUP BY public_key, experiment_id, phase
    ) AS phase_hours USING (public_key, experiment_id, phase)
) AS variants
ARRAY JOIN hours AS hour
ANY LEFT JOIN (
    SELECT experiment_id, phase, variant_id, is_control, weight, toUInt8(1) AS defined
    FROM {db}.experiment_phase_variants
) AS definitions USING (experiment_id, phase, variant_id)
-- A variant appears from the hour of its first exposure on.
WHERE exposed > 0
