//! Settings, each a flag and an environment variable.

use std::net::SocketAddr;
use std::path::PathBuf;

/// The config-api: experiments served from an in-memory snapshot.
#[derive(clap::Parser, Clone, Debug)]
#[command(version, about)]
pub struct Config {
    /// Address to listen on (the experiments endpoint and /healthz, /readyz, /metrics).
    #[arg(long, env = "CONFIG_API_LISTEN", default_value = "127.0.0.1:8082")]
    pub listen: SocketAddr,

    /// Experiments snapshot file, reloaded when it changes.
    #[arg(
        long,
        env = "EXPERIMENTS_SNAPSHOT",
        default_value = "deploy/experiments.json"
    )]
    pub snapshot: PathBuf,

    /// How often the snapshot file is checked for changes, in milliseconds.
    #[arg(long, env = "SNAPSHOT_POLL_INTERVAL_MS", default_value_t = 1000)]
    pub snapshot_poll_interval_ms: u64,

    /// `max-age` of the Cache-Control header of live responses, in seconds.
    #[arg(long, env = "CONFIG_API_CACHE_MAX_AGE", default_value_t = 30)]
    pub cache_max_age: u32,
}
