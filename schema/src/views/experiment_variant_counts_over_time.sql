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
                -- Each visitor's steps: at each hour their standing changes (their first
                -- exposure, their conversion within the window, the end of their window
                -- once past, their second arm), what they add to their arm from then on,
                -- and what they no longer add to the arm they stood in before. A standing:
                -- (arm, exposed, converted, mature, mature and converted, the time they
                -- entered the arm). Only their own events up to an hour decide it, so an
                -- hour's counts never change once every event before its end is in.
                SELECT
                    public_key, experiment_id, phase, step.1 AS variant_id, step.2 AS hour_s,
                    sum(step.3) AS exposed,
                    sum(step.4) AS converted,
                    sum(step.5) AS mature,
                    sum(step.6) AS mature_converted,
                    min(step.7) AS first_ms
                FROM (
                    SELECT
                        public_key, experiment_id, phase,
                        if(converted = 1, intDiv(conversion_ms, 3600000) * 3600, 0)
                            AS conversion_hour_s,
                        if(mature = 1, intDiv(window_end_ms, 3600000) * 3600, 0)
                            AS maturity_hour_s,
                        arraySort(arrayDistinct(arrayFilter(h -> h > 0, [
                            intDiv(first_exposure_ms, 3600000) * 3600, conversion_hour_s,
                            maturity_hour_s, intDiv(multiple_from_ms, 1000)]))) AS changes,
                        -- The visitor's own figures beside each hour: on 18.x a lambda
                        -- reads the columns of its arrays only.
                        arrayResize([(first_variant_id, multiple_from_ms, conversion_hour_s,
                            maturity_hour_s, first_exposure_ms)], length(changes),
                            (first_variant_id, multiple_from_ms, conversion_hour_s,
                            maturity_hour_s, first_exposure_ms)) AS own,
                        arrayMap((h, o) -> (
                            if(o.2 > 0 AND h * 1000 >= o.2, '__multiple__', o.1),
                            toInt64(1),
                            toInt64(o.3 > 0 AND h >= o.3),
                            toInt64(o.4 > 0 AND h >= o.4),
                            toInt64(o.4 > 0 AND o.3 > 0 AND h >= o.4),
                            if(o.2 > 0 AND h * 1000 >= o.2, o.2, o.5)), changes, own)
                            AS standings,
                        arrayJoin(arrayConcat(
                            arrayMap((h, s) -> (s.1, h, s.2, s.3, s.4, s.5, s.6),
                                changes, standings),
                            arrayMap((h, s) -> (s.1, h, -s.2, -s.3, -s.4, -s.5, s.6),
                                arrayPopFront(changes), arrayPopBack(standings)))) AS step
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
