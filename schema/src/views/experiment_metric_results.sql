SELECT
    public_key, experiment_id, phase{segment}, metric_id, role, position, kind, higher_is_better,
    variant_id, is_control,
    toUInt64(n) AS visitors,
    value,
    if(comparable, if(is_control = 1, 0, raw_diff), NULL) AS diff,
    -- The fixed horizon: gbstats' TwoSidedTTest, Welch's t.
    if(testable, raw_diff - t_quantile * se, NULL) AS ci_low,
    if(testable, raw_diff + t_quantile * se, NULL) AS ci_high,
    if(testable, {t_p_value}, NULL) AS p_value,
    if(testable,
        least(1, family * sqrt(1 + n_rho2)
            * exp(-pow(raw_diff / se_always_valid, 2) / 2 * n_rho2 / (1 + n_rho2))),
        NULL) AS always_valid_p_value,
    if(testable, raw_diff - se_always_valid * always_valid_factor, NULL) AS always_valid_ci_low,
    if(testable, raw_diff + se_always_valid * always_valid_factor, NULL) AS always_valid_ci_high,
    -- GrowthBook's Bayesian normal approximation with its default (improper) prior.
    if(testable, 0.5 * erfc(-better_sign * raw_diff / se / sqrt(2)), NULL)
        AS chance_to_beat_control,
    -- A guardrail: the always-valid one-sided test that the variant harms (the mixture of
    -- the two-sided test restricted to harmful effects).
    if(testable AND role = 'guardrail',
        least(1, family * sqrt(1 + n_rho2)
            * exp(-pow(raw_diff / se_always_valid, 2) / 2 * n_rho2 / (1 + n_rho2))
            / (2 * 0.5 * erfc(better_sign * raw_diff / se_always_valid
                * sqrt(n_rho2 / (1 + n_rho2))
                / sqrt(2)))),
        NULL) AS always_valid_harm_p_value,
    -- CUPED: the covariate is the same metric in the lookback before exposure, its
    -- coefficient theta pooled over this arm and the control (and, where some visitors
    -- have no history, a second one: below).
    if(cuped_testable, theta, NULL) AS cuped_theta,
    if(cuped_testable, theta_h, NULL) AS cuped_history_theta,
    if(cuped_testable, cuped_raw_diff, NULL) AS cuped_diff,
    if(cuped_testable, cuped_raw_diff - cuped_t_quantile * cuped_se, NULL) AS cuped_ci_low,
    if(cuped_testable, cuped_raw_diff + cuped_t_quantile * cuped_se, NULL) AS cuped_ci_high,
    if(cuped_testable, {cuped_t_p_value}, NULL) AS cuped_p_value,
    if(cuped_testable,
        least(1, family * sqrt(1 + n_rho2)
            * exp(-pow(cuped_raw_diff / cuped_se_always_valid, 2) / 2 * n_rho2 / (1 + n_rho2))),
        NULL) AS cuped_always_valid_p_value,
    if(cuped_testable, cuped_raw_diff - cuped_se_always_valid * always_valid_factor, NULL)
        AS cuped_always_valid_ci_low,
    if(cuped_testable, cuped_raw_diff + cuped_se_always_valid * always_valid_factor, NULL)
        AS cuped_always_valid_ci_high,
    if(cuped_testable, 1 - cuped_variance / variance, NULL) AS cuped_variance_reduction,
    cap,
    tuning AS sequential_tuning,
    family AS treatments,
    no_test_reason,
    -- The secondary metrics' p-values corrected for their number (Bonferroni): each
    -- times the experiment's secondary metrics, at most 1. The goal and the guardrails
    -- keep theirs.
    secondary_family AS secondary_metrics,
    if(role = 'secondary', least(1, p_value * secondary_family), p_value) AS adjusted_p_value,
    if(role = 'secondary', least(1, always_valid_p_value * secondary_family),
        always_valid_p_value) AS adjusted_always_valid_p_value,
    refreshed_as_of AS as_of
FROM (
-- Student's t quantile for the intervals.
SELECT *, {t_quantile}, {cuped_t_quantile} FROM (
    SELECT
        *,
        if(higher_is_better = 1, 1, -1) AS better_sign,
        -- Each arm's mean and the variance of one visitor's value, as gbstats has them:
        -- ProportionStatistic, SampleMeanStatistic, RatioStatistic (delta method).
        {arm_statistics_b},
        {arm_statistics_a},
        value_b AS value,
        value_b - value_a AS raw_diff,
        var_b / n + var_a / n_a AS variance,
        sqrt(variance) AS se,
        -- CUPED (gbstats' RegressionAdjustedStatistic and compute_theta).
        n + n_a AS joint_n,
        multiIf(kind = 'proportion',
                (sy + sy_a) / joint_n * (1 - (sy + sy_a) / joint_n),
            joint_n > 1,
                (syy + syy_a - pow(sy + sy_a, 2) / joint_n) / (joint_n - 1),
            0) AS joint_var_y,
        multiIf(kind = 'proportion',
                (sx + sx_a) / joint_n * (1 - (sx + sx_a) / joint_n),
            joint_n > 1,
                (sxx + sxx_a - pow(sx + sx_a, 2) / joint_n) / (joint_n - 1),
            0) AS joint_var_x,
        if(joint_n > 1,
            (sxy + sxy_a - (sy + sy_a) * (sx + sx_a) / joint_n) / (joint_n - 1), 0)
            AS joint_cov,
        -- Where some visitors have a history and some none, a second covariate h (1 for
        -- a history): the coefficients of x and h by least squares on both arms' visitors
        -- together, and x * theta + h * theta_h the covariate, a sample mean. Where every
        -- visitor has a history, or none, or x tells h, x alone (gbstats).
        greatest(joint_n - 1, 1) AS joint_dof,
        (sxx + sxx_a - pow(sx + sx_a, 2) / joint_n) / joint_dof AS joint_sxx,
        (sh + sh_a - pow(sh + sh_a, 2) / joint_n) / joint_dof AS joint_shh,
        (sx + sx_a - (sx + sx_a) * (sh + sh_a) / joint_n) / joint_dof AS joint_sxh,
        (shy + shy_a - (sh + sh_a) * (sy + sy_a) / joint_n) / joint_dof AS joint_shy,
        joint_sxx * joint_shh - joint_sxh * joint_sxh AS joint_det,
        -- Some have a history and some none: decided on the counts (exact), not on
        -- joint_shh, which rounding may leave above 0 when all have one.
        joint_n > 1 AND joint_var_y > 0 AND sh + sh_a > 0 AND sh + sh_a < joint_n
            AND (joint_sxx = 0 OR joint_det > 1e-9 * joint_sxx * joint_shh) AS with_history,
        multiIf(with_history,
                if(joint_sxx > 0, (joint_shh * joint_cov - joint_sxh * joint_shy) / joint_det, 0),
            joint_var_x > 0 AND joint_var_y > 0, joint_cov / joint_var_x,
            0) AS theta,
        if(with_history,
            if(joint_sxx > 0, (joint_sxx * joint_shy - joint_sxh * joint_cov) / joint_det,
                joint_shy / joint_shh),
            0) AS theta_h,
        (sy - theta * sx - theta_h * sh) / n - (sy_a - theta * sx_a - theta_h * sh_a) / n_a
            AS cuped_raw_diff,
        cuped_var_b / n + cuped_var_a / n_a AS cuped_variance,
        sqrt(greatest(cuped_variance, 0)) AS cuped_se,
        -- The always-valid tests' standard error: the larger of the unpooled one and the
        -- one under no effect, from both arms' values together (a ratio keeps its delta
        -- method's). docs/results.md.
        if(kind = 'ratio', variance, joint_var_y * (1 / n + 1 / n_a)) AS null_variance,
        sqrt(greatest(variance, null_variance)) AS se_always_valid,
        (joint_var_y + theta * theta * if(with_history, joint_sxx, joint_var_x)
            + theta_h * theta_h * joint_shh + 2 * theta * theta_h * joint_sxh
            - 2 * theta * joint_cov - 2 * theta_h * joint_shy) * (1 / n + 1 / n_a)
            AS cuped_null_variance,
        sqrt(greatest(greatest(cuped_variance, cuped_null_variance), 0)) AS cuped_se_always_valid,
        -- Welch-Satterthwaite's degrees of freedom, as gbstats has them.
        pow(variance, 2) / (pow(var_b, 2) / (pow(n, 2) * (n - 1))
            + pow(var_a, 2) / (pow(n_a, 2) * (n_a - 1))) AS dof,
        raw_diff / se AS t_stat,
        pow(cuped_variance, 2) / (pow(cuped_var_b, 2) / (pow(n, 2) * (n - 1))
            + pow(cuped_var_a, 2) / (pow(n_a, 2) * (n_a - 1))) AS cuped_dof,
        cuped_raw_diff / cuped_se AS cuped_t_stat,
        controls = 1 AND n_a > 0 AND variant_id != '__multiple__' AND defined = 1 AS comparable,
        n >= {min_visitors} AND n_a >= {min_visitors}
            AND (kind != 'proportion' OR (sy + sy_a >= {min_conversions}
                AND n + n_a - sy - sy_a >= {min_conversions})) AS enough,
        var_a > 0 AND var_b > 0 AS variances,
        comparable AND is_control = 0 AND enough AND variances AND variance > 0 AS testable,
        testable AND kind != 'ratio' AND cuped_lookback_days > 0 AND cuped_variance > 0
            AS cuped_testable,
        multiIf(controls = 1 AND defined = 0, '{undefined_arm}',
            NOT comparable OR is_control = 1, '',
            NOT enough, 'not enough data',
            NOT variances, 'an arm has no variance',
            '') AS no_test_reason,
        -- The always-valid test (gbstats' SequentialTwoSidedTTest) at 5% / treatments.
        greatest(toUInt64(ifNull(phase_treatments, 0)), 1) AS family,
        greatest(toUInt64(ifNull(secondaries, 0)), 1) AS secondary_family,
        5.991464547107982 + 2 * log(family) AS family_bound,
        if(snapshot_tuning > 0, snapshot_tuning,
            if(default_tuning > 0, default_tuning, 5000)) AS tuning,
        arrayElement(arrayFilter((s, start) -> s.1 <= start, tuning_log,
            arrayResize([intDiv(phase_start_ms, 1000)], length(tuning_log),
                intDiv(phase_start_ms, 1000))), -1).2 AS default_tuning,
        (n + n_a) * (family_bound + log(family_bound + 1)) / tuning AS n_rho2,
        sqrt((1 + n_rho2) / n_rho2 * (log(1 + n_rho2) + family_bound)) AS always_valid_factor
    FROM (
      -- The log of the default tuning and the time of the refreshes beside every arm: a
      -- join, not a scalar subquery, which 18.x runs again at each level of the query's
      -- analysis.
      SELECT *
      FROM (
        -- Per metric: its arms in arrays with the control's sums beside, then a row per
        -- arm.
        SELECT
            public_key, experiment_id, phase{segment}, metric_id, role, position, kind,
            higher_is_better, cuped_lookback_days, cap, phase_start_ms, controls,
            variant_id, is_control, defined, n, sy, syy, sd, sdd, syd, sx, sxx, sxy, sh, shy,
            n_a, sy_a, syy_a, sd_a, sdd_a, syd_a, sx_a, sxx_a, sxy_a, sh_a, shy_a
        FROM (
            SELECT
                public_key, experiment_id, phase{segment}, metric_id,
                any(metric_role) AS role, any(metric_position) AS position,
                any(metric_kind) AS kind, any(higher) AS higher_is_better,
                any(lookback) AS cuped_lookback_days, any(applied_cap) AS cap,
                min(first_ms) AS phase_start_ms,
                countIf(control_flag = 1) AS controls,
                groupArray(variant) AS variant_ids,
                groupArray(control_flag) AS control_flags,
                groupArray(defined) AS defined_flags,
                groupArray(arm_n) AS ns, groupArray(arm_sy) AS sys,
                groupArray(arm_syy) AS syys, groupArray(arm_sd) AS sds,
                groupArray(arm_sdd) AS sdds, groupArray(arm_syd) AS syds,
                groupArray(arm_sx) AS sxs, groupArray(arm_sxx) AS sxxs,
                groupArray(arm_sxy) AS sxys, groupArray(arm_sh) AS shs,
                groupArray(arm_shy) AS shys,
                sumIf(arm_n, control_flag = 1) AS n_a,
                sumIf(arm_sy, control_flag = 1) AS sy_a,
                sumIf(arm_syy, control_flag = 1) AS syy_a,
                sumIf(arm_sd, control_flag = 1) AS sd_a,
                sumIf(arm_sdd, control_flag = 1) AS sdd_a,
                sumIf(arm_syd, control_flag = 1) AS syd_a,
                sumIf(arm_sx, control_flag = 1) AS sx_a,
                sumIf(arm_sxx, control_flag = 1) AS sxx_a,
                sumIf(arm_sxy, control_flag = 1) AS sxy_a,
                sumIf(arm_sh, control_flag = 1) AS sh_a,
                sumIf(arm_shy, control_flag = 1) AS shy_a
            FROM (
                SELECT *, ifNull(defined_control, 0) AS control_flag, ifNull(arm_defined, 0) AS defined
                FROM (
                    -- Each arm's sufficient statistics, on the capped values: the sums
                    -- of parts/metric_arms.sql and those of the values it kept whole, capped.
                    SELECT
                        public_key, experiment_id, phase{segment}, metric_id, variant,
                        metric_role, metric_position, metric_kind, higher, lookback,
                        cap_at AS applied_cap, first_ms, arm_n,
                        raw_sy + arraySum(ys_capped) AS arm_sy,
                        raw_syy + arraySum(arrayMap(v -> v * v, ys_capped)) AS arm_syy,
                        raw_sd + arraySum(ds) AS arm_sd,
                        raw_sdd + arraySum(arrayMap(v -> v * v, ds)) AS arm_sdd,
                        raw_syd + arraySum(arrayMap((v, w) -> v * w, ys_capped, ds))
                            AS arm_syd,
                        raw_sx + arraySum(xs_capped) AS arm_sx,
                        raw_sxx + arraySum(arrayMap(v -> v * v, xs_capped)) AS arm_sxx,
                        raw_sxy + arraySum(arrayMap((v, w) -> v * w, xs_capped, ys_capped))
                            AS arm_sxy,
                        raw_sh + arraySum(hs) AS arm_sh,
                        raw_shy + arraySum(arrayMap((v, w) -> v * w, hs, ys_capped)) AS arm_shy
                    FROM (
                        SELECT
                            *,
                            arrayMap((v, c) -> least(v, c), ys, caps) AS ys_capped,
                            arrayMap((v, c) -> least(v, c), xs, caps) AS xs_capped
                        FROM (
                            SELECT
                                public_key, experiment_id, phase, metric_id, segment,
                                variant, metric_role, metric_position, metric_kind, higher,
                                lookback, first_ms, cap_at, arm_n, raw_sy, raw_syy, raw_sd,
                                raw_sdd, raw_syd, raw_sx, raw_sxx, raw_sxy, raw_sh, raw_shy,
                                ys, ds, xs, hs,
                                -- No cap: none applied.
                                if(cap_value > 0 OR by_rank, cap_at, inf) AS applied,
                                arrayResize([applied], length(ys), applied) AS caps
                            FROM (
                                -- The cap at a percentile: of the metric's visitors' values
                                -- in the phase (every arm and segment), numpy's linear.
                                SELECT
                                    public_key, experiment_id, phase, metric_id,
                                    any(m_cap_value) AS cap_value,
                                    any(m_cap_percentile) AS cap_percentile,
                                    cap_value = 0 AND cap_percentile > 0 AS by_rank,
                                    arraySort(groupArrayArray(arm_ys)) AS sorted,
                                    (length(sorted) - 1) * cap_percentile AS rank,
                                    toUInt64(floor(rank)) AS below,
                                    multiIf(cap_value > 0, cap_value,
                                        by_rank AND length(sorted) > 0,
                                            sorted[below + 1] + (rank - below)
                                                * (sorted[least(below + 2, length(sorted))]
                                                    - sorted[below + 1]),
                                        0) AS cap_at,
                                    groupArray(arm_segment) AS segments_of_arms,
                                    groupArray(arm_variant) AS variants,
                                    groupArray(arm_role) AS roles,
                                    groupArray(arm_position) AS positions,
                                    groupArray(arm_kind) AS kinds,
                                    groupArray(arm_higher) AS highers,
                                    groupArray(arm_lookback) AS lookbacks,
                                    groupArray(arm_first_ms) AS firsts,
                                    groupArray(arm_visitors) AS visitor_counts,
                                    groupArray(arm_sy) AS sys, groupArray(arm_syy) AS syys,
                                    groupArray(arm_sd) AS sds, groupArray(arm_sdd) AS sdds,
                                    groupArray(arm_syd) AS syds, groupArray(arm_sx) AS sxs,
                                    groupArray(arm_sxx) AS sxxs, groupArray(arm_sxy) AS sxys,
                                    groupArray(arm_sh) AS shs, groupArray(arm_shy) AS shys,
                                    groupArray(arm_ys) AS arms_ys,
                                    groupArray(arm_ds) AS arms_ds,
                                    groupArray(arm_xs) AS arms_xs,
                                    groupArray(arm_hs) AS arms_hs
                                FROM {metric_arms} AS arms_summed
                                GROUP BY public_key, experiment_id, phase, metric_id
                            ) AS per_metric
                            ARRAY JOIN
                                segments_of_arms AS segment, variants AS variant,
                                roles AS metric_role, positions AS metric_position,
                                kinds AS metric_kind, highers AS higher,
                                lookbacks AS lookback, firsts AS first_ms,
                                visitor_counts AS arm_n, sys AS raw_sy, syys AS raw_syy,
                                sds AS raw_sd, sdds AS raw_sdd, syds AS raw_syd,
                                sxs AS raw_sx, sxxs AS raw_sxx, sxys AS raw_sxy,
                                shs AS raw_sh, shys AS raw_shy,
                                arms_ys AS ys, arms_ds AS ds, arms_xs AS xs, arms_hs AS hs
                        ) AS with_caps
                    ) AS capped
                ) AS arms
                ANY LEFT JOIN (
                    SELECT experiment_id, phase, variant_id AS variant,
                        is_control AS defined_control, toUInt8(1) AS arm_defined
                    FROM {db}.experiment_phase_variants
                ) AS definitions USING (experiment_id, phase, variant)
            ) AS defined_arms
            GROUP BY public_key, experiment_id, phase{segment}, metric_id
        ) AS per_metric
        ARRAY JOIN
            variant_ids AS variant_id, control_flags AS is_control,
            defined_flags AS defined, ns AS n, sys AS sy,
            syys AS syy, sds AS sd, sdds AS sdd, syds AS syd, sxs AS sx, sxxs AS sxx,
            sxys AS sxy, shs AS sh, shys AS shy
      ) AS arms_of_metrics
      CROSS JOIN (
        SELECT tuning_log, refreshed_as_of
        FROM (
            SELECT
                arraySort(groupArray((toInt64(toUnixTimestamp(set_at)), value))) AS tuning_log
            FROM {db}.results_settings_log
            WHERE name = 'sequential_tuning' AND value > 0 AND isFinite(value)
        ) AS tunings_logged
        CROSS JOIN ({refreshed_as_of}) AS refreshed
      ) AS logged
      -- One block: the aggregations above hand on up to 256, and the statistics cost
      -- per block.
      ORDER BY public_key, experiment_id, phase{segment}, metric_id, variant_id
    ) AS arms
    ANY LEFT JOIN (
        SELECT experiment_id, phase, phase_treatments, snapshot_tuning, secondaries
        FROM (
            SELECT experiment_id, phase, phase_treatments, snapshot_tuning
            FROM (
                SELECT experiment_id, phase, countIf(is_control = 0) AS phase_treatments
                FROM {db}.experiment_phase_variants
                WHERE weight > 0
                GROUP BY experiment_id, phase
            ) AS weighted
            ANY LEFT JOIN (
                SELECT experiment_id, phase, sequential_tuning AS snapshot_tuning
                FROM {db}.experiment_phase_settings
            ) AS tunings USING (experiment_id, phase)
        ) AS phases
        ANY LEFT JOIN (
            SELECT experiment_id, countIf(role = 'secondary') AS secondaries
            FROM {db}.experiment_metric_definitions
            GROUP BY experiment_id
        ) AS roles USING (experiment_id)
    ) AS settings USING (experiment_id, phase)
) AS statistics
) AS quantiles
