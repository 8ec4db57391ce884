//! The statistics of `experiment-results`, pure functions of counts and summaries (no I/O),
//! so that `e2e/tests/results/statistics.rs` can hold each one against an independent
//! implementation (scipy, statsmodels). Every function answers a finite, non-degenerate
//! value or a [`Reason`] why there is none: no zero-width, infinite or NaN interval, and no
//! p-value outside (0, 1], ever leaves this module.
//!
//! - the difference of two conversion rates: Newcombe's hybrid score interval (Wilson
//!   intervals per arm), which holds for small counts where the Wald interval does not;
//! - its p-value: Fisher's exact test, two-sided as scipy computes it (the tables no more
//!   likely than the observed one), from the hypergeometric weights relative to the mode,
//!   so 10^5 visitors per arm take well under a millisecond;
//! - the lift (p1 / p0 − 1): a Wald test and interval on the log of the ratio (delta
//!   method), so the interval never crosses −100% and agrees with the test;
//! - Holm and Benjamini-Hochberg adjustments across the treatment variants of one
//!   experiment and phase;
//! - the minimum-data guard on pooled counts, and Welch's t-test of a mean.

use std::fmt;

use serde::Serialize;
use statrs::distribution::{ContinuousCDF, StudentsT};
use statrs::function::erf::erfc;

/// The 97.5th percentile of the standard normal: a two-sided 95% interval.
pub const Z_95: f64 = 1.959_963_984_540_054;

/// Tables whose hypergeometric weight is within this relative distance of the observed
/// table's count as ties in Fisher's two-sided test (R's `fisher.test` uses the same; the
/// weights here are products of up to ~10^5 ratios, so exact ties can differ by far more
/// than scipy's 1e-14 while no two distinct weights of a realistic table are this close).
const FISHER_TIE: f64 = 1e-7;

/// One arm's counts: exposed visitors and those of them who converted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Arm {
    pub exposed: u64,
    pub converted: u64,
}

impl Arm {
    pub fn new(exposed: u64, converted: u64) -> Self {
        Self { exposed, converted }
    }

    fn rate(self) -> f64 {
        self.converted as f64 / self.exposed as f64
    }
}

/// A 95% interval.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Interval {
    pub low: f64,
    pub high: f64,
}

/// A number with its 95% interval.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Estimate {
    pub value: f64,
    pub low: f64,
    pub high: f64,
}

/// The lift of a variant over the control, `p1 / p0 − 1`, with its interval and the
/// two-sided p-value of the test of no lift, both on the log of the ratio.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Lift {
    pub value: f64,
    pub low: f64,
    pub high: f64,
    pub p_value: f64,
}

/// Welch's t-test of a difference of means.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Welch {
    /// The variant's mean minus the control's.
    pub diff: f64,
    pub p_value: f64,
}

/// Summary of one arm's values (say, each visitor's longest time on page).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    pub n: u64,
    pub mean: f64,
    /// The sample variance (n − 1 in the denominator).
    pub variance: f64,
}

/// Why a statistic is not given.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Reason {
    /// An arm has no exposed visitor.
    NoExposure,
    /// The control has no conversion: the ratio p1 / p0 is undefined.
    NoControlConversion,
    /// The variant has no conversion: the log of the ratio is −∞.
    NoVariantConversion,
    /// Every visitor of both arms converted: the ratio is 1 with no variance.
    AllConverted,
    /// Below the minimum-data guard.
    NotEnoughData(Minimums),
    /// Fewer than two values in an arm: no variance.
    TooFewValues,
    /// Both arms' values are constant: no variance.
    NoVariance,
    /// The computation gave an infinite, NaN or zero-width result (never seen; a guard).
    Degenerate,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoExposure => f.write_str("no exposed visitor in an arm"),
            Self::NoControlConversion => f.write_str("the control has no conversion"),
            Self::NoVariantConversion => f.write_str("the variant has no conversion"),
            Self::AllConverted => f.write_str("every visitor of both arms converted"),
            Self::NotEnoughData(m) => write!(
                f,
                "not enough data (needs {} visitors per arm, {} conversions and {} \
                 non-conversions in both arms together)",
                m.visitors, m.conversions, m.conversions
            ),
            Self::TooFewValues => f.write_str("fewer than 2 values in an arm"),
            Self::NoVariance => f.write_str("no variance in either arm"),
            Self::Degenerate => f.write_str("no finite, non-degenerate value"),
        }
    }
}

/// The minimum-data guard: below it no statistic is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Minimums {
    /// Fewest exposed visitors in each arm.
    pub visitors: u64,
    /// Fewest conversions, and fewest non-conversions, in both arms together.
    pub conversions: u64,
}

/// Whether a variant and its control pass the guard. Conversions are pooled so that a
/// broken variant (0/10,000 against 100/10,000) is reported, not hidden.
pub fn enough_data(variant: Arm, control: Arm, m: Minimums) -> Result<(), Reason> {
    let converted = variant.converted + control.converted;
    let exposed = variant.exposed + control.exposed;
    let ok = variant.exposed >= m.visitors
        && control.exposed >= m.visitors
        && converted >= m.conversions
        && exposed - converted >= m.conversions;
    if ok {
        Ok(())
    } else {
        Err(Reason::NotEnoughData(m))
    }
}

fn finite_interval(low: f64, high: f64) -> Result<(), Reason> {
    if low.is_finite() && high.is_finite() && high > low {
        Ok(())
    } else {
        Err(Reason::Degenerate)
    }
}

fn probability(p: f64) -> Result<f64, Reason> {
    if p.is_finite() && p >= 0.0 {
        Ok(p.min(1.0))
    } else {
        Err(Reason::Degenerate)
    }
}

/// Wilson's score interval of one arm's rate (clipped to [0, 1], as statsmodels does).
pub fn wilson(arm: Arm) -> Result<Interval, Reason> {
    if arm.exposed == 0 {
        return Err(Reason::NoExposure);
    }
    let n = arm.exposed as f64;
    let p = arm.rate();
    let z2 = Z_95 * Z_95;
    let denominator = 1.0 + z2 / n;
    let center = (p + z2 / (2.0 * n)) / denominator;
    let half = Z_95 * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt() / denominator;
    let (low, high) = (
        (center - half).clamp(0.0, 1.0),
        (center + half).clamp(0.0, 1.0),
    );
    finite_interval(low, high)?;
    Ok(Interval { low, high })
}

/// The difference of the rates, variant minus control, with Newcombe's hybrid score
/// interval (method 10 of Newcombe 1998; statsmodels' `method="newcomb"`).
pub fn newcombe_diff(variant: Arm, control: Arm) -> Result<Estimate, Reason> {
    let (w1, w0) = (wilson(variant)?, wilson(control)?);
    let (p1, p0) = (variant.rate(), control.rate());
    let value = p1 - p0;
    let low = value - ((p1 - w1.low).powi(2) + (w0.high - p0).powi(2)).sqrt();
    let high = value + ((w1.high - p1).powi(2) + (p0 - w0.low).powi(2)).sqrt();
    finite_interval(low, high)?;
    Ok(Estimate { value, low, high })
}

/// Two-sided p-value of Fisher's exact test of the 2×2 table (variant, control) ×
/// (converted, not): the probability, given the margins, of the tables no more likely than
/// the observed one (scipy's `fisher_exact`). The hypergeometric weights are built from
/// the mode outward by their ratios and normalized by their sum, which needs no factorial
/// and loses less precision than differences of log-gamma values of 10^5-sized counts.
pub fn fisher_exact(variant: Arm, control: Arm) -> Result<f64, Reason> {
    if variant.exposed == 0 || control.exposed == 0 {
        return Err(Reason::NoExposure);
    }
    // X, the variant's conversions, is hypergeometric: N visitors, K conversions, n1 drawn.
    let (n1, n0) = (variant.exposed, control.exposed);
    let k = variant.converted + control.converted;
    let n = n1 + n0;
    let lo = k.saturating_sub(n0);
    let hi = k.min(n1);
    let observed = variant.converted;
    let mode = (((k + 1) as u128 * (n1 + 1) as u128) / (n + 2) as u128) as u64;
    let mode = mode.clamp(lo, hi);
    // weight(x + 1) / weight(x)
    let up =
        |x: u64| ((k - x) as f64 * (n1 - x) as f64) / ((x + 1) as f64 * (n0 + x + 1 - k) as f64);
    let mut weights = vec![0.0_f64; (hi - lo + 1) as usize];
    weights[(mode - lo) as usize] = 1.0;
    let mut w = 1.0;
    for x in mode..hi {
        w *= up(x);
        if w == 0.0 {
            break;
        }
        weights[(x + 1 - lo) as usize] = w;
    }
    w = 1.0;
    for x in (lo..mode).rev() {
        w /= up(x);
        if w == 0.0 {
            break;
        }
        weights[(x - lo) as usize] = w;
    }
    let at_observed = weights[(observed - lo) as usize] * (1.0 + FISHER_TIE);
    let total: f64 = weights.iter().sum();
    let as_extreme: f64 = weights.iter().filter(|w| **w <= at_observed).sum();
    probability(as_extreme / total)
}

/// The lift `p1 / p0 − 1` with a Wald interval and test on `ln(p1 / p0)`, whose variance
/// by the delta method is `1/x1 − 1/n1 + 1/x0 − 1/n0` (statsmodels' `compare="ratio",
/// method="log"`).
pub fn lift(variant: Arm, control: Arm) -> Result<Lift, Reason> {
    if variant.exposed == 0 || control.exposed == 0 {
        return Err(Reason::NoExposure);
    }
    if control.converted == 0 {
        return Err(Reason::NoControlConversion);
    }
    if variant.converted == 0 {
        return Err(Reason::NoVariantConversion);
    }
    let (x1, n1) = (variant.converted as f64, variant.exposed as f64);
    let (x0, n0) = (control.converted as f64, control.exposed as f64);
    let variance = 1.0 / x1 - 1.0 / n1 + 1.0 / x0 - 1.0 / n0;
    if variance <= 0.0 {
        return Err(Reason::AllConverted);
    }
    let se = variance.sqrt();
    let log_ratio = (x1 / n1).ln() - (x0 / n0).ln();
    let low = (log_ratio - Z_95 * se).exp_m1();
    let high = (log_ratio + Z_95 * se).exp_m1();
    finite_interval(low, high)?;
    Ok(Lift {
        value: log_ratio.exp_m1(),
        low,
        high,
        p_value: probability(erfc(log_ratio.abs() / se / std::f64::consts::SQRT_2))?,
    })
}

/// How p-values of several variants against one control are adjusted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Correction {
    /// Holm's step-down: the family-wise error rate, valid under any dependence.
    #[default]
    Holm,
    /// Benjamini-Hochberg: the false discovery rate.
    Bh,
    /// None: each p-value as it is.
    None,
}

impl fmt::Display for Correction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Holm => "holm",
            Self::Bh => "bh",
            Self::None => "none",
        })
    }
}

/// The adjusted p-values, in the order given (statsmodels' `multipletests`, methods
/// `holm` and `fdr_bh`).
pub fn adjust(p_values: &[f64], correction: Correction) -> Vec<f64> {
    let m = p_values.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|a, b| p_values[*a].total_cmp(&p_values[*b]));
    let mut adjusted = p_values.to_vec();
    match correction {
        Correction::None => {}
        Correction::Holm => {
            let mut running = 0.0_f64;
            for (rank, &i) in order.iter().enumerate() {
                running = running.max((m - rank) as f64 * p_values[i]);
                adjusted[i] = running.min(1.0);
            }
        }
        Correction::Bh => {
            let mut running = f64::INFINITY;
            for (rank, &i) in order.iter().enumerate().rev() {
                running = running.min(m as f64 / (rank + 1) as f64 * p_values[i]);
                adjusted[i] = running.min(1.0);
            }
        }
    }
    adjusted
}

/// Welch's t-test of the variant's mean against the control's (two-sided).
pub fn welch(variant: Sample, control: Sample) -> Result<Welch, Reason> {
    if variant.n < 2 || control.n < 2 {
        return Err(Reason::TooFewValues);
    }
    let (va, vb) = (
        variant.variance / variant.n as f64,
        control.variance / control.n as f64,
    );
    let se2 = va + vb;
    if se2.is_nan() || se2 <= 0.0 {
        return Err(Reason::NoVariance);
    }
    let diff = variant.mean - control.mean;
    let t = diff / se2.sqrt();
    let df = se2 * se2 / (va * va / (variant.n as f64 - 1.0) + vb * vb / (control.n as f64 - 1.0));
    let dist = StudentsT::new(0.0, 1.0, df).map_err(|_| Reason::Degenerate)?;
    Ok(Welch {
        diff,
        p_value: probability(2.0 * dist.sf(t.abs()))?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(got: f64, want: f64, what: &str) {
        assert!(
            (got - want).abs() <= 1e-9 * want.abs().max(1e-3),
            "{what}: got {got}, want {want}"
        );
    }

    #[test]
    fn wilson_matches_the_closed_form_and_stays_inside_0_1() {
        // 0/10: [0, 0.2775327998628892] (z = 1.96, Wilson 1927).
        let w = wilson(Arm::new(10, 0)).expect("defined");
        assert_eq!(w.low, 0.0);
        close(w.high, 0.277_532_799_862_889_2, "0/10 high");
        let w = wilson(Arm::new(10, 10)).expect("defined");
        close(w.low, 1.0 - 0.277_532_799_862_889_2, "10/10 low");
        close(w.high, 1.0, "10/10 high");
        assert_eq!(wilson(Arm::new(0, 0)), Err(Reason::NoExposure));
    }

    #[test]
    fn newcombe_never_gives_a_zero_width_interval() {
        // The view's Wald interval for 0/1 against 1/1 is [−1, −1].
        let e = newcombe_diff(Arm::new(1, 0), Arm::new(1, 1)).expect("defined");
        assert_eq!(e.value, -1.0);
        assert!(e.low == -1.0 && e.high > -0.5, "{e:?}");
        for (v, c) in [((5, 0), (5, 0)), ((7, 7), (3, 3)), ((100, 0), (100, 5))] {
            let e = newcombe_diff(Arm::new(v.0, v.1), Arm::new(c.0, c.1)).expect("defined");
            assert!(
                e.high > e.low && e.low <= e.value && e.value <= e.high,
                "{e:?}"
            );
        }
    }

    #[test]
    fn fisher_matches_known_values() {
        // scipy.stats.fisher_exact([[0, 100], [5, 95]]) = 0.05933..., where the z-test
        // gives 0.022.
        let p = fisher_exact(Arm::new(100, 0), Arm::new(100, 5)).expect("defined");
        close(p, 0.059_383_210_468_586_585, "0/100 vs 5/100");
        // The lady tasting tea: [[3, 1], [1, 3]] → 0.4857142857142857.
        let p = fisher_exact(Arm::new(4, 3), Arm::new(4, 1)).expect("defined");
        close(p, 17.0 / 35.0, "tea");
        // One support point: p = 1.
        assert_eq!(fisher_exact(Arm::new(5, 5), Arm::new(3, 3)), Ok(1.0));
        assert_eq!(fisher_exact(Arm::new(5, 0), Arm::new(3, 0)), Ok(1.0));
        assert_eq!(
            fisher_exact(Arm::new(0, 0), Arm::new(3, 0)),
            Err(Reason::NoExposure)
        );
    }

    #[test]
    fn fisher_is_fast_and_tiny_for_a_broken_variant_of_10_000() {
        let started = std::time::Instant::now();
        let p = fisher_exact(Arm::new(10_000, 0), Arm::new(10_000, 100)).expect("defined");
        assert!(p > 0.0 && p < 1e-25, "{p}");
        let p =
            fisher_exact(Arm::new(100_000, 10_000), Arm::new(100_000, 10_250)).expect("defined");
        assert!(p > 0.0 && p < 0.1, "{p}");
        assert!(started.elapsed() < std::time::Duration::from_millis(100));
    }

    #[test]
    fn the_lift_agrees_with_the_difference() {
        // 15/100 against 25/100: the Wald lift interval of the old CLI crossed zero while
        // the difference was significant; on the log ratio it cannot cross −100%.
        let l = lift(Arm::new(100, 25), Arm::new(100, 15)).expect("defined");
        close(l.value, 25.0 / 15.0 - 1.0, "lift");
        assert!(l.low > -1.0 && l.low < l.value && l.value < l.high, "{l:?}");
        let se = (1.0 / 25.0 - 1.0 / 100.0 + 1.0 / 15.0 - 1.0 / 100.0_f64).sqrt();
        close(
            l.low,
            ((25.0_f64 / 15.0).ln() - Z_95 * se).exp() - 1.0,
            "low",
        );
        assert_eq!(
            lift(Arm::new(100, 5), Arm::new(100, 0)),
            Err(Reason::NoControlConversion)
        );
        assert_eq!(
            lift(Arm::new(100, 0), Arm::new(100, 5)),
            Err(Reason::NoVariantConversion)
        );
        assert_eq!(
            lift(Arm::new(9, 9), Arm::new(4, 4)),
            Err(Reason::AllConverted)
        );
    }

    #[test]
    fn corrections_follow_holm_and_benjamini_hochberg() {
        let p = [0.01, 0.04, 0.03, 0.5];
        assert_eq!(adjust(&p, Correction::None), p);
        let holm = adjust(&p, Correction::Holm);
        let want = [0.04, 0.09, 0.09, 0.5];
        for (g, w) in holm.iter().zip(want) {
            close(*g, w, "holm");
        }
        let bh = adjust(&p, Correction::Bh);
        let want = [0.04, 0.16 / 3.0, 0.16 / 3.0, 0.5];
        for (g, w) in bh.iter().zip(want) {
            close(*g, w, "bh");
        }
        assert_eq!(adjust(&[0.7, 0.9], Correction::Holm), [1.0, 1.0]);
        assert!(adjust(&[], Correction::Bh).is_empty());
    }

    #[test]
    fn the_guard_pools_conversions_so_a_broken_variant_is_reported() {
        let m = Minimums {
            visitors: 50,
            conversions: 5,
        };
        assert_eq!(
            enough_data(Arm::new(10_000, 0), Arm::new(10_000, 100), m),
            Ok(())
        );
        assert!(enough_data(Arm::new(49, 10), Arm::new(100, 10), m).is_err());
        assert!(enough_data(Arm::new(100, 2), Arm::new(100, 2), m).is_err());
        // Nearly everyone converted: too few non-conversions.
        assert!(enough_data(Arm::new(100, 98), Arm::new(100, 99), m).is_err());
    }

    #[test]
    fn welch_needs_two_values_and_some_variance() {
        let s = |n, mean, variance| Sample { n, mean, variance };
        let w = welch(s(30, 12.0, 4.0), s(40, 10.0, 9.0)).expect("defined");
        assert_eq!(w.diff, 2.0);
        assert!(w.p_value > 0.0 && w.p_value < 0.01, "{w:?}");
        assert_eq!(
            welch(s(1, 1.0, 0.0), s(40, 10.0, 9.0)),
            Err(Reason::TooFewValues)
        );
        assert_eq!(
            welch(s(5, 1.0, 0.0), s(5, 2.0, 0.0)),
            Err(Reason::NoVariance)
        );
    }
}
