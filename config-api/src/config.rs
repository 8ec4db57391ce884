//! Settings, each a flag and an environment variable.

use std::net::SocketAddr;

/// The config-api: experiments served from an in-memory snapshot.
#[derive(clap::Parser, Clone, Debug)]
#[command(version, about)]
pub struct Config {
    /// Address to listen on (the experiments endpoint and /healthz, /readyz, /metrics).
    #[arg(long, env = "CONFIG_API_LISTEN", default_value = "127.0.0.1:8082")]
    pub listen: SocketAddr,

    #[command(flatten)]
    pub snapshot: http_kit::reload::SnapshotArgs,

    #[command(flatten)]
    pub http: http_kit::serve::ServeArgs,

    /// `max-age` of the Cache-Control header of live responses, in seconds.
    #[arg(long, env = "CONFIG_API_CACHE_MAX_AGE", default_value_t = 30)]
    pub cache_max_age: u32,

    /// At shutdown, how long /readyz answers 503 while requests are still served, so that
    /// load balancers stop sending traffic first, in milliseconds.
    #[arg(long, env = "CONFIG_API_SHUTDOWN_DRAIN_MS", default_value_t = 0)]
    pub shutdown_drain_ms: u64,
}
