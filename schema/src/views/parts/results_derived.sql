{p}converted / {p}exposed AS {p}arm_rate,
        {p}control_converted / {p}control_exposed AS {p}control_rate,
        {p}arm_rate - {p}control_rate AS {p}raw_diff,
        sqrt({p}arm_rate * (1 - {p}arm_rate) / {p}exposed
            + {p}control_rate * (1 - {p}control_rate) / {p}control_exposed) AS {p}se,
        -- The fixed-horizon test's standard error under its null (one rate for both arms,
        -- pooled: statsmodels' proportions_ztest).
        ({p}converted + {p}control_converted) / ({p}exposed + {p}control_exposed)
            AS {p}pooled_rate,
        sqrt({p}pooled_rate * (1 - {p}pooled_rate) * (1 / {p}exposed + 1 / {p}control_exposed))
            AS {p}se_null,
        -- The always-valid test's: the larger of the two. The unpooled one alone shrinks
        -- with a small arm's rare conversions (1 of 700 against 133 of 13,300 read as
        -- p = 1.6e-5); the pooled one alone with a small arm's many. docs/results.md.
        greatest({p}se, {p}se_null) AS {p}se_always_valid,
        -- The lift, arm / control - 1, and its standard error by the delta method on the
        -- ratio of the means (gbstats' relative difference).
        {p}raw_diff / {p}control_rate AS {p}raw_lift,
        sqrt({p}arm_rate * (1 - {p}arm_rate) / {p}exposed / pow({p}control_rate, 2)
            + {p}control_rate * (1 - {p}control_rate) / {p}control_exposed
                * pow({p}arm_rate, 2) / pow({p}control_rate, 4)) AS {p}se_lift,
        controls = 1 AND {p}control_exposed > 0 AND variant_id != '__multiple__' AND defined = 1
            AS {p}comparable,
        -- No statistic where an arm's variance is zero (no conversion, or all converted)
        -- or below the minimum-data guard (visitors per arm; conversions and
        -- non-conversions of both arms together).
        {p}converted > 0 AND {p}converted < {p}exposed
            AND {p}control_converted > 0 AND {p}control_converted < {p}control_exposed
            AS {p}variances,
        {p}exposed >= {min_visitors} AND {p}control_exposed >= {min_visitors}
            AND {p}converted + {p}control_converted >= {min_conversions}
            AND {p}exposed + {p}control_exposed - {p}converted - {p}control_converted
                >= {min_conversions}
            AS {p}enough,
        {p}comparable AND is_control = 0 AND {p}se > 0 AND {p}variances AND {p}enough
            AS {p}testable,
        multiIf(controls = 1 AND defined = 0, '{undefined_arm}',
            NOT {p}comparable OR is_control = 1, '',
            NOT {p}enough, 'not enough data',
            NOT {p}variances, 'an arm has no variance (no conversion, or all converted)',
            '') AS {p}no_test_reason,
        ({p}exposed + {p}control_exposed) * (family_bound + log(family_bound + 1)) / tuning
            AS {p}n_rho2,
        {p}se_always_valid
            * sqrt((1 + {p}n_rho2) / {p}n_rho2 * (log(1 + {p}n_rho2) + family_bound))
            AS {p}always_valid_half
