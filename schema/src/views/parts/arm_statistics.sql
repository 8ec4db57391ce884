sy{c} / n{c} AS mean_y_{arm},
        sx{c} / n{c} AS mean_x_{arm},
        sd{c} / n{c} AS mean_d_{arm},
        if(n{c} > 1, (syy{c} - sy{c} * sy{c} / n{c}) / (n{c} - 1), 0) AS sample_var_y_{arm},
        if(n{c} > 1, (sdd{c} - sd{c} * sd{c} / n{c}) / (n{c} - 1), 0) AS sample_var_d_{arm},
        if(n{c} > 1, (syd{c} - sy{c} * sd{c} / n{c}) / (n{c} - 1), 0) AS cov_yd_{arm},
        if(kind = 'ratio', if(sd{c} != 0, sy{c} / sd{c}, 0), mean_y_{arm}) AS value_{arm},
        multiIf(kind = 'proportion', mean_y_{arm} * (1 - mean_y_{arm}),
            kind = 'ratio',
                if(mean_d_{arm} = 0 OR n{c} <= 1, 0,
                    sample_var_y_{arm} / pow(mean_d_{arm}, 2)
                    - 2 * cov_yd_{arm} * mean_y_{arm} / pow(mean_d_{arm}, 3)
                    + pow(mean_y_{arm}, 2) * sample_var_d_{arm} / pow(mean_d_{arm}, 4)),
            sample_var_y_{arm}) AS var_{arm},
        multiIf(kind = 'proportion', mean_x_{arm} * (1 - mean_x_{arm}),
            n{c} > 1, (sxx{c} - sx{c} * sx{c} / n{c}) / (n{c} - 1), 0) AS var_x_{arm},
        if(n{c} > 1, (sxy{c} - sy{c} * sx{c} / n{c}) / (n{c} - 1), 0) AS cov_xy_{arm},
        -- The second covariate h (whether the visitor has a history): h * h = h, h * x = x.
        if(n{c} > 1, (sxx{c} - sx{c} * sx{c} / n{c}) / (n{c} - 1), 0) AS sample_var_x_{arm},
        if(n{c} > 1, (sh{c} - sh{c} * sh{c} / n{c}) / (n{c} - 1), 0) AS var_h_{arm},
        if(n{c} > 1, (sx{c} - sx{c} * sh{c} / n{c}) / (n{c} - 1), 0) AS cov_xh_{arm},
        if(n{c} > 1, (shy{c} - sy{c} * sh{c} / n{c}) / (n{c} - 1), 0) AS cov_hy_{arm},
        -- The variance of the value less theta * x + theta_h * h (CUPED).
        var_{arm} + theta * theta * if(with_history, sample_var_x_{arm}, var_x_{arm})
            + theta_h * theta_h * var_h_{arm} + 2 * theta * theta_h * cov_xh_{arm}
            - 2 * theta * cov_xy_{arm} - 2 * theta_h * cov_hy_{arm} AS cuped_var_{arm}
