CREATE VIEW IF NOT EXISTS {db}.experiment_metric_visitors{on_cluster} AS
-- One row per exposed visitor (as experiment_visitor_exposures counts them: no test, no
-- bot) and metric of their experiment: the numerator `value` and the denominator
-- `denominator` (1 but for a ratio) from their events in the experiment and phase within
-- their window, and `pre_value` the same numerator from their events of the key (any
-- experiment) in the metric's lookback before their first exposure (CUPED's covariate).
-- Uncapped; a visitor with no matching event counts 0.
SELECT
    public_key, experiment_id, phase, visitor_id, variant_id, metric_id,
    any(metric_role) AS role, any(metric_position) AS position, any(metric_kind) AS kind,
    any(higher) AS higher_is_better, any(cap_abs) AS cap_value, any(cap_pct) AS cap_percentile,
    any(lookback_days) AS cuped_lookback_days,
    min(first_ms) AS first_exposure_ms,
    {value_of_n} AS value,
    if(any(d_agg) = '', 1, {value_of_d}) AS denominator,
    {value_of_p} AS pre_value
FROM (
    -- Per session first: its matching events' count, sum, max and how many carried the
    -- field, for the numerator after exposure (n_), before it (p_) and the denominator
    -- (d_).
    SELECT
        public_key, experiment_id, phase, visitor_id, variant_id, metric_id, session_id,
        any(m_role) AS metric_role, any(m_position) AS metric_position,
        any(m_kind) AS metric_kind, any(m_higher) AS higher, any(m_cap_value) AS cap_abs,
        any(m_cap_percentile) AS cap_pct, any(m_lookback) AS lookback_days,
        any(m_n_aggregate) AS n_agg, any(m_d_aggregate) AS d_agg,
        min(first_exposure_ms) AS first_ms,
        countIf(post AND n_match) AS n_count,
        sumIf(n_field_value, post AND n_match AND n_has) AS n_sum,
        maxIf(n_field_value, post AND n_match AND n_has) AS n_max,
        countIf(post AND n_match AND n_has) AS n_values,
        countIf(pre AND n_match) AS p_count,
        sumIf(n_field_value, pre AND n_match AND n_has) AS p_sum,
        maxIf(n_field_value, pre AND n_match AND n_has) AS p_max,
        countIf(pre AND n_match AND n_has) AS p_values,
        countIf(post AND d_match) AS d_count,
        sumIf(d_field_value, post AND d_match AND d_has) AS d_sum,
        maxIf(d_field_value, post AND d_match AND d_has) AS d_max,
        countIf(post AND d_match AND d_has) AS d_values
    FROM (
        SELECT
            public_key, experiment_id, phase, visitor_id, variant_id, session_id,
            first_exposure_ms,
            metric_id, m_role, m_position, m_kind, m_higher, m_cap_value, m_cap_percentile,
            m_lookback, m_n_aggregate, m_d_aggregate,
            event_experiment = experiment_id AND event_phase = phase
                AND t >= first_exposure_ms AND (window_end_ms = 0 OR t <= window_end_ms)
                AS post,
            t < first_exposure_ms
                AND t >= first_exposure_ms - toInt64(m_lookback * 86400000) AS pre,
            (m_n_event = '' OR name = m_n_event)
                AND (m_n_target = '' OR target = m_n_target)
                AND (m_n_conversion = 0 OR is_conversion = 1) AS n_match,
            (m_d_event = '' OR name = m_d_event)
                AND (m_d_target = '' OR target = m_d_target)
                AND (m_d_conversion = 0 OR is_conversion = 1) AS d_match,
            multiIf(m_n_field = 'time_on_page', time_on_page,
                m_n_field = 'scroll_depth', scroll_depth,
                m_n_field = 'load_time', load_time, NULL) AS n_field_raw,
            isNotNull(n_field_raw) AS n_has,
            ifNull(n_field_raw, 0) AS n_field_value,
            multiIf(m_d_field = 'time_on_page', time_on_page,
                m_d_field = 'scroll_depth', scroll_depth,
                m_d_field = 'load_time', load_time, NULL) AS d_field_raw,
            isNotNull(d_field_raw) AS d_has,
            ifNull(d_field_raw, 0) AS d_field_value
        FROM (
            -- Each event of an exposed visitor's key, beside each of their exposures it
            -- may count for: in the experiment's phase after the first exposure, or before
            -- it within the longest lookback.
            SELECT *
            FROM (
                SELECT
                    toString(public_key) AS public_key, visitor_id, session_id,
                    toString(experiment_id) AS event_experiment, phase AS event_phase,
                    toString(event_name) AS name, click_target AS target,
                    toUInt8(event_name = 'conversion' OR ifNull(conversion, 0) = 1)
                        AS is_conversion,
                    time_on_page, scroll_depth, load_time, {to_ms}(event_time) AS t
                FROM {db}.events FINAL
            ) AS visitor_events
            ALL INNER JOIN (
                SELECT
                    public_key, visitor_id, experiment_id, phase, variant_id,
                    first_exposure_ms, window_end_ms, longest_lookback,
                    metric_ids, roles, positions, kinds, highers, cap_values,
                    cap_percentiles, lookbacks, n_events, n_targets, n_conversions,
                    n_fields, n_aggregates, d_events, d_targets, d_conversions, d_fields,
                    d_aggregates
                FROM {db}.experiment_visitor_exposures
                ALL INNER JOIN (
                    SELECT
                        experiment_id,
                        max(cuped_lookback_days) AS longest_lookback,
                        groupArray(metric_id) AS metric_ids,
                        groupArray(toString(role)) AS roles,
                        groupArray(position) AS positions,
                        groupArray(toString(kind)) AS kinds,
                        groupArray(higher_is_better) AS highers,
                        groupArray(cap_value) AS cap_values,
                        groupArray(cap_percentile) AS cap_percentiles,
                        groupArray(cuped_lookback_days) AS lookbacks,
                        groupArray(num_event) AS n_events,
                        groupArray(num_click_target) AS n_targets,
                        groupArray(num_conversion) AS n_conversions,
                        groupArray(num_field) AS n_fields,
                        groupArray(toString(num_aggregate)) AS n_aggregates,
                        groupArray(den_event) AS d_events,
                        groupArray(den_click_target) AS d_targets,
                        groupArray(den_conversion) AS d_conversions,
                        groupArray(den_field) AS d_fields,
                        groupArray(toString(den_aggregate)) AS d_aggregates
                    FROM {db}.experiment_metric_definitions
                    GROUP BY experiment_id
                ) AS metrics USING (experiment_id)
            ) AS exposures USING (public_key, visitor_id)
            WHERE (event_experiment = experiment_id AND event_phase = phase
                    AND t >= first_exposure_ms)
                OR (t < first_exposure_ms
                    AND t >= first_exposure_ms - toInt64(longest_lookback * 86400000))
        ) AS candidates
        ARRAY JOIN
            metric_ids AS metric_id, roles AS m_role, positions AS m_position,
            kinds AS m_kind, highers AS m_higher, cap_values AS m_cap_value,
            cap_percentiles AS m_cap_percentile, lookbacks AS m_lookback,
            n_events AS m_n_event, n_targets AS m_n_target,
            n_conversions AS m_n_conversion, n_fields AS m_n_field,
            n_aggregates AS m_n_aggregate, d_events AS m_d_event,
            d_targets AS m_d_target, d_conversions AS m_d_conversion,
            d_fields AS m_d_field, d_aggregates AS m_d_aggregate
    ) AS rows
    GROUP BY public_key, experiment_id, phase, visitor_id, variant_id, metric_id, session_id
) AS sessions
GROUP BY public_key, experiment_id, phase, visitor_id, variant_id, metric_id
