if({p}comparable, if(is_control = 1, 0, {p}raw_diff), NULL) AS {p}diff,
    if({p}testable, {p}raw_diff - 1.959963984540054 * {p}se, NULL) AS {p}ci_low,
    if({p}testable, {p}raw_diff + 1.959963984540054 * {p}se, NULL) AS {p}ci_high,
    if({p}testable, erfc(abs({p}raw_diff / {p}se_null) / sqrt(2)), NULL) AS {p}p_value
