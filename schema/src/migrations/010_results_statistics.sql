SELECT
    public_key, experiment_id, phase, {time_columns}variant_id, is_control, exposed, converted,
    conversion_rate,
    if(comparable, if(is_control = 1, 0, raw_diff), NULL) AS diff,
    if(testable, raw_diff - 1.959963984540054 * se, NULL) AS ci_low,
    if(testable, raw_diff + 1.959963984540054 * se, NULL) AS ci_high,
    if(testable, erfc(abs(raw_diff / se_null) / sqrt(2)), NULL) AS p_value,
    {srm_chi_square} AS srm_p_value,
    if(testable,
        least(1, sqrt(1 + n_rho2) * exp(-pow(raw_diff / se, 2) / 2 * n_rho2 / (1 + n_rho2))),
        NULL) AS always_valid_p_value,
    if(testable, raw_diff - always_valid_half, NULL) AS always_valid_ci_low,
    if(testable, raw_diff + always_valid_half, NULL) AS always_valid_ci_high,
    no_test_reason
FROM (
    SELECT
        *,
        converted / exposed AS conversion_rate,
        control_converted / control_exposed AS control_rate,
        conversion_rate - control_rate AS raw_diff,
        sqrt(conversion_rate * (1 - conversion_rate) / exposed
            + control_rate * (1 - control_rate) / control_exposed) AS se,
        -- The fixed-horizon test's standard error under its null (one rate for both arms,
        -- pooled: statsmodels' proportions_ztest): the unpooled one is too small on ramped
        -- splits with rare conversions (10% false positives at 10/90, 1-2%).
        (converted + control_converted) / (exposed + control_exposed) AS pooled_rate,
        sqrt(pooled_rate * (1 - pooled_rate) * (1 / exposed + 1 / control_exposed)) AS se_null,
        controls = 1 AND control_exposed > 0 AND variant_id != '__multiple__' AS comparable,
        -- No statistic where an arm's variance is zero (no conversion, or all converted:
        -- its standard error would count for nothing, as GrowthBook refuses) or below the
        -- minimum-data guard of `experiment-results` (visitors per arm; conversions and
        -- non-conversions of both arms together).
        converted > 0 AND converted < exposed
            AND control_converted > 0 AND control_converted < control_exposed AS variances,
        exposed >= {min_visitors} AND control_exposed >= {min_visitors}
            AND converted + control_converted >= {min_conversions}
            AND exposed + control_exposed - converted - control_converted >= {min_conversions}
            AS enough,
        comparable AND is_control = 0 AND se > 0 AND variances AND enough AS testable,
        multiIf(NOT comparable OR is_control = 1, '',
            NOT enough, 'not enough data',
            NOT variances, 'an arm has no variance (no conversion, or all converted)',
            '') AS no_test_reason,
        (exposed + control_exposed) * 7.936154601737565 / (
            SELECT if(count() = 0, 5000, argMax(value, set_at))
            FROM {db}.results_settings
            WHERE name = 'sequential_tuning'
        ) AS n_rho2,
        se * sqrt((1 + n_rho2) / n_rho2 * (log(1 + n_rho2) + 5.991464547107982))
            AS always_valid_half,
        srm_k - 1 AS srm_df,
        greatest(srm_w / srm_n * srm_sum - srm_n, 0) AS srm_x
    FROM (
        -- The counts read once: each experiment's and phase's (and hour's) variants in
        -- arrays, with the control's counts and the sample-ratio sums beside them, then a row
        -- per variant.
        SELECT
            public_key, experiment_id, phase{by}, variant_id, is_control, exposed, converted,
            controls, control_exposed, control_converted, srm_n, srm_sum
        FROM (
            SELECT
                public_key, experiment_id, phase{by},
                groupArray(variant_id) AS variant_ids,
                groupArray(is_control) AS controls_flags,
                groupArray(exposed) AS exposed_counts,
                groupArray(converted) AS converted_counts,
                countIf(is_control = 1) AS controls,
                sumIf(exposed, is_control = 1) AS control_exposed,
                sumIf(converted, is_control = 1) AS control_converted,
                sumIf(exposed, weight > 0) AS srm_n,
                sumIf(exposed * exposed / weight, weight > 0) AS srm_sum
            FROM {db}.{counts}
            GROUP BY public_key, experiment_id, phase{by}
        ) AS per_experiment
        ARRAY JOIN
            variant_ids AS variant_id,
            controls_flags AS is_control,
            exposed_counts AS exposed,
            converted_counts AS converted
    ) AS counts
    ANY LEFT JOIN (
        SELECT experiment_id, phase, sum(weight) AS srm_w, count() AS srm_k
        FROM {db}.experiment_phase_variants
        WHERE weight > 0
        GROUP BY experiment_id, phase
    ) AS weights USING (experiment_id, phase)
)
