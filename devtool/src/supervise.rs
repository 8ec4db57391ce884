//! What the drivers of `scripts/chaos` and `scripts/bench` (`chaos`, `bench`) share
//! to supervise processes: signals, whether a pid still runs, free ports (stack-kit's,
//! which starts and stops servers the way scripts/up does, so that how a server is started
//! stays written once), and the exit code of a run.

pub use stack_kit::process::{free_port_from, is_running, read_pid, signal, tcp_open};
pub use stack_kit::up::pidfile;

/// The `loadgen` binary beside this one (the scripts build both into `target/release`):
/// the load of every run, a child process.
pub fn loadgen() -> anyhow::Result<std::path::PathBuf> {
    use anyhow::Context;
    let path = std::env::current_exe()
        .context("cannot find devtool's own path")?
        .with_file_name("loadgen");
    anyhow::ensure!(
        path.exists(),
        "{} is not built (cargo build --release --bin loadgen)",
        path.display()
    );
    Ok(path)
}

/// The tansu binary: `$TANSU`, which scripts/lib.sh exports (scripts/bench and
/// scripts/chaos source it).
pub fn tansu() -> anyhow::Result<std::path::PathBuf> {
    use anyhow::Context;
    std::env::var_os("TANSU")
        .map(Into::into)
        .context("TANSU is not set (scripts/lib.sh exports it)")
}

/// `scripts/up` of `repo`, its output but errors discarded: the pipeline a run measures.
pub async fn scripts_up(repo: &std::path::Path) -> anyhow::Result<()> {
    use anyhow::Context;
    let status = tokio::process::Command::new(repo.join("scripts/up"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .status()
        .await
        .context("scripts/up does not run")?;
    anyhow::ensure!(status.success(), "scripts/up failed ({status})");
    Ok(())
}

/// Runs `work`, a start or a stop of stack-kit that polls and sleeps, off the runtime's
/// worker threads.
pub async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> anyhow::Result<T> + Send + 'static,
) -> anyhow::Result<T> {
    tokio::task::spawn_blocking(work).await?
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

#[cfg(test)]
mod tests {
    use super::*;
    use stack_kit::process::state;

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
}
