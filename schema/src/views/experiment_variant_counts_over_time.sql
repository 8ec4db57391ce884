SELECT
    public_key, experiment_id, phase, toDateTime(hour_s, 'UTC') AS hour, variant_id,
    arraySum(arrayFilter((n, h) -> h <= hour_s, new_exposed, variant_hours)) AS exposed,
    arraySum(arrayFilter((n, h) -> h <= hour_s, new_converted, variant_hours)) AS converted,
    is_control, weight, defined,
    arraySum(arrayFilter((n, h) -> h <= hour_s, new_mature, variant_hours)) AS mature_exposed,
    arraySum(arrayFilter((n, h) -> h <= hour_s, new_mature_converted, variant_hours))
        AS mature_converted,
    first_exposure_ms
FROM (
    -- Each variant's steps per hour beside every hour of its experiment and phase that
    -- has one, so that each variant has a row at each of them.
    SELECT
        public_key, experiment_id, phase, variant_id, variant_hours, new_exposed,
        new_converted, new_mature, new_mature_converted, first_exposure_ms, hours
    FROM (
        SELECT
            public_key, experiment_id, phase,
            groupArray(variant_id) AS variant_ids,
            groupArray(variant_hours) AS hours_of,
            groupArray(new_exposed) AS exposed_of,
            groupArray(new_converted) AS converted_of,
            groupArray(new_mature) AS mature_of,
            groupArray(new_mature_converted) AS mature_converted_of,
            groupArray(first_exposure_ms) AS firsts,
            groupUniqArrayArray(variant_hours) AS hours
        FROM (
            SELECT
                public_key, experiment_id, phase, variant_id,
                groupArray(hour_s) AS variant_hours,
                groupArray(exposed) AS new_exposed,
                groupArray(converted) AS new_converted,
                groupArray(mature) AS new_mature,
                groupArray(mature_converted) AS new_mature_converted,
                min(first_ms) AS first_exposure_ms
            FROM (
                -- A visitor steps in at the hour of their first exposure, their
                -- conversion (within the window) and the end of their window (once it
                -- is past), each counted from then on.
                SELECT
                    public_key, experiment_id, phase, variant_id, step.1 AS hour_s,
                    sum(step.2) AS exposed,
                    sum(step.3) AS converted,
                    sum(step.4) AS mature,
                    sum(step.5) AS mature_converted,
                    min(first_exposure_ms) AS first_ms
                FROM (
                    SELECT
                        public_key, experiment_id, phase, variant_id, first_exposure_ms,
                        arrayJoin(arrayFilter(s -> s.1 > 0, [
                            (intDiv(first_exposure_ms, 3600000) * 3600,
                                toUInt8(1), toUInt8(0), toUInt8(0), toUInt8(0)),
                            (if(converted = 1, intDiv(conversion_ms, 3600000) * 3600, 0),
                                toUInt8(0), toUInt8(1), toUInt8(0), toUInt8(0)),
                            (if(mature = 1, intDiv(window_end_ms, 3600000) * 3600, 0),
                                toUInt8(0), toUInt8(0), toUInt8(1), converted)
                        ])) AS step
                    FROM {db}.experiment_visitor_exposures
                ) AS steps
                GROUP BY public_key, experiment_id, phase, variant_id, hour_s
            ) AS per_hour
            GROUP BY public_key, experiment_id, phase, variant_id
        ) AS per_variant
        GROUP BY public_key, experiment_id, phase
    ) AS per_phase
    ARRAY JOIN
        variant_ids AS variant_id,
        hours_of AS variant_hours,
        exposed_of AS new_exposed,
        converted_of AS new_converted,
        mature_of AS new_mature,
        mature_converted_of AS new_mature_converted,
        firsts AS first_exposure_ms
) AS variants
ARRAY JOIN hours AS hour_s
ANY LEFT JOIN (
    SELECT experiment_id, phase, variant_id, is_control, weight, toUInt8(1) AS defined
    FROM {db}.experiment_phase_variants
) AS definitions USING (experiment_id, phase, variant_id)
-- A variant appears from the hour of its first exposure on.
WHERE exposed > 0
