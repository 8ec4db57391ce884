//! A ClickHouse server of one test's own, for tests that pause or stop their ClickHouse
//! without touching the shared one. It is made from the project's config template in a
//! temporary folder and killed when dropped, so a failing test leaves no server running.

use std::time::Duration;

use crate::process::{ChildProcess, free_port, send_signal};
use crate::wait::eventually;

/// A ClickHouse server of one test's own (run as the `clickhouse` user, from the
/// project's config template), for tests that pause or stop it.
pub struct PrivateClickHouse {
    dir: tempfile::TempDir,
    http_port: u16,
    child: Option<ChildProcess>,
}

impl PrivateClickHouse {
    pub async fn start() -> Self {
        let dir = tempfile::tempdir().expect("temporary folder");
        let http_port = free_port();
        // As scripts/up prepares its own; the process is this kit's, to stop and kill.
        stack_kit::clickhouse::prepare(
            &crate::process::repo(),
            &stack_kit::clickhouse::Server {
                dir: dir.path(),
                http_port,
                tcp_port: free_port(),
                extra_config: None,
                env: &[],
            },
        )
        .expect("the server's folder and configuration");
        let mut server = Self {
            dir,
            http_port,
            child: None,
        };
        server.start_again().await;
        server
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.http_port)
    }

    /// Starts the server (again) on the same data.
    pub async fn start_again(&mut self) {
        let child = stack_kit::clickhouse::server_command(self.dir.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("clickhouse-server starts");
        self.child = Some(ChildProcess(child));
        let ping = format!("{}/ping", self.url());
        eventually(Duration::from_secs(60), "the private ClickHouse", || {
            let ping = ping.clone();
            async move {
                reqwest::get(&ping)
                    .await
                    .ok()?
                    .status()
                    .is_success()
                    .then_some(())
            }
        })
        .await;
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").0.id()
    }

    /// SIGSTOP: connections stay open, nothing answers.
    pub fn pause(&self) {
        send_signal(self.pid(), "-STOP");
    }

    pub fn resume(&self) {
        send_signal(self.pid(), "-CONT");
    }

    /// SIGTERM and wait: the port closes.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            send_signal(child.0.id(), "-CONT");
            send_signal(child.0.id(), "-TERM");
            let _ = child.0.wait();
        }
    }
}
