//! What a driver of a script (`chaos_run`) needs to supervise processes: signals, pid
//! files, the run's interruption, and the thin call into `scripts/lib.sh` that starts and
//! stops servers the way scripts/up does, so that how a server is started stays written once.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::Context;

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

/// The exit code of a run ended by SIGINT or SIGTERM.
pub async fn interrupted() -> i32 {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) {
        (Ok(mut int), Ok(mut term)) => tokio::select! {
            _ = int.recv() => 130,
            _ = term.recv() => 143,
        },
        _ => std::future::pending().await,
    }
}

/// The pid a pid file records.
pub fn read_pid(path: &Path) -> anyhow::Result<u32> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    text.trim()
        .parse()
        .with_context(|| format!("no pid in {}", path.display()))
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

/// Runs `script` with the functions of `repo`'s scripts/lib.sh and its arguments `$1`,
/// `$2`…, with `env` over the environment, its output discarded.
pub async fn lib_sh(
    repo: &Path,
    env: &[(String, String)],
    script: &str,
    args: &[&str],
) -> anyhow::Result<()> {
    let status = tokio::process::Command::new("bash")
        .arg("-c")
        .arg(format!("set -e; source \"$0\"; {script}"))
        .arg(repo.join("scripts/lib.sh"))
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await
        .context("bash does not run")?;
    anyhow::ensure!(status.success(), "{script}: {status}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
