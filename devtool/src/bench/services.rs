//! The processes a benchmark run starts besides its load: the services under test against
//! its broker, the references and peers. Each is started from the repository with its
//! output in the run's `NAME.log` and its pid in `NAME.pid`, waited for until it is ready,
//! and stopped by the run; whatever still runs when the run ends, however it ends, is sent
//! SIGTERM (and SIGCONT, in case it was frozen).

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context;

use crate::supervise;

/// How a started process shows it is ready.
pub enum Ready {
    /// An HTTP GET of this URL answers 2xx within 2 s.
    Http(String),
    /// Something accepts connections on this port.
    Tcp(u16),
}

/// What to start: `command` with `env` over the run's environment (`unset` removed).
pub struct Start<'a> {
    pub name: &'a str,
    pub ready: Ready,
    pub command: Vec<String>,
    pub env: Vec<(String, String)>,
    pub unset: Vec<&'a str>,
}

/// A process the run started.
struct Started {
    pid: u32,
    /// Its handle until it was waited for.
    child: Option<tokio::process::Child>,
    /// Started by stack-kit, not a child of this process: never waited for here.
    adopted: bool,
}

impl Started {
    /// Not known to have exited (a pid waited for may be another process's by now).
    fn live(&self) -> bool {
        self.child.is_some() || (self.adopted && supervise::is_running(self.pid))
    }
}

/// The processes a run started, in order, with their handles until stopped.
pub struct Services {
    repo: PathBuf,
    out: PathBuf,
    started: RefCell<Vec<Started>>,
}

impl Services {
    pub fn new(repo: &Path, out: &Path) -> Self {
        Self {
            repo: repo.to_owned(),
            out: out.to_owned(),
            started: RefCell::new(Vec::new()),
        }
    }

    /// How many processes were started so far (a series stops those after its mark).
    pub fn mark(&self) -> usize {
        self.started.borrow().len()
    }

    /// `bench_start`: starts the process and waits up to 120 s until it is ready; fails,
    /// with the end of its log, when it exits first or is not ready in time.
    pub async fn start(&self, start: Start<'_>) -> anyhow::Result<u32> {
        let log = self.out.join(format!("{}.log", start.name));
        let file = std::fs::File::create(&log)
            .with_context(|| format!("cannot create {}", log.display()))?;
        let (program, args) = start.command.split_first().context("nothing to start")?;
        let mut command = tokio::process::Command::new(program);
        command
            .args(args)
            .current_dir(&self.repo)
            .envs(start.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file);
        for name in &start.unset {
            command.env_remove(name);
        }
        let child = command
            .spawn()
            .with_context(|| format!("{} does not start", start.name))?;
        let pid = child.id().context("no pid")?;
        self.started.borrow_mut().push(Started {
            pid,
            child: Some(child),
            adopted: false,
        });
        std::fs::write(
            self.out.join(format!("{}.pid", start.name)),
            format!("{pid}\n"),
        )?;
        wait_ready(pid, &start.ready, &log, start.name).await?;
        Ok(pid)
    }

    /// `stop_bench_service`: SIGTERM, then waits for it to exit.
    pub async fn stop(&self, pid: u32) -> anyhow::Result<()> {
        supervise::signal(pid, "TERM")?;
        self.reap(pid).await;
        Ok(())
    }

    /// SIGKILL, then waits for it to exit.
    pub async fn kill(&self, pid: u32) -> anyhow::Result<()> {
        supervise::signal(pid, "KILL")?;
        self.reap(pid).await;
        Ok(())
    }

    /// Waits for a started process to exit (nothing for one already waited for).
    async fn reap(&self, pid: u32) {
        let child = self
            .started
            .borrow_mut()
            .iter_mut()
            .find(|s| s.pid == pid)
            .and_then(|s| s.child.take());
        if let Some(mut child) = child {
            let _ = child.wait().await;
        }
    }

    /// Stops what was started after `mark` and still runs: SIGTERM (and SIGCONT), 20 s
    /// (a service whose broker died may not finish its shutdown), then SIGKILL.
    pub async fn stop_since(&self, mark: usize) {
        let pids: Vec<u32> = self.started.borrow()[mark..]
            .iter()
            .filter(|s| s.live())
            .map(|s| s.pid)
            .collect();
        for pid in pids {
            if !supervise::is_running(pid) {
                self.reap(pid).await;
                continue;
            }
            if supervise::signal(pid, "TERM").is_ok() {
                let _ = supervise::signal(pid, "CONT");
            }
            for _ in 0..100 {
                if !supervise::is_running(pid) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            let _ = supervise::signal(pid, "KILL");
            self.reap(pid).await;
        }
    }

    /// Records a process started elsewhere (a ClickHouse of stack-kit) so that the end
    /// of the run stops it too.
    pub fn adopt(&self, pid: u32) {
        self.started.borrow_mut().push(Started {
            pid,
            child: None,
            adopted: true,
        });
    }

    /// The end of the run: SIGTERM and SIGCONT to everything started that may still run,
    /// as the script's EXIT trap did.
    pub fn cleanup(&self) {
        for started in self.started.borrow().iter().filter(|s| s.live()) {
            if supervise::signal(started.pid, "TERM").is_ok() {
                let _ = supervise::signal(started.pid, "CONT");
            }
        }
    }
}

/// The check every 0.2 s for 120 s while the process lives, as stack-kit waits.
async fn wait_ready(pid: u32, ready: &Ready, log: &Path, name: &str) -> anyhow::Result<()> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()?;
    for _ in 0..120 * 5 {
        let ok = match ready {
            Ready::Http(url) => client
                .get(url)
                .send()
                .await
                .is_ok_and(|r| r.status().is_success()),
            Ready::Tcp(port) => supervise::tcp_open(*port),
        };
        if ok {
            return Ok(());
        }
        if !supervise::is_running(pid) {
            tail(log);
            anyhow::bail!("{name} exited during start-up (log: {})", log.display());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tail(log);
    anyhow::bail!(
        "{name} did not become ready within 120s (log: {})",
        log.display()
    )
}

/// The last 20 lines of a log, on stderr.
fn tail(log: &Path) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    for line in &lines[lines.len().saturating_sub(20)..] {
        eprintln!("{line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_service_is_waited_for_and_stopped_and_one_that_dies_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let services = Services::new(dir.path(), dir.path());
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let pid = services
            .start(Start {
                name: "sleeper",
                ready: Ready::Tcp(port),
                command: vec!["sleep".into(), "30".into()],
                env: Vec::new(),
                unset: Vec::new(),
            })
            .await
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("sleeper.pid")).unwrap(),
            format!("{pid}\n")
        );
        assert!(supervise::is_running(pid));
        services.stop(pid).await.unwrap();
        assert!(!supervise::is_running(pid));

        drop(listener);
        let error = services
            .start(Start {
                name: "dies",
                ready: Ready::Tcp(port),
                command: vec!["sh".into(), "-c".into(), "echo $GREETING; exit 3".into()],
                env: vec![("GREETING".into(), "bye".into())],
                unset: Vec::new(),
            })
            .await
            .unwrap_err();
        assert!(
            error.to_string().starts_with("dies exited during start-up"),
            "{error}"
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("dies.log")).unwrap(),
            "bye\n"
        );
        assert_eq!(services.mark(), 2);
    }

    #[tokio::test]
    async fn a_series_stops_what_it_started_even_when_frozen() {
        let dir = tempfile::tempdir().unwrap();
        let services = Services::new(dir.path(), dir.path());
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let start = |name| Start {
            name,
            ready: Ready::Tcp(port),
            command: vec!["sleep".into(), "30".into()],
            env: Vec::new(),
            unset: Vec::new(),
        };
        let before = services.start(start("before")).await.unwrap();
        let mark = services.mark();
        let frozen = services.start(start("frozen")).await.unwrap();
        supervise::signal(frozen, "STOP").unwrap();
        services.stop_since(mark).await;
        assert!(!supervise::is_running(frozen));
        assert!(supervise::is_running(before));
        services.stop(before).await.unwrap();
    }
}
