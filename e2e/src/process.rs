//! Processes a test starts or freezes: the workspace's binaries, children that are killed
//! and reaped when dropped, signals, and a free port to give them. A guard here always
//! undoes its effect when dropped, so a failing test leaves nothing running or frozen.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// A process started by a test, killed (SIGKILL) and reaped at the latest when dropped,
/// so that a failing test leaves nothing running.
pub struct ChildProcess(pub std::process::Child);

impl ChildProcess {
    /// SIGKILL, then wait for the exit.
    pub fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Path of a binary of the workspace, built beside the tests (in their profile) by
/// `cargo build --workspace --bins` (`scripts/test` does it first).
pub fn workspace_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>");
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} not built: build the binaries first, in the tests' profile \
         (cargo build [--release] --workspace --bins)",
        path.display()
    );
    path
}

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A process frozen with SIGSTOP, continued with SIGCONT when this guard is dropped: a
/// test that fails while a server is frozen does not leave it frozen for the next one.
pub struct Paused(u32);

impl Paused {
    pub fn new(pid: u32) -> Self {
        send_signal(pid, "-STOP");
        Self(pid)
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        resume(self.0);
    }
}

/// SIGCONT to `pid`, whatever its state: a process that is not frozen, or gone, is left
/// as it is.
pub fn resume(pid: u32) {
    let _ = kill(pid, "-CONT");
}

/// Sends `signal` (`-STOP`, `-CONT`, `-TERM`…) to `pid`; a failure fails the test.
pub fn send_signal(pid: u32, signal: &str) {
    let status = kill(pid, signal).expect("kill runs");
    assert!(status.success(), "kill {signal} {pid} failed");
}

/// Runs `kill signal pid`.
fn kill(pid: u32, signal: &str) -> std::io::Result<std::process::ExitStatus> {
    std::process::Command::new("kill")
        .arg(signal)
        .arg(pid.to_string())
        .status()
}

/// The repository (its `deploy/`, `sdk/dist` and `target/`).
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A ClickHouse server started as `scripts/up` starts one (stack-kit's, after whatever the
/// test put in DIR), stopped when dropped: by the process id read at its start, so that a
/// folder removed first (a `TempDir` dropped before it) leaves no server running.
pub struct ScriptedClickHouse {
    pid: u32,
}

impl ScriptedClickHouse {
    pub fn start(dir: &Path, http_port: u16, tcp_port: u16) -> Self {
        stack_kit::clickhouse::start(
            &repo(),
            &stack_kit::clickhouse::Server {
                dir,
                http_port,
                tcp_port,
                extra_config: None,
                env: &[],
            },
        )
        .expect("ClickHouse starts");
        let pid = stack_kit::process::read_pid(&dir.join("clickhouse.pid"))
            .expect("the server's process id");
        Self { pid }
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }
}

impl Drop for ScriptedClickHouse {
    /// SIGTERM, then SIGKILL after 20 s.
    fn drop(&mut self) {
        let _ = stack_kit::process::signal(self.pid, "TERM");
        if !stack_kit::process::wait_gone(self.pid, Duration::from_secs(20)) {
            let _ = stack_kit::process::signal(self.pid, "KILL");
            stack_kit::process::wait_gone(self.pid, Duration::from_secs(5));
        }
    }
}

/// What `docker-compose config` prints for the single-server file merged with the cluster
/// override, with the passwords compose requires set to test values; panics unless it
/// succeeds.
pub fn compose_cluster_config() -> Vec<u8> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let output = std::process::Command::new("docker-compose")
        .arg("--project-directory")
        .arg(&repo)
        .args([
            "-f",
            "docker-compose.yml",
            "-f",
            "docker-compose.cluster.yml",
            "config",
        ])
        .current_dir(&repo)
        .env("CLICKHOUSE_PASSWORD", "compose-check")
        .env("CLICKHOUSE_OPERATOR_PASSWORD", "compose-operator")
        .output()
        .expect("docker-compose runs");
    assert!(
        output.status.success(),
        "docker-compose config: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

#[cfg(test)]
mod tests {
    /// The story tests keep their folder beside their server: whichever goes first, the
    /// server stops (it outlived every run when the folder, with its pid file, went
    /// first).
    #[test]
    fn a_server_whose_folder_is_gone_still_stops() {
        let dir = tempfile::tempdir().expect("a folder");
        let server = super::ScriptedClickHouse::start(
            &dir.path().join("clickhouse"),
            super::free_port(),
            super::free_port(),
        );
        let pid = server.pid();
        assert!(stack_kit::process::is_running(pid));
        drop(dir);
        drop(server);
        assert!(
            !stack_kit::process::is_running(pid),
            "server {pid} still runs"
        );
    }
}
