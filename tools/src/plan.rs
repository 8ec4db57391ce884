//! `experiment-results plan`: the visitors a split test needs before it starts, for the
//! view's two tests: the fixed-horizon pooled z-test read once (`p_value`) and the
//! always-valid mSPRT read while the test runs (`always_valid_p_value`, migration 11). The
//! first weight is the control's; each figure is the fewest visitors at which every
//! treatment's comparison with the control reaches the requested power at the treatment's
//! share of α (Bonferroni across the treatments), so on a ramp the smallest arm decides.
//!
//! - Fixed horizon: the closed form of statsmodels' `samplesize_proportions_2indep_onetail`
//!   (variance pooled under the null, per arm under the alternative; the far tail of the
//!   two-sided test ignored).
//! - Always valid: no simulation. The z-statistic of the difference is approximated by a
//!   Brownian motion with drift in the visitors seen (the normal approximation at the true
//!   rates), read at `looks` equally spaced sizes up to the planned one, and the chance that
//!   it crosses the mSPRT's boundary at one of them is integrated numerically, look by look
//!   (Armitage, McPherson and Rowe's recursion, as group-sequential designs compute it).
//!   The planned size is the smallest at which that chance reaches the power.

use std::fmt::{self, Write as _};
use std::str::FromStr;

use serde::Serialize;
use statrs::distribution::{ContinuousCDF, Normal};
use statrs::function::erf::erfc;

/// The view's tuning constant N* where neither the snapshot nor the settings set one.
pub const DEFAULT_TUNING: f64 = 5000.0;

/// The view's always-valid mixture: its N* and the treatments its 5% is shared across.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Mixture {
    pub tuning: f64,
    pub treatments: usize,
}

impl Mixture {
    /// ρ² as the view tunes it (migration 11): `(b + ln(b + 1)) / N*` with
    /// `b = −2 ln(0.05 / treatments)`, whatever α the plan uses (the view's mixture is tuned
    /// at 5% shared across the treatments; only the threshold its p-value is read against
    /// moves).
    fn rho2(self) -> f64 {
        let b = -2.0 * (0.05 / self.treatments as f64).ln();
        (b + b.ln_1p()) / self.tuning
    }
}

/// Most looks `--looks` takes: the integration's cost grows with the square root of the
/// looks times the looks (1,000 looks, hourly over six weeks: 2 to 3 s per treatment).
pub const MAX_LOOKS: u32 = 1000;

/// No design is planned beyond this many visitors per treatment (it would take centuries).
const MAX_VISITORS: f64 = 1e13;

/// The smallest difference worth detecting, as typed: `0.01` (absolute, in proportion) or
/// `5%` (relative to the baseline rate).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Mde {
    Absolute(f64),
    /// A fraction of the baseline rate (`5%` is 0.05).
    Relative(f64),
}

impl FromStr for Mde {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let number = |text: &str| {
            text.trim()
                .parse::<f64>()
                .ok()
                .filter(|x| x.is_finite())
                .ok_or_else(|| format!("{s:?} is not a number, nor a percentage such as 5%"))
        };
        match s.strip_suffix('%') {
            Some(percent) => number(percent).map(|x| Self::Relative(x / 100.0)),
            None => number(s).map(Self::Absolute),
        }
    }
}

/// `experiment-results plan`: the visitors a test needs, per variant and in total.
#[derive(clap::Parser, Clone, Debug)]
#[command(
    name = "experiment-results plan",
    version,
    about = "Prints the visitors a split test needs per variant, for the fixed-horizon \
             z-test read once and for always-valid monitoring (docs/planning.md)."
)]
pub struct PlanConfig {
    /// The control's conversion rate, e.g. 0.10.
    #[arg(long, value_name = "R", allow_hyphen_values = true)]
    pub baseline_rate: f64,

    /// The smallest difference worth detecting: absolute in proportion (0.01 is one
    /// percentage point: 0.10 against 0.11), or relative to the baseline rate with a % sign
    /// (5%: 0.10 against 0.105). Negative for a decrease.
    #[arg(long, value_name = "D", allow_hyphen_values = true)]
    pub mde: Mde,

    /// The variants' weights, the control's first, e.g. 10,90 for a ramp or 34,33,33 for
    /// two treatments; only their ratios count.
    #[arg(
        long,
        value_name = "W,W,...",
        value_delimiter = ',',
        default_value = "50,50",
        allow_hyphen_values = true
    )]
    pub weights: Vec<f64>,

    /// The family-wise error across the treatments, two-sided; each treatment is tested at
    /// alpha / (number of treatments).
    #[arg(long, default_value_t = 0.05, allow_hyphen_values = true)]
    pub alpha: f64,

    /// The chance that each treatment's comparison detects a true difference of D.
    #[arg(long, default_value_t = 0.8, allow_hyphen_values = true)]
    pub power: f64,

    /// N*, the always-valid tuning constant: the deployment's `sequential_tuning` setting.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_TUNING, allow_hyphen_values = true)]
    pub tuning: f64,

    /// How many times the always-valid result is read up to the planned size, equally
    /// spaced (20: about daily over three weeks; 1: once, at the end, which needs the most
    /// visitors and holds for any schedule that includes the end).
    #[arg(long, default_value_t = 20)]
    pub looks: u32,

    /// JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Why there is no plan: each a sentence naming the input to change.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum PlanError {
    #[error("--baseline-rate must be between 0 and 1, exclusive (got {0})")]
    BaselineRate(f64),
    #[error("--mde must not be 0")]
    NoEffect,
    #[error(
        "the baseline rate plus --mde must be between 0 and 1, exclusive (got {baseline} + \
         {mde} = {})",
        baseline + mde
    )]
    TreatmentRate { baseline: f64, mde: f64 },
    #[error("--weights needs the control's weight and at least one treatment's, e.g. 50,50")]
    TooFewWeights,
    #[error("every weight must be a positive number (got {0})")]
    Weight(f64),
    #[error("--alpha must be between 0 and 1, exclusive (got {0})")]
    Alpha(f64),
    #[error("--power must be between 0 and 1, exclusive (got {0})")]
    Power(f64),
    #[error("--power must be greater than --alpha (got power {power}, alpha {alpha})")]
    PowerBelowAlpha { power: f64, alpha: f64 },
    #[error("--tuning must be a positive number of visitors (got {0})")]
    Tuning(f64),
    #[error("--looks must be between 1 and {MAX_LOOKS} (got {0})")]
    Looks(u32),
    #[error("the test would need more than 10^13 visitors per variant: plan a larger --mde")]
    TooLarge,
}

/// A validated design: every field within its range.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Design {
    pub baseline_rate: f64,
    pub treatment_rate: f64,
    /// The control's first.
    pub weights: Vec<f64>,
    /// The family-wise error across the treatments.
    pub alpha: f64,
    pub power: f64,
    pub tuning: f64,
    pub looks: u32,
}

impl Design {
    /// The inputs checked, or the first that is out of range.
    pub fn parse(config: &PlanConfig) -> Result<Self, PlanError> {
        let open_unit = |x: f64| x > 0.0 && x < 1.0;
        let baseline = config.baseline_rate;
        if !open_unit(baseline) {
            return Err(PlanError::BaselineRate(baseline));
        }
        let mde = match config.mde {
            Mde::Absolute(d) => d,
            Mde::Relative(f) => baseline * f,
        };
        if mde == 0.0 {
            return Err(PlanError::NoEffect);
        }
        if !open_unit(baseline + mde) {
            return Err(PlanError::TreatmentRate { baseline, mde });
        }
        if config.weights.len() < 2 {
            return Err(PlanError::TooFewWeights);
        }
        if let Some(&w) = config
            .weights
            .iter()
            .find(|w| !(w.is_finite() && **w > 0.0))
        {
            return Err(PlanError::Weight(w));
        }
        if !open_unit(config.alpha) {
            return Err(PlanError::Alpha(config.alpha));
        }
        if !open_unit(config.power) {
            return Err(PlanError::Power(config.power));
        }
        if config.power <= config.alpha {
            return Err(PlanError::PowerBelowAlpha {
                power: config.power,
                alpha: config.alpha,
            });
        }
        if !(config.tuning.is_finite() && config.tuning > 0.0) {
            return Err(PlanError::Tuning(config.tuning));
        }
        if !(1..=MAX_LOOKS).contains(&config.looks) {
            return Err(PlanError::Looks(config.looks));
        }
        Ok(Self {
            baseline_rate: baseline,
            treatment_rate: baseline + mde,
            weights: config.weights.clone(),
            alpha: config.alpha,
            power: config.power,
            tuning: config.tuning,
            looks: config.looks,
        })
    }

    pub fn mde(&self) -> f64 {
        self.treatment_rate - self.baseline_rate
    }

    /// The view's mixture for this design.
    pub fn mixture(&self) -> Mixture {
        Mixture {
            tuning: self.tuning,
            treatments: self.weights.len() - 1,
        }
    }

    /// α of each treatment's comparison: Bonferroni across the treatments.
    pub fn alpha_per_treatment(&self) -> f64 {
        self.alpha / (self.weights.len() - 1) as f64
    }

    /// Treatment `i`'s comparison with the control (`i` from 1).
    fn comparison(&self, i: usize) -> Comparison {
        Comparison {
            control_rate: self.baseline_rate,
            treatment_rate: self.treatment_rate,
            ratio: self.weights[0] / self.weights[i],
        }
    }
}

/// One treatment against the control, sized by its treatment visitors `n`: the control
/// has `ratio · n` (statsmodels' `ratio`, nobs2 / nobs1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Comparison {
    pub control_rate: f64,
    pub treatment_rate: f64,
    pub ratio: f64,
}

impl Comparison {
    fn diff(self) -> f64 {
        self.treatment_rate - self.control_rate
    }

    /// √(n · Var(p̂₁ − p̂₀)) with each arm's own rate: the alternative's spread.
    fn sd_alternative(self) -> f64 {
        let (p1, p0) = (self.treatment_rate, self.control_rate);
        (p1 * (1.0 - p1) + p0 * (1.0 - p0) / self.ratio).sqrt()
    }

    /// √(n · Var(p̂₁ − p̂₀)) with the expected pooled rate in both arms: the null's spread
    /// as the pooled z-test estimates it.
    fn sd_null(self) -> f64 {
        let r = self.ratio;
        let pooled = (self.treatment_rate + r * self.control_rate) / (1.0 + r);
        (pooled * (1.0 - pooled) * (1.0 + 1.0 / r)).sqrt()
    }
}

fn normal_quantile(p: f64) -> f64 {
    Normal::standard().inverse_cdf(p)
}

/// Φ(x), accurate in the far tails.
fn normal_cdf(x: f64) -> f64 {
    0.5 * erfc(-x / std::f64::consts::SQRT_2)
}

/// Treatment visitors at which the two-sided pooled z-test at `alpha` reaches `power`:
/// `((z_{1−α/2}·σ₀ + z_power·σ₁) / D)²` (statsmodels' `samplesize_proportions_2indep_onetail`).
pub fn fixed_horizon_visitors(c: Comparison, alpha: f64, power: f64) -> f64 {
    let z = normal_quantile(1.0 - alpha / 2.0) * c.sd_null()
        + normal_quantile(power) * c.sd_alternative();
    (z / c.diff()).powi(2)
}

/// The |z| above which the view's always-valid p-value is below `alpha`, at `visitors` in
/// the variant and the control together: solves
/// `√(1+nρ²)·exp(−z²/2 · nρ²/(1+nρ²)) = α` for z.
pub fn always_valid_threshold(visitors: f64, mixture: Mixture, alpha: f64) -> f64 {
    let v = visitors * mixture.rho2();
    ((1.0 + v) / v * (v.ln_1p() - 2.0 * alpha.ln())).sqrt()
}

/// The chance that the always-valid test of `c` at `alpha` gives p < alpha at one of `looks`
/// equally spaced looks up to `n` treatment visitors (normal approximation; see the module).
pub fn always_valid_power(c: Comparison, n: f64, alpha: f64, mixture: Mixture, looks: u32) -> f64 {
    // X(t) = z(t)·√t, t the share of the planned visitors seen: a Brownian motion with drift
    // θ = E[z at n]. Look j at t = j/L rejects where |X| ≥ b_j = c(n·t)·√t.
    // The view divides by the larger of the unpooled and the pooled standard error.
    let drift = c.diff().abs() * n.sqrt() / c.sd_alternative().max(c.sd_null());
    let pair = n * (1.0 + c.ratio);
    let step = 1.0 / f64::from(looks);
    let bounds: Vec<f64> = (1..=looks)
        .map(|j| {
            let t = f64::from(j) * step;
            always_valid_threshold(pair * t, mixture, alpha) * t.sqrt()
        })
        .collect();
    crossing_probability(drift, &bounds, GRID).0
}

/// Grid points per standard deviation of one look's increment.
const GRID: f64 = 4.0;
/// Densities are cut where they are below e^(−SPAN²/2) of their peak.
const SPAN: f64 = 8.0;

/// A node off the lattice (a look's boundary, or the start X(0) = 0): it adds
/// `mass·g(x) + slope·g'(x)` to the integral of the density times any g.
#[derive(Clone, Copy, Debug)]
struct Node {
    x: f64,
    mass: f64,
    slope: f64,
}

/// P(|X(t_j)| ≥ bounds[j] for some j) for X a Brownian motion with `drift`, looks at
/// t_j = (j+1)/L: the density of the paths still inside is carried from look to look on a
/// lattice of `grid` points per standard deviation of a look's increment, integrated by the
/// trapezoid rule with each look's boundary as a node (so the cut is exact) and the
/// Euler-Maclaurin end correction (so the error is of the third order in the spacing).
/// Also answers the mass still inside after the last look: the two add up to 1 but for the
/// grid's error.
fn crossing_probability(drift: f64, bounds: &[f64], grid: f64) -> (f64, f64) {
    let step = 1.0 / bounds.len() as f64;
    let sd = step.sqrt();
    let h = sd / grid;
    let shift = drift * step;
    let peak = 1.0 / (sd * (2.0 * std::f64::consts::PI).sqrt());
    // The increment's density at y − x, and its derivatives in x and in y and x.
    let kernel = |y: f64, x: f64| {
        let u = (y - x - shift) / sd;
        if u.abs() > SPAN {
            (0.0, 0.0, 0.0)
        } else {
            let k = peak * (-0.5 * u * u).exp();
            (k, k * u / sd, k * (1.0 - u * u) / step)
        }
    };
    // Lattice to lattice, k − i in d_min..=d_max: a table.
    let d_min = ((shift - SPAN * sd) / h).floor() as i64;
    let d_max = ((shift + SPAN * sd) / h).ceil() as i64;
    let table: Vec<f64> = (d_min..=d_max)
        .map(|d| kernel(d as f64 * h, 0.0).0)
        .collect();

    // The paths still inside after the previous look: masses (density × trapezoid weight)
    // on the lattice points k·h, k from `first`, and the off-lattice nodes.
    let mut first: i64 = 0;
    let mut lattice: Vec<f64> = Vec::new();
    let mut nodes = vec![Node {
        x: 0.0,
        mass: 1.0,
        slope: 0.0,
    }];
    let mut rejected = 0.0;

    for (j, &b) in bounds.iter().enumerate() {
        // Crossing at this look: each mass's chance to end beyond ±b, and its derivative.
        let out = |x: f64| {
            let (lo, hi) = ((-b - x - shift) / sd, (x + shift - b) / sd);
            let density = |z: f64| peak * sd * (-0.5 * z * z).exp();
            (
                normal_cdf(lo) + normal_cdf(hi),
                (density(hi) - density(lo)) / sd,
            )
        };
        let near = |x: f64| x + shift > b - SPAN * sd || x + shift < -b + SPAN * sd;
        let mut out_now = 0.0;
        for (k, m) in (first..).zip(&lattice) {
            let x = k as f64 * h;
            if near(x) {
                out_now += m * out(x).0;
            }
        }
        for n in &nodes {
            let (p, dp) = out(n.x);
            out_now += n.mass * p + n.slope * dp;
        }
        rejected += out_now;
        if j + 1 == bounds.len() {
            let before: f64 =
                lattice.iter().sum::<f64>() + nodes.iter().map(|n| n.mass).sum::<f64>();
            return (rejected, before - out_now);
        }

        // The density of the paths inside at this look, and its derivative, at y.
        let t = (j + 1) as f64 * step;
        let centre = drift * t;
        let low = (-b).max(centre - SPAN * t.sqrt());
        let high = b.min(centre + SPAN * t.sqrt());
        if low >= high {
            return (rejected, 0.0);
        }
        let at = |y: f64| {
            let (mut f, mut df) = (0.0, 0.0);
            for (k, m) in (first..).zip(&lattice) {
                let (kv, _, _) = kernel(y, k as f64 * h);
                f += m * kv;
                // ∂y K = −∂x K.
                df -= m * kernel(y, k as f64 * h).1;
            }
            for n in &nodes {
                let (kv, dx, dxy) = kernel(y, n.x);
                f += n.mass * kv + n.slope * dx;
                df += -n.mass * dx + n.slope * dxy;
            }
            (f, df)
        };
        let k_low = (low / h).floor() as i64 + 1;
        let k_high = (high / h).ceil() as i64 - 1;
        let mut next = Vec::with_capacity((k_high - k_low + 1).max(0) as usize);
        for k in k_low..=k_high {
            let y = k as f64 * h;
            let mut f = 0.0;
            let i_low = (k - d_max).max(first);
            let i_high = (k - d_min).min(first + lattice.len() as i64 - 1);
            for i in i_low..=i_high {
                f += lattice[(i - first) as usize] * table[(k - i - d_min) as usize];
            }
            for n in &nodes {
                let (kv, dx, _) = kernel(y, n.x);
                f += n.mass * kv + n.slope * dx;
            }
            next.push(f);
        }
        // Trapezoid weights over low, k_low·h, ..., k_high·h, high (or the one cell from
        // low to high), and the end correction (spacing²/12)·(F'(low) − F'(high)).
        let (gap_low, gap_high, spacing) = if next.is_empty() {
            (high - low, high - low, high - low)
        } else {
            (k_low as f64 * h - low, high - k_high as f64 * h, h)
        };
        let last = next.len().saturating_sub(1);
        for (i, f) in next.iter_mut().enumerate() {
            let below = if i == 0 { gap_low } else { h };
            let above = if i == last { gap_high } else { h };
            *f *= (below + above) / 2.0;
        }
        let correction = spacing * spacing / 12.0;
        let ((f_low, df_low), (f_high, df_high)) = (at(low), at(high));
        nodes = vec![
            Node {
                x: low,
                mass: f_low * gap_low / 2.0 + correction * df_low,
                slope: correction * f_low,
            },
            Node {
                x: high,
                mass: f_high * gap_high / 2.0 - correction * df_high,
                slope: -correction * f_high,
            },
        ];
        first = k_low;
        lattice = next;
    }
    (rejected, 0.0)
}

/// Visitors per variant of one design.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Sizes {
    /// In the order of the weights, each rounded up.
    pub per_variant: Vec<u64>,
    pub total: u64,
    /// Before rounding.
    pub exact_per_variant: Vec<f64>,
    /// The treatment (its index among the weights, the control being 0) whose comparison
    /// needs the most visitors: it sets the size.
    pub deciding_variant: usize,
}

impl Sizes {
    /// Each treatment's needed visitors `need(i)` scaled to the whole split, the largest
    /// kept.
    fn from_treatments(
        weights: &[f64],
        mut need: impl FnMut(usize) -> Result<f64, PlanError>,
    ) -> Result<Self, PlanError> {
        // Relative to the largest, so that no sum of huge weights overflows.
        let largest = weights.iter().copied().fold(0.0, f64::max);
        let weights: Vec<f64> = weights.iter().map(|w| w / largest).collect();
        let total_weight: f64 = weights.iter().sum();
        let mut best = (0.0, 1);
        for i in 1..weights.len() {
            // Treatments of equal weight need the same: computed once.
            if weights[1..i].contains(&weights[i]) {
                continue;
            }
            let total = need(i)? * total_weight / weights[i];
            if total > best.0 {
                best = (total, i);
            }
        }
        let exact: Vec<f64> = weights.iter().map(|w| best.0 * w / total_weight).collect();
        let per_variant: Vec<u64> = exact.iter().map(|n| n.ceil() as u64).collect();
        Ok(Self {
            total: per_variant.iter().sum(),
            per_variant,
            exact_per_variant: exact,
            deciding_variant: best.1,
        })
    }
}

/// The visitors needed for both designs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Plan {
    pub design: Design,
    pub alpha_per_treatment: f64,
    /// The pooled z-test, read once at this size.
    pub fixed_horizon: Sizes,
    /// The always-valid test, read at `design.looks` equally spaced sizes up to this one.
    pub always_valid: Sizes,
}

/// Both designs' sizes.
pub fn plan(design: &Design) -> Result<Plan, PlanError> {
    let alpha = design.alpha_per_treatment();
    let fixed = |i| {
        let n = fixed_horizon_visitors(design.comparison(i), alpha, design.power);
        if n <= MAX_VISITORS {
            Ok(n)
        } else {
            Err(PlanError::TooLarge)
        }
    };
    let fixed_horizon = Sizes::from_treatments(&design.weights, fixed)?;
    let always_valid = Sizes::from_treatments(&design.weights, |i| {
        let c = design.comparison(i);
        let power = |n| always_valid_power(c, n, alpha, design.mixture(), design.looks);
        // The size is bracketed by the fixed horizon's (the always-valid boundary is above
        // the fixed one) and the size with one look at the end (more looks only add
        // chances), each widened if the grid's error puts it on the wrong side, then
        // bisected to a tenth of a visitor (or 10⁻⁶ of the size).
        let fixed_n = fixed(i)?;
        let high = one_look_visitors(c, alpha, design, fixed_n)?;
        let low = if power(fixed_n) >= design.power {
            0.0
        } else {
            fixed_n
        };
        smallest_reaching(power, design.power, (low, high), |high| {
            f64::max(0.1, 1e-6 * high)
        })
    })?;
    Ok(Plan {
        design: design.clone(),
        alpha_per_treatment: alpha,
        fixed_horizon,
        always_valid,
    })
}

/// Treatment visitors at which one look at the end reaches the power (the closed form of
/// [`always_valid_power`] with one look), found from `from` up.
fn one_look_visitors(
    c: Comparison,
    alpha: f64,
    design: &Design,
    from: f64,
) -> Result<f64, PlanError> {
    let power = |n| always_valid_power(c, n, alpha, design.mixture(), 1);
    smallest_reaching(power, design.power, (0.0, from.max(1.0)), |high| {
        1e-9 * high
    })
}

/// The smallest size at which `power` reaches `target`, to within `tolerance` of the size:
/// from `[low, high]`, `high` doubled until it reaches it, then the bracket bisected.
fn smallest_reaching(
    power: impl Fn(f64) -> f64,
    target: f64,
    (mut low, mut high): (f64, f64),
    tolerance: impl Fn(f64) -> f64,
) -> Result<f64, PlanError> {
    while power(high) < target {
        (low, high) = (high, 2.0 * high);
        if high > MAX_VISITORS {
            return Err(PlanError::TooLarge);
        }
    }
    while high - low > tolerance(high) {
        let mid = f64::midpoint(low, high);
        if power(mid) < target {
            low = mid;
        } else {
            high = mid;
        }
    }
    Ok(high)
}

/// The command: the plan as a table, or as JSON.
pub fn run(config: &PlanConfig) -> anyhow::Result<String> {
    let design = Design::parse(config)?;
    let plan = plan(&design)?;
    if config.json {
        Ok(serde_json::to_string_pretty(&plan)? + "\n")
    } else {
        Ok(plan.to_string())
    }
}

fn variant_name(i: usize) -> String {
    if i == 0 {
        "control".to_owned()
    } else {
        format!("treatment {i}")
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = &self.design;
        let treatments = d.weights.len() - 1;
        let weights: Vec<String> = d.weights.iter().map(|w| w.to_string()).collect();
        writeln!(
            f,
            "control {:.2}%, treatment {:.2}% ({:+.2} pp, {:+.2}%), weights {} (the control's \
             first), power {}",
            100.0 * d.baseline_rate,
            100.0 * d.treatment_rate,
            100.0 * d.mde(),
            100.0 * d.mde() / d.baseline_rate,
            weights.join(","),
            d.power,
        )?;
        if treatments == 1 {
            writeln!(f, "alpha {} two-sided", d.alpha)?;
        } else {
            writeln!(
                f,
                "alpha {} two-sided across {treatments} treatments: {:.4} each (Bonferroni)",
                d.alpha, self.alpha_per_treatment
            )?;
        }
        let mut header = format!("{:<46}", "visitors needed");
        for i in 0..d.weights.len() {
            write!(header, "{:>13}", variant_name(i))?;
        }
        writeln!(f, "{header}{:>13}", "total")?;
        let rows = [
            (
                "fixed horizon: pooled z-test, read once".to_owned(),
                &self.fixed_horizon,
            ),
            (
                format!(
                    "always valid: N* = {}, {} look{}",
                    d.tuning,
                    d.looks,
                    if d.looks == 1 { "" } else { "s" }
                ),
                &self.always_valid,
            ),
        ];
        for (name, sizes) in rows {
            let mut line = format!("{name:<46}");
            for n in &sizes.per_variant {
                write!(line, "{n:>13}")?;
            }
            writeln!(f, "{line}{:>13}", sizes.total)?;
        }
        let smallest = d.weights[1..].iter().cloned().fold(f64::INFINITY, f64::min);
        if treatments > 1 && d.weights[1..].iter().any(|w| *w != smallest) {
            writeln!(
                f,
                "{} (the smallest treatment) sets the size.",
                variant_name(self.fixed_horizon.deciding_variant)
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    const ONE: Mixture = Mixture {
        tuning: 5000.0,
        treatments: 1,
    };

    fn config(args: &[&str]) -> PlanConfig {
        PlanConfig::try_parse_from(std::iter::once("plan").chain(args.iter().copied()))
            .expect("parses")
    }

    fn design(args: &[&str]) -> Design {
        Design::parse(&config(args)).expect("valid")
    }

    fn even(rate: f64, mde: f64) -> Comparison {
        Comparison {
            control_rate: rate,
            treatment_rate: rate + mde,
            ratio: 1.0,
        }
    }

    #[test]
    fn plan_fixed_horizon_is_the_textbook_figure() {
        // 10% against 12%, 50/50, α 0.05, power 0.8: the pooled design's 3,841 per arm
        // (statsmodels' samplesize_proportions_2indep_onetail: 3840.5).
        let n = fixed_horizon_visitors(even(0.10, 0.02), 0.05, 0.8);
        assert!((n - 3840.5).abs() < 0.5, "{n}");
        let p = plan(&design(&["--baseline-rate", "0.1", "--mde", "0.02"])).expect("plan");
        assert_eq!(p.fixed_horizon.per_variant, [3841, 3841]);
        assert_eq!(p.fixed_horizon.total, 7682);
    }

    #[test]
    fn plan_the_threshold_is_where_the_views_p_value_is_alpha() {
        // The view's p-value (migration 11: ρ²·N* = b + ln(b + 1), b = −2 ln(0.05 / k), the
        // p-value times k) at |z| = threshold is k·α exactly: read against k·α, the
        // family's.
        let b1 = 5.991_464_547_107_982;
        for (n, tuning, treatments, alpha) in [
            (100.0, 5000.0, 1, 0.05),
            (20_000.0, 5000.0, 2, 0.025),
            (3e6, 2e4, 3, 0.01 / 3.0),
        ] {
            let z = always_valid_threshold(n, Mixture { tuning, treatments }, alpha);
            let b = b1 + 2.0 * f64::ln(treatments as f64);
            let v = n * (b + f64::ln(b + 1.0)) / tuning;
            let k = treatments as f64;
            let p = k * (1.0_f64 + v).sqrt() * (-z * z / 2.0 * v / (1.0 + v)).exp();
            assert!((p - k * alpha).abs() < 1e-12, "{n}: {p}");
        }
        // One treatment: migration 10's constant.
        let one = Mixture {
            tuning: 1.0,
            treatments: 1,
        }
        .rho2();
        assert!((one - 7.936_154_601_737_565).abs() < 1e-12, "{one}");
    }

    #[test]
    fn plan_one_look_is_the_closed_form() {
        // One look: P(|N(θ, 1)| ≥ c) exactly.
        let c = even(0.10, 0.02);
        for n in [2000.0, 8000.0, 20_000.0] {
            let theta = 0.02 * f64::sqrt(n) / c.sd_alternative().max(c.sd_null());
            let z = always_valid_threshold(2.0 * n, ONE, 0.05);
            let want = normal_cdf(theta - z) + normal_cdf(-theta - z);
            let got = always_valid_power(c, n, 0.05, ONE, 1);
            assert!((got - want).abs() < 1e-12, "{n}: {got} against {want}");
        }
    }

    #[test]
    fn plan_integration_keeps_the_mass_and_converges() {
        // Every path is either out or in after the last look (to 5·10⁻⁴), and a grid twice
        // as fine gives the same power (to 3·10⁻⁴, under 0.1% of the size).
        for (drift, looks) in [(2.8, 20), (4.0, 5), (0.5, 200), (3.0, 1000)] {
            let bounds: Vec<f64> = (1..=looks)
                .map(|j| {
                    let t = f64::from(j) / f64::from(looks);
                    always_valid_threshold(20_000.0 * t, ONE, 0.05) * t.sqrt()
                })
                .collect();
            let (out, inside) = crossing_probability(drift, &bounds, GRID);
            assert!(
                (out + inside - 1.0).abs() < 5e-4,
                "{drift}, {looks}: {out} + {inside}"
            );
            let (finer, _) = crossing_probability(drift, &bounds, 2.0 * GRID);
            assert!(
                (out - finer).abs() < 3e-4,
                "{drift}, {looks}: {out} against {finer}"
            );
        }
        // L looks include the looks of L/2, so the crossing probability cannot fall.
        let c = even(0.05, 0.005);
        let mut last = 0.0;
        for looks in [1, 2, 4, 8, 16, 32, 64, 128, 256] {
            let p = always_valid_power(c, 40_000.0, 0.05, ONE, looks);
            assert!(p >= last - 1e-6, "{looks} looks: {p} < {last}");
            assert!(p > 0.0 && p < 1.0);
            last = p;
        }
        // Under no effect the crossing chance stays below α however often one looks (the
        // sequence's guarantee), and close to it with many looks at a large size.
        let null = Comparison {
            control_rate: 0.1,
            treatment_rate: 0.1 + 1e-9,
            ratio: 1.0,
        };
        let p = always_valid_power(null, 1e6, 0.05, ONE, 500);
        assert!(p < 0.05 && p > 0.005, "{p}");
    }

    #[test]
    fn plan_always_valid_needs_more_and_more_looks_need_fewer() {
        let once = plan(&design(&[
            "--baseline-rate",
            "0.1",
            "--mde",
            "0.02",
            "--looks",
            "1",
        ]))
        .expect("plan");
        let often = plan(&design(&[
            "--baseline-rate",
            "0.1",
            "--mde",
            "0.02",
            "--looks",
            "200",
        ]))
        .expect("plan");
        assert!(once.always_valid.total > once.fixed_horizon.total);
        assert!(often.always_valid.total < once.always_valid.total);
        assert!(often.always_valid.total > often.fixed_horizon.total);
        // The planned size reaches the power, and a visitor less per variant does not.
        let d = design(&["--baseline-rate", "0.1", "--mde", "0.02"]);
        let p = plan(&d).expect("plan");
        let n = p.always_valid.exact_per_variant[1];
        let power = |n| always_valid_power(d.comparison(1), n, 0.05, ONE, 20);
        assert!(power(n) >= 0.8 && power(n - 1.0) < 0.8, "{}", power(n));
    }

    #[test]
    fn plan_the_smallest_arm_decides_and_alpha_is_split() {
        let ramp = plan(&design(&[
            "--baseline-rate",
            "0.1",
            "--mde",
            "0.02",
            "--weights",
            "10,90",
        ]))
        .expect("plan");
        let even = plan(&design(&["--baseline-rate", "0.1", "--mde", "0.02"])).expect("plan");
        assert!(ramp.fixed_horizon.total > 2 * even.fixed_horizon.total);
        let exact = &ramp.fixed_horizon.exact_per_variant;
        assert!((exact[0] * 9.0 - exact[1]).abs() < 1e-6 * exact[1]);
        let three = design(&[
            "--baseline-rate",
            "0.1",
            "--mde",
            "0.02",
            "--weights",
            "50,25,25",
        ]);
        assert_eq!(three.alpha_per_treatment(), 0.025);
        let p = plan(&three).expect("plan");
        // Each treatment at α/2, with twice the control's... the same as one treatment of
        // weight 25 against 50 at α 0.025.
        let c = Comparison {
            control_rate: 0.1,
            treatment_rate: 0.12,
            ratio: 2.0,
        };
        let n = fixed_horizon_visitors(c, 0.025, 0.8);
        assert!((p.fixed_horizon.exact_per_variant[1] - n).abs() < 1e-6 * n);
        let uneven = plan(&design(&[
            "--baseline-rate",
            "0.1",
            "--mde",
            "0.02",
            "--weights",
            "40,40,20",
        ]))
        .expect("plan");
        assert_eq!(uneven.fixed_horizon.deciding_variant, 2);
        assert_eq!(uneven.always_valid.deciding_variant, 2);
    }

    #[test]
    fn plan_relative_mde_and_bad_input() {
        let d = design(&["--baseline-rate", "0.2", "--mde", "5%"]);
        assert!((d.treatment_rate - 0.21).abs() < 1e-12);
        let d = design(&["--baseline-rate", "0.2", "--mde", "-0.01"]);
        assert!((d.treatment_rate - 0.19).abs() < 1e-12);
        let bad = |args: &[&str]| Design::parse(&config(args)).expect_err("refused");
        assert_eq!(
            bad(&["--baseline-rate", "0", "--mde", "0.01"]),
            PlanError::BaselineRate(0.0)
        );
        assert_eq!(
            bad(&["--baseline-rate", "1", "--mde", "0.01"]),
            PlanError::BaselineRate(1.0)
        );
        assert!(matches!(
            bad(&["--baseline-rate", "NaN", "--mde", "0.01"]),
            PlanError::BaselineRate(_)
        ));
        assert!(matches!(
            bad(&["--baseline-rate", "0.995", "--mde", "0.01"]),
            PlanError::TreatmentRate { .. }
        ));
        assert!(matches!(
            bad(&["--baseline-rate", "0.1", "--mde", "-100%"]),
            PlanError::TreatmentRate { .. }
        ));
        assert_eq!(
            bad(&["--baseline-rate", "0.1", "--mde", "0"]),
            PlanError::NoEffect
        );
        assert_eq!(
            bad(&[
                "--baseline-rate",
                "0.1",
                "--mde",
                "0.01",
                "--weights",
                "100"
            ]),
            PlanError::TooFewWeights
        );
        assert_eq!(
            bad(&[
                "--baseline-rate",
                "0.1",
                "--mde",
                "0.01",
                "--weights",
                "50,0"
            ]),
            PlanError::Weight(0.0)
        );
        assert_eq!(
            bad(&[
                "--baseline-rate",
                "0.1",
                "--mde",
                "0.01",
                "--weights",
                "-5,50"
            ]),
            PlanError::Weight(-5.0)
        );
        assert_eq!(
            bad(&["--baseline-rate", "0.1", "--mde", "0.01", "--alpha", "1"]),
            PlanError::Alpha(1.0)
        );
        assert_eq!(
            bad(&["--baseline-rate", "0.1", "--mde", "0.01", "--power", "0"]),
            PlanError::Power(0.0)
        );
        assert!(matches!(
            bad(&["--baseline-rate", "0.1", "--mde", "0.01", "--power", "0.04"]),
            PlanError::PowerBelowAlpha { .. }
        ));
        assert_eq!(
            bad(&["--baseline-rate", "0.1", "--mde", "0.01", "--tuning", "0"]),
            PlanError::Tuning(0.0)
        );
        assert_eq!(
            bad(&["--baseline-rate", "0.1", "--mde", "0.01", "--looks", "0"]),
            PlanError::Looks(0)
        );
        assert_eq!(
            plan(&design(&["--baseline-rate", "0.5", "--mde", "1e-9"])),
            Err(PlanError::TooLarge)
        );
        let huge = plan(&design(&[
            "--baseline-rate",
            "0.1",
            "--mde",
            "0.02",
            "--weights",
            "1e308,1e308",
        ]))
        .expect("plan");
        assert_eq!(huge.fixed_horizon.per_variant, [3841, 3841]);
        assert!("abc".parse::<Mde>().is_err());
        assert!("5 %".parse::<Mde>().is_ok());
    }
}
