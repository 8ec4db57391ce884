//! The `experiment-results` command: `experiment_results` for one experiment, per public
//! key and phase, in a terminal or as JSON, with what SQL does poorly (`crate::stats`):
//! the difference's interval that holds for small counts (Newcombe), Fisher's exact
//! p-value adjusted across the variants (`--correction`), the lift on the log ratio,
//! Welch's t-test on the time on page (each visitor's longest), next to the view's
//! always-valid p-value and interval. Every statistic the command does not give says why.

use anyhow::Context;
use clickhouse::{Client, Row};
use schema::ResultsRow;
use serde::{Deserialize, Serialize};

use crate::stats::{self, Arm, Correction, Estimate, Interval, Lift, Minimums, Sample, Welch};

/// Prints the results of one experiment.
#[derive(clap::Parser, Clone, Debug)]
#[command(version, about = "Prints one experiment's results from ClickHouse.")]
pub struct ResultsConfig {
    /// The experiment, e.g. exp_checkout_cta.
    pub experiment: String,

    /// Only this public key's results [default: every key that has some].
    #[arg(long)]
    pub public_key: Option<String>,

    /// JSON instead of a table.
    #[arg(long)]
    pub json: bool,

    /// Also writes the results as a self-contained HTML page to FILE: the table with a
    /// verdict in words and a chart of the differences over time (`tools::report`).
    #[arg(long, value_name = "FILE")]
    pub html: Option<std::path::PathBuf>,

    /// Fewest exposed visitors in each arm (the variant and the control) for statistics.
    #[arg(long, alias = "min-sessions", default_value_t = schema::MIN_VISITORS)]
    pub min_visitors: u64,

    /// Fewest conversions, and fewest non-conversions, of a variant and the control
    /// together for statistics (pooled, so a variant that converts nobody is reported).
    #[arg(long, default_value_t = schema::MIN_CONVERSIONS)]
    pub min_conversions: u64,

    /// Adjustment of the p-values across the treatment variants of an experiment and
    /// phase: holm (family-wise error), bh (false discovery rate, Benjamini-Hochberg) or
    /// none.
    #[arg(long, value_enum, default_value_t = Correction::Holm)]
    pub correction: Correction,

    /// Each metric per segment of the visitors' first exposure, the p-values adjusted
    /// across the segments tested (`--correction`).
    #[arg(long, value_enum, value_name = "SEGMENT")]
    pub by: Option<crate::metrics::Segment>,

    #[command(flatten)]
    pub clickhouse: clickhouse_kit::ClickHouseArgs,
}

/// How the command computes: its guard and its correction.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    pub minimums: Minimums,
    pub correction: Correction,
}

/// Time on page of one variant's exposed visitors that reported it (each one's longest).
#[derive(Clone, Debug, Deserialize, Row)]
struct TimeRow {
    public_key: String,
    phase: u32,
    variant_id: String,
    visitors: u64,
    mean: f64,
    variance: f64,
}

/// A statistic, or why there is none.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Shown<T> {
    Value(T),
    Missing(String),
}

impl<T> Shown<T> {
    pub fn value(&self) -> Option<&T> {
        match self {
            Self::Value(v) => Some(v),
            Self::Missing(_) => None,
        }
    }

    pub fn reason(&self) -> Option<&str> {
        match self {
            Self::Value(_) => None,
            Self::Missing(r) => Some(r),
        }
    }

    fn missing(reason: impl ToString) -> Self {
        Self::Missing(reason.to_string())
    }
}

impl<T> From<Result<T, stats::Reason>> for Shown<T> {
    fn from(result: Result<T, stats::Reason>) -> Self {
        result.map_or_else(Self::missing, Self::Value)
    }
}

/// The view's always-valid p-value and intervals (confidence sequences: valid however
/// often the results are looked at): of the difference (`low`, `high`) and of the lift
/// (`lift`, rate / the control's − 1, between `lift_low` and `lift_high`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct AlwaysValid {
    pub p_value: f64,
    pub low: f64,
    pub high: f64,
    pub lift: f64,
    pub lift_low: f64,
    pub lift_high: f64,
}

/// A treatment variant against the control.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Comparison {
    /// `false`: below the minimum-data guard; every statistic below says so.
    pub enough_data: bool,
    /// Conversion rate minus the control's, Newcombe's 95% interval.
    pub diff: Shown<Estimate>,
    /// Fisher's exact two-sided p-value.
    pub p_value: Shown<f64>,
    /// `p_value` adjusted across the experiment's variants in this phase (`correction`).
    pub p_adjusted: Shown<f64>,
    /// Conversion rate relative to the control's, minus one; test and interval on the
    /// log of the ratio.
    pub lift: Shown<Lift>,
    /// From the view: read this one while the experiment runs.
    pub always_valid: Shown<AlwaysValid>,
}

impl Comparison {
    /// No statistic, for one reason.
    fn missing(reason: impl ToString) -> Self {
        let reason = reason.to_string();
        Self {
            enough_data: false,
            diff: Shown::missing(&reason),
            p_value: Shown::missing(&reason),
            p_adjusted: Shown::missing(&reason),
            lift: Shown::missing(&reason),
            always_valid: Shown::missing(&reason),
        }
    }
}

/// Welch's t-test of the visitors' longest time on page against the control's.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TimeOnPage {
    pub visitors: u64,
    pub mean: f64,
    /// Absent for the control and `__multiple__`.
    pub test: Option<Shown<Welch>>,
}

/// One variant's line.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct VariantReport {
    pub variant_id: String,
    pub is_control: bool,
    pub exposed: u64,
    pub converted: u64,
    pub conversion_rate: f64,
    /// Wilson's 95% interval of the rate.
    pub rate_interval: Shown<Interval>,
    /// Absent for the control and `__multiple__`.
    pub comparison: Option<Comparison>,
    pub time_on_page: Option<TimeOnPage>,
}

/// A health check beside the sample ratio: the visitors the phase saw in more than one
/// variant (`__multiple__`, left out of every comparison) and their share of all its
/// visitors. A warning from 10 visitors and 1%, GrowthBook's rule: above it the
/// assignment is not sticky for some visitors (ids lost between pages or devices, a
/// cache serving one variant to another, flicker showing both).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct MultipleExposures {
    pub visitors: u64,
    pub share: f64,
    pub warning: bool,
}

/// The share of the phase's visitors in several variants from which [`MultipleExposures`]
/// warns.
pub const MULTIPLE_EXPOSURES_WARN_SHARE: f64 = 0.01;
/// The fewest visitors in several variants for a warning.
pub const MULTIPLE_EXPOSURES_WARN_VISITORS: u64 = 10;

impl MultipleExposures {
    pub fn of(variants: &[VariantReport]) -> Self {
        let visitors = variants
            .iter()
            .filter(|v| v.variant_id == "__multiple__")
            .map(|v| v.exposed)
            .sum();
        let total: u64 = variants.iter().map(|v| v.exposed).sum();
        let share = if total > 0 {
            visitors as f64 / total as f64
        } else {
            0.0
        };
        Self {
            visitors,
            share,
            warning: visitors >= MULTIPLE_EXPOSURES_WARN_VISITORS
                && share >= MULTIPLE_EXPOSURES_WARN_SHARE,
        }
    }

    /// The check in words.
    pub fn status(self) -> String {
        let seen = format!(
            "{} of the phase's visitors ({:.2}%) saw several variants",
            self.visitors,
            self.share * 100.0
        );
        if self.warning {
            format!(
                "{seen}: WARNING, {}% or more (and {} visitors or more): the assignment is \
                 not sticky for some visitors (ids lost between pages or devices, a cache, \
                 flicker). \
                 They are left out of the comparison, which may then be biased",
                MULTIPLE_EXPOSURES_WARN_SHARE * 100.0,
                MULTIPLE_EXPOSURES_WARN_VISITORS
            )
        } else {
            seen
        }
    }
}

/// The results of an experiment under one public key in one phase.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    pub public_key: String,
    pub experiment_id: String,
    pub phase: u32,
    pub srm_p_value: Option<f64>,
    pub multiple_exposures: MultipleExposures,
    /// The time up to which the events counted were stored (`as_of`, seconds, UTC).
    pub as_of: u32,
    pub correction: Correction,
    pub variants: Vec<VariantReport>,
    /// The experiment's metrics (`experiment_metric_results`), goal first.
    pub metrics: crate::metrics::Metrics,
}

/// Each visitor's longest time on page, per public key, phase and variant of the
/// experiment (the view's counting rules: first exposure, `__multiple__`, test and bot
/// visitors left out).
const TIME_ON_PAGE: &str = "\
    SELECT public_key, phase, variant_id, count() AS visitors, \
           avg(assumeNotNull(max_time_on_page)) AS mean, \
           varSamp(assumeNotNull(max_time_on_page)) AS variance \
    FROM experiment_visitor_exposures \
    WHERE experiment_id = ? AND isNotNull(max_time_on_page) \
    GROUP BY public_key, phase, variant_id";

/// Reads the results of `experiment` (of `public_key`, or of every key).
pub async fn report(
    client: &Client,
    experiment: &str,
    public_key: Option<&str>,
    settings: Settings,
) -> anyhow::Result<Vec<Report>> {
    let rows: Vec<ResultsRow> = client
        .query(
            "SELECT ?fields FROM experiment_results WHERE experiment_id = ? \
             ORDER BY public_key, phase, variant_id = '__multiple__', is_control DESC, \
             variant_id",
        )
        .bind(experiment)
        .fetch_all()
        .await
        .context("cannot read experiment_results")?;
    let times: Vec<TimeRow> = client
        .query(TIME_ON_PAGE)
        .bind(experiment)
        .fetch_all()
        .await
        .context("cannot read the time on page")?;

    let mut reports: Vec<Report> = Vec::new();
    for row in rows
        .iter()
        .filter(|r| public_key.is_none_or(|k| k == r.public_key))
    {
        let same = |r: &Report| r.public_key == row.public_key && r.phase == row.phase;
        if !reports.last().is_some_and(same) {
            reports.push(Report {
                public_key: row.public_key.clone(),
                experiment_id: experiment.to_owned(),
                phase: row.phase,
                srm_p_value: row.srm_p_value,
                multiple_exposures: MultipleExposures::default(),
                as_of: row.as_of,
                correction: settings.correction,
                variants: Vec::new(),
                metrics: crate::metrics::Metrics::default(),
            });
        }
        let control = rows
            .iter()
            .find(|r| r.public_key == row.public_key && r.phase == row.phase && r.is_control == 1);
        let time = |variant: &str| {
            times.iter().find(|t| {
                t.public_key == row.public_key && t.phase == row.phase && t.variant_id == variant
            })
        };
        let report = variant_report(
            row,
            control,
            time(&row.variant_id),
            control.and_then(|c| time(&c.variant_id)),
            settings.minimums,
        );
        reports.last_mut().expect("pushed").variants.push(report);
    }
    for report in &mut reports {
        report.multiple_exposures = MultipleExposures::of(&report.variants);
        adjust(report, settings.correction);
    }
    Ok(reports)
}

/// Fills `p_adjusted` across the report's comparisons that have a p-value.
fn adjust(report: &mut Report, correction: Correction) {
    let mut tested: Vec<&mut Comparison> = report
        .variants
        .iter_mut()
        .filter_map(|v| v.comparison.as_mut())
        .filter(|c| c.p_value.value().is_some())
        .collect();
    let p: Vec<f64> = tested
        .iter()
        .filter_map(|c| c.p_value.value().copied())
        .collect();
    for (c, adjusted) in tested.iter_mut().zip(stats::adjust(&p, correction)) {
        c.p_adjusted = Shown::Value(adjusted);
    }
}

fn variant_report(
    row: &ResultsRow,
    control: Option<&ResultsRow>,
    time: Option<&TimeRow>,
    control_time: Option<&TimeRow>,
    minimums: Minimums,
) -> VariantReport {
    let arm = |r: &ResultsRow| Arm::new(r.exposed, r.converted);
    let compared = row.is_control == 0 && row.variant_id != "__multiple__";
    // No test of its own either, of any kind: any client can send such a variant id.
    let undefined = row.no_test_reason == schema::UNDEFINED_ARM;
    let comparison = compared.then(|| match control {
        _ if undefined => Comparison::missing(schema::UNDEFINED_ARM),
        None => Comparison::missing("no control in this phase"),
        Some(c) => comparison(row, arm(row), arm(c), minimums),
    });
    let time_on_page = time.map(|t| {
        let sample = |t: &TimeRow| Sample {
            n: t.visitors,
            mean: t.mean,
            variance: t.variance,
        };
        let test = compared.then(|| match control_time {
            _ if undefined => Shown::missing(schema::UNDEFINED_ARM),
            None => Shown::missing("no time on page in the control"),
            Some(c) if t.visitors < minimums.visitors || c.visitors < minimums.visitors => {
                Shown::missing(format!(
                    "not enough data (needs {} visitors per arm)",
                    minimums.visitors
                ))
            }
            Some(c) => stats::welch(sample(t), sample(c)).into(),
        });
        TimeOnPage {
            visitors: t.visitors,
            mean: t.mean,
            test,
        }
    });
    VariantReport {
        variant_id: row.variant_id.clone(),
        is_control: row.is_control == 1,
        exposed: row.exposed,
        converted: row.converted,
        conversion_rate: row.conversion_rate,
        rate_interval: stats::wilson(arm(row)).into(),
        comparison,
        time_on_page,
    }
}

fn comparison(row: &ResultsRow, variant: Arm, control: Arm, minimums: Minimums) -> Comparison {
    if let Err(reason) = stats::enough_data(variant, control, minimums) {
        return Comparison::missing(reason);
    }
    let p_value: Shown<f64> = stats::fisher_exact(variant, control).into();
    let always_valid = match (
        row.always_valid_p_value,
        (row.always_valid_ci_low, row.always_valid_ci_high),
        (
            row.lift,
            row.always_valid_lift_ci_low,
            row.always_valid_lift_ci_high,
        ),
    ) {
        (Some(p_value), (Some(low), Some(high)), (Some(lift), Some(lift_low), Some(lift_high)))
            if [p_value, low, high, lift, lift_low, lift_high]
                .iter()
                .all(|x| x.is_finite())
                && high > low =>
        {
            Shown::Value(AlwaysValid {
                p_value,
                low,
                high,
                lift,
                lift_low,
                lift_high,
            })
        }
        _ if row.no_test_reason.is_empty() => Shown::missing("none in the view"),
        _ => Shown::missing(format!("none in the view: {}", row.no_test_reason)),
    };
    Comparison {
        enough_data: true,
        diff: stats::newcombe_diff(variant, control).into(),
        p_adjusted: p_value.clone(),
        p_value,
        lift: stats::lift(variant, control).into(),
        always_valid,
    }
}

/// A UTC time, `YYYY-MM-DD HH:MM`.
pub(crate) fn utc(seconds: u32) -> String {
    let days = i64::from(seconds / 86_400);
    let (h, m) = ((seconds % 86_400) / 3600, (seconds % 3600) / 60);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{d:02} {h:02}:{m:02}")
}

/// A share in percent (or a difference in percentage points), signed: `+1.25`.
fn pct(x: f64) -> String {
    format!("{:+.2}", x * 100.0)
}

/// A value and its interval in percent: `+1.25 [-0.50, +3.00]`.
fn interval(value: f64, low: f64, high: f64) -> String {
    format!("{} [{}, {}]", pct(value), pct(low), pct(high))
}

/// A p-value: four decimals, or scientific notation below 0.0001.
fn p(p: f64) -> String {
    if p < 1e-4 {
        format!("{p:.1e}")
    } else {
        format!("{p:.4}")
    }
}

/// The reports as a terminal table.
pub fn render(reports: &[Report], settings: Settings) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    for report in reports {
        let _ = writeln!(
            out,
            "{} under {}, phase {}, as of {} UTC: sample-ratio p = {}{}; {}",
            report.experiment_id,
            report.public_key,
            report.phase,
            utc(report.as_of),
            report.srm_p_value.map_or("n/a".into(), p),
            if report.srm_p_value.is_some_and(|p| p < 0.001) {
                "  (MISMATCH: exposures do not follow the weights; check the assignment before trusting the rest)"
            } else {
                ""
            },
            report.multiple_exposures.status()
        );
        let label = |v: &VariantReport| {
            if v.is_control {
                format!("{} (control)", v.variant_id)
            } else {
                v.variant_id.clone()
            }
        };
        // The variant column as wide as the longest name, so the columns stay aligned.
        let width = report
            .variants
            .iter()
            .map(|v| label(v).chars().count())
            .max()
            .unwrap_or(0)
            .max(20);
        let _ = writeln!(
            out,
            "{:<width$} {:>9} {:>9} {:>8}  {:<28} {:>8}  {:<26} {:>8} {:>8}  {:<32} time on page: mean ms (Welch p)",
            "variant",
            "visitors",
            "converted",
            "rate",
            "lift, % (95% CI)",
            "lift p",
            "diff, pp (95% CI)",
            "p",
            format!("p {}", report.correction),
            "always-valid p, lift % [CI]",
        );
        let mut notes = Vec::new();
        for v in &report.variants {
            variant_row(&mut out, v, &label(v), width, &mut notes);
        }
        for note in notes {
            let _ = writeln!(out, "{note}");
        }
        out.push_str(&crate::metrics::render(
            &report.metrics,
            settings.correction,
        ));
        out.push('\n');
    }
    if reports.is_empty() {
        out.push_str("No exposed visitor yet.\n");
    }
    let m = settings.minimums;
    let _ = writeln!(
        out,
        "Fixed horizon (diff: Newcombe's interval; p: Fisher's exact test, adjusted across \
         the variants of a phase by {}): read once, at the planned end. Always-valid: read \
         at any time. Statistics need {} visitors per arm and {} conversions and {} \
         non-conversions in both arms together. __multiple__: visitors who saw several \
         variants in the phase, left out of the comparison.",
        settings.correction, m.visitors, m.conversions, m.conversions
    );
    out
}

/// Writes one variant's line of the table, `name` padded to `width`; the reason of each
/// n/a cell goes to `notes`.
fn variant_row(
    out: &mut String,
    v: &VariantReport,
    name: &str,
    width: usize,
    notes: &mut Vec<String>,
) {
    use std::fmt::Write;
    let dash = || String::from("-");
    let mut cell = |what: &str, reason: Option<&str>| {
        if let Some(reason) = reason {
            notes.push(format!("  {}, {what}: {reason}", v.variant_id));
        }
        String::from("n/a")
    };
    let (diff, p_raw, p_adj, lift, lift_p, always) = match &v.comparison {
        None => (dash(), dash(), dash(), dash(), dash(), dash()),
        Some(c) if !c.enough_data => (
            match c.diff.reason() {
                Some(r) if r.starts_with("not enough data") => r[..15].to_owned(),
                reason => cell("comparison", reason),
            },
            dash(),
            dash(),
            dash(),
            dash(),
            dash(),
        ),
        Some(c) => (
            c.diff.value().map_or_else(
                || cell("diff", c.diff.reason()),
                |e| interval(e.value, e.low, e.high),
            ),
            c.p_value
                .value()
                .map_or_else(|| cell("p", c.p_value.reason()), |x| p(*x)),
            c.p_adjusted.value().map_or_else(dash, |x| p(*x)),
            c.lift.value().map_or_else(
                || cell("lift", c.lift.reason()),
                |l| interval(l.value, l.low, l.high),
            ),
            c.lift.value().map_or_else(dash, |l| p(l.p_value)),
            c.always_valid.value().map_or_else(
                || cell("always-valid", c.always_valid.reason()),
                |a| {
                    format!(
                        "{} [{}, {}]",
                        p(a.p_value),
                        pct(a.lift_low),
                        pct(a.lift_high)
                    )
                },
            ),
        ),
    };
    let time = v
        .time_on_page
        .as_ref()
        .map_or("-".into(), |t| match &t.test {
            None => format!("{:.1}", t.mean),
            Some(Shown::Value(w)) => format!("{:.1} (p = {})", t.mean, p(w.p_value)),
            Some(Shown::Missing(reason)) => {
                notes.push(format!("  {}, time on page: {reason}", v.variant_id));
                format!("{:.1} (n/a)", t.mean)
            }
        });
    let _ = writeln!(
        out,
        "{name:<width$} {:>9} {:>9} {:>7.2}%  {lift:<28} {lift_p:>8}  {diff:<26} {p_raw:>8} {p_adj:>8}  {always:<32} {time}",
        v.exposed,
        v.converted,
        v.conversion_rate * 100.0
    );
}

/// How `config` asks the command to compute.
fn settings(config: &ResultsConfig) -> Settings {
    Settings {
        minimums: Minimums {
            visitors: config.min_visitors,
            conversions: config.min_conversions,
        },
        correction: config.correction,
    }
}

/// The command's figures: a report per public key and phase, with its metrics.
pub async fn reports(config: &ResultsConfig) -> anyhow::Result<Vec<Report>> {
    let client = config.clickhouse.client();
    let mut reports = report(
        &client,
        &config.experiment,
        config.public_key.as_deref(),
        settings(config),
    )
    .await?;
    let caps = schema::ServerCaps::of(&client).await?;
    let metrics = crate::metrics::read(
        &client,
        caps,
        &config.clickhouse.clickhouse_database,
        &config.experiment,
        config.by,
        config.correction,
    )
    .await?;
    for ((key, phase), metrics) in metrics {
        if let Some(report) = reports
            .iter_mut()
            .find(|r| r.public_key == key && r.phase == phase)
        {
            report.metrics = metrics;
        }
    }
    Ok(reports)
}

/// What the command prints of `reports`: the table, or JSON.
pub fn text(config: &ResultsConfig, reports: &[Report]) -> anyhow::Result<String> {
    Ok(if config.json {
        serde_json::to_string_pretty(reports)? + "\n"
    } else {
        render(reports, settings(config))
    })
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::*;

    #[test]
    fn the_columns_stay_aligned_whatever_the_variant_names() {
        let variant = |name: &str, is_control: bool| VariantReport {
            variant_id: name.to_owned(),
            is_control,
            exposed: 1234,
            converted: 56,
            conversion_rate: 0.045,
            rate_interval: Shown::Missing("n/a".into()),
            comparison: None,
            time_on_page: None,
        };
        let report = Report {
            public_key: "pk_a".into(),
            experiment_id: "exp".into(),
            phase: 1,
            srm_p_value: None,
            multiple_exposures: MultipleExposures::default(),
            as_of: 1_763_700_000,
            correction: Correction::Holm,
            variants: vec![
                variant("a_rather_long_control_variant_name", true),
                variant("b", false),
            ],
            metrics: crate::metrics::Metrics::default(),
        };
        let settings = Settings {
            minimums: crate::stats::Minimums {
                visitors: 0,
                conversions: 0,
            },
            correction: Correction::Holm,
        };
        let out = render(&[report], settings);
        assert!(
            out.starts_with("exp under pk_a, phase 1, as of 2025-11-21 04:40 UTC:"),
            "{out}"
        );
        let lines: Vec<&str> = out.lines().skip(1).take(3).collect();
        // Where the visitors column ends, in the header and in each row.
        let header_end = lines[0].find("visitors").expect("header") + "visitors".len();
        for row in &lines[1..] {
            let end = row.find("1234").expect("visitors") + 4;
            assert_eq!(end, header_end, "{out}");
        }
    }

    #[test]
    fn visitors_in_several_variants_warn_from_10_and_1_percent() {
        let variants = |multiple: u64, others: u64| -> Vec<VariantReport> {
            [
                ("a", others / 2),
                ("b", others - others / 2),
                ("__multiple__", multiple),
            ]
            .into_iter()
            .map(|(id, exposed)| VariantReport {
                variant_id: id.into(),
                is_control: id == "a",
                exposed,
                converted: 0,
                conversion_rate: 0.0,
                rate_interval: Shown::Missing("n/a".into()),
                comparison: None,
                time_on_page: None,
            })
            .collect()
        };
        let check = |multiple, others| MultipleExposures::of(&variants(multiple, others));
        // 10 of 1,000 in all: 1%, a warning; 10 of 1,001 is below 1%; 9 of 100 is 9%, but
        // too few visitors to tell.
        let at = check(10, 990);
        assert_eq!((at.visitors, at.share, at.warning), (10, 0.01, true));
        assert!(!check(10, 991).warning);
        assert!(!check(9, 91).warning);
        assert_eq!(check(0, 0), MultipleExposures::default());
        assert!(
            at.status()
                .starts_with("10 of the phase's visitors (1.00%) saw several variants: WARNING")
        );
        assert_eq!(
            check(1, 999).status(),
            "1 of the phase's visitors (0.10%) saw several variants"
        );
    }

    #[test]
    fn an_arm_the_phase_does_not_define_is_not_compared() {
        let row = |variant_id: &str, is_control, converted, no_test_reason: &str| ResultsRow {
            public_key: "pk_a".into(),
            phase: 1,
            variant_id: variant_id.into(),
            is_control,
            exposed: 1000,
            converted,
            conversion_rate: converted as f64 / 1000.0,
            srm_p_value: None,
            always_valid_p_value: None,
            always_valid_ci_low: None,
            no_test_reason: no_test_reason.into(),
            ..ResultsRow::default()
        };
        let control = row("a", 1, 100, "");
        let minimums = crate::stats::Minimums {
            visitors: 50,
            conversions: 5,
        };
        let time = |variant_id: &str, mean| TimeRow {
            public_key: "pk_a".into(),
            phase: 1,
            variant_id: variant_id.into(),
            visitors: 1000,
            mean,
            variance: 100.0,
        };
        let control_time = time("a", 30.0);
        let compare = |arm: &ResultsRow| {
            let report = variant_report(
                arm,
                Some(&control),
                Some(&time(&arm.variant_id, 60.0)),
                Some(&control_time),
                minimums,
            );
            let time_test = report.time_on_page.expect("time on page").test;
            (
                report.comparison.expect("a treatment is compared"),
                time_test,
            )
        };
        let (fake, fake_time) = compare(&row("x", 0, 500, schema::UNDEFINED_ARM));
        assert!(!fake.enough_data, "{fake:?}");
        assert_eq!(fake.p_value, Shown::missing(schema::UNDEFINED_ARM));
        assert_eq!(fake_time, Some(Shown::missing(schema::UNDEFINED_ARM)));
        let (real, real_time) = compare(&row("b", 0, 500, ""));
        assert!(
            real.enough_data && real.p_value.value().is_some(),
            "{real:?}"
        );
        assert!(
            real_time.as_ref().and_then(Shown::value).is_some(),
            "{real_time:?}"
        );
    }

    #[test]
    fn min_sessions_is_a_hidden_alias_of_min_visitors() {
        let parse = |args: &[&str]| {
            ResultsConfig::try_parse_from([&["experiment-results", "exp_x"], args].concat())
                .expect("parses")
        };
        let config = parse(&["--min-sessions", "7"]);
        assert_eq!(
            (config.min_visitors, config.correction),
            (7, Correction::Holm)
        );
        let config = parse(&["--min-visitors", "9", "--correction", "bh"]);
        assert_eq!(
            (config.min_visitors, config.correction),
            (9, Correction::Bh)
        );
        assert_eq!(
            parse(&["--correction", "none"]).correction,
            Correction::None
        );
        let help = ResultsConfig::command().render_long_help().to_string();
        assert!(
            help.contains("--min-visitors") && !help.contains("min-sessions"),
            "{help}"
        );
    }
}
