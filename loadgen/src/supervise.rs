//! What the drivers of `scripts/chaos` and `scripts/bench` (`chaos_run`, `bench_run`) share
//! to supervise processes: signals, whether a pid still runs, free ports, and the thin call
//! into `scripts/lib.sh` that starts and stops servers the way scripts/up does, so that how
//! a server is started stays written once.

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

/// The exit code of a run: 0 when `outcome` says it passed, 1 when it failed or could not
/// run (the error printed), the signal's code when SIGINT or SIGTERM came first (the run's
/// future dropped then, so its guards undo what it did).
pub async fn exit_code(outcome: impl Future<Output = anyhow::Result<bool>>) -> i32 {
    tokio::select! {
        outcome = outcome => match outcome {
            Ok(true) => 0,
            Ok(false) => 1,
            Err(e) => {
                eprintln!("error: {e:#}");
                1
            }
        },
        signal = interrupted() => signal,
    }
}

/// The state letter of `/proc/PID/stat` (`R`, `S`, `T`, `Z`…); none when the pid is gone.
pub fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// `is_running` of scripts/lib.sh: the process lives (a zombie, killed but not yet reaped,
/// does not).
pub fn is_running(pid: u32) -> bool {
    state(pid).is_some_and(|s| s != 'Z')
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

/// `tcp_open` of scripts/lib.sh: something accepts connections on 127.0.0.1:`port`.
pub fn tcp_open(port: u16) -> bool {
    std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
}

/// `free_port_from` of scripts/lib.sh: `port` if nothing listens there, else the next free
/// one above it.
pub fn free_port_from(port: u16) -> u16 {
    (port..=u16::MAX).find(|p| !tcp_open(*p)).unwrap_or(port)
}

/// Runs `script` with the functions of `repo`'s scripts/lib.sh and its arguments `$1`,
/// `$2`…, with `env` over the environment; its output goes where `output` says (stdout and
/// stderr, or both discarded).
pub async fn lib_sh(
    repo: &Path,
    env: &[(String, String)],
    script: &str,
    args: &[&str],
    output: Output,
) -> anyhow::Result<()> {
    let (stdout, stderr) = match output {
        Output::Discarded => (Stdio::null(), Stdio::null()),
        Output::Stderr => (Stdio::from(std::io::stderr()), Stdio::inherit()),
    };
    let status = tokio::process::Command::new("bash")
        .arg("-c")
        .arg(format!("set -e; source \"$0\"; {script}"))
        .arg(repo.join("scripts/lib.sh"))
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .status()
        .await
        .context("bash does not run")?;
    anyhow::ensure!(status.success(), "{script}: {status}");
    Ok(())
}

/// Where the output of a call into scripts/lib.sh goes.
#[derive(Clone, Copy)]
pub enum Output {
    /// Nowhere: a step of a run, not the run's log.
    Discarded,
    /// Both streams to this process's stderr (its log lines, `==> …`).
    Stderr,
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
        let guard = Stopped::new(child.id()).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert_eq!(state(child.id()), Some('T'));
        drop(guard);
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert_eq!(state(child.id()), Some('S'));
        assert!(is_running(child.id()));
        child.kill().unwrap();
        // Killed, not yet reaped: a zombie does not run.
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(!is_running(child.id()));
        child.wait().unwrap();
        assert!(signal(child.id(), "CONT").is_err());
        assert!(!is_running(child.id()));
    }

    #[test]
    fn a_free_port_is_the_first_nobody_listens_on() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let taken = listener.local_addr().unwrap().port();
        assert!(tcp_open(taken));
        assert_ne!(free_port_from(taken), taken);
        drop(listener);
        assert_eq!(free_port_from(taken), taken);
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
