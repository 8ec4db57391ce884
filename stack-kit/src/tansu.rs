//! The Kafka-protocol broker: Tansu, built by `scripts/lib.sh` (`ensure_tansu`) with its
//! memory and SQLite storage.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::process::{self, tcp_open};

/// Where a broker keeps its records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Storage {
    /// Nothing survives a restart, and nothing is ever deleted.
    Memory,
    /// A database file in the broker's folder.
    Sqlite,
}

impl Storage {
    /// Its name, as the `stack` binary takes it.
    pub fn name(self) -> String {
        use clap::ValueEnum;
        self.to_possible_value()
            .map(|v| v.get_name().to_owned())
            .unwrap_or_default()
    }
}

/// A broker of the stack's own.
pub struct Broker<'a> {
    /// The `tansu` binary (`$TANSU` of scripts/lib.sh).
    pub bin: &'a Path,
    /// Its pid file, database and log: its owner's only.
    pub dir: &'a Path,
    pub port: u16,
    pub storage: Storage,
    /// With SQLite, how often Tansu deletes the records older than a topic's
    /// `retention.ms` (a humantime duration such as `2s`; Tansu's default: 10m).
    pub maintenance_interval: Option<&'a str>,
}

/// Starts the broker unless it runs, and waits up to 30 s for its port.
pub fn start(broker: &Broker) -> anyhow::Result<()> {
    let dir = broker.dir;
    let pidfile = dir.join("tansu.pid");
    if process::pidfile_running(&pidfile) {
        return Ok(());
    }
    let port = broker.port;
    process::claim_port(port, "Kafka broker")?;
    process::private_dir(dir)?;
    let mut engine = match broker.storage {
        Storage::Memory => "memory://tansu/".to_owned(),
        // Relative to the broker's working folder.
        Storage::Sqlite => "sqlite://tansu.db".to_owned(),
    };
    if let Some(interval) = broker.maintenance_interval {
        engine = format!("{engine}?maintenance_interval={interval}");
    }
    crate::log(&format!(
        "Starting tansu on 127.0.0.1:{port} ({} storage)",
        broker.storage.name()
    ));
    let url = format!("tcp://127.0.0.1:{port}");
    let log = dir.join("tansu.log");
    process::spawn(
        Command::new(broker.bin)
            .args([
                "broker",
                "--listener-url",
                &url,
                "--advertised-listener-url",
                &url,
            ])
            .args(["--storage-engine", &engine])
            .current_dir(dir),
        process::Output {
            log: &log,
            append: false,
            private: true,
        },
        &pidfile,
    )?;
    process::wait_ready(
        Duration::from_secs(30),
        &pidfile,
        &log,
        &format!("tansu on port {port}"),
        || tcp_open(port),
    )
}

/// Stops the broker of `dir`.
pub fn stop(dir: &Path, name: &str) -> anyhow::Result<()> {
    process::stop(&dir.join("tansu.pid"), name)
}
