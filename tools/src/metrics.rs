//! The metrics of `experiment-results`: `experiment_metric_results` for one experiment, per
//! public key and phase, goal first, then secondary, then guardrails; each with its kind,
//! unit, difference, intervals, CUPED's variance cut and a verdict. A harmed guardrail is
//! flagged above the table, whatever the goal says. With `--by`, each metric per segment of
//! the visitors' first exposure, the p-values adjusted across the segments tested.

use std::collections::BTreeSet;
use std::fmt::Write;

use anyhow::Context;
use clickhouse::{Client, Row};
use schema::MetricResultsRow;
use serde::{Deserialize, Serialize};

use crate::stats::{self, Correction};

/// What `--by` splits the visitors by: a field of the impression of their first exposure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum Segment {
    UtmSource,
    UtmMedium,
    UtmCampaign,
    Pathname,
    /// The browser's family, from the user agent.
    Browser,
}

impl Segment {
    /// The segment of an `events` row, in SQL.
    fn sql(self) -> &'static str {
        match self {
            Self::UtmSource => "utm_source",
            Self::UtmMedium => "utm_medium",
            Self::UtmCampaign => "utm_campaign",
            Self::Pathname => "pathname",
            // Order matters: Edge and Opera also say Chrome, Chrome also says Safari.
            Self::Browser => {
                "multiIf(user_agent LIKE '%Edg/%', 'Edge', user_agent LIKE '%OPR/%', 'Opera', \
                 user_agent LIKE '%Firefox/%', 'Firefox', user_agent LIKE '%Chrome/%', 'Chrome', \
                 user_agent LIKE '%Safari/%', 'Safari', 'other')"
            }
        }
    }

    fn name(self) -> String {
        clap::ValueEnum::to_possible_value(&self)
            .map(|v| v.get_name().to_owned())
            .unwrap_or_default()
    }
}

#[derive(Clone, Debug, Deserialize, Row)]
struct DefinitionRow {
    metric_id: String,
    num_event: String,
    num_field: String,
    num_aggregate: String,
    den_event: String,
    den_aggregate: String,
}

/// An interval, low and high.
pub type Interval = [f64; 2];

/// CUPED's figures of a comparison.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Cuped {
    pub diff: f64,
    pub ci: Interval,
    pub p_value: f64,
    /// 1 - the adjusted variance over the plain one.
    pub variance_reduction: f64,
}

/// One arm of a metric.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MetricVariant {
    pub variant_id: String,
    pub is_control: bool,
    pub visitors: u64,
    /// The arm's mean (a share for a proportion, a ratio of sums for a ratio).
    pub value: f64,
    pub diff: Option<f64>,
    pub ci: Option<Interval>,
    pub p_value: Option<f64>,
    /// A secondary metric's p-value corrected for the number of secondary metrics
    /// (Bonferroni, by the view); with `--by`, adjusted across the segments and treatments
    /// of the metric too.
    pub p_adjusted: Option<f64>,
    /// A secondary metric's corrected for their number, as `p_adjusted`.
    pub always_valid_p_value: Option<f64>,
    pub always_valid_ci: Option<Interval>,
    pub chance_to_beat_control: Option<f64>,
    /// A guardrail's one-sided always-valid test of harm.
    pub harm_p_value: Option<f64>,
    pub cuped: Option<Cuped>,
    pub verdict: String,
}

/// One metric of one experiment, key and phase (and segment).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MetricReport {
    pub metric_id: String,
    pub role: String,
    pub kind: String,
    pub unit: String,
    pub higher_is_better: bool,
    pub segment: Option<String>,
    pub variants: Vec<MetricVariant>,
}

/// The metrics of one key and phase.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Metrics {
    pub by: Option<Segment>,
    /// With `by`: the segments with a tested comparison (the adjustment's family, with the
    /// treatments).
    pub segments_tested: Option<usize>,
    pub metrics: Vec<MetricReport>,
}

impl Metrics {
    /// The guardrails harmed: (metric, variant, harm p).
    pub fn harmed(&self) -> Vec<(&str, &str, f64)> {
        self.metrics
            .iter()
            .flat_map(|m| {
                m.variants.iter().filter_map(move |v| {
                    v.harm_p_value
                        .filter(|p| *p < 0.05)
                        .map(|p| (m.metric_id.as_str(), v.variant_id.as_str(), p))
                })
            })
            .collect()
    }
}

/// What one unit of a metric is, in words.
fn unit(d: Option<&DefinitionRow>, kind: &str) -> String {
    let Some(d) = d else {
        return String::new();
    };
    let field = |field: &str| match field {
        "time_on_page" => "time on page, ms",
        "load_time" => "load time, ms",
        "scroll_depth" => "scroll depth, %",
        _ => "",
    };
    let measure = |event: &str, field_name: &str, aggregate: &str| match aggregate {
        "count" if event.is_empty() => "events".to_owned(),
        "count" => format!("{event} events"),
        "sessions" => "sessions".to_owned(),
        "any" => "visitors".to_owned(),
        other => format!("{other} {}", field(field_name)),
    };
    match kind {
        "proportion" => "share of visitors".to_owned(),
        "ratio" => format!(
            "{} per {}",
            measure(&d.num_event, &d.num_field, &d.num_aggregate),
            measure(&d.den_event, "", &d.den_aggregate)
        ),
        _ => format!(
            "{} per visitor",
            measure(&d.num_event, &d.num_field, &d.num_aggregate)
        ),
    }
}

/// The verdict of a tested treatment, from its always-valid tests (they hold however
/// often the results are read).
fn tested_verdict(guardrail: bool, higher_is_better: bool, v: &MetricVariant) -> String {
    if guardrail {
        return if v.harm_p_value.is_some_and(|p| p < 0.05) {
            "HARMED".into()
        } else {
            "no harm detected".into()
        };
    }
    match (v.always_valid_p_value, v.diff) {
        (Some(p), Some(diff)) if p < 0.05 && (diff > 0.0) == higher_is_better => "better".into(),
        (Some(p), Some(_)) if p < 0.05 => "worse".into(),
        _ => "no difference shown yet".into(),
    }
}

fn both(low: Option<f64>, high: Option<f64>) -> Option<Interval> {
    Some([low?, high?])
}

fn role_rank(role: &str) -> u8 {
    match role {
        "goal" => 0,
        "secondary" => 1,
        _ => 2,
    }
}

/// Reads the metrics of `experiment`, per (public key, phase), with `by` per segment.
pub async fn read(
    client: &Client,
    caps: schema::ServerCaps,
    database: &str,
    experiment: &str,
    by: Option<Segment>,
    correction: Correction,
) -> anyhow::Result<Vec<((String, u32), Metrics)>> {
    let source = match by {
        None => "(SELECT *, '' AS segment FROM experiment_metric_results)".to_owned(),
        Some(segment) => format!(
            "({})",
            schema::metric_results_by(caps, database, segment.sql())
        ),
    };
    // The view's row, then the segment.
    let rows: Vec<(MetricResultsRow, String)> = client
        .query(&format!(
            "SELECT ?fields, segment FROM {source} WHERE experiment_id = ? ORDER BY public_key, \
             phase, position, metric_id, segment, variant_id = '__multiple__', \
             is_control DESC, variant_id"
        ))
        .bind(experiment)
        .fetch_all()
        .await
        .context("cannot read experiment_metric_results")?;
    let definitions: Vec<DefinitionRow> = client
        .query(
            "SELECT metric_id, num_event, num_field, toString(num_aggregate) AS num_aggregate, \
             den_event, toString(den_aggregate) AS den_aggregate \
             FROM experiment_metric_definitions WHERE experiment_id = ?",
        )
        .bind(experiment)
        .fetch_all()
        .await
        .context("cannot read experiment_metric_definitions")?;

    let mut out: Vec<((String, u32), Metrics)> = Vec::new();
    for (row, segment) in &rows {
        let key = (row.public_key.clone(), row.phase);
        if out.last().is_none_or(|(k, _)| *k != key) {
            out.push((
                key,
                Metrics {
                    by,
                    ..Metrics::default()
                },
            ));
        }
        let metrics = &mut out.last_mut().expect("pushed").1.metrics;
        let segment = by.map(|_| segment.clone());
        let same = |m: &MetricReport| m.metric_id == row.metric_id && m.segment == segment;
        if !metrics.last().is_some_and(same) {
            metrics.push(MetricReport {
                metric_id: row.metric_id.clone(),
                role: row.role.clone(),
                kind: row.kind.clone(),
                unit: unit(
                    definitions.iter().find(|d| d.metric_id == row.metric_id),
                    &row.kind,
                ),
                higher_is_better: row.higher_is_better == 1,
                segment,
                variants: Vec::new(),
            });
        }
        let cuped = (|| {
            Some(Cuped {
                diff: row.cuped_diff?,
                ci: both(row.cuped_ci_low, row.cuped_ci_high)?,
                p_value: row.cuped_p_value?,
                variance_reduction: row.cuped_variance_reduction?,
            })
        })();
        let mut variant = MetricVariant {
            variant_id: row.variant_id.clone(),
            is_control: row.is_control == 1,
            visitors: row.visitors,
            value: row.value,
            diff: row.diff,
            ci: both(row.ci_low, row.ci_high),
            p_value: row.p_value,
            // A secondary metric's p-values, corrected in the view for the number of
            // secondary metrics (Bonferroni); the goal's and the guardrails' as they are.
            p_adjusted: (row.role == "secondary")
                .then_some(row.adjusted_p_value)
                .flatten(),
            always_valid_p_value: row.adjusted_always_valid_p_value,
            always_valid_ci: both(row.always_valid_ci_low, row.always_valid_ci_high),
            chance_to_beat_control: row.chance_to_beat_control,
            harm_p_value: row.always_valid_harm_p_value,
            cuped,
            verdict: String::new(),
        };
        variant.verdict = if variant.is_control {
            "control".into()
        } else if variant.p_value.is_none() {
            if row.no_test_reason.is_empty() {
                "not compared".into()
            } else {
                row.no_test_reason.clone()
            }
        } else {
            tested_verdict(row.role == "guardrail", row.higher_is_better == 1, &variant)
        };
        metrics.last_mut().expect("pushed").variants.push(variant);
    }
    for (_, metrics) in &mut out {
        // Goal first, then secondary, then guardrails; the view's order within each.
        metrics.metrics.sort_by_key(|m| role_rank(&m.role));
        if by.is_some() {
            adjust_across_segments(metrics, correction);
        }
    }
    Ok(out)
}

/// With `--by`: each metric's p-values adjusted across its segments and treatments by
/// `correction`; the always-valid p-values and harm tests by Bonferroni over the segments
/// tested, and the verdicts read from those.
fn adjust_across_segments(metrics: &mut Metrics, correction: Correction) {
    let mut segments: Vec<&str> = metrics
        .metrics
        .iter()
        .filter(|m| m.variants.iter().any(|v| v.p_value.is_some()))
        .filter_map(|m| m.segment.as_deref())
        .collect();
    segments.sort_unstable();
    segments.dedup();
    let tested = segments.len();
    metrics.segments_tested = Some(tested);
    // Each metric once, however many segments it has rows for.
    let ids: BTreeSet<String> = metrics
        .metrics
        .iter()
        .map(|m| m.metric_id.clone())
        .collect();
    for id in ids {
        let mut family: Vec<&mut MetricVariant> = metrics
            .metrics
            .iter_mut()
            .filter(|m| m.metric_id == id)
            .flat_map(|m| m.variants.iter_mut())
            .filter(|v| v.p_value.is_some())
            .collect();
        let p: Vec<f64> = family
            .iter()
            .filter_map(|v| v.p_adjusted.or(v.p_value))
            .collect();
        for (v, adjusted) in family.iter_mut().zip(stats::adjust(&p, correction)) {
            v.p_adjusted = Some(adjusted);
            let k = tested.max(1) as f64;
            v.always_valid_p_value = v.always_valid_p_value.map(|p| (p * k).min(1.0));
            v.harm_p_value = v.harm_p_value.map(|p| (p * k).min(1.0));
        }
    }
    for m in &mut metrics.metrics {
        let (guardrail, higher) = (m.role == "guardrail", m.higher_is_better);
        for v in m.variants.iter_mut().filter(|v| v.p_value.is_some()) {
            v.verdict = tested_verdict(guardrail, higher, v);
        }
    }
}

fn number(x: f64) -> String {
    if x != 0.0 && (x.abs() >= 1e5 || x.abs() < 1e-3) {
        format!("{x:.3e}")
    } else {
        format!("{x:.4}")
    }
}

fn p(x: f64) -> String {
    if x < 1e-4 {
        format!("{x:.1e}")
    } else {
        format!("{x:.4}")
    }
}

/// The metrics as text: a line per metric and arm, the guardrails harmed first.
pub fn render(metrics: &Metrics, correction: Correction) -> String {
    let mut out = String::new();
    if metrics.metrics.is_empty() {
        return out;
    }
    for (metric, variant, harm) in metrics.harmed() {
        let _ = writeln!(
            out,
            "GUARDRAIL HARMED: {metric} in {variant} (always-valid harm p = {}), whatever \
             the goal says.",
            p(harm)
        );
    }
    if let (Some(by), Some(tested)) = (metrics.by, metrics.segments_tested) {
        let _ = writeln!(
            out,
            "Per {}: {tested} segments tested; p adjusted across them and the treatments \
             ({correction}), always-valid and harm p-values multiplied by {tested}.",
            by.name()
        );
    }
    let secondaries = metrics
        .metrics
        .iter()
        .filter(|m| m.role == "secondary")
        .map(|m| m.metric_id.as_str())
        .collect::<BTreeSet<_>>()
        .len();
    let secondary = secondaries > 0;
    if secondary {
        let _ = writeln!(
            out,
            "Secondary metrics: p adj. and always-valid p multiplied by their number \
             ({secondaries}, Bonferroni); the goal's and the guardrails' as they are."
        );
    }
    let width = metrics
        .metrics
        .iter()
        .map(|m| m.metric_id.chars().count() + m.segment.as_ref().map_or(0, |s| s.len() + 3))
        .max()
        .unwrap_or(0)
        .max(12);
    let _ = writeln!(
        out,
        "{:<width$} {:<9} {:<10} {:<16} {:>9} {:>11}  {:<32} {:>8} {:>8}  {:<18} {:>7}  {:<30} verdict",
        "metric",
        "role",
        "kind",
        "variant",
        "visitors",
        "value",
        "diff (95% CI)",
        "p",
        if metrics.by.is_some() || secondary {
            "p adj."
        } else {
            ""
        },
        "always-valid p",
        "P(beat)",
        "CUPED diff (CI), variance cut",
    );
    for m in &metrics.metrics {
        let name = match &m.segment {
            Some(s) if s.is_empty() => format!("{} [(none)]", m.metric_id),
            Some(s) => format!("{} [{s}]", m.metric_id),
            None => m.metric_id.clone(),
        };
        for v in &m.variants {
            let variant = if v.is_control {
                format!("{} (control)", v.variant_id)
            } else {
                v.variant_id.clone()
            };
            let diff = match (v.diff, v.ci) {
                (Some(d), Some([lo, hi])) => {
                    format!("{} ({}, {})", number(d), number(lo), number(hi))
                }
                _ => "-".into(),
            };
            let always = match (v.harm_p_value, v.always_valid_p_value) {
                (Some(h), _) => format!("harm {}", p(h)),
                (None, Some(a)) => p(a),
                _ => "-".into(),
            };
            let cuped = v.cuped.as_ref().map_or("-".into(), |c| {
                format!(
                    "{} ({}, {}), {:.0}%",
                    number(c.diff),
                    number(c.ci[0]),
                    number(c.ci[1]),
                    100.0 * c.variance_reduction
                )
            });
            let _ = writeln!(
                out,
                "{name:<width$} {:<9} {:<10} {variant:<16} {:>9} {:>11}  {diff:<32} {:>8} {:>8}  {always:<18} {:>7}  {cuped:<30} {}",
                m.role,
                m.kind,
                v.visitors,
                number(v.value),
                v.p_value.map_or("-".into(), p),
                v.p_adjusted.map_or(String::new(), p),
                v.chance_to_beat_control
                    .map_or("-".into(), |c| format!("{:.1}%", 100.0 * c)),
                v.verdict
            );
        }
        let _ = writeln!(out, "{:<width$} unit: {}", "", m.unit);
    }
    out.push_str(
        "Metrics: p is Welch's t-test at the planned end; always-valid p may be read at any \
         time (a guardrail's: one-sided, of harm); P(beat) is the chance to beat the control \
         (normal approximation, flat prior); CUPED adjusts each visitor's value by their own \
         before exposure.\n",
    );
    out
}

/// The metrics as an HTML table (for the `--html` page): a row per metric and treatment.
pub fn html(metrics: &Metrics, escape: impl Fn(&str) -> String) -> String {
    let mut html = String::new();
    if metrics.metrics.is_empty() {
        return html;
    }
    for (metric, variant, harm) in metrics.harmed() {
        let _ = write!(
            html,
            "<p class=\"srm alarm harmed\" data-metric=\"{}\">Guardrail harmed: {} in {} \
             (always-valid harm p = {}), whatever the goal says.</p>",
            escape(metric),
            escape(metric),
            escape(variant),
            p(harm)
        );
    }
    html.push_str(
        "<h3>Metrics</h3><div class=\"scroll\"><table class=\"metrics\"><thead><tr>\
         <th>Metric</th><th>Role</th><th>Variant</th><th>Value</th><th>Diff (95% CI)</th>\
         <th>CUPED variance cut</th><th>Verdict</th></tr></thead><tbody>",
    );
    for m in &metrics.metrics {
        for v in m.variants.iter().filter(|v| !v.is_control) {
            let diff = match (v.diff, v.ci) {
                (Some(d), Some([lo, hi])) => {
                    format!("{} ({}, {})", number(d), number(lo), number(hi))
                }
                _ => "-".into(),
            };
            let cut = v.cuped.as_ref().map_or("-".into(), |c| {
                format!("{:.0}%", 100.0 * c.variance_reduction)
            });
            let segment = m
                .segment
                .as_ref()
                .map_or(String::new(), |s| format!(" [{}]", escape(s)));
            let _ = write!(
                html,
                "<tr data-metric=\"{}\" data-variant=\"{}\"><td>{}{segment}<br><small>{}, {}\
                 </small></td><td>{}</td><td>{}</td><td>{}</td><td>{diff}</td><td>{cut}</td>\
                 <td class=\"verdict\">{}</td></tr>",
                escape(&m.metric_id),
                escape(&v.variant_id),
                escape(&m.metric_id),
                escape(&m.kind),
                escape(&m.unit),
                escape(&m.role),
                escape(&v.variant_id),
                number(v.value),
                escape(&v.verdict)
            );
        }
    }
    html.push_str("</tbody></table></div>");
    html
}

#[cfg(test)]
mod tests {
    use super::*;

    fn variant(id: &str, control: bool, harm: Option<f64>) -> MetricVariant {
        MetricVariant {
            variant_id: id.into(),
            is_control: control,
            visitors: 100,
            value: 500.0,
            diff: (!control).then_some(50.0),
            ci: (!control).then_some([20.0, 80.0]),
            p_value: (!control).then_some(0.001),
            p_adjusted: None,
            always_valid_p_value: (!control).then_some(0.01),
            always_valid_ci: None,
            chance_to_beat_control: (!control).then_some(0.001),
            harm_p_value: harm,
            cuped: None,
            verdict: String::new(),
        }
    }

    fn metrics(harm: f64) -> Metrics {
        Metrics {
            by: None,
            segments_tested: None,
            metrics: vec![MetricReport {
                metric_id: "load_time".into(),
                role: "guardrail".into(),
                kind: "mean".into(),
                unit: "sum load time, ms per visitor".into(),
                higher_is_better: false,
                segment: None,
                variants: vec![variant("A", true, None), variant("B", false, Some(harm))],
            }],
        }
    }

    #[test]
    fn a_harmed_guardrail_is_flagged_above_the_table_and_on_the_page() {
        let text = render(&metrics(0.01), Correction::Holm);
        let flag = text
            .find("GUARDRAIL HARMED: load_time in B")
            .expect("flagged");
        assert!(flag < text.find("metric ").expect("header"), "{text}");
        let html = html(&metrics(0.01), str::to_owned);
        assert!(html.contains("Guardrail harmed: load_time in B"), "{html}");

        let quiet = render(&metrics(0.2), Correction::Holm);
        assert!(!quiet.contains("HARMED: "), "{quiet}");
        assert!(!html_is_flagged(&metrics(0.2)));
    }

    #[test]
    fn with_segments_each_metric_is_corrected_once_for_their_number() {
        let mut m = metrics(0.01);
        let one = m.metrics[0].clone();
        m.metrics = ["ads", "mail", "search"]
            .map(|segment| MetricReport {
                segment: Some(segment.into()),
                ..one.clone()
            })
            .to_vec();
        adjust_across_segments(&mut m, Correction::Holm);
        assert_eq!(m.segments_tested, Some(3));
        for report in &m.metrics {
            let b = &report.variants[1];
            assert!(
                (b.always_valid_p_value.expect("p") - 0.03).abs() < 1e-12,
                "{b:?}"
            );
            assert!((b.harm_p_value.expect("p") - 0.03).abs() < 1e-12, "{b:?}");
            assert!((b.p_adjusted.expect("p") - 0.003).abs() < 1e-12, "{b:?}");
        }
    }

    fn html_is_flagged(m: &Metrics) -> bool {
        html(m, str::to_owned).contains("Guardrail harmed")
    }
}
