//! The numbers and SQL pieces the views and the commands share, below both: the
//! minimum-data guard, the sample-ratio prior, the refresh marks' times, and Student's t
//! written as ClickHouse expressions.

/// The minimum-data guard of the results views and of `experiment-results`: fewest exposed
/// visitors in each arm.
pub const MIN_VISITORS: u64 = 50;
/// The guard's fewest conversions, and fewest non-conversions, of an arm and the control
/// together (pooled, so a variant that converts nobody is still seen).
pub const MIN_CONVERSIONS: u64 = 5;

/// The concentration of the sequential sample-ratio check's Dirichlet prior, centred on the
/// weights: it detects a 48/52 split of 10,000 visitors at p = 0.002 (chi-square: 6e-5).
pub const SRM_PRIOR: f64 = 1000.0;

/// The results views' `no_test_reason` of an arm that the phase does not define (since
/// migration 16).
pub const UNDEFINED_ARM: &str = "the phase does not define this variant";

/// How long a consumer's refresh mark counts for `experiment_metric_results`' `as_of`
/// after it was written: a consumer writes one at least every [`MARK_EVERY`] while it
/// runs, so one silent longer has stopped.
pub const MARK_ALIVE: std::time::Duration = std::time::Duration::from_secs(120);

/// The longest a running consumer goes without writing a refresh mark.
pub const MARK_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// Student's t with `nu` degrees of freedom: P(0 < T < t) for t >= 0, with `terms` terms of
/// the series. ClickHouse has no t distribution; this is
/// `t Γ((ν+1)/2) / (√(νπ) Γ(ν/2)) (1 + t²/ν)^(-(ν+1)/2) ₂F₁(1, (ν+1)/2; 3/2; t²/(ν+t²))`
/// (the hypergeometric form of the t CDF after Pfaff's transformation), whose series has
/// positive terms only. The terms are cumulative sums of logarithms (an `lgamma` of a large
/// ν loses digits), the gamma ratio is its asymptotic series from ν = 1000 on, and log1p
/// (not in 18.x) its series for small arguments. Against scipy: within 1e-9 relative or
/// 1e-12 absolute for ν >= 49 (the guard's fewest visitors) and |t| <= 40 with 4000 terms.
fn t_half(t: &str, nu: &str, terms: u32) -> String {
    let x = format!("(pow({t}, 2) / ({nu}))");
    let log1p = format!(
        "if({x} < 1e-4,\n        {x}\n        - pow({x}, 2) / 2\n        + pow({x}, 3) / 3\n        \
         - pow({x}, 4) / 4,\n        log(1 + {x}))"
    );
    let half_nu = format!("(({nu}) / 2)");
    let gamma_ratio = format!(
        "if({half_nu} < 500, exp(lgamma({half_nu} + 0.5) - lgamma({half_nu})),\n        \
         sqrt({half_nu}) * (1 - 1 / (8 * {half_nu}) + 1 / (128 * pow({half_nu}, 2))\n        \
         + 5 / (1024 * pow({half_nu}, 3)) - 21 / (32768 * pow({half_nu}, 4))))"
    );
    let log_w = format!("log(pow({t}, 2) / (({nu}) + pow({t}, 2)))");
    let b = format!("((({nu}) + 1) / 2)");
    format!(
        "(({t})\n    * {gamma_ratio}\n    / sqrt(({nu}) * pi())\n    * exp(-{b} * {log1p})\n    \
         * arraySum(arrayMap(l -> exp(l), arrayCumSum(arrayMap(\n        \
         (k, b, lw) -> if(k = 0, 0, log(b + k - 1) - log(0.5 + k) + lw),\n        \
         range({terms}),\n        arrayResize([{b}], {terms}, {b}),\n        \
         arrayResize([{log_w}], {terms},\n            {log_w}))))))"
    )
}

/// The two-sided p-value of Student's t statistic `t` with `nu` degrees of freedom (0
/// beyond |t| = 40, where it is below 1e-40 for ν >= 49).
pub(crate) fn t_p_value(t: &str, nu: &str) -> String {
    let half = t_half(&format!("abs({t})"), nu, 4000);
    format!("if(abs({t}) > 40, 0, greatest(0, 1 - 2 * {half}))")
}

/// The 97.5% quantile of Student's t with `nu` degrees of freedom, as the column `name`:
/// the Cornish-Fisher expansion, then two Newton steps on [`t_half`]. Within 1e-12 of scipy
/// for ν >= 49. Each step is a lambda over the one before, in one expression: 18.x expands
/// an alias into every place that names it (the steps as aliases outgrow its limit), and
/// analyzes a query's subqueries again at each level above them (the steps as SELECTs over
/// one another made the metric view's analysis 4 times as long: 2.3 s per query).
pub(crate) fn t_quantile_975(nu: &str, name: &str) -> String {
    let z = "1.959963984540054";
    let start = format!(
        "{z}\n    + (pow({z}, 3) + {z}) / (4 * ({nu}))\n    \
         + (5 * pow({z}, 5) + 16 * pow({z}, 3) + 3 * {z}) / (96 * pow({nu}, 2))"
    );
    let pdf = "(exp(lgamma((nu + 1) / 2) - lgamma(nu / 2)) / sqrt(nu * pi())\n    \
               * pow(1 + pow(t, 2) / nu, -(nu + 1) / 2))";
    let step = |before: String| {
        format!(
            "arrayMap((t, nu) -> t - ({}\n    - 0.475) / {pdf},\n    {before},\n    [{nu}])",
            t_half("t", "nu", 100)
        )
    };
    format!(
        "{}[1]\n    AS {name}",
        step(step(format!("[{start}\n    ]")))
    )
}
