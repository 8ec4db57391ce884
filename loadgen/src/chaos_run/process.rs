//! The pipeline of `scripts/up` as the nemesis sees it: each service's pid file, signals,
//! and the thin calls into bash that start and stop servers the way scripts/up does
//! (`scripts/up` itself, and `scripts/lib.sh`'s `stop_pidfile` and `start_tansu`), so that
//! how a server is started stays written once.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::Context;

/// The broker's port (scripts/up's).
pub const BROKER_PORT: u16 = 9092;

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
        let path = self.pidfile(service);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("{service}: cannot read {}", path.display()))?;
        text.trim()
            .parse()
            .with_context(|| format!("{service}: no pid in {}", path.display()))
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
            let text = std::fs::read_to_string(&self.up_log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            for line in &lines[lines.len().saturating_sub(20)..] {
                eprintln!("{line}");
            }
            anyhow::bail!("scripts/up failed");
        }
        Ok(())
    }

    /// `stop_pidfile` of scripts/lib.sh: SIGTERM, up to 20 s, then SIGKILL.
    pub async fn stop(&self, service: &str) -> anyhow::Result<()> {
        let pidfile = self.pidfile(service).display().to_string();
        self.lib_sh("stop_pidfile \"$1\" \"$2\"", &[&pidfile, service])
            .await
            .with_context(|| format!("{service} could not be stopped"))
    }

    /// `start_tansu` of scripts/lib.sh: the broker again, on its SQLite file.
    pub async fn start_broker(&self) -> anyhow::Result<()> {
        let dir = self.run_dir.join("tansu").display().to_string();
        self.lib_sh(
            "start_tansu \"$1\" \"$2\" sqlite",
            &[&dir, &BROKER_PORT.to_string()],
        )
        .await
        .with_context(|| format!("the broker did not start again (log: {dir}/tansu.log)"))
    }

    /// Runs `script` with the functions of scripts/lib.sh and its arguments `$1`, `$2`…,
    /// its output discarded as the nemesis's own steps are not the run's log.
    async fn lib_sh(&self, script: &str, args: &[&str]) -> anyhow::Result<()> {
        let status = tokio::process::Command::new("bash")
            .arg("-c")
            .arg(format!("set -e; source \"$0\"; {script}"))
            .arg(self.repo.join("scripts/lib.sh"))
            .args(args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .await
            .context("bash does not run")?;
        anyhow::ensure!(status.success(), "{script}: {status}");
        Ok(())
    }
}

/// Where scripts/up records a service's pid under its `.run/up`.
pub fn pidfile(run_dir: &Path, service: &str) -> PathBuf {
    match service {
        "tansu" => run_dir.join("tansu/tansu.pid"),
        "clickhouse" => run_dir.join("clickhouse/clickhouse.pid"),
        "zookeeper" => run_dir.join("cluster/zookeeper/zookeeper.pid"),
        s if s
            .strip_prefix("ch")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())) =>
        {
            run_dir.join("cluster").join(s).join("clickhouse.pid")
        }
        s => run_dir.join(format!("{s}.pid")),
    }
}

/// Sends `signal` (`STOP`, `CONT`, `KILL`…) to `pid` with kill(1).
pub fn signal(pid: u32, signal: &str) -> anyhow::Result<()> {
    let status = std::process::Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .stderr(Stdio::null())
        .status()
        .context("kill does not run")?;
    anyhow::ensure!(status.success(), "kill -{signal} {pid} failed");
    Ok(())
}

/// A process frozen with SIGSTOP, continued when this guard goes, however the run ends.
pub struct Stopped(u32);

impl Stopped {
    pub fn new(pid: u32) -> anyhow::Result<Self> {
        signal(pid, "STOP")?;
        Ok(Self(pid))
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        // A process already gone needs nothing.
        let _ = signal(self.0, "CONT");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_service_has_the_pid_file_scripts_up_writes() {
        let dir = Path::new("/r/.run/up");
        for (service, path) in [
            ("tansu", "/r/.run/up/tansu/tansu.pid"),
            ("clickhouse", "/r/.run/up/clickhouse/clickhouse.pid"),
            ("ch3", "/r/.run/up/cluster/ch3/clickhouse.pid"),
            ("zookeeper", "/r/.run/up/cluster/zookeeper/zookeeper.pid"),
            ("consumer", "/r/.run/up/consumer.pid"),
            ("config-api", "/r/.run/up/config-api.pid"),
            ("chaos", "/r/.run/up/chaos.pid"),
        ] {
            assert_eq!(pidfile(dir, service), Path::new(path), "{service}");
        }
    }

    #[test]
    fn a_stopped_process_is_continued_when_its_guard_goes() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let state = |pid: u32| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
            stat.rsplit_once(')')
                .unwrap()
                .1
                .split_whitespace()
                .next()
                .unwrap()
                .to_owned()
        };
        let guard = Stopped::new(child.id()).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert_eq!(state(child.id()), "T");
        drop(guard);
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert_eq!(state(child.id()), "S");
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(signal(child.id(), "CONT").is_err());
    }
}
