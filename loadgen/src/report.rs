//! The table of `scripts/bench`: each figure next to its reference from the same run, the
//! median over the alternated rounds, the ratio and the target.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::stats::Figure;

/// (bench, our subject, reference subject, target ratio of rates).
pub const COMPARISONS: &[(&str, &str, &str, f64)] = &[
    ("config-api", "config-api", "nginx-static", 0.9),
    ("ingest", "ingest", "librdkafka-producer", 0.5),
    ("consumer", "consumer", "clickhouse-jsoneachrow", 0.8),
];

fn median(mut values: Vec<f64>) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    Some(if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    })
}

fn of<'a>(figures: &'a [Figure], bench: &str, subject: &str) -> Vec<&'a Figure> {
    figures
        .iter()
        .filter(|f| f.bench == bench && f.subject == subject)
        .collect()
}

fn median_rate(figures: &[&Figure]) -> Option<f64> {
    median(figures.iter().map(|f| f.rate).collect())
}

fn median_p99_ms(figures: &[&Figure]) -> Option<f64> {
    median(
        figures
            .iter()
            .filter_map(|f| f.p99_us)
            .map(|us| us as f64 / 1e3)
            .collect(),
    )
}

fn show(value: Option<f64>, decimals: usize) -> String {
    value.map_or("-".to_owned(), |v| format!("{v:.decimals$}"))
}

/// The Markdown table of every comparison, then the figures that stand alone.
pub fn render(figures: &[Figure]) -> String {
    let mut out = String::new();
    out.push_str(
        "| measure | ours | reference | ratio | target | met | p99 ms ours | p99 ms reference | rounds |\n",
    );
    out.push_str("|---|---:|---:|---:|---:|:-:|---:|---:|---:|\n");
    for &(bench, ours, reference, target) in COMPARISONS {
        let a = of(figures, bench, ours);
        let b = of(figures, bench, reference);
        if a.is_empty() && b.is_empty() {
            continue;
        }
        let unit = a.first().or(b.first()).map_or("", |f| f.unit.as_str());
        let (ra, rb) = (median_rate(&a), median_rate(&b));
        let ratio = ra.zip(rb).filter(|(_, b)| *b > 0.0).map(|(a, b)| a / b);
        let met = match ratio {
            Some(r) if r >= target => "yes",
            Some(_) => "NO",
            None => "?",
        };
        let _ = writeln!(
            out,
            "| {bench} {unit}/s ({ours} vs {reference}) | {} | {} | {} | ≥ {target} | {met} | {} | {} | {} |",
            show(ra, 0),
            show(rb, 0),
            show(ratio, 2),
            show(median_p99_ms(&a), 2),
            show(median_p99_ms(&b), 2),
            a.len().min(b.len()),
        );
    }
    let paired = |f: &Figure| COMPARISONS.iter().any(|c| c.0 == f.bench);
    let single: Vec<&Figure> = figures
        .iter()
        .filter(|f| !paired(f) && f.rss_kib.is_none())
        .collect();
    if !single.is_empty() {
        out.push_str("\n| figure | value | p50 ms | p99 ms | max ms | non-2xx | errors |\n");
        out.push_str("|---|---:|---:|---:|---:|---:|---:|\n");
        for f in single {
            let value = format!("{:.0} {}/s", f.rate, f.unit);
            let ms = |us: Option<u64>| show(us.map(|us| us as f64 / 1e3), 2);
            let _ = writeln!(
                out,
                "| {} {} | {value} | {} | {} | {} | {} | {} |",
                f.bench,
                f.subject,
                ms(f.p50_us),
                ms(f.p99_us),
                ms(f.max_us),
                f.failures.values().sum::<u64>(),
                f.transport_errors,
            );
        }
    }
    let rss: Vec<&Figure> = figures.iter().filter(|f| f.rss_kib.is_some()).collect();
    if !rss.is_empty() {
        out.push_str("\n| process | measured | peak RSS MiB |\n|---|---|---:|\n");
        for f in rss {
            let mib = f.rss_kib.unwrap_or_default() as f64 / 1024.0;
            let _ = writeln!(out, "| {} | {} | {mib:.1} |", f.subject, f.bench);
        }
    }
    out.push_str(&cpu_table(figures));
    let failures: u64 = figures
        .iter()
        .map(|f| f.failures.values().sum::<u64>() + f.transport_errors)
        .sum();
    if failures > 0 {
        let _ = writeln!(
            out,
            "\n{failures} request(s) failed during the measured windows; see the rounds' lines."
        );
    }
    out
}

/// Median CPU of each watched process during each kind of measurement.
fn cpu_table(figures: &[Figure]) -> String {
    let mut by_measure: BTreeMap<(&str, &str), BTreeMap<&str, Vec<f64>>> = BTreeMap::new();
    for f in figures {
        for (process, pct) in &f.cpu_percent {
            by_measure
                .entry((&f.bench, &f.subject))
                .or_default()
                .entry(process)
                .or_default()
                .push(*pct);
        }
    }
    if by_measure.is_empty() {
        return String::new();
    }
    let mut out = String::from("\n| during | CPU, % of one core (median of rounds) |\n|---|---|\n");
    for ((bench, subject), processes) in by_measure {
        let cells: Vec<String> = processes
            .into_iter()
            .map(|(process, values)| format!("{process} {}", show(median(values), 0)))
            .collect();
        let _ = writeln!(out, "| {bench} {subject} | {} |", cells.join(", "));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figure(bench: &str, subject: &str, rate: f64, p99_us: Option<u64>) -> Figure {
        Figure {
            bench: bench.into(),
            subject: subject.into(),
            unit: "events".into(),
            rate,
            p99_us,
            ..Figure::default()
        }
    }

    #[test]
    fn medians_ratios_and_targets() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(vec![]), None);

        let figures = vec![
            figure("ingest", "ingest", 30.0, Some(2000)),
            figure("ingest", "librdkafka-producer", 100.0, None),
            figure("ingest", "ingest", 60.0, Some(4000)),
            figure("ingest", "librdkafka-producer", 100.0, None),
            figure("ingest", "ingest", 90.0, Some(3000)),
            Figure {
                cpu_percent: BTreeMap::from([("tansu".into(), 90.0), ("consumer".into(), 20.0)]),
                ..figure("consumer", "consumer", 70.0, None)
            },
            figure("consumer", "clickhouse-jsoneachrow", 100.0, None),
            Figure {
                rss_kib: Some(2048),
                ..figure("rss", "ingest", 0.0, None)
            },
        ];
        let table = render(&figures);
        let ingest = table.lines().find(|l| l.starts_with("| ingest")).unwrap();
        assert!(
            ingest.contains("| 60 | 100 | 0.60 | ≥ 0.5 | yes | 3.00 | - | 2 |"),
            "{ingest}"
        );
        let consumer = table.lines().find(|l| l.starts_with("| consumer")).unwrap();
        assert!(consumer.contains("| 0.70 | ≥ 0.8 | NO |"), "{consumer}");
        assert!(!table.contains("| config-api"), "no figures, no line");
        assert!(table.contains("| ingest | rss | 2.0 |"), "{table}");
        assert!(
            table.contains("| consumer consumer | consumer 20, tansu 90 |"),
            "{table}"
        );
    }
}
