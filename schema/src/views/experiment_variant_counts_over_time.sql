SELECT
    public_key, experiment_id, phase, toDateTime(hour_s, 'UTC') AS hour, variant_id,
    toUInt64(arraySum(arrayFilter((n, h) -> h <= hour_s, new_exposed, variant_hours)))
        AS exposed,
    toUInt64(arraySum(arrayFilter((n, h) -> h <= hour_s, new_converted, variant_hours)))
        AS converted,
    is_control, weight, defined,
    toUInt64(arraySum(arrayFilter((n, h) -> h <= hour_s, new_mature, variant_hours)))
        AS mature_exposed,
    toUInt64(arraySum(arrayFilter((n, h) -> h <= hour_s, new_mature_converted, variant_hours)))
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
                -- A visitor steps in at the hour of their first exposure, their conversion
                -- (within the window) and the end of their window (once past), each counted
                -- from then on in the arm they stand in then: their first, or
                -- `__multiple__` from the hour they saw a second arm. At that hour they
                -- move: what they added to their first arm before it goes to
                -- `__multiple__`. Only their own events up to an hour decide its counts, so
                -- an hour's row never changes once every event before its end is in.
                SELECT
                    public_key, experiment_id, phase, step.2 AS variant_id, step.1 AS hour_s,
                    sum(step.3) AS exposed,
                    sum(step.4) AS converted,
                    sum(step.5) AS mature,
                    sum(step.6) AS mature_converted,
                    min(step.7) AS first_ms
                FROM (
                    SELECT
                        public_key, experiment_id, phase,
                        intDiv(multiple_from_ms, 1000) AS moved_s,
                        if(converted = 1, intDiv(conversion_ms, 3600000) * 3600, 0)
                            AS conversion_s,
                        if(mature = 1, intDiv(window_end_ms, 3600000) * 3600, 0) AS maturity_s,
                        toInt64(conversion_s > 0 AND conversion_s < moved_s) AS converted_before,
                        toInt64(maturity_s > 0 AND maturity_s < moved_s) AS mature_before,
                        arrayJoin(arrayFilter(s -> s.1 > 0, [
                            (intDiv(first_exposure_ms, 3600000) * 3600, first_variant_id,
                                toInt64(1), toInt64(0), toInt64(0), toInt64(0),
                                first_exposure_ms),
                            (conversion_s, if(moved_s > 0 AND conversion_s >= moved_s,
                                '__multiple__', first_variant_id),
                                toInt64(0), toInt64(1), toInt64(0), toInt64(0),
                                first_exposure_ms),
                            (maturity_s, if(moved_s > 0 AND maturity_s >= moved_s,
                                '__multiple__', first_variant_id),
                                toInt64(0), toInt64(0), toInt64(1), toInt64(converted),
                                first_exposure_ms),
                            (moved_s, first_variant_id, toInt64(-1), -converted_before,
                                -mature_before, -(mature_before * converted),
                                first_exposure_ms),
                            (moved_s, '__multiple__', toInt64(1), converted_before,
                                mature_before, mature_before * converted, multiple_from_ms)
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
