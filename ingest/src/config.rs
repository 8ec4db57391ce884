//! Settings, each a flag and an environment variable.

use std::net::SocketAddr;

/// The analytics ingest: HTTP → Kafka.
#[derive(clap::Parser, Clone, Debug)]
#[command(version, about)]
pub struct Config {
    /// Address to listen on (the analytics endpoint and /healthz, /readyz, /metrics).
    #[arg(long, env = "INGEST_LISTEN", default_value = "127.0.0.1:8081")]
    pub listen: SocketAddr,

    #[command(flatten)]
    pub kafka: kafka_kit::client::KafkaArgs,

    #[command(flatten)]
    pub snapshot: http_kit::reload::SnapshotArgs,

    #[command(flatten)]
    pub http: http_kit::serve::ServeArgs,

    /// Longest wait for Kafka to acknowledge a request's events before answering 503,
    /// in milliseconds.
    #[arg(long, env = "INGEST_DELIVERY_TIMEOUT_MS", default_value_t = 5000)]
    pub delivery_timeout_ms: u64,

    /// Most events waiting in the Kafka producer (librdkafka queue.buffering.max.messages).
    /// A request waits up to the delivery timeout for room for all its events, then
    /// enqueues them all; a 503 for want of room leaves none of them in Kafka.
    #[arg(
        long,
        env = "INGEST_PRODUCER_QUEUE_MESSAGES",
        default_value_t = 100_000
    )]
    pub producer_queue_messages: usize,

    /// Events per second accepted for a key whose snapshot entry has no
    /// `maxEventsPerSecond` (absent: no limit). Each replica enforces its own share.
    #[arg(long, env = "INGEST_DEFAULT_MAX_EVENTS_PER_SECOND", value_parser = positive_rate)]
    pub default_max_events_per_second: Option<f64>,

    /// Longest a request body may take to arrive once its head is read, in milliseconds;
    /// a slower client is answered 408.
    #[arg(long, env = "INGEST_BODY_READ_TIMEOUT_MS", default_value_t = 10_000)]
    pub body_read_timeout_ms: u64,

    /// Bytes of each request's User-Agent stored with its events (cut at a character
    /// boundary), at most 1024; 0 stores none. Bots are told from the whole header first.
    #[arg(long, env = "INGEST_USER_AGENT_MAX_BYTES", default_value_t = 1024,
        value_parser = clap::value_parser!(u16).range(0..=1024))]
    pub user_agent_max_bytes: u16,

    /// Largest accepted request body, in bytes, before and after gzip decompression.
    #[arg(long, env = "INGEST_MAX_BODY_BYTES", default_value_t = 1_048_576)]
    pub max_body_bytes: usize,

    /// Most bytes the requests worked on at once may take, from the end of their body's
    /// reading to their answer: each counts its body and the most its events could become
    /// (their reading, and Kafka messages with the User-Agent in each). Further requests
    /// wait, their body read, for room; a request that counts more than this runs alone.
    /// The process's peak memory follows from it: docs/ingest-limits.md.
    #[arg(long, env = "INGEST_MAX_BYTES_IN_FLIGHT", default_value_t = 16 * 1_048_576,
        value_parser = clap::value_parser!(u32).range(1..))]
    pub max_bytes_in_flight: u32,

    /// At shutdown, how long /readyz answers 503 while requests are still served, so that
    /// load balancers stop sending traffic first, in milliseconds.
    #[arg(long, env = "INGEST_SHUTDOWN_DRAIN_MS", default_value_t = 0)]
    pub shutdown_drain_ms: u64,

    /// How long the producer waits to fill a batch, in milliseconds (librdkafka linger.ms).
    #[arg(long, env = "KAFKA_LINGER_MS", default_value_t = 5)]
    pub linger_ms: u64,
}

fn positive_rate(raw: &str) -> Result<f64, String> {
    match raw.parse::<f64>() {
        Ok(rate) if rate.is_finite() && rate > 0.0 => Ok(rate),
        _ => Err(format!(
            "{raw:?} is not a positive number of events per second"
        )),
    }
}
