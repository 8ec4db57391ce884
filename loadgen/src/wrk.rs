//! `wrk` (Debian's C load tool) as the benchmark's second client: runs it, reads its text
//! report into a `Figure` (the same line as `loadgen`'s own loads, so `report` tabulates
//! both), and writes the ingest batches its Lua script posts.
//!
//! What wrk counts differs from `loadgen`: every answer it read counts, warm-up aside
//! (a separate wrk run before the measured one), and the answers it calls errors are
//! those of status 400 and above; it does not say which status they had.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::Context;

use crate::traffic::Traffic;
use crate::watch::Watch;
use loadgen::stats::Figure;

/// What one wrk run reported (with `--latency`).
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// Every answer read, errors included.
    pub requests: u64,
    /// wrk's `Requests/sec`: answers over its whole run.
    pub requests_per_second: f64,
    /// `Non-2xx or 3xx responses` (wrk counts status ≥ 400).
    pub errors_status: u64,
    /// `Socket errors`: connect, read, write and timeout together.
    pub socket_errors: u64,
    pub p50_us: Option<u64>,
    pub p99_us: Option<u64>,
    pub max_us: Option<u64>,
}

/// A duration as wrk prints it (`103.00us`, `1.37ms`, `2.10s`, `1.50m`), in microseconds.
fn micros(text: &str) -> Option<u64> {
    let split = text.find(|c: char| c.is_ascii_alphabetic())?;
    let (number, unit) = text.split_at(split);
    let value: f64 = number.parse().ok()?;
    let scale = match unit {
        "us" => 1.0,
        "ms" => 1e3,
        "s" => 1e6,
        "m" => 60e6,
        "h" => 3600e6,
        _ => return None,
    };
    Some((value * scale).round() as u64)
}

/// Reads wrk's text report.
pub fn parse(text: &str) -> anyhow::Result<Report> {
    let mut report = Report {
        requests: 0,
        requests_per_second: 0.0,
        errors_status: 0,
        socket_errors: 0,
        p50_us: None,
        p99_us: None,
        max_us: None,
    };
    let (mut requests, mut rate) = (None, None);
    for line in text.lines().map(str::trim) {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["Latency", _avg, _stdev, max, _] => report.max_us = micros(max),
            ["50%", value] => report.p50_us = micros(value),
            ["99%", value] => report.p99_us = micros(value),
            [n, "requests", "in", ..] => requests = n.parse().ok(),
            ["Requests/sec:", value] => rate = value.parse().ok(),
            ["Non-2xx", "or", "3xx", "responses:", n] => {
                report.errors_status = n.parse().context("wrk's error count")?;
            }
            ["Socket", "errors:", rest @ ..] => {
                // connect 0, read 0, write 0, timeout 0
                report.socket_errors = rest
                    .iter()
                    .filter_map(|w| w.trim_end_matches(',').parse::<u64>().ok())
                    .sum();
            }
            _ => {}
        }
    }
    report.requests = requests.context("no `N requests in` line in wrk's output")?;
    report.requests_per_second = rate.context("no `Requests/sec:` line in wrk's output")?;
    Ok(report)
}

impl Report {
    /// The figure of this run: `units_per_request` units per answer below 400, at wrk's
    /// rate; wrk's error answers go under status 0 (it does not tell their status).
    pub fn figure(
        &self,
        bench: &str,
        subject: &str,
        unit: &str,
        units_per_request: f64,
        cpu: BTreeMap<String, f64>,
    ) -> Figure {
        let ok = self.requests.saturating_sub(self.errors_status);
        let ok_share = if self.requests == 0 {
            0.0
        } else {
            ok as f64 / self.requests as f64
        };
        Figure {
            bench: bench.to_owned(),
            subject: subject.to_owned(),
            unit: unit.to_owned(),
            rate: self.requests_per_second * ok_share * units_per_request,
            requests: ok,
            p50_us: self.p50_us,
            p99_us: self.p99_us,
            max_us: self.max_us,
            failures: if self.errors_status > 0 {
                BTreeMap::from([(0, self.errors_status)])
            } else {
                BTreeMap::new()
            },
            transport_errors: self.socket_errors,
            rss_kib: None,
            cpu_percent: cpu,
            bytes_per_unit: None,
        }
    }
}

/// Runs `wrk ARGS -d SECONDS` (plus `--latency` when measured) and returns its report.
/// While it runs, `watch` (with wrk itself as `wrk`) is sampled over `seconds`, from its
/// start: the window wrk measures, less its last answers.
pub fn run(
    args: &[String],
    seconds: f64,
    watch: Option<&Watch>,
) -> anyhow::Result<(Report, BTreeMap<String, f64>)> {
    let mut command = Command::new("wrk");
    // wrk's own options first: whatever follows a `--` in ARGS goes to the Lua script.
    command
        .arg("-d")
        .arg(format!("{}s", seconds.max(1.0).round() as u64))
        .stdout(Stdio::piped());
    if watch.is_some() {
        command.arg("--latency");
    }
    command.args(args);
    let child = command
        .spawn()
        .context("cannot start wrk (Debian package `wrk`)")?;
    let cpu = match watch {
        Some(watch) => {
            let watch = watch.clone().with("wrk", child.id());
            let from = watch.sample();
            std::thread::sleep(Duration::from_secs_f64(seconds.max(1.0).round()));
            watch.usage(&from, &watch.sample())
        }
        None => BTreeMap::new(),
    };
    let output = child.wait_with_output()?;
    let text = String::from_utf8_lossy(&output.stdout);
    anyhow::ensure!(output.status.success(), "wrk failed: {text}");
    Ok((parse(&text)?, cpu))
}

/// The body a batch is written in.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum BatchFormat {
    /// The contract's `{"events": [...]}`, for `POST /api/v1/analytics`.
    Contract,
    /// PostHog capture's `/batch` body (`crate::peers::posthog_body`).
    Posthog,
}

/// Writes `count` of the traffic model's batches of five (beacons left out) for the Lua
/// script, one a line: key, user agent, body, separated by tabs.
pub fn write_batches(
    traffic: &mut Traffic,
    count: usize,
    format: BatchFormat,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let mut written = 0;
    while written < count {
        let batch = traffic.next_batch();
        if batch.beacon {
            continue;
        }
        out.write_all(batch.key.as_bytes())?;
        out.write_all(b"\t")?;
        out.write_all(batch.user_agent.as_bytes())?;
        out.write_all(b"\t")?;
        // serde_json escapes tabs and line breaks inside strings: the body is one line.
        match format {
            BatchFormat::Contract => out.write_all(&batch.body())?,
            BatchFormat::Posthog => out.write_all(&crate::peers::posthog_body(&batch)?)?,
        }
        out.write_all(b"\n")?;
        written += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_report_of_wrk_4_1() {
        // Captured from Debian's wrk 4.1.0 against nginx serving a file.
        let report = parse(include_str!("../wrk/testdata/nginx-200.txt")).unwrap();
        assert_eq!(
            report,
            Report {
                requests: 286_403,
                requests_per_second: 136_405.89,
                errors_status: 0,
                socket_errors: 0,
                p50_us: Some(103),
                p99_us: Some(1_370),
                max_us: Some(4_960),
            }
        );
        let figure = report.figure("b", "s", "events", 5.0, BTreeMap::new());
        assert_eq!(figure.requests, 286_403);
        assert!((figure.rate - 682_029.45).abs() < 0.01, "{}", figure.rate);
        assert!(figure.failures.is_empty());
    }

    #[test]
    fn error_answers_are_not_counted() {
        // The same nginx asked for a file it does not have: every answer a 404.
        let report = parse(include_str!("../wrk/testdata/nginx-404.txt")).unwrap();
        assert_eq!(report.errors_status, 291_042);
        assert_eq!(report.max_us, Some(13_520));
        let figure = report.figure("b", "s", "requests", 1.0, BTreeMap::new());
        assert_eq!((figure.rate, figure.requests), (0.0, 0));
        assert_eq!(figure.failures, BTreeMap::from([(0, 291_042)]));
    }

    #[test]
    fn batches_are_lines_of_key_agent_and_five_events() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/experiments.json");
        let sites = std::sync::Arc::new(crate::traffic::Sites::from_file(&path).unwrap());
        let mut out = Vec::new();
        write_batches(
            &mut Traffic::new(sites, "w1", 3),
            50,
            BatchFormat::Contract,
            &mut out,
        )
        .unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.lines().count(), 50);
        for line in text.lines() {
            let fields: Vec<&str> = line.split('\t').collect();
            assert_eq!(fields.len(), 3, "{line}");
            assert!(fields[0].starts_with("pk_"), "{line}");
            let body: serde_json::Value = serde_json::from_str(fields[2]).unwrap();
            assert_eq!(body["events"].as_array().unwrap().len(), 5);
            assert!(body.get("pkey").is_none(), "the key goes in the header");
        }
    }

    #[test]
    fn socket_errors_and_units() {
        let text = "  10 requests in 1.00s, 1KB read\n  Socket errors: connect 1, read 2, write 0, timeout 4\nRequests/sec:     10.00\n";
        let report = parse(text).unwrap();
        assert_eq!(report.socket_errors, 7);
        assert_eq!((report.p50_us, report.max_us), (None, None));
        assert_eq!(micros("1.50m"), Some(90_000_000));
        assert_eq!(micros("2.10s"), Some(2_100_000));
        assert_eq!(micros("12"), None);
        assert!(parse("Running 2s test\n").is_err());
    }
}
