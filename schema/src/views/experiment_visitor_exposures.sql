-- Each exposed visitor that `visitor_filter` keeps (the view: all), as
-- experiment_visitor_exposures has them: their arm, first exposure, conversion within their window, maturity.
SELECT
    public_key, experiment_id, phase, visitor_id, variant_id, first_exposure,
    toUInt8(candidate_ms > 0 AND (window_end_ms = 0 OR candidate_ms <= window_end_ms))
        AS converted,
    max_time_on_page,
    first_exposure_ms,
    if(converted = 1, candidate_ms, toInt64(0)) AS conversion_ms,
    window_end_ms,
    toUInt8(window_end_ms > 0 AND window_end_ms <= toInt64(toUnixTimestamp(now())) * 1000)
        AS mature
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
            t0 AS first_exposure,
            top AS max_time_on_page,
            {to_ms}(t0) AS first_exposure_ms,
            -- The first conversion at or after the first exposure: the first conversion
            -- if it is, else the last if it is (a visitor whose conversions fall before
            -- their exposure and after their window, with one inside, is taken at the
            -- last).
            multiIf({to_ms}(tf) >= first_exposure_ms, {to_ms}(tf),
                {to_ms}(tc) >= first_exposure_ms, {to_ms}(tc), toInt64(0)) AS candidate_ms
        FROM (
            SELECT
                toString(public_key) AS public_key,
                toString(experiment_id) AS experiment_id,
                phase,
                visitor_id,
                uniqExactIfMerge(variants) AS n,
                argMinIfMerge(first_variant) AS v0,
                minIfMerge(first_exposure) AS t0,
                maxIfMerge(last_conversion) AS tc,
                minIfMerge(first_conversion) AS tf,
                maxMerge(excluded) AS out,
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
