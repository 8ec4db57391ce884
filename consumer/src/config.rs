//! Settings, each a flag and an environment variable.

use std::net::SocketAddr;

/// The consumer's Kafka `client.id`, for its consumer, dead-letter producer and admin
/// client.
pub(crate) const CLIENT_ID: &str = env!("CARGO_PKG_NAME");

/// The consumer: Kafka → ClickHouse.
#[derive(clap::Parser, Clone, Debug)]
#[command(version, about)]
pub struct Config {
    /// Address of /healthz, /readyz and /metrics.
    #[arg(long, env = "CONSUMER_LISTEN", default_value = "127.0.0.1:8083")]
    pub listen: SocketAddr,

    /// Apply the ClickHouse schema's migrations, then exit (a deployment's init step, a
    /// benchmark's database).
    #[arg(long)]
    pub migrate_only: bool,

    /// At start, apply the schema's migrations (`true`), or wait, unready, until something
    /// else has (`false`: a migration Job with its own user; the consumer's user then needs
    /// no DDL rights). Waiting, /healthz answers 200 and /readyz 503.
    #[arg(long, env = "CONSUMER_MIGRATE", default_value_t = true, action = clap::ArgAction::Set)]
    pub migrate: bool,

    /// Apply the migrations, store the metric values of every visitor whose values are
    /// missing or stale (the consumer's sweep), then exit: after rows were inserted by
    /// anything but a consumer, when no consumer runs.
    #[arg(long, conflicts_with = "migrate_only")]
    pub refresh_metrics_only: bool,

    /// Print every statement that migrating a fresh database sends to a server of
    /// `--profile`, in order, then exit: connects to nothing (schema/rendered/ keeps them).
    #[arg(long, requires = "profile", conflicts_with_all = ["migrate_only", "refresh_metrics_only"])]
    pub print_schema: bool,

    /// The kind of server and topology `--print-schema` renders for.
    #[arg(long, value_enum, requires = "print_schema")]
    pub profile: Option<schema::profile::Profile>,

    #[command(flatten)]
    pub http: http_kit::serve::ServeArgs,

    #[command(flatten)]
    pub kafka: kafka_kit::client::KafkaArgs,

    /// Topic that receives the messages that cannot be stored (dead letters).
    #[arg(long, env = "KAFKA_DLQ_TOPIC", default_value = kafka_kit::client::DEAD_LETTER_TOPIC)]
    pub dlq_topic: String,

    /// Consumer group; consumers of one group share the topic's partitions.
    #[arg(long, env = "KAFKA_GROUP_ID", default_value = "analytics-consumer")]
    pub group_id: String,

    /// How long the group waits for a silent consumer before giving its partitions to
    /// the others, in milliseconds (librdkafka session.timeout.ms).
    #[arg(long, env = "KAFKA_SESSION_TIMEOUT_MS", default_value_t = 45_000)]
    pub kafka_session_timeout_ms: u64,

    /// Longest pause between two reads before the group counts this consumer as stuck,
    /// and how long a rebalance waits for the members to rejoin, in milliseconds
    /// (librdkafka max.poll.interval.ms).
    #[arg(long, env = "KAFKA_MAX_POLL_INTERVAL_MS", default_value_t = 300_000)]
    pub kafka_max_poll_interval_ms: u64,

    #[command(flatten)]
    pub clickhouse: clickhouse_kit::ClickHouseArgs,

    /// A batch is inserted when it holds this many rows...
    #[arg(long, env = "BATCH_MAX_ROWS", default_value_t = 100_000)]
    pub batch_max_rows: usize,

    /// ...or this many bytes of Kafka payload...
    #[arg(long, env = "BATCH_MAX_BYTES", default_value_t = 64 * 1024 * 1024)]
    pub batch_max_bytes: usize,

    /// ...or when its first row has waited this long, in milliseconds.
    #[arg(long, env = "BATCH_MAX_WAIT_MS", default_value_t = 1000)]
    pub batch_max_wait_ms: u64,

    /// Experiments snapshot (file path or http(s):// URL, as the config-api's) mirrored
    /// into `experiment_variants` for the results views; none: the table stays as is.
    #[arg(long, env = "EXPERIMENTS_SNAPSHOT")]
    pub experiments_snapshot: Option<String>,

    #[command(flatten)]
    pub snapshot_watch: http_kit::reload::SnapshotWatchArgs,

    /// Days the events are kept: the monthly partitions of `events` whose rows were all
    /// received before then are dropped, at start and hourly (never the current month's).
    /// Unset: kept for ever.
    #[arg(long, env = "EVENTS_RETENTION_DAYS", value_parser = clap::value_parser!(u32).range(1..))]
    pub events_retention_days: Option<u32>,

    /// Longest an insert may take before it is abandoned and retried, in milliseconds.
    #[arg(long, env = "CLICKHOUSE_INSERT_TIMEOUT_MS", default_value_t = 30_000)]
    pub insert_timeout_ms: u64,

    /// How often the visitors of the batches stored since the last time have their metric
    /// values computed again and stored, in milliseconds (0: neither this nor the sweeps;
    /// `experiment_metric_results` then counts only what `--refresh-metrics-only` stores).
    #[arg(long, env = "METRICS_REFRESH_MS", default_value_t = 2_000)]
    pub metrics_refresh_ms: u64,

    /// How often every visitor whose stored metric values are missing or stale (rows not
    /// inserted by a consumer, changed definitions) has them stored, in seconds; also at
    /// start and when the mirrored snapshot changes.
    #[arg(long, env = "METRICS_SWEEP_SECS", default_value_t = 600,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub metrics_sweep_secs: u64,

    /// Visitors whose metric values one statement computes and stores. Each statement
    /// reads the whole `events` table, so larger ones sweep faster; its memory grows with
    /// it (about 850 MB at 100 000 visitors of five events, five metrics).
    #[arg(long, env = "METRICS_VISITORS_PER_STATEMENT",
          default_value_t = crate::refresh::VISITORS_PER_STATEMENT,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub metrics_visitors_per_statement: usize,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn retention_is_off_unless_set_and_at_least_a_day() {
        let parse = |args: &[&str]| {
            Config::try_parse_from(std::iter::once("consumer").chain(args.iter().copied()))
        };
        assert_eq!(parse(&[]).expect("parses").events_retention_days, None);
        assert_eq!(
            parse(&["--events-retention-days", "400"])
                .expect("parses")
                .events_retention_days,
            Some(400)
        );
        assert!(parse(&["--events-retention-days", "0"]).is_err());
        assert!(parse(&["--events-retention-days", "-3"]).is_err());
    }

    #[test]
    fn a_statement_takes_at_least_one_visitor() {
        let per_statement = |args: &[&str]| {
            Config::try_parse_from(std::iter::once("consumer").chain(args.iter().copied()))
                .map(|c| c.metrics_visitors_per_statement)
        };
        assert_eq!(
            per_statement(&[]).expect("parses"),
            crate::refresh::VISITORS_PER_STATEMENT
        );
        let flag = "--metrics-visitors-per-statement";
        assert_eq!(per_statement(&[flag, "20000"]).expect("parses"), 20_000);
        assert!(per_statement(&[flag, "0"]).is_err());
    }
}
