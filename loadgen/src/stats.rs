//! What a run measured: answers by status, units done, transport errors and latencies,
//! and the one-line result (`Figure`) that `scripts/bench` collects and `report` tabulates.

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;
use hyper::StatusCode;
use serde::{Deserialize, Serialize};

/// The counts of one worker or of a whole run.
#[derive(Clone, Debug)]
pub struct Tally {
    window: Duration,
    /// Latency of 2xx answers, microseconds.
    latency: Histogram<u64>,
    statuses: BTreeMap<u16, u64>,
    units: u64,
    /// Units of every 2xx answer, in the window or not (for verification).
    units_all: u64,
    transport_errors: u64,
}

impl Tally {
    pub fn new(window: Duration) -> Self {
        Self {
            window,
            latency: Histogram::new_with_bounds(1, 120_000_000, 3).expect("valid bounds"),
            statuses: BTreeMap::new(),
            units: 0,
            units_all: 0,
            transport_errors: 0,
        }
    }

    /// Records an answer; only `counted` ones (inside the measured window) enter the
    /// figures, but the units of every success are kept for verification.
    pub fn answer(&mut self, status: StatusCode, units: u64, latency: Duration, counted: bool) {
        if status.is_success() {
            self.units_all += units;
        }
        if !counted {
            return;
        }
        *self.statuses.entry(status.as_u16()).or_default() += 1;
        if status.is_success() {
            self.units += units;
            self.latency.saturating_record(latency.as_micros() as u64);
        }
    }

    pub fn transport_error(&mut self, counted: bool) {
        if counted {
            self.transport_errors += 1;
        }
    }

    pub fn merge(&mut self, other: &Tally) {
        self.latency
            .add(&other.latency)
            .expect("same histogram bounds");
        for (status, n) in &other.statuses {
            *self.statuses.entry(*status).or_default() += n;
        }
        self.units += other.units;
        self.units_all += other.units_all;
        self.transport_errors += other.transport_errors;
    }

    pub fn ok(&self) -> u64 {
        self.latency.len()
    }

    /// Units of every success, warm-up and stragglers included.
    pub fn units_all(&self) -> u64 {
        self.units_all
    }

    /// Answers that were not 2xx, by status.
    pub fn failures(&self) -> BTreeMap<u16, u64> {
        self.statuses
            .iter()
            .filter(|(s, _)| !(200..300).contains(*s))
            .map(|(s, n)| (*s, *n))
            .collect()
    }

    pub fn figure(&self, bench: &str, subject: &str, unit: &str) -> Figure {
        let secs = self.window.as_secs_f64().max(1e-9);
        let micros = |q: f64| (self.ok() > 0).then(|| self.latency.value_at_quantile(q));
        Figure {
            bench: bench.to_owned(),
            subject: subject.to_owned(),
            unit: unit.to_owned(),
            rate: self.units as f64 / secs,
            requests: self.ok(),
            p50_us: micros(0.5),
            p99_us: micros(0.99),
            max_us: (self.ok() > 0).then(|| self.latency.max()),
            failures: self.failures(),
            transport_errors: self.transport_errors,
            rss_kib: None,
            cpu_percent: BTreeMap::new(),
            bytes_per_unit: None,
        }
    }
}

/// One measured figure: a rate of `unit` per second and, for request loads, latencies.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Figure {
    pub bench: String,
    pub subject: String,
    pub unit: String,
    pub rate: f64,
    /// Requests answered 2xx in the window; for the tools that are not HTTP loads
    /// (producer, consumers, inserts), the units done.
    #[serde(default)]
    pub requests: u64,
    #[serde(default)]
    pub p50_us: Option<u64>,
    #[serde(default)]
    pub p99_us: Option<u64>,
    #[serde(default)]
    pub max_us: Option<u64>,
    /// Non-2xx answers by status code.
    #[serde(default)]
    pub failures: BTreeMap<u16, u64>,
    #[serde(default)]
    pub transport_errors: u64,
    /// Peak resident memory of the measured process, when known.
    #[serde(default)]
    pub rss_kib: Option<u64>,
    /// CPU used by the watched processes during the measurement, percent of one core.
    #[serde(default)]
    pub cpu_percent: BTreeMap<String, f64>,
    /// Bytes per unit, where the tool knows them: the raw producer's messages (key plus
    /// value, as Kafka stores them uncompressed, before record overhead), a ClickHouse
    /// database's compressed parts per event row (`clickhouse-disk`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_per_unit: Option<f64>,
}

impl Figure {
    /// A human-readable line for the terminal.
    pub fn summary(&self) -> String {
        let ms =
            |us: Option<u64>| us.map_or("-".to_owned(), |us| format!("{:.2}", us as f64 / 1e3));
        let failures: u64 = self.failures.values().sum();
        let cpu: Vec<String> = self
            .cpu_percent
            .iter()
            .map(|(name, pct)| format!("{name} {pct:.0}%"))
            .collect();
        format!(
            "{}/{}: {:.0} {}/s over {} requests; latency ms p50 {} p99 {} max {}; non-2xx {} {:?}; transport errors {}; CPU {}",
            self.bench,
            self.subject,
            self.rate,
            self.unit,
            self.requests,
            ms(self.p50_us),
            ms(self.p99_us),
            ms(self.max_us),
            failures,
            self.failures,
            self.transport_errors,
            cpu.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tally_counts_units_of_success_only_and_keeps_failures_apart() {
        let mut a = Tally::new(Duration::from_secs(2));
        for ms in 1..=100 {
            a.answer(StatusCode::ACCEPTED, 5, Duration::from_millis(ms), true);
        }
        let mut b = Tally::new(Duration::from_secs(2));
        b.answer(
            StatusCode::SERVICE_UNAVAILABLE,
            5,
            Duration::from_secs(9),
            true,
        );
        b.answer(StatusCode::BAD_REQUEST, 0, Duration::from_secs(9), true);
        b.answer(StatusCode::ACCEPTED, 3, Duration::from_secs(9), false);
        b.transport_error(true);
        b.transport_error(false);
        a.merge(&b);

        let f = a.figure("ingest", "ingest", "events");
        assert_eq!(f.requests, 100);
        assert_eq!(f.rate, 250.0);
        assert_eq!(f.failures, BTreeMap::from([(400, 1), (503, 1)]));
        assert_eq!(f.transport_errors, 1);
        assert_eq!(
            a.units_all(),
            503,
            "warm-up successes are kept for verification only"
        );
        let within = |v: Option<u64>, want: u64| v.is_some_and(|v| v.abs_diff(want) <= want / 100);
        assert!(within(f.p50_us, 50_000), "{:?}", f.p50_us);
        assert!(within(f.p99_us, 99_000), "{:?}", f.p99_us);
        assert!(
            within(f.max_us, 100_000),
            "failed answers stay out of the latencies"
        );
    }

    #[test]
    fn an_empty_tally_has_no_latency() {
        let f = Tally::new(Duration::from_secs(1)).figure("x", "y", "requests");
        assert_eq!((f.rate, f.p99_us, f.max_us), (0.0, None, None));
    }
}
