//! The table of `scripts/bench`: each figure next to its reference from the same run, the
//! median over the alternated rounds, the ratio and the target.

use std::collections::BTreeMap;
use std::fmt::Write;

use anyhow::Context;
use loadgen::stats::Figure;

/// The figures of a file of JSON lines.
pub fn figures(file: &std::path::Path) -> anyhow::Result<Vec<Figure>> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(serde_json::from_str)
        .collect::<Result<Vec<Figure>, _>>()
        .with_context(|| format!("{} is not a file of figures", file.display()))
}

/// One line of the table: our subject and its reference in one bench, the target ratio
/// of their rates, and the watched processes whose CPU each one's work costs (a name
/// ending in `-` stands for every process whose name starts with it).
pub struct Comparison {
    pub bench: &'static str,
    pub ours: (&'static str, &'static [&'static str]),
    pub reference: (&'static str, &'static [&'static str]),
    pub target: f64,
}

pub const COMPARISONS: &[Comparison] = &[
    Comparison {
        bench: "config-api",
        ours: ("config-api", &["config-api"]),
        reference: ("nginx-static", &["nginx-"]),
        target: 1.0,
    },
    // The same two servers driven by wrk instead of loadgen: the ratio must hold under both.
    Comparison {
        bench: "config-api-wrk",
        ours: ("config-api", &["config-api"]),
        reference: ("nginx-static", &["nginx-"]),
        target: 1.0,
    },
    Comparison {
        bench: "ingest",
        ours: ("ingest", &["bench-ingest"]),
        reference: ("librdkafka-producer", &["loadgen"]),
        target: 0.8,
    },
    // ClickHouse's CPU counts on both sides: the consumer's inserts cost it too.
    Comparison {
        bench: "consumer",
        ours: ("consumer", &["bench-consumer", "clickhouse"]),
        reference: ("clickhouse-jsoneachrow", &["clickhouse"]),
        target: 0.8,
    },
];

/// Ours next to a peer users would run instead (`BENCH_PEERS=1`), in one bench: no
/// target, the ratio of our rate to the peer's and each one's CPU per unit; each side is
/// a subject and the watched processes whose CPU its work costs.
pub struct Peer {
    pub bench: &'static str,
    pub ours: (&'static str, &'static [&'static str]),
    pub peer: (&'static str, &'static [&'static str]),
}

const CONFIG_API: (&str, &[&str]) = ("config-api", &["config-api"]);
const EDGE_CLIENT: (&str, &[&str]) = ("unleash-edge-client", &["unleash-edge"]);
const EDGE_FRONTEND: (&str, &[&str]) = ("unleash-edge-frontend", &["unleash-edge"]);

pub const PEERS: &[Peer] = &[
    Peer {
        bench: "config-api",
        ours: CONFIG_API,
        peer: EDGE_CLIENT,
    },
    Peer {
        bench: "config-api",
        ours: CONFIG_API,
        peer: EDGE_FRONTEND,
    },
    Peer {
        bench: "config-api-wrk",
        ours: CONFIG_API,
        peer: EDGE_CLIENT,
    },
    Peer {
        bench: "config-api-wrk",
        ours: CONFIG_API,
        peer: EDGE_FRONTEND,
    },
    // Capture's Redis is idle under this load (its quota limiter reads it every 5 s); it is
    // in the CPU table.
    Peer {
        bench: FLOOR_BENCH,
        ours: ("ingest", &["bench-ingest"]),
        peer: ("posthog-capture", &["posthog-capture"]),
    },
    // Both into one ClickHouse server of their own: its CPU is counted on both sides.
    Peer {
        bench: "consumer-peers",
        ours: ("consumer", &["bench-consumer", "clickhouse-peer"]),
        peer: ("clickhouse-kafka-engine", &["clickhouse-peer"]),
    },
];

/// The ingest's floor: wrk posting the same batches of five to the ingest and to nginx
/// answering a fixed 202 (the HTTP cost), plus the raw producer (the Kafka cost).
pub const FLOOR_BENCH: &str = "ingest-wrk";
const FLOOR_TARGET: f64 = 1.5;
/// `loadgen clickhouse-disk` figures: compressed bytes per event of a database.
pub const DISK_BENCH: &str = "clickhouse-disk";

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

/// Microseconds of CPU per unit: the named processes' CPU over the figure's rate.
fn cpu_us_per_unit(figure: &Figure, processes: &[&str]) -> Option<f64> {
    let counts = |name: &str| {
        processes.iter().any(|p| {
            name == *p || (p.ends_with('-') && name.starts_with(p) && name.len() > p.len())
        })
    };
    let used: Vec<f64> = figure
        .cpu_percent
        .iter()
        .filter(|(name, _)| counts(name))
        .map(|(_, pct)| *pct)
        .collect();
    (figure.rate > 0.0 && !used.is_empty())
        .then(|| used.iter().sum::<f64>() / 100.0 * 1e6 / figure.rate)
}

fn median_cpu_us(figures: &[&Figure], processes: &[&str]) -> Option<f64> {
    median(
        figures
            .iter()
            .filter_map(|f| cpu_us_per_unit(f, processes))
            .collect(),
    )
}

/// `a / b`, when both are known and `b` is above zero.
fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    a.zip(b).filter(|(_, b)| *b > 0.0).map(|(a, b)| a / b)
}

fn show(value: Option<f64>, decimals: usize) -> String {
    value.map_or("-".to_owned(), |v| format!("{v:.decimals$}"))
}

/// `devtool report|latencies FILE`: a table of the figures in FILE on stdout; exit code 1
/// (the reason on stderr) when FILE cannot be read as figures.
pub fn print(file: &std::path::Path, table: fn(&[Figure]) -> String) -> i32 {
    match figures(file) {
        Ok(figures) => {
            print!("{}", table(&figures));
            0
        }
        Err(e) => {
            eprintln!("{e:#}");
            1
        }
    }
}

/// The Markdown table of every comparison, then the figures that stand alone.
pub fn render(figures: &[Figure]) -> String {
    let mut out = String::new();
    out.push_str(
        "| measure | ours | reference | ratio | target | met | CPU µs/unit ours | CPU µs/unit reference | p99 ms ours | p99 ms reference | rounds |\n",
    );
    out.push_str("|---|---:|---:|---:|---:|:-:|---:|---:|---:|---:|---:|\n");
    for c in COMPARISONS {
        let (bench, target) = (c.bench, c.target);
        let (ours, reference) = (c.ours.0, c.reference.0);
        let a = of(figures, bench, ours);
        let b = of(figures, bench, reference);
        if a.is_empty() && b.is_empty() {
            continue;
        }
        let unit = a.first().or(b.first()).map_or("", |f| f.unit.as_str());
        let (ra, rb) = (median_rate(&a), median_rate(&b));
        let ratio = ratio(ra, rb);
        let met = match ratio {
            Some(r) if r >= target => "yes",
            Some(_) => "NO",
            None => "?",
        };
        let _ = writeln!(
            out,
            "| {bench} {unit}/s ({ours} vs {reference}) | {} | {} | {} | ≥ {target} | {met} | {} | {} | {} | {} | {} |",
            show(ra, 0),
            show(rb, 0),
            show(ratio, 2),
            show(median_cpu_us(&a, c.ours.1), 2),
            show(median_cpu_us(&b, c.reference.1), 2),
            show(median_p99_ms(&a), 2),
            show(median_p99_ms(&b), 2),
            a.len().min(b.len()),
        );
    }
    out.push_str(&floor_table(figures));
    out.push_str(&peer_table(figures));
    let paired = |f: &Figure| COMPARISONS.iter().any(|c| c.bench == f.bench);
    let single: Vec<&Figure> = figures
        .iter()
        .filter(|f| !paired(f) && f.rss_kib.is_none() && f.bench != DISK_BENCH)
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
    out.push_str(&sizing_table(figures));
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

/// Each peer comparison of which both sides were measured.
fn peer_table(figures: &[Figure]) -> String {
    let mut rows = String::new();
    for c in PEERS {
        let a = of(figures, c.bench, c.ours.0);
        let b = of(figures, c.bench, c.peer.0);
        if a.is_empty() || b.is_empty() {
            continue;
        }
        let (ra, rb) = (median_rate(&a), median_rate(&b));
        let rate_ratio = ratio(ra, rb);
        let (ca, cb) = (median_cpu_us(&a, c.ours.1), median_cpu_us(&b, c.peer.1));
        let cpu_ratio = ratio(cb, ca);
        let _ = writeln!(
            rows,
            "| {} {}/s ({} vs {}) | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            c.bench,
            a[0].unit,
            c.ours.0,
            c.peer.0,
            show(ra, 0),
            show(rb, 0),
            show(rate_ratio, 2),
            show(ca, 2),
            show(cb, 2),
            show(cpu_ratio, 2),
            show(median_p99_ms(&a), 2),
            show(median_p99_ms(&b), 2),
            a.len().min(b.len()),
        );
    }
    if rows.is_empty() {
        return rows;
    }
    format!(
        "\n| peers | ours | peer | rate ratio | CPU µs/unit ours | CPU µs/unit peer | peer CPU / ours | p99 ms ours | p99 ms peer | rounds |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n{rows}"
    )
}

/// The ingest's CPU per event next to its floor, all from wrk's batches of five: nginx's
/// CPU per event answering them with a fixed 202, plus the raw producer's per event.
fn floor_table(figures: &[Figure]) -> String {
    let ingest = median_cpu_us(&of(figures, FLOOR_BENCH, "ingest"), &["bench-ingest"]);
    let http = median_cpu_us(&of(figures, FLOOR_BENCH, "nginx-202"), &["nginx-"]);
    let kafka = median_cpu_us(&of(figures, "ingest", "librdkafka-producer"), &["loadgen"]);
    if ingest.is_none() && http.is_none() {
        return String::new();
    }
    let floor = http.zip(kafka).map(|(h, k)| h + k);
    let ratio = ratio(ingest, floor);
    let met = match ratio {
        Some(r) if r <= FLOOR_TARGET => "yes",
        Some(_) => "NO",
        None => "?",
    };
    format!(
        "\n| CPU µs per event, batches of 5 (wrk) | ingest | nginx 202 (HTTP) | raw producer (Kafka) | floor | ratio | target | met |\n\
         |---|---:|---:|---:|---:|---:|---:|:-:|\n\
         | ingest vs its floor | {} | {} | {} | {} | {} | ≤ {FLOOR_TARGET} | {met} |\n",
        show(ingest, 2),
        show(http, 2),
        show(kafka, 2),
        show(floor, 2),
        show(ratio, 2),
    ) + &stack_table(figures, http, floor, ingest)
}

/// The ingest's CPU per event part by part: its own stack (`stack_floor`: the same HTTP
/// server answering a fixed 202; then also publishing five fixed messages through the
/// ingest's Kafka sink), next to the floor's parts, and the ingest doing the events' work.
fn stack_table(
    figures: &[Figure],
    nginx: Option<f64>,
    floor: Option<f64>,
    ingest: Option<f64>,
) -> String {
    let http = median_cpu_us(&of(figures, FLOOR_BENCH, "stack-http"), &["bench-stack"]);
    let kafka = median_cpu_us(&of(figures, FLOOR_BENCH, "stack-kafka"), &["bench-stack"]);
    if http.is_none() && kafka.is_none() {
        return String::new();
    }
    format!(
        "\n| CPU µs per event, batches of 5 (wrk), part by part | HTTP | HTTP + Kafka | ratio to the floor |\n\
         |---|---:|---:|---:|\n\
         | the floor: nginx 202, then + the raw producer | {} | {} | 1 |\n\
         | the ingest's stack, no work on the events (stack_floor) | {} | {} | {} |\n\
         | the ingest: + reading, checking and writing the events | - | {} | {} |\n",
        show(nginx, 2),
        show(floor, 2),
        show(http, 2),
        show(kafka, 2),
        show(ratio(kafka, floor), 2),
        show(ingest, 2),
        show(ratio(ingest, floor), 2),
    )
}

/// What sizing needs, per unit and per core, from the medians of this run's figures.
fn sizing_table(figures: &[Figure]) -> String {
    let per_core = |us: Option<f64>| us.filter(|us| *us > 0.0).map(|us| 1e6 / us);
    let cpu = |bench: &str, subject: &str, processes: &[&str]| {
        median_cpu_us(&of(figures, bench, subject), processes)
    };
    let bytes = |bench: &str, subject: &str| {
        median(
            of(figures, bench, subject)
                .iter()
                .filter_map(|f| f.bytes_per_unit)
                .collect(),
        )
    };
    let mut rows: Vec<(String, Option<f64>, &str)> = vec![
        (
            "ingest events/s per core (loadgen's mix)".into(),
            per_core(cpu("ingest", "ingest", &["bench-ingest"])),
            "ingest ingest: 1 / its CPU per event",
        ),
        (
            "ingest events/s per core (wrk, batches of 5)".into(),
            per_core(cpu(FLOOR_BENCH, "ingest", &["bench-ingest"])),
            "ingest-wrk ingest",
        ),
        (
            "consumer rows/s per core (the consumer alone)".into(),
            per_core(cpu("consumer", "consumer", &["bench-consumer"])),
            "consumer consumer",
        ),
        (
            "ClickHouse CPU s per million events stored (consumer's inserts)".into(),
            cpu("consumer", "consumer", &["clickhouse"]),
            "consumer consumer: ClickHouse's CPU per row",
        ),
        (
            "config-api requests/s per core (loadgen)".into(),
            per_core(cpu("config-api", "config-api", &["config-api"])),
            "config-api config-api",
        ),
        (
            "config-api requests/s per core (wrk)".into(),
            per_core(cpu("config-api-wrk", "config-api", &["config-api"])),
            "config-api-wrk config-api",
        ),
        (
            "Kafka bytes per event (key + value, uncompressed)".into(),
            bytes("ingest", "librdkafka-producer"),
            "the raw producer's messages",
        ),
    ];
    let mut databases: Vec<&str> = figures
        .iter()
        .filter(|f| f.bench == DISK_BENCH)
        .map(|f| f.subject.as_str())
        .collect();
    databases.dedup();
    for database in databases {
        rows.push((
            format!("ClickHouse compressed bytes per event on disk ({database}, all tables)"),
            bytes(DISK_BENCH, database),
            "system.parts after the run",
        ));
    }
    let rows: Vec<String> = rows
        .into_iter()
        .filter(|(_, value, _)| value.is_some())
        .map(|(what, value, from)| format!("| {what} | {} | {from} |\n", show(value, 1)))
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    format!(
        "\n| sizing | value | from (median of rounds) |\n|---|---:|---|\n{}",
        rows.concat()
    )
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

/// The latency beside each rate: per bench and subject measured at a rate, the medians
/// over its rounds of the rate, the p50 and the p99 as the load tool measured them; `n/a`
/// where a round has none (the tools that send no requests: producer, consumers, inserts).
pub fn latencies(figures: &[Figure]) -> String {
    let mut groups: BTreeMap<(&str, &str), Vec<&Figure>> = BTreeMap::new();
    for f in figures.iter().filter(|f| f.rate > 0.0) {
        groups.entry((&f.bench, &f.subject)).or_default().push(f);
    }
    let ms = |values: Option<Vec<u64>>| -> String {
        values
            .and_then(|v| median(v.into_iter().map(|us| us as f64).collect()))
            .map_or("n/a".to_owned(), |us| {
                format!("{}", (us / 10.0).round() / 100.0)
            })
    };
    let mut out = String::from(
        "| bench | subject | rate /s | unit | p50 ms | p99 ms | rounds |\n|---|---|---|---|---|---|---|\n",
    );
    for ((bench, subject), rounds) in groups {
        let rate = median(rounds.iter().map(|f| f.rate).collect()).unwrap_or(0.0);
        let _ = writeln!(
            out,
            "| {bench} | {subject} | {} | {} | {} | {} | {} |",
            rate.round(),
            rounds[0].unit,
            ms(rounds.iter().map(|f| f.p50_us).collect()),
            ms(rounds.iter().map(|f| f.p99_us).collect()),
            rounds.len()
        );
    }
    out
}

/// Half the median request rate of a subject's rounds in a bench (requests answered 2xx
/// over the measured seconds): an open-loop rate well below saturation.
pub fn half_request_rate(
    figures: &[Figure],
    bench: &str,
    subject: &str,
    seconds: f64,
) -> Option<f64> {
    median(
        of(figures, bench, subject)
            .iter()
            .map(|f| f.requests as f64)
            .collect(),
    )
    .map(|requests| requests / seconds / 2.0)
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

    fn cpu(bench: &str, subject: &str, rate: f64, process: &str, pct: f64) -> Figure {
        Figure {
            cpu_percent: BTreeMap::from([(process.into(), pct)]),
            ..figure(bench, subject, rate, None)
        }
    }

    #[test]
    fn peers_are_compared_only_when_measured_with_their_cpu_per_unit() {
        let mut figures = vec![
            cpu(
                "config-api-wrk",
                "config-api",
                100_000.0,
                "config-api",
                80.0,
            ),
            cpu("ingest-wrk", "ingest", 100_000.0, "bench-ingest", 50.0),
        ];
        assert_eq!(peer_table(&figures), "", "no peer measured");
        figures.extend([
            cpu(
                "config-api-wrk",
                "unleash-edge-frontend",
                20_000.0,
                "unleash-edge",
                100.0,
            ),
            cpu(
                "config-api-wrk",
                "unleash-edge-frontend",
                30_000.0,
                "unleash-edge",
                90.0,
            ),
            cpu(
                "ingest-wrk",
                "posthog-capture",
                50_000.0,
                "posthog-capture",
                100.0,
            ),
        ]);
        let table = render(&figures);
        // 8 µs against 40 (median of 50 and 30), a fourth of the rate (100 000 / 25 000).
        assert!(
            table.contains("| config-api-wrk events/s (config-api vs unleash-edge-frontend) | 100000 | 25000 | 4.00 | 8.00 | 40.00 | 5.00 | - | - | 1 |"),
            "{table}"
        );
        assert!(
            table.contains("| ingest-wrk events/s (ingest vs posthog-capture) | 100000 | 50000 | 2.00 | 5.00 | 20.00 | 4.00 |"),
            "{table}"
        );
        assert!(!table.contains("unleash-edge-client"), "{table}");
    }

    #[test]
    fn the_consumer_and_the_kafka_engine_both_count_their_own_clickhouse_only() {
        let figure = |subject, rate, cpu: &[(&str, f64)]| Figure {
            cpu_percent: cpu.iter().map(|&(name, pct)| (name.into(), pct)).collect(),
            ..figure("consumer-peers", subject, rate, None)
        };
        let figures = vec![
            figure(
                "consumer",
                100_000.0,
                &[
                    ("bench-consumer", 30.0),
                    ("clickhouse-peer", 70.0),
                    ("clickhouse", 50.0),
                ],
            ),
            figure(
                "clickhouse-kafka-engine",
                50_000.0,
                &[("clickhouse-peer", 40.0), ("clickhouse", 50.0)],
            ),
        ];
        // 10 µs per row (30 + 70 % at 100 000 rows/s) against 8 (40 % at 50 000): the
        // pipeline's own ClickHouse, idle, counts on neither side.
        let table = render(&figures);
        assert!(
            table.contains("| consumer-peers events/s (consumer vs clickhouse-kafka-engine) | 100000 | 50000 | 2.00 | 10.00 | 8.00 | 0.80 |"),
            "{table}"
        );
    }

    #[test]
    fn the_floor_sums_http_and_kafka_per_event_and_sizing_follows_the_figures() {
        let figures = vec![
            // 50% of a core for 100 000 events/s: 5 µs an event.
            cpu("ingest-wrk", "ingest", 100_000.0, "bench-ingest", 50.0),
            cpu("ingest-wrk", "nginx-202", 500_000.0, "nginx-1", 50.0),
            // 20% and 40% of a core for 100 000 events/s: 2 and 4 µs.
            cpu("ingest-wrk", "stack-http", 100_000.0, "bench-stack", 20.0),
            cpu("ingest-wrk", "stack-kafka", 100_000.0, "bench-stack", 40.0),
            Figure {
                bytes_per_unit: Some(300.0),
                ..cpu("ingest", "librdkafka-producer", 500_000.0, "loadgen", 100.0)
            },
            cpu(
                "config-api-wrk",
                "config-api",
                100_000.0,
                "config-api",
                80.0,
            ),
            cpu(
                "config-api-wrk",
                "nginx-static",
                125_000.0,
                "nginx-2",
                100.0,
            ),
            cpu("consumer", "consumer", 200_000.0, "clickhouse", 80.0),
            Figure {
                bytes_per_unit: Some(41.5),
                ..figure("clickhouse-disk", "bench_consumer", 0.0, None)
            },
        ];
        let table = render(&figures);
        // 1 µs (nginx) + 2 µs (producer) = 3; 5 / 3 = 1.67.
        assert!(
            table.contains(
                "| ingest vs its floor | 5.00 | 1.00 | 2.00 | 3.00 | 1.67 | ≤ 1.5 | NO |"
            ),
            "{table}"
        );
        for row in [
            "| the floor: nginx 202, then + the raw producer | 1.00 | 3.00 | 1 |",
            "| the ingest's stack, no work on the events (stack_floor) | 2.00 | 4.00 | 1.33 |",
            "| the ingest: + reading, checking and writing the events | - | 5.00 | 1.67 |",
        ] {
            assert!(table.contains(row), "{row} in {table}");
        }
        let wrk = table
            .lines()
            .find(|l| l.starts_with("| config-api-wrk"))
            .unwrap();
        assert!(wrk.contains("| 0.80 | ≥ 1 | NO | 8.00 | 8.00 |"), "{wrk}");
        for row in [
            "| ingest events/s per core (wrk, batches of 5) | 200000.0 |",
            "| config-api requests/s per core (wrk) | 125000.0 |",
            "| ClickHouse CPU s per million events stored (consumer's inserts) | 4.0 |",
            "| Kafka bytes per event (key + value, uncompressed) | 300.0 |",
            "| ClickHouse compressed bytes per event on disk (bench_consumer, all tables) | 41.5 |",
        ] {
            assert!(table.contains(row), "{row} in {table}");
        }
        assert!(!table.contains("| clickhouse-disk"), "not a rate: {table}");
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
                cpu_percent: BTreeMap::from([
                    ("tansu".into(), 90.0),
                    ("bench-consumer".into(), 20.0),
                    ("clickhouse".into(), 15.0),
                ]),
                ..figure("consumer", "consumer", 70.0, None)
            },
            Figure {
                cpu_percent: BTreeMap::from([("clickhouse".into(), 50.0)]),
                ..figure("consumer", "clickhouse-jsoneachrow", 100.0, None)
            },
            Figure {
                cpu_percent: BTreeMap::from([
                    ("nginx-1".into(), 40.0),
                    ("nginx-2".into(), 60.0),
                    ("nginx".into(), 900.0),
                ]),
                ..figure("config-api", "nginx-static", 200_000.0, None)
            },
            Figure {
                rss_kib: Some(2048),
                ..figure("rss", "ingest", 0.0, None)
            },
        ];
        let table = render(&figures);
        let ingest = table.lines().find(|l| l.starts_with("| ingest")).unwrap();
        assert!(
            ingest.contains("| 60 | 100 | 0.60 | ≥ 0.8 | NO | - | - | 3.00 | - | 2 |"),
            "{ingest}"
        );
        // (20% + 15%) of a core for 70 rows/s: 5000 µs a row; 50% for 100: 5000.
        let consumer = table.lines().find(|l| l.starts_with("| consumer")).unwrap();
        assert!(
            consumer.contains("| 0.70 | ≥ 0.8 | NO | 5000.00 | 5000.00 |"),
            "{consumer}"
        );
        // Both workers, not the process named without a suffix: 1 core for 200 000/s.
        let config_api = table
            .lines()
            .find(|l| l.starts_with("| config-api"))
            .unwrap();
        assert!(
            config_api.contains("| - | 200000 | - | ≥ 1 | ? | - | 5.00 |"),
            "{config_api}"
        );
        assert!(table.contains("| ingest | rss | 2.0 |"), "{table}");
        assert!(
            !table.contains("ingest-wrk"),
            "no floor without its figures: {table}"
        );
        assert!(
            table.contains("| consumer consumer | bench-consumer 20, clickhouse 15, tansu 90 |"),
            "{table}"
        );
    }

    #[test]
    fn each_rate_has_its_median_latencies_and_none_where_a_round_has_none() {
        let mut figures = vec![
            figure("ingest", "ingest", 100.0, Some(2_000)),
            figure("ingest", "ingest", 300.0, Some(4_150)),
            figure("consumer", "consumer", 50.0, None),
            figure("consumer", "consumer", 70.0, Some(1_000)),
            figure("idle", "nothing", 0.0, Some(1_000)),
        ];
        figures[0].p50_us = Some(500);
        figures[1].p50_us = Some(1_000);
        assert_eq!(
            latencies(&figures),
            "| bench | subject | rate /s | unit | p50 ms | p99 ms | rounds |\n\
             |---|---|---|---|---|---|---|\n\
             | consumer | consumer | 60 | events | n/a | n/a | 2 |\n\
             | ingest | ingest | 200 | events | 0.75 | 3.08 | 2 |\n"
        );
    }

    #[test]
    fn half_the_median_request_rate_of_the_subjects_rounds() {
        let rounds = [3_000, 1_000, 2_000, 9_000].map(|requests| Figure {
            requests,
            ..figure("ingest", "ingest", 1.0, None)
        });
        let mut figures = rounds.to_vec();
        figures.push(Figure {
            requests: 100_000,
            ..figure("ingest", "stack", 1.0, None)
        });
        assert_eq!(
            half_request_rate(&figures, "ingest", "ingest", 10.0),
            Some(125.0)
        );
        assert_eq!(
            half_request_rate(&figures, "consumer", "ingest", 10.0),
            None
        );
    }
}
