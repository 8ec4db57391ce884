-- Each exposed visitor that `visitor_filter` keeps (the view: all), as
-- experiment_visitor_exposures has them: their arm, first exposure, conversion within their
-- window, maturity; their first arm and when they saw a second (`multiple_from_ms`, the start
-- of that hour; 0: never), from which on they count in `__multiple__`.
SELECT
    public_key, experiment_id, phase, visitor_id, variant_id, first_exposure,
    toUInt8(candidate_ms > 0 AND (window_end_ms = 0 OR candidate_ms <= window_end_ms))
        AS converted,
    max_time_on_page,
    first_exposure_ms,
    if(converted = 1, candidate_ms, toInt64(0)) AS conversion_ms,
    window_end_ms,
    toUInt8(window_end_ms > 0 AND window_end_ms <= toInt64(toUnixTimestamp(now())) * 1000)
        AS mature,
    first_variant_id,
    multiple_from_ms
FROM (
    SELECT
        *,
        -- The window: the experiment's hours from the first exposure, else to the end of
        -- the phase (0 while it runs).
        if(conversion_window_hours > 0,
            first_exposure_ms + toInt64(conversion_window_hours * 3600000),
            phase_end_ms) AS window_end_ms
    FROM (
        SELECT
            public_key, experiment_id, phase, visitor_id,
            if(n > 1, '__multiple__', v0) AS variant_id,
            v0 AS first_variant_id,
            t0 AS first_exposure,
            top AS max_time_on_page,
            {to_ms}(t0) AS first_exposure_ms,
            -- The hour of the first exposure to another arm than the first: of the arm
            -- first or last by its hash that is not the first (exactly the second arm's
            -- for a visitor of two; the earlier of those two for more).
            cityHash64(v0) % 4294967296 AS first_hash,
            toInt64(least_arm % 4294967296) AS least_arm_hour,
            toInt64(4294967295 - greatest_arm % 4294967296) AS greatest_arm_hour,
            if(n > 1, multiIf(intDiv(least_arm, 4294967296) = first_hash, greatest_arm_hour,
                intDiv(greatest_arm, 4294967296) = first_hash, least_arm_hour,
                least(least_arm_hour, greatest_arm_hour)) * 3600000, toInt64(0))
                AS multiple_from_ms,
            -- The first conversion at or after the first exposure (0: none): conversions
            -- before it, or after it in any number, change nothing. (On 18.x a lambda
            -- reads the columns of its arrays only: the first exposure goes in as one.)
            arrayMap(c -> {to_ms}(c), conversion_times) AS conversions_ms,
            arrayFilter((c, first) -> c >= first, conversions_ms,
                arrayResize([first_exposure_ms], length(conversions_ms), first_exposure_ms))
                AS after_exposure,
            if(empty(after_exposure), toInt64(0), arrayReduce('min', after_exposure))
                AS candidate_ms
        FROM (
            SELECT
                toString(public_key) AS public_key,
                toString(experiment_id) AS experiment_id,
                phase,
                visitor_id,
                uniqExactIfMerge(variants) AS n,
                argMinIfMerge(first_variant) AS v0,
                minIfMerge(first_exposure) AS t0,
                minIfMerge(least_arm) AS least_arm,
                maxIfMerge(greatest_arm) AS greatest_arm,
                groupUniqArrayIfMerge(conversions) AS conversion_times,
                maxIfMerge(exposure_excluded) AS out,
                if(maxMerge(has_time_on_page) = 1, toNullable(maxIfMerge(max_time_on_page)),
                    NULL) AS top
            FROM {db}.experiment_visitors
            WHERE {visitor_filter}
            GROUP BY public_key, experiment_id, phase, visitor_id
        ) AS merged
        WHERE n > 0 AND out = 0
    ) AS visitors
    ANY LEFT JOIN (
        SELECT experiment_id, phase, conversion_window_hours, phase_end_ms
        FROM {db}.experiment_phase_settings
    ) AS settings USING (experiment_id, phase)
)
