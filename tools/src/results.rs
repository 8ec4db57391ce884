//! The `experiment-results` command: `experiment_results` for one experiment, in a
//! terminal or as JSON, with what SQL does poorly: the relative lift with its interval,
//! Welch's t-test on the time on page (each session's longest), and guards that say "not
//! enough data" instead of a p-value below the minimums.

use anyhow::Context;
use clickhouse::{Client, Row};
use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, StudentsT};

/// The 97.5th percentile of the standard normal: a two-sided 95% interval.
const Z_95: f64 = 1.959_963_984_540_054;

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
    /// verdict in words and a chart of the differences over time (`crate::report`).
    #[arg(long, value_name = "FILE")]
    pub html: Option<std::path::PathBuf>,

    /// Fewest exposed sessions a variant (and the control) needs for its statistics.
    #[arg(long, default_value_t = 50)]
    pub min_sessions: u64,

    /// Fewest converted sessions a variant (and the control) needs for its statistics.
    #[arg(long, default_value_t = 5)]
    pub min_conversions: u64,

    #[command(flatten)]
    pub clickhouse: consumer::ClickHouseArgs,
}

/// A row of `experiment_results`.
#[derive(Clone, Debug, Deserialize, Row)]
struct ResultRow {
    public_key: String,
    variant_id: String,
    is_control: u8,
    exposed: u64,
    converted: u64,
    conversion_rate: f64,
    diff: Option<f64>,
    ci_low: Option<f64>,
    ci_high: Option<f64>,
    p_value: Option<f64>,
    srm_p_value: Option<f64>,
}

/// Time on page of one variant's exposed sessions that reported it.
#[derive(Clone, Debug, Deserialize, Row)]
struct TimeRow {
    public_key: String,
    variant_id: String,
    sessions: u64,
    mean: f64,
    variance: f64,
}

/// A number with its 95% interval.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Estimate {
    pub value: f64,
    pub low: f64,
    pub high: f64,
}

/// Welch's t-test of a variant's mean time on page against the control's.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TimeOnPage {
    pub sessions: u64,
    pub mean: f64,
    /// Difference of the means against the control; absent for the control and below
    /// the minimums.
    pub diff: Option<f64>,
    pub p_value: Option<f64>,
}

/// One variant's line.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct VariantReport {
    pub variant_id: String,
    pub is_control: bool,
    pub exposed: u64,
    pub converted: u64,
    pub conversion_rate: f64,
    /// `false`: the variant or the control is below the minimums; no statistics then.
    pub enough_data: bool,
    /// Conversion rate minus the control's.
    pub diff: Option<Estimate>,
    pub p_value: Option<f64>,
    /// Conversion rate relative to the control's, minus one (delta method interval).
    pub lift: Option<Estimate>,
    pub time_on_page: Option<TimeOnPage>,
}

/// The results of an experiment under one public key.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    pub public_key: String,
    pub experiment_id: String,
    pub srm_p_value: Option<f64>,
    pub variants: Vec<VariantReport>,
}

/// The minimums below which no statistic is given.
#[derive(Clone, Copy, Debug)]
pub struct Minimums {
    pub sessions: u64,
    pub conversions: u64,
}

/// Reads the results of `experiment` (of `public_key`, or of every key).
pub async fn report(
    client: &Client,
    experiment: &str,
    public_key: Option<&str>,
    minimums: Minimums,
) -> anyhow::Result<Vec<Report>> {
    let rows: Vec<ResultRow> = client
        .query(
            "SELECT public_key, variant_id, is_control, exposed, converted, conversion_rate, \
             diff, ci_low, ci_high, p_value, srm_p_value FROM experiment_results \
             WHERE experiment_id = ? \
             ORDER BY public_key, variant_id = '__multiple__', is_control DESC, variant_id",
        )
        .bind(experiment)
        .fetch_all()
        .await
        .context("cannot read experiment_results")?;
    let times: Vec<TimeRow> = client
        .query(
            "SELECT public_key, variant_id, count() AS sessions, \
             avg(assumeNotNull(max_time_on_page)) AS mean, \
             varSamp(assumeNotNull(max_time_on_page)) AS variance \
             FROM experiment_visitor_exposures \
             WHERE experiment_id = ? AND isNotNull(max_time_on_page) \
             GROUP BY public_key, variant_id",
        )
        .bind(experiment)
        .fetch_all()
        .await
        .context("cannot read the time on page")?;

    let mut reports: Vec<Report> = Vec::new();
    for row in rows
        .iter()
        .filter(|r| public_key.is_none_or(|k| k == r.public_key))
    {
        if reports
            .last()
            .is_none_or(|r| r.public_key != row.public_key)
        {
            reports.push(Report {
                public_key: row.public_key.clone(),
                experiment_id: experiment.to_owned(),
                srm_p_value: row.srm_p_value,
                variants: Vec::new(),
            });
        }
        let of_key = |r: &&ResultRow| r.public_key == row.public_key;
        let control = rows.iter().filter(of_key).find(|r| r.is_control == 1);
        let time = |variant: &str| {
            times
                .iter()
                .find(|t| t.public_key == row.public_key && t.variant_id == variant)
        };
        let report = variant_report(
            row,
            control,
            time(&row.variant_id),
            control.and_then(|c| time(&c.variant_id)),
            minimums,
        );
        reports.last_mut().expect("pushed").variants.push(report);
    }
    Ok(reports)
}

fn enough(row: &ResultRow, m: Minimums) -> bool {
    row.exposed >= m.sessions && row.converted >= m.conversions
}

fn variant_report(
    row: &ResultRow,
    control: Option<&ResultRow>,
    time: Option<&TimeRow>,
    control_time: Option<&TimeRow>,
    minimums: Minimums,
) -> VariantReport {
    let compared = row.is_control == 0 && row.variant_id != "__multiple__";
    let enough_data = enough(row, minimums) && control.is_some_and(|c| enough(c, minimums));
    let stats = compared && enough_data;
    let diff = match (row.diff, row.ci_low, row.ci_high) {
        (Some(value), Some(low), Some(high)) if stats => Some(Estimate { value, low, high }),
        _ => None,
    };
    let lift = control.filter(|_| stats).and_then(|c| {
        let (p1, p0) = (row.conversion_rate, c.conversion_rate);
        if p0 <= 0.0 {
            return None;
        }
        let v1 = p1 * (1.0 - p1) / row.exposed as f64;
        let v0 = p0 * (1.0 - p0) / c.exposed as f64;
        let value = p1 / p0 - 1.0;
        let se = (v1 / (p0 * p0) + p1 * p1 * v0 / p0.powi(4)).sqrt();
        Some(Estimate {
            value,
            low: value - Z_95 * se,
            high: value + Z_95 * se,
        })
    });
    let time_on_page = time.map(|t| {
        let test = control_time
            .filter(|c| {
                compared && t.sessions >= minimums.sessions && c.sessions >= minimums.sessions
            })
            .and_then(|c| welch(t, c));
        TimeOnPage {
            sessions: t.sessions,
            mean: t.mean,
            diff: test.map(|(d, _)| d),
            p_value: test.map(|(_, p)| p),
        }
    });
    VariantReport {
        variant_id: row.variant_id.clone(),
        is_control: row.is_control == 1,
        exposed: row.exposed,
        converted: row.converted,
        conversion_rate: row.conversion_rate,
        enough_data,
        diff,
        p_value: row.p_value.filter(|_| stats),
        lift,
        time_on_page,
    }
}

/// Difference of the means and the two-sided p-value of Welch's t-test.
fn welch(a: &TimeRow, b: &TimeRow) -> Option<(f64, f64)> {
    let (va, vb) = (
        a.variance / a.sessions as f64,
        b.variance / b.sessions as f64,
    );
    let se2 = va + vb;
    if se2 <= 0.0 {
        return None;
    }
    let t = (a.mean - b.mean) / se2.sqrt();
    let df =
        se2 * se2 / (va * va / (a.sessions as f64 - 1.0) + vb * vb / (b.sessions as f64 - 1.0));
    let dist = StudentsT::new(0.0, 1.0, df).ok()?;
    Some((a.mean - b.mean, 2.0 * dist.sf(t.abs())))
}

/// The reports as a terminal table.
pub fn render(reports: &[Report], minimums: Minimums) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let pct = |x: f64| format!("{:+.2}", x * 100.0);
    for report in reports {
        let _ = writeln!(
            out,
            "{} under {}: sample-ratio p = {}{}",
            report.experiment_id,
            report.public_key,
            report
                .srm_p_value
                .map_or("n/a".into(), |p| format!("{p:.4}")),
            if report.srm_p_value.is_some_and(|p| p < 0.001) {
                "  (MISMATCH: exposures do not follow the weights; check the assignment before trusting the rest)"
            } else {
                ""
            }
        );
        let _ = writeln!(
            out,
            "{:<20} {:>9} {:>9} {:>8}  {:<28} {:>8}  {:<28} time on page: mean s (Welch p)",
            "variant",
            "sessions",
            "converted",
            "rate",
            "diff, pp (95% CI)",
            "p",
            "lift, % (95% CI)",
        );
        for v in &report.variants {
            let name = if v.is_control {
                format!("{} (control)", v.variant_id)
            } else {
                v.variant_id.clone()
            };
            let (diff, p, lift) = if v.is_control || v.variant_id == "__multiple__" {
                (String::from("-"), String::from("-"), String::from("-"))
            } else if !v.enough_data {
                let note = String::from("not enough data");
                (note.clone(), String::from("-"), note)
            } else {
                let interval =
                    |e: &Estimate| format!("{} [{}, {}]", pct(e.value), pct(e.low), pct(e.high));
                (
                    v.diff.as_ref().map_or("-".into(), interval),
                    v.p_value.map_or("-".into(), |p| format!("{p:.4}")),
                    v.lift.as_ref().map_or("-".into(), interval),
                )
            };
            let time = v
                .time_on_page
                .as_ref()
                .map_or("-".into(), |t| match t.p_value {
                    Some(p) => format!("{:.1} (p = {p:.4})", t.mean),
                    None if v.is_control || v.variant_id == "__multiple__" => {
                        format!("{:.1}", t.mean)
                    }
                    None => format!("{:.1} (not enough data)", t.mean),
                });
            let _ = writeln!(
                out,
                "{name:<20} {:>9} {:>9} {:>7.2}%  {diff:<28} {p:>8}  {lift:<28} {time}",
                v.exposed,
                v.converted,
                v.conversion_rate * 100.0
            );
        }
        out.push('\n');
    }
    if reports.is_empty() {
        out.push_str("No exposed session yet.\n");
    }
    let _ = writeln!(
        out,
        "Statistics need {} sessions and {} conversions per variant and control. \
         __multiple__: sessions that saw several variants, left out of the comparison.",
        minimums.sessions, minimums.conversions
    );
    out
}

/// The command: prints the table, or JSON.
pub async fn run(config: &ResultsConfig) -> anyhow::Result<String> {
    let client = config.clickhouse.client();
    if let Some(path) = &config.html {
        crate::report::write(
            &client,
            &config.experiment,
            config.public_key.as_deref(),
            path,
        )
        .await?;
    }
    let minimums = Minimums {
        sessions: config.min_sessions,
        conversions: config.min_conversions,
    };
    let reports = report(
        &client,
        &config.experiment,
        config.public_key.as_deref(),
        minimums,
    )
    .await?;
    Ok(if config.json {
        serde_json::to_string_pretty(&reports)? + "\n"
    } else {
        render(&reports, minimums)
    })
}
