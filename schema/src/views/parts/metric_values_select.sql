-- One row per visitor that `visitor_filter` keeps and metric of each experiment that exposed
-- them (as experiment_visitor_exposures counts them: no test, no bot): the numerator
-- `value` and the denominator `denominator` (1 but for a ratio) from their events in the
-- experiment and phase within their window, and `pre_value` the same numerator from their
-- events of the key (any experiment) in the metric's lookback before their first exposure
-- (CUPED's covariate); `pre_seen` is 1 when they had any event of the key in that lookback
-- (CUPED's second covariate: whether the visitor has a history). Uncapped; a visitor with
-- no matching event counts 0. A visitor with no exposure, or an exposure to an experiment
-- with no metric, has one row of metric ''.
-- `events_seen`: the visitor's rows of `events` read, every one (so that a stored value
-- is known to be stale when a row comes after it).
--
-- Every metric of an experiment is read in one pass: an array per event, an element per
-- metric, summed per session, then per visitor, and split at the end. Per measure (n: the
-- numerator after exposure, p: before it, d: the denominator) three sums: `sum` (matching
-- events for count, any and sessions; their field's values for sum and mean), `values`
-- (matching events with the field) and `max` (the field's largest value); and per visitor
-- `sessions` (their sessions with a matching event). The definitions are joined again
-- after the sums, in the same order, so that no sum carries them.
SELECT
    public_key, experiment_id, phase, visitor_id, variant_id, metric_id, first_exposure_ms,
    {value_of_n} AS value,
    if(d_agg = '', 1, {value_of_d}) AS denominator,
    {value_of_p} AS pre_value,
    toFloat64(p_seen > 0) AS pre_seen,
    events_seen
FROM (
    SELECT *
    FROM (
        SELECT
            public_key, experiment_id, phase, visitor_id, variant_id,
            any(first_ms) AS first_exposure_ms, sum(session_rows) AS events_seen,
            sumForEach(n_sums) AS n_sums_all, sumForEach(n_values) AS n_values_all,
            maxForEach(n_maxes) AS n_maxes_all,
            sumForEach(arrayMap(x -> toFloat64(x > 0), n_sums)) AS n_sessions_all,
            sumForEach(p_sums) AS p_sums_all, sumForEach(p_values) AS p_values_all,
            maxForEach(p_maxes) AS p_maxes_all,
            sumForEach(arrayMap(x -> toFloat64(x > 0), p_sums)) AS p_sessions_all,
            sumForEach(p_rows) AS p_seen_all,
            sumForEach(d_sums) AS d_sums_all, sumForEach(d_values) AS d_values_all,
            maxForEach(d_maxes) AS d_maxes_all,
            sumForEach(arrayMap(x -> toFloat64(x > 0), d_sums)) AS d_sessions_all
        FROM (
            SELECT
                public_key, experiment_id, phase, visitor_id, variant_id, session_id,
                any(first_exposure_ms) AS first_ms, sum(copies) AS session_rows,
                sumForEach(n_add) AS n_sums, sumForEach(n_had) AS n_values,
                maxForEach(n_top) AS n_maxes,
                sumForEach(p_add) AS p_sums, sumForEach(p_had) AS p_values,
                maxForEach(p_top) AS p_maxes,
                sumForEach(arrayMap(x -> toFloat64(x), pres)) AS p_rows,
                sumForEach(d_add) AS d_sums, sumForEach(d_had) AS d_values,
                maxForEach(d_top) AS d_maxes
            FROM (
                SELECT
                    *,
                    length(metric_ids) AS m,
                    -- The event's own values, one per metric (a lambda reads arrays only).
                    arrayResize([post], m, post) AS posts,
                    arrayResize([t], m, t) AS times,
                    arrayResize([first_exposure_ms], m, first_exposure_ms) AS firsts,
                    arrayResize([name], m, name) AS names,
                    arrayResize([target], m, target) AS targets,
                    arrayResize([is_conversion], m, is_conversion) AS conversions,
                    arrayResize([time_on_page], m, time_on_page) AS times_on_page,
                    arrayResize([scroll_depth], m, scroll_depth) AS scroll_depths,
                    arrayResize([load_time], m, load_time) AS load_times,
                    arrayMap((lb, tt, f) -> tt < f AND tt >= f - toInt64(lb * 86400000),
                        lookbacks, times, firsts) AS pres,
                    arrayMap((e, g, c, nm, tg, cv) -> (e = '' OR nm = e)
                        AND (g = '' OR tg = g) AND (c = 0 OR cv = 1),
                        n_events, n_targets, n_conversions, names, targets, conversions)
                        AS n_matches,
                    arrayMap((e, g, c, nm, tg, cv) -> (e = '' OR nm = e)
                        AND (g = '' OR tg = g) AND (c = 0 OR cv = 1),
                        d_events, d_targets, d_conversions, names, targets, conversions)
                        AS d_matches,
                    arrayMap((f, a, b, c) -> multiIf(f = 'time_on_page', a,
                        f = 'scroll_depth', b, f = 'load_time', c, NULL),
                        n_fields, times_on_page, scroll_depths, load_times) AS n_fielded,
                    arrayMap((f, a, b, c) -> multiIf(f = 'time_on_page', a,
                        f = 'scroll_depth', b, f = 'load_time', c, NULL),
                        d_fields, times_on_page, scroll_depths, load_times) AS d_fielded,
                    -- Per measure: what a matching event adds to the sum (1, or its
                    -- field's value), whether it has the field, the field's value.
                    arrayMap((x, p, v, a) -> if(x AND p, if(a IN ('sum', 'mean'),
                        ifNull(v, 0.), 1.), 0.), n_matches, posts, n_fielded, n_aggregates)
                        AS n_add,
                    arrayMap((x, p, v) -> toFloat64(x AND p AND isNotNull(v)),
                        n_matches, posts, n_fielded) AS n_had,
                    arrayMap((x, p, v) -> if(x AND p, ifNull(v, 0.), 0.),
                        n_matches, posts, n_fielded) AS n_top,
                    arrayMap((x, p, v, a) -> if(x AND p, if(a IN ('sum', 'mean'),
                        ifNull(v, 0.), 1.), 0.), n_matches, pres, n_fielded, n_aggregates)
                        AS p_add,
                    arrayMap((x, p, v) -> toFloat64(x AND p AND isNotNull(v)),
                        n_matches, pres, n_fielded) AS p_had,
                    arrayMap((x, p, v) -> if(x AND p, ifNull(v, 0.), 0.),
                        n_matches, pres, n_fielded) AS p_top,
                    arrayMap((x, p, v, a) -> if(x AND p, if(a IN ('sum', 'mean'),
                        ifNull(v, 0.), 1.), 0.), d_matches, posts, d_fielded, d_aggregates)
                        AS d_add,
                    arrayMap((x, p, v) -> toFloat64(x AND p AND isNotNull(v)),
                        d_matches, posts, d_fielded) AS d_had,
                    arrayMap((x, p, v) -> if(x AND p, ifNull(v, 0.), 0.),
                        d_matches, posts, d_fielded) AS d_top
                FROM (
                    SELECT *
                    FROM (
                        -- Each event of the visitors, beside each of their exposures (none:
                        -- one row, no experiment), so that every row read is counted.
                        SELECT
                            *,
                            event_experiment = experiment_id AND event_phase = phase
                                AND t >= first_exposure_ms
                                AND (window_end_ms = 0 OR t <= window_end_ms) AS post
                        FROM (
                            -- Each event once (a redelivered copy counted in `copies`):
                            -- FINAL would read the whole table before the filter.
                            SELECT
                                any(toString(public_key)) AS public_key,
                                any(visitor_id) AS visitor_id,
                                any(session_id) AS session_id,
                                any(toString(experiment_id)) AS event_experiment,
                                any(phase) AS event_phase,
                                any(toString(event_name)) AS name,
                                any(click_target) AS target,
                                any(toUInt8(event_name = 'conversion'
                                    OR ifNull(conversion, 0) = 1)) AS is_conversion,
                                any(time_on_page) AS time_on_page,
                                any(scroll_depth) AS scroll_depth,
                                any(load_time) AS load_time,
                                any({to_ms}(event_time)) AS t,
                                count() AS copies
                            FROM (
                                SELECT * FROM {db}.events
                                WHERE {visitor_filter}
                            ) AS read
                            GROUP BY event_id
                        ) AS visitor_events
                        ALL LEFT JOIN (
                            SELECT
                                public_key, visitor_id, experiment_id, phase, variant_id,
                                first_exposure_ms, window_end_ms
                            FROM ({exposures_of_visitors}) AS exposed
                        ) AS exposures USING (public_key, visitor_id)
                    ) AS candidates
                    ALL LEFT JOIN {metric_arrays} AS metrics USING (experiment_id)
                ) AS with_definitions
            ) AS rows
            GROUP BY public_key, experiment_id, phase, visitor_id, variant_id, session_id
        ) AS sessions
        GROUP BY public_key, experiment_id, phase, visitor_id, variant_id
    ) AS visitors
    ALL LEFT JOIN {metric_arrays} AS metrics USING (experiment_id)
) AS with_metrics
LEFT ARRAY JOIN
    metric_ids AS metric_id, n_aggregates AS n_agg, d_aggregates AS d_agg,
    n_sums_all AS n_sum, n_values_all AS n_values, n_maxes_all AS n_max,
    n_sessions_all AS n_sessions,
    p_sums_all AS p_sum, p_values_all AS p_values, p_maxes_all AS p_max,
    p_sessions_all AS p_sessions, p_seen_all AS p_seen,
    d_sums_all AS d_sum, d_values_all AS d_values, d_maxes_all AS d_max,
    d_sessions_all AS d_sessions
