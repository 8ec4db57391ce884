if({p}testable,
        least(1, family * sqrt(1 + {p}n_rho2)
            * exp(-pow({p}raw_diff / {p}se_always_valid, 2) / 2 * {p}n_rho2 / (1 + {p}n_rho2))),
        NULL) AS {p}always_valid_p_value,
    if({p}testable, {p}raw_diff - {p}always_valid_half, NULL) AS {p}always_valid_ci_low,
    if({p}testable, {p}raw_diff + {p}always_valid_half, NULL) AS {p}always_valid_ci_high,
    {p}no_test_reason
