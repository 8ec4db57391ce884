//! `experiment-results --html FILE`: one experiment's results as a page that needs nothing
//! but itself (inline CSS and SVG, no script, no font or image to fetch), readable on a
//! phone: per public key and phase, the command's own figures ([`crate::results::Report`],
//! its minimum-data guard included) with a verdict in words (read from the always-valid
//! interval, which stays valid however often the page is looked at), a
//! cumulative chart of each variant's difference to the control with its always-valid
//! band, the sample-ratio check and the time range of the first exposures.

use std::fmt::Write;

use anyhow::Context;
use clickhouse::Client;
use schema::ResultsOverTimeRow;

use crate::results::{Report, Shown, VariantReport, utc};

/// One experiment under one public key in one phase: the command's figures and the
/// hours of the view.
#[derive(Clone, Debug)]
pub struct Section<'a> {
    pub report: &'a Report,
    /// Ordered by hour.
    pub points: Vec<ResultsOverTimeRow>,
}

/// Reads the hours of the experiment of `reports` and writes their page to `path`.
pub async fn write(
    client: &Client,
    experiment: &str,
    reports: &[Report],
    path: &std::path::Path,
) -> anyhow::Result<()> {
    let points: Vec<ResultsOverTimeRow> = client
        .query(
            "SELECT ?fields FROM experiment_results_over_time WHERE experiment_id = ? ORDER BY public_key, phase, hour, variant_id",
        )
        .bind(experiment)
        .fetch_all()
        .await
        .context("cannot read experiment_results_over_time")?;
    let sections: Vec<Section> = reports
        .iter()
        .map(|report| Section {
            report,
            points: points
                .iter()
                .filter(|p| p.public_key == report.public_key && p.phase == report.phase)
                .cloned()
                .collect(),
        })
        .collect();
    std::fs::write(path, page(experiment, &sections))
        .with_context(|| format!("cannot write {}", path.display()))
}

/// Text for HTML (element content and attribute values).
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Percentage points with a sign.
fn pp(x: f64) -> String {
    format!("{:+.2}", x * 100.0)
}

/// A lift (a ratio less one) in percent, signed: `+12.5%`.
fn pct(x: f64) -> String {
    format!("{:+.1}%", x * 100.0)
}

/// The verdict of a variant, in words, from the always-valid interval.
pub fn verdict(v: &VariantReport) -> String {
    if v.variant_id == "__multiple__" {
        return "Saw several variants: left out of the comparison.".into();
    }
    let Some(comparison) = &v.comparison else {
        return "The control: every variant is compared with it.".into();
    };
    match &comparison.always_valid {
        Shown::Value(av) => {
            let d = (av.low + av.high) / 2.0;
            let (low, high) = (pp(av.low), pp(av.high));
            let lift = pct(av.lift);
            if av.low > 0.0 {
                format!(
                    "Better than the control: {lift}, {} pp (between {low} and {high} pp, an \
                     interval that holds however often you look).",
                    pp(d)
                )
            } else if av.high < 0.0 {
                format!(
                    "Worse than the control: {lift}, {} pp (between {low} and {high} pp, an \
                     interval that holds however often you look).",
                    pp(d)
                )
            } else {
                format!(
                    "No difference shown yet: {lift}, {} pp, anywhere between {low} and {high} \
                     pp. Keep it running, or stop if that range rules out every effect worth \
                     having.",
                    pp(d)
                )
            }
        }
        Shown::Missing(reason) => format!("No verdict yet: {reason}."),
    }
}

/// The sample-ratio status in words, and whether it is an alarm.
fn srm_status(p: Option<f64>) -> (String, bool) {
    match p {
        Some(p) if p < 0.001 => (
            format!(
                "Sample-ratio MISMATCH (p = {p:.2e}): the exposures do not follow the weights. \
                 Fix the assignment before trusting anything below."
            ),
            true,
        ),
        Some(p) => (
            format!("Sample ratio as expected (p = {p:.3}): exposures follow the weights."),
            false,
        ),
        None => (
            "Sample ratio not checked (no definition or a single variant).".into(),
            false,
        ),
    }
}

const COLORS: &[&str] = &["#1b6ac9", "#d9480f", "#2b8a3e", "#862e9c", "#c92a2a"];

/// One variant's series in the chart: x in hours (any unit), y the difference, its band.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub variant_id: String,
    /// (x, diff, low, high)
    pub points: Vec<(f64, f64, f64, f64)>,
}

/// The chart geometry.
const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 260.0;
const LEFT: f64 = 84.0;
const RIGHT: f64 = 12.0;
const TOP: f64 = 12.0;
const BOTTOM: f64 = 28.0;

/// Maps data onto the plot area: (x0, x1) and (y0, y1), with 0 always in the y range.
#[derive(Clone, Copy, Debug)]
pub struct Scale {
    x: (f64, f64),
    y: (f64, f64),
}

impl Scale {
    /// Every x, every difference and 0 in view; the bands of each series' first quarter
    /// of points, as wide as a few visitors make them, may leave it (the plot clips them):
    /// they would flatten the rest.
    pub fn of(series: &[Series]) -> Self {
        let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, 0.0f64, 0.0f64);
        for s in series {
            let early = s.points.len() / 4;
            for (i, &(x, d, low, high)) in s.points.iter().enumerate() {
                x0 = x0.min(x);
                x1 = x1.max(x);
                y0 = y0.min(d);
                y1 = y1.max(d);
                if i >= early {
                    y0 = y0.min(low);
                    y1 = y1.max(high);
                }
            }
        }
        if x0 > x1 {
            (x0, x1) = (0.0, 1.0);
        }
        if x1 - x0 < 1e-9 {
            x1 = x0 + 1.0;
        }
        if y1 - y0 < 1e-9 {
            (y0, y1) = (y0 - 0.01, y1 + 0.01);
        }
        // A margin, so that a band that crosses 0 is seen to.
        let pad = (y1 - y0) * 0.08;
        (y0, y1) = (y0 - pad, y1 + pad);
        Self {
            x: (x0, x1),
            y: (y0, y1),
        }
    }

    pub fn px(&self, x: f64) -> f64 {
        LEFT + (x - self.x.0) / (self.x.1 - self.x.0) * (WIDTH - LEFT - RIGHT)
    }

    pub fn py(&self, y: f64) -> f64 {
        TOP + (self.y.1 - y) / (self.y.1 - self.y.0) * (HEIGHT - TOP - BOTTOM)
    }
}

/// The cumulative difference chart: per variant, its always-valid band (a polygon) and
/// its difference (a polyline), the zero line, the y range and the first and last time.
pub fn chart(series: &[Series], first: &str, last: &str, clip: &str) -> String {
    let scale = Scale::of(series);
    let mut svg = String::new();
    let _ = write!(
        svg,
        "<svg class=\"chart\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" role=\"img\" \
         aria-label=\"Difference to the control over time, with always-valid bands\" \
         xmlns=\"http://www.w3.org/2000/svg\">"
    );
    let zero = scale.py(0.0);
    let _ = write!(
        svg,
        "<line class=\"zero\" x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{zero:.1}\" y2=\"{zero:.1}\"/>",
        WIDTH - RIGHT
    );
    for (label, y) in [
        (scale.y.1, scale.py(scale.y.1)),
        (0.0, zero),
        (scale.y.0, scale.py(scale.y.0)),
    ] {
        // An end too close to the zero line would write over its label.
        if label != 0.0 && (y - zero).abs() < 18.0 {
            continue;
        }
        let _ = write!(
            svg,
            "<text class=\"axis\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{} pp</text>",
            LEFT - 4.0,
            y + 4.0,
            pp(label)
        );
    }
    let _ = write!(
        svg,
        "<text class=\"axis\" x=\"{LEFT}\" y=\"{:.1}\">{}</text>\
         <text class=\"axis\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
        HEIGHT - 8.0,
        escape(first),
        WIDTH - RIGHT,
        HEIGHT - 8.0,
        escape(last)
    );
    let _ = write!(
        svg,
        "<clipPath id=\"{clip}\"><rect x=\"{LEFT}\" y=\"{TOP}\" width=\"{}\" height=\"{}\"/>\
         </clipPath><g clip-path=\"url(#{clip})\">",
        WIDTH - LEFT - RIGHT,
        HEIGHT - TOP - BOTTOM
    );
    for (i, s) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let id = escape(&s.variant_id);
        let upper = s.points.iter().map(|p| (p.0, p.3));
        let lower = s.points.iter().rev().map(|p| (p.0, p.2));
        let band: Vec<String> = upper
            .chain(lower)
            .map(|(x, y)| format!("{:.1},{:.1}", scale.px(x), scale.py(y)))
            .collect();
        let line: Vec<String> = s
            .points
            .iter()
            .map(|p| format!("{:.1},{:.1}", scale.px(p.0), scale.py(p.1)))
            .collect();
        let _ = write!(
            svg,
            "<polygon class=\"band\" data-variant=\"{id}\" fill=\"{color}\" fill-opacity=\"0.18\" \
             points=\"{}\"/><polyline class=\"diff\" data-variant=\"{id}\" fill=\"none\" \
             stroke=\"{color}\" stroke-width=\"2\" points=\"{}\"/>",
            band.join(" "),
            line.join(" ")
        );
    }
    svg.push_str("</g></svg>");
    svg
}

/// The chart's series of a section: each compared variant's hours with a difference and
/// an always-valid interval (x in hours since the first).
fn series_of(section: &Section) -> Vec<Series> {
    let first = section.points.first().map_or(0, |p| p.hour);
    section
        .report
        .variants
        .iter()
        .filter(|v| v.comparison.is_some())
        .map(|v| Series {
            variant_id: v.variant_id.clone(),
            points: section
                .points
                .iter()
                .filter(|p| p.variant_id == v.variant_id)
                .filter_map(|p| {
                    let x = f64::from(p.hour.saturating_sub(first)) / 3600.0;
                    Some((x, p.diff?, p.always_valid_ci_low?, p.always_valid_ci_high?))
                })
                .collect(),
        })
        .filter(|s| !s.points.is_empty())
        .collect()
}

const STYLE: &str = "\
body{font:16px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:0;\
padding:16px;color:#1d2329;background:#fff;max-width:960px;margin:auto}\
h1{font-size:1.4em;margin:.2em 0}h2{font-size:1.15em;margin:1.6em 0 .4em}\
.meta{color:#56606b;font-size:.9em}.srm,.multiple{padding:8px 12px;border-radius:6px;\
background:#e6f4ea;margin:4px 0}.alarm{background:#fde2e1;font-weight:600}\
.scroll{overflow-x:auto}table{border-collapse:collapse;width:100%;font-size:.92em}\
th,td{padding:6px 8px;border-bottom:1px solid #dde1e6;text-align:right;vertical-align:top}\
th:first-child,td:first-child{text-align:left}.verdicts{padding-left:1.2em}\
.verdicts li{margin:.3em 0}@media(max-width:600px){body{padding:10px}table{font-size:.8em}\
th,td{padding:4px 5px}td:first-child{overflow-wrap:anywhere;min-width:6em}}\
.chart{width:100%;height:auto;max-height:320px;display:block}\
.chart .zero{stroke:#868e96;stroke-dasharray:4 3}.chart .axis{font-size:15px;fill:#56606b}\
.legend span{display:inline-block;margin-right:1em}.legend i{display:inline-block;\
width:12px;height:12px;border-radius:2px;margin-right:4px;vertical-align:-1px}";

/// The whole page.
pub fn page(experiment: &str, sections: &[Section]) -> String {
    let mut html = String::new();
    let _ = write!(
        html,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{0}: results</title><style>{STYLE}</style></head><body>\
         <h1>{0}</h1>",
        escape(experiment)
    );
    if sections.is_empty() {
        html.push_str("<p class=\"empty\">No exposed visitor yet.</p>");
    }
    for (index, section) in sections.iter().enumerate() {
        let report = section.report;
        let key = escape(&report.public_key);
        let _ = write!(
            html,
            "<section class=\"result\" data-key=\"{key}\" data-phase=\"{}\">\
             <h2>{key}, phase {}</h2>\
             <p class=\"meta as-of\">As of {} UTC: the events stored up to then.</p>",
            report.phase,
            report.phase,
            utc(report.as_of)
        );
        let (first, last) = (
            section.points.first().map(|p| p.hour),
            section.points.last().map(|p| p.hour),
        );
        if let (Some(first), Some(last)) = (first, last) {
            let _ = write!(
                html,
                "<p class=\"meta range\">First exposures from {} to {} UTC (hour by hour).</p>",
                utc(first),
                utc(last.saturating_add(3599))
            );
        }
        let (status, alarm) = srm_status(report.srm_p_value);
        let multiple = report.multiple_exposures;
        for (class, status, alarm) in [
            ("srm", status, alarm),
            ("multiple", multiple.status() + ".", multiple.warning),
        ] {
            let _ = write!(
                html,
                "<p class=\"{class}{}\">{}</p>",
                if alarm { " alarm" } else { "" },
                escape(&status)
            );
        }
        html.push_str(
            "<div class=\"scroll\"><table class=\"variants\"><thead><tr><th>Variant</th>\
             <th>Visitors</th><th>Conv.</th><th>Rate</th><th>Lift</th><th>Diff, pp</th>\
             </tr></thead><tbody>",
        );
        for v in &report.variants {
            let name = if v.is_control {
                format!("{} (control)", escape(&v.variant_id))
            } else {
                escape(&v.variant_id)
            };
            let (lift, diff) = match v.comparison.as_ref().map(|c| &c.always_valid) {
                Some(Shown::Value(av)) => (pct(av.lift), pp((av.low + av.high) / 2.0)),
                _ => ("-".into(), "-".into()),
            };
            let _ = write!(
                html,
                "<tr data-variant=\"{}\"><td>{name}</td><td class=\"exposed\">{}</td>\
                 <td class=\"converted\">{}</td><td class=\"rate\">{:.2}%</td>\
                 <td class=\"lift\">{lift}</td><td class=\"diff\">{diff}</td></tr>",
                escape(&v.variant_id),
                v.exposed,
                v.converted,
                v.conversion_rate * 100.0,
            );
        }
        html.push_str("</tbody></table></div><ul class=\"verdicts\">");
        for v in &report.variants {
            let _ = write!(
                html,
                "<li class=\"verdict\" data-variant=\"{0}\"><b>{0}</b>: {1}</li>",
                escape(&v.variant_id),
                escape(&verdict(v))
            );
        }
        html.push_str("</ul>");
        html.push_str(&crate::metrics::html(&report.metrics, escape));
        let series = series_of(section);
        if series.is_empty() {
            html.push_str("<p class=\"meta\">No chart: no variant has an interval yet.</p>");
        } else {
            let (first, last) = (first.unwrap_or(0), last.unwrap_or(0));
            html.push_str(
                "<h3>Difference to the control, cumulative, with its always-valid 95% band</h3>",
            );
            let clip = format!("plot-{index}");
            html.push_str(&chart(&series, &utc(first), &utc(last), &clip));
            html.push_str("<p class=\"legend\">");
            for (i, s) in series.iter().enumerate() {
                let _ = write!(
                    html,
                    "<span><i style=\"background:{}\"></i>{}</span>",
                    COLORS[i % COLORS.len()],
                    escape(&s.variant_id)
                );
            }
            html.push_str(
                "</p><p class=\"meta\">A band that leaves the dashed zero line is an \
                 effect; it may be read at any time.</p>",
            );
        }
        html.push_str("</section>");
    }
    html.push_str("</body></html>\n");
    html
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(points: &[(f64, f64, f64, f64)]) -> Series {
        Series {
            variant_id: "var_<b>".into(),
            points: points.to_vec(),
        }
    }

    #[test]
    fn the_scale_keeps_zero_in_view_and_maps_the_ends_to_the_plot_edges() {
        let s = series(&[(0.0, 0.02, 0.01, 0.03), (10.0, 0.04, 0.03, 0.05)]);
        let scale = Scale::of(&[s]);
        assert_eq!(scale.px(0.0), LEFT);
        assert_eq!(scale.px(10.0), WIDTH - RIGHT);
        // From 0 to 0.05, with a margin of 8% of that on each side.
        assert!((scale.py(0.054) - TOP).abs() < 1e-9);
        assert!((scale.py(-0.004) - (HEIGHT - BOTTOM)).abs() < 1e-9);
    }

    fn svg_labels(svg: &str) -> String {
        svg.split("<text").skip(1).collect::<Vec<_>>().join("|")
    }

    #[test]
    fn the_early_bands_may_leave_the_view_but_no_difference_does() {
        let mut points = vec![(0.0, 0.2, -0.5, 0.9)];
        points.extend((1..8).map(|x| (f64::from(x), 0.03, 0.01, 0.05)));
        let scale = Scale::of(&[series(&points)]);
        let (top, bottom) = (scale.py(0.2), scale.py(0.0));
        assert!(
            top > TOP && top < TOP + 20.0,
            "the first difference near the top: {top}"
        );
        assert!(
            bottom < HEIGHT - BOTTOM && bottom > HEIGHT - BOTTOM - 20.0,
            "0: {bottom}"
        );
        assert!(scale.py(0.9) < 0.0, "the first band leaves the view");
        assert!(!svg_labels(&chart(&[series(&points)], "a", "b", "p")).contains("-1.60 pp"));
        let svg = chart(&[series(&points)], "a", "b", "plot-1");
        assert!(svg.contains("<clipPath id=\"plot-1\">"));
        assert!(svg.contains("clip-path=\"url(#plot-1)\""));
    }

    #[test]
    fn the_chart_draws_a_band_and_a_line_per_variant_at_the_scaled_points() {
        let s = series(&[(0.0, 0.0, -0.05, 0.05), (1.0, 0.05, 0.0, 0.1)]);
        let svg = chart(&[s], "2026-11-22 00:00", "2026-11-22 01:00", "c");
        // y from -0.062 (bottom, 232) to 0.112 (top, 12): -0.05 to 0.1 and 8% of that
        // more on each side; 0 at 12 + 0.112 / 0.174 * 220.
        assert!(svg.contains("points=\"84.0,153.6 628.0,90.4\""), "{svg}");
        assert!(
            svg.contains("points=\"84.0,90.4 628.0,27.2 628.0,153.6 84.0,216.8\""),
            "{svg}"
        );
        assert!(svg.contains("data-variant=\"var_&lt;b&gt;\""));
        assert!(!svg.contains("<b>"), "variant ids are escaped");
        assert_eq!(svg.matches("<polyline").count(), 1);
        assert!(
            svg.contains("+11.20 pp") && svg.contains("-6.20 pp"),
            "{svg}"
        );
    }

    fn row(variant: &str, control: bool, ci: Option<(f64, f64)>) -> VariantReport {
        use crate::results::{AlwaysValid, Comparison};
        fn missing<T>() -> Shown<T> {
            Shown::Missing("not enough data".into())
        }
        VariantReport {
            variant_id: variant.into(),
            is_control: control,
            exposed: 100,
            converted: 10,
            conversion_rate: 0.1,
            rate_interval: missing(),
            comparison: (!control).then(|| Comparison {
                enough_data: ci.is_some(),
                diff: missing(),
                p_value: missing(),
                p_adjusted: missing(),
                lift: missing(),
                always_valid: ci.map_or_else(missing, |(low, high)| {
                    Shown::Value(AlwaysValid {
                        p_value: 0.01,
                        low,
                        high,
                        lift: (low + high) / 2.0 / 0.1,
                        lift_low: low / 0.1,
                        lift_high: high / 0.1,
                    })
                }),
            }),
            time_on_page: None,
        }
    }

    #[test]
    fn the_verdict_reads_the_always_valid_interval() {
        // The lift first, the difference beside it: +4 pp on a 10% rate is +40%.
        assert_eq!(
            verdict(&row("b", false, Some((0.01, 0.07)))),
            "Better than the control: +40.0%, +4.00 pp (between +1.00 and +7.00 pp, an \
             interval that holds however often you look)."
        );
        assert!(verdict(&row("b", false, Some((-0.07, -0.01)))).starts_with("Worse"));
        assert!(verdict(&row("b", false, Some((-0.01, 0.07)))).starts_with("No difference"));
        assert_eq!(
            verdict(&row("b", false, None)),
            "No verdict yet: not enough data."
        );
        assert!(verdict(&row("a", true, None)).starts_with("The control"));
    }

    const HOUR0: u32 = 1_795_000_000 / 3600 * 3600;

    #[test]
    fn the_page_is_self_contained_and_says_the_time_range_and_the_sample_ratio() {
        let point = |hour: u32, variant: &str| ResultsOverTimeRow {
            public_key: "pk".into(),
            phase: 1,
            hour,
            variant_id: variant.into(),
            exposed: 10,
            diff: Some(0.04),
            always_valid_ci_low: Some(0.01),
            always_valid_ci_high: Some(0.07),
            ..ResultsOverTimeRow::default()
        };
        let report = Report {
            public_key: "pk".into(),
            experiment_id: "exp".into(),
            phase: 1,
            srm_p_value: Some(0.0001),
            multiple_exposures: crate::results::MultipleExposures {
                visitors: 12,
                share: 0.02,
                warning: true,
            },
            as_of: 1_763_700_000,
            correction: crate::stats::Correction::Holm,
            variants: vec![row("a", true, None), row("b", false, Some((0.01, 0.07)))],
            metrics: crate::metrics::Metrics::default(),
        };
        let section = Section {
            report: &report,
            points: vec![point(HOUR0, "b"), point(HOUR0 + 7200, "b")],
        };
        let html = page("exp", &[section]);
        for needle in ["http://", "https://", "<script", "src=", "@import", "url("] {
            let found = html
                .replace("http://www.w3.org/2000/svg", "")
                .replace("url(#plot-", "");
            assert!(!found.contains(needle), "{needle} in the page");
        }
        assert!(html.contains("name=\"viewport\""));
        assert!(html.contains("class=\"srm alarm\""));
        assert!(
            html.contains(
                "<p class=\"multiple alarm\">12 of the phase&#39;s visitors (2.00%) saw several \
                 variants: WARNING"
            ),
            "{html}"
        );
        assert!(
            html.contains("from 2026-11-18 11:00 to 2026-11-18 13:59 UTC"),
            "{html}"
        );
        assert!(html.contains("Better than the control: +40.0%, +4.00 pp"));
        assert!(html.contains("<td class=\"lift\">+40.0%</td><td class=\"diff\">+4.00</td>"));
        assert!(html.contains("As of 2025-11-21 04:40 UTC"), "{html}");
        assert_eq!(utc(0), "1970-01-01 00:00");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00");
    }
}
