if({p}comparable AND {p}control_rate > 0, if(is_control = 1, 0, {p}raw_lift), NULL) AS {p}lift,
    if({p}testable, {p}raw_lift - 1.959963984540054 * {p}se_lift, NULL) AS {p}lift_ci_low,
    if({p}testable, {p}raw_lift + 1.959963984540054 * {p}se_lift, NULL) AS {p}lift_ci_high,
    -- The always-valid interval of the difference, as wide in the lift's standard errors.
    if({p}testable, {p}raw_lift - {p}always_valid_half * {p}se_lift / {p}se, NULL)
        AS {p}always_valid_lift_ci_low,
    if({p}testable, {p}raw_lift + {p}always_valid_half * {p}se_lift / {p}se, NULL)
        AS {p}always_valid_lift_ci_high