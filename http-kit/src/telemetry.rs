//! Logging and the process-wide Prometheus recorder. Every metric the services export is
//! listed once in [`METRICS`], with its HELP text (and, for a histogram, its buckets):
//! the dashboard and alert rules of `deploy/monitoring` are checked against that list.

use std::sync::OnceLock;
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::EnvFilter;

/// Logs to stderr, filtered by `RUST_LOG` (default `info`); JSON when `LOG_FORMAT=json`.
pub fn init_logging() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let result = if std::env::var("LOG_FORMAT").is_ok_and(|f| f == "json") {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
    // Already set (tests start several services in one process): keep the first.
    let _ = result;
}

/// Logging for tests: captured by the test harness, shown for failing tests only.
pub fn init_test_logging() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .try_init();
}

/// Installs the Prometheus recorder, if no service of this process did: what is recorded
/// before it is lost, so each service calls it first thing in its `build`.
pub fn install_metrics() {
    metrics_handle();
}

/// How often the recorder folds the histograms' new samples into their buckets. It keeps
/// each sample until then (or until `/metrics` is scraped): without it, a config-api that
/// nobody scraped grew by about 20 bytes per request, 10 MB per 530 000.
const UPKEEP_EVERY: Duration = Duration::from_secs(1);

/// The recorder, installed on first use, with a thread of its own for its upkeep; services
/// of one process share it. `/metrics` renders it.
pub fn metrics_handle() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let mut builder = PrometheusBuilder::new();
        for metric in METRICS {
            if let Kind::Histogram(buckets) = metric.kind {
                builder = builder
                    .set_buckets_for_metric(Matcher::Full(metric.name.to_owned()), buckets)
                    .expect("buckets are never empty");
            }
        }
        let recorder = builder.build_recorder();
        let handle = recorder.handle();
        let upkeep = handle.clone();
        std::thread::Builder::new()
            .name("metrics-upkeep".to_owned())
            .spawn(move || {
                loop {
                    std::thread::sleep(UPKEEP_EVERY);
                    upkeep.run_upkeep();
                }
            })
            .expect("the metrics' upkeep thread starts");
        if metrics::set_global_recorder(recorder).is_err() {
            tracing::warn!("A metrics recorder was already installed; /metrics will be empty.");
        }
        for metric in METRICS {
            match metric.kind {
                Kind::Counter => metrics::describe_counter!(metric.name, metric.help),
                Kind::Gauge => metrics::describe_gauge!(metric.name, metric.help),
                Kind::Histogram(_) => metrics::describe_histogram!(metric.name, metric.help),
            }
        }
        handle
    })
}

/// What a metric is; a histogram's upper bounds (`le`), explicit so that its buckets add up
/// across replicas (a summary's quantiles cannot be aggregated).
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram(&'static [f64]),
}

/// One exported metric: its name, kind and HELP text.
#[derive(Clone, Copy, Debug)]
pub struct Metric {
    pub name: &'static str,
    pub kind: Kind,
    pub help: &'static str,
}

/// Latencies: 1 ms to 30 s.
const SECONDS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
/// Rows of a batch: 1 to a million (BATCH_MAX_ROWS is 100 000 by default).
const ROWS: &[f64] = &[
    1.0,
    10.0,
    100.0,
    1_000.0,
    10_000.0,
    50_000.0,
    100_000.0,
    250_000.0,
    1_000_000.0,
];

const fn counter(name: &'static str, help: &'static str) -> Metric {
    Metric {
        name,
        kind: Kind::Counter,
        help,
    }
}
const fn gauge(name: &'static str, help: &'static str) -> Metric {
    Metric {
        name,
        kind: Kind::Gauge,
        help,
    }
}
const fn histogram(name: &'static str, buckets: &'static [f64], help: &'static str) -> Metric {
    Metric {
        name,
        kind: Kind::Histogram(buckets),
        help,
    }
}

/// The name of the request-duration histograms (recorded by `RequestDurations`, in the
/// operations module).
pub const REQUEST_DURATIONS: &str = "http_request_duration_seconds";

/// Every metric of the three services (a service exports those it records; each serves
/// `http_request_duration_seconds` of its own routes).
pub const METRICS: &[Metric] = &[
    histogram(
        REQUEST_DURATIONS,
        SECONDS,
        "Time to answer a request (until the answer's head), by route and status.",
    ),
    counter(
        "ingest_requests_total",
        "Analytics requests answered, by route and status.",
    ),
    counter(
        "ingest_events_accepted_total",
        "Events accepted and acknowledged by Kafka.",
    ),
    counter(
        "ingest_events_rejected_total",
        "Events refused, by the field at fault.",
    ),
    histogram(
        "ingest_delivery_seconds",
        SECONDS,
        "Time from enqueue to Kafka's acknowledgement of a request's events.",
    ),
    counter(
        "ingest_delivery_errors_total",
        "Requests whose events did not reach Kafka, by reason (enqueue, delivery, timeout).",
    ),
    gauge(
        "ingest_producer_queue_depth",
        "Messages waiting in the Kafka producer.",
    ),
    counter(
        "ingest_producer_replacements_total",
        "Kafka producers replaced after the broker refused them.",
    ),
    counter(
        "ingest_body_budget_waits_total",
        "Requests that waited for room in the bytes-in-flight budget.",
    ),
    counter(
        "ingest_rate_limited_requests_total",
        "Requests refused with 429 by a key's rate limit.",
    ),
    counter(
        "ingest_rate_limited_events_total",
        "Events of the requests refused by a key's rate limit.",
    ),
    counter(
        "config_api_requests_total",
        "Experiment requests answered, by route and status.",
    ),
    counter(
        "config_api_unknown_key_requests_total",
        "Experiment requests with a key not in the snapshot.",
    ),
    counter(
        "consumer_rows_inserted_total",
        "Rows inserted into ClickHouse.",
    ),
    histogram("consumer_batch_rows", ROWS, "Rows per inserted batch."),
    histogram(
        "consumer_insert_seconds",
        SECONDS,
        "Time of a successful insert of a batch (a shard's rows in a cluster) into ClickHouse.",
    ),
    counter(
        "consumer_insert_retries_total",
        "ClickHouse inserts retried after a failure.",
    ),
    counter(
        "consumer_dead_letters_total",
        "Messages set aside to the dead-letter topic.",
    ),
    counter(
        "consumer_dlq_producer_replacements_total",
        "Dead-letter producers replaced after the broker refused them.",
    ),
    gauge(
        "consumer_lag_messages",
        "Messages behind the end of each assigned partition.",
    ),
    gauge(
        "consumer_assigned_partitions",
        "Partitions this consumer owns (updated every 5 s).",
    ),
    gauge(
        "consumer_group_stalled",
        "1 while the consumer group is stalled (no owner for a partition with work).",
    ),
    counter(
        "consumer_group_rejoins_total",
        "Times this consumer left and rejoined a stalled group.",
    ),
    counter(
        "consumer_definitions_written_total",
        "Snapshots mirrored into experiment_variants.",
    ),
    counter(
        "consumer_partitions_dropped_total",
        "Monthly partitions of events dropped by EVENTS_RETENTION_DAYS.",
    ),
    counter(
        "consumer_metric_visitors_refreshed_total",
        "Visitors whose metric values were computed again and stored.",
    ),
    counter(
        "consumer_metric_refresh_failures_total",
        "Metric value refreshes (a batch's visitors, or a sweep) that failed.",
    ),
    gauge(
        "consumer_metric_refreshed_as_of_seconds",
        "This consumer's latest refresh mark: every event it stored before is counted \
         in experiment_metric_results (Unix time).",
    ),
    counter(
        "ingest_snapshot_reloads_total",
        "Snapshot checks that found a change or failed, by result.",
    ),
    counter(
        "config_api_snapshot_reloads_total",
        "Snapshot checks that found a change or failed, by result.",
    ),
    counter(
        "consumer_snapshot_reloads_total",
        "Snapshot checks that found a change or failed, by result.",
    ),
    gauge(
        "ingest_snapshot_loaded_timestamp_seconds",
        "When the snapshot served was loaded (Unix time).",
    ),
    gauge(
        "config_api_snapshot_loaded_timestamp_seconds",
        "When the snapshot served was loaded (Unix time).",
    ),
    gauge(
        "consumer_snapshot_loaded_timestamp_seconds",
        "When the snapshot mirrored was loaded (Unix time).",
    ),
    gauge(
        "ingest_snapshot_refused",
        "1 while the snapshot file read is refused (the last good one serves).",
    ),
    gauge(
        "config_api_snapshot_refused",
        "1 while the snapshot file read is refused (the last good one serves).",
    ),
    gauge(
        "consumer_snapshot_refused",
        "1 while the snapshot file read is refused (the last mirrored stays).",
    ),
    gauge(
        "ingest_snapshot_info",
        "1 for the version of the snapshot served.",
    ),
    gauge(
        "config_api_snapshot_info",
        "1 for the version of the snapshot served.",
    ),
    gauge(
        "consumer_snapshot_info",
        "1 for the version of the snapshot mirrored.",
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    /// Resident bytes of this process.
    fn resident() -> u64 {
        let statm = std::fs::read_to_string("/proc/self/statm").expect("statm");
        let pages: u64 = statm
            .split(' ')
            .nth(1)
            .expect("resident")
            .parse()
            .expect("pages");
        pages * 4096
    }

    #[test]
    fn histogram_samples_are_folded_in_without_a_scrape() {
        metrics_handle();
        let histogram = metrics::histogram!(REQUEST_DURATIONS, "route" => "/test");
        let record = || {
            for _ in 0..2_000_000 {
                histogram.record(0.001);
            }
            std::thread::sleep(UPKEEP_EVERY * 3);
        };
        record();
        let before = resident();
        record();
        let grown = resident().saturating_sub(before);
        // Kept, two million samples take 16 MB or more.
        assert!(grown < 4 << 20, "grew by {grown} bytes");
    }
}
