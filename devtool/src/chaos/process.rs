//! The pipeline of `scripts/up` as the nemesis sees it: each service's pid file, and the
//! calls that start and stop servers the way scripts/up does (`scripts/up` itself, and
//! stack-kit's stop and broker start), so that how a server is started stays written once.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::Context;

use crate::supervise;

/// The broker's port (scripts/up's).
pub const BROKER_PORT: u16 = stack_kit::up::BROKER_PORT;

/// The pipeline of `scripts/up` in a repository, restarted with the run's settings.
pub struct Pipeline {
    repo: PathBuf,
    /// `.run/up`: pid files and the services' logs.
    run_dir: PathBuf,
    /// Where scripts/up's output goes (appended).
    up_log: PathBuf,
    /// The settings handed to scripts/up, hence to the services.
    env: Vec<(String, String)>,
}

impl Pipeline {
    pub fn new(repo: &Path, up_log: PathBuf, env: Vec<(String, String)>) -> Self {
        Self {
            repo: repo.to_owned(),
            run_dir: repo.join(".run/up"),
            up_log,
            env,
        }
    }

    /// A service's log file under `.run/up/logs`.
    pub fn log_of(&self, service: &str) -> PathBuf {
        self.run_dir.join("logs").join(format!("{service}.log"))
    }

    /// Where scripts/up records a service's pid.
    pub fn pidfile(&self, service: &str) -> PathBuf {
        pidfile(&self.run_dir, service)
    }

    /// The pid a service's pid file records.
    pub fn pid_of(&self, service: &str) -> anyhow::Result<u32> {
        supervise::read_pid(&self.pidfile(service)).with_context(|| service.to_owned())
    }

    /// `scripts/up` with the run's settings: starts whatever is down, restarts what runs
    /// with other settings. On failure the end of its output goes to stderr.
    pub async fn up(&self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.up_log)
            .with_context(|| format!("cannot open {}", self.up_log.display()))?;
        let status = tokio::process::Command::new(self.repo.join("scripts/up"))
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .status()
            .await
            .context("scripts/up does not run")?;
        if !status.success() {
            stack_kit::process::print_tail(&self.up_log);
            anyhow::bail!("scripts/up failed");
        }
        Ok(())
    }

    /// Stops a process of the pipeline: SIGTERM, up to 20 s, then SIGKILL.
    pub async fn stop(&self, service: &str) -> anyhow::Result<()> {
        let (pidfile, name) = (self.pidfile(service), service.to_owned());
        supervise::blocking(move || stack_kit::process::stop(&pidfile, &name))
            .await
            .with_context(|| format!("{service} could not be stopped"))
    }

    /// The broker again, on its SQLite file, as scripts/up starts it.
    pub async fn start_broker(&self) -> anyhow::Result<()> {
        let dir = self.run_dir.join("tansu");
        let tansu = supervise::tansu()?;
        let log = dir.join("tansu.log");
        supervise::blocking(move || {
            stack_kit::tansu::start(&stack_kit::tansu::Broker {
                bin: &tansu,
                dir: &dir,
                port: BROKER_PORT,
                storage: stack_kit::tansu::Storage::Sqlite,
                maintenance_interval: None,
            })
        })
        .await
        .with_context(|| format!("the broker did not start again (log: {})", log.display()))
    }
}

pub use supervise::pidfile;
