//! The references nginx serves (two workers), for sections 1 and 2: the config-api's answer
//! as a static file, and the ingest's floor, a fixed 202 to the ingest's POSTs (the body is
//! read and dropped).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;

use crate::supervise;

/// Its worker processes.
const WORKERS: usize = 2;

/// The static nginx of a run.
pub struct Static {
    pub dir: PathBuf,
    /// The static file's server.
    pub port: u16,
    /// The fixed 202's server.
    pub floor_port: u16,
    /// `name=pid` of each worker, whose CPU the references' figures report.
    pub workers: Vec<String>,
}

impl Static {
    /// Writes its configuration under `out/nginx` and starts it.
    pub async fn start(out: &Path) -> anyhow::Result<Self> {
        let dir = out.join("nginx");
        std::fs::create_dir_all(dir.join("www/api/v1"))?;
        std::fs::create_dir_all(dir.join("tmp"))?;
        let port = supervise::free_port_from(8090);
        let floor_port = supervise::free_port_from(port + 1);
        let conf = dir.join("nginx.conf");
        std::fs::write(&conf, config(&dir, port, floor_port))?;
        let status = std::process::Command::new("nginx")
            .arg("-p")
            .arg(&dir)
            .arg("-c")
            .arg(&conf)
            .status()
            .context("nginx does not run")?;
        anyhow::ensure!(status.success(), "nginx did not start ({status})");
        // nginx listens before it forks its master, which writes the pid file and then forks
        // the workers: ready when both ports answer and both workers run (5 s at most).
        let mut workers = Vec::new();
        for _ in 0..50 {
            if supervise::tcp_open(port)
                && supervise::tcp_open(floor_port)
                && let Ok(master) = supervise::read_pid(&dir.join("nginx.pid"))
            {
                workers = children(master);
                if workers.len() >= WORKERS {
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let workers = workers
            .into_iter()
            .map(|pid| format!("nginx-{pid}={pid}"))
            .collect();
        Ok(Self {
            dir,
            port,
            floor_port,
            workers,
        })
    }

    /// Where the static file is served from.
    pub fn www(&self) -> PathBuf {
        self.dir.join("www")
    }
}

/// `nginx -s stop` of the static nginx in `dir`, whatever its state.
pub fn stop(dir: &Path) {
    let _ = std::process::Command::new("nginx")
        .arg("-p")
        .arg(dir)
        .arg("-c")
        .arg(dir.join("nginx.conf"))
        .args(["-s", "stop"])
        .stderr(std::process::Stdio::null())
        .status();
}

/// The pids whose parent is `pid` (`pgrep -P`).
pub fn children(pid: u32) -> Vec<u32> {
    let output = std::process::Command::new("pgrep")
        .arg("-P")
        .arg(pid.to_string())
        .output();
    output
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The configuration of the static nginx in `dir`.
fn config(dir: &Path, port: u16, floor_port: u16) -> String {
    let d = dir.display();
    format!(
        "worker_processes {WORKERS};
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {d}/tmp/body;
    proxy_temp_path {d}/tmp/proxy;
    fastcgi_temp_path {d}/tmp/fastcgi;
    uwsgi_temp_path {d}/tmp/uwsgi;
    scgi_temp_path {d}/tmp/scgi;
    keepalive_requests 1000000;
    server {{
        listen 127.0.0.1:{port};
        root {d}/www;
        location / {{ default_type application/json; }}
    }}
    server {{
        listen 127.0.0.1:{floor_port};
        client_max_body_size 1m;
        location / {{
            default_type application/json;
            return 202 '{{\"accepted\":5}}';
        }}
    }}
}}
"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configuration_serves_the_file_and_the_fixed_202() {
        let text = config(Path::new("/o/nginx"), 8090, 8091);
        assert!(text.starts_with("worker_processes 2;\npid /o/nginx/nginx.pid;\n"));
        assert!(text.contains("listen 127.0.0.1:8090;\n        root /o/nginx/www;"));
        assert!(text.contains("listen 127.0.0.1:8091;"));
        assert!(text.contains("return 202 '{\"accepted\":5}';"));
        assert!(text.ends_with("    }\n}\n"));
    }

    #[tokio::test]
    async fn it_serves_both_and_its_two_workers_are_watched() {
        let dir = tempfile::tempdir().unwrap();
        let nginx = Static::start(dir.path()).await.unwrap();
        let _stop = Stop(nginx.dir.clone());
        assert_eq!(nginx.workers.len(), 2, "{:?}", nginx.workers);
        assert!(supervise::tcp_open(nginx.port) && supervise::tcp_open(nginx.floor_port));
    }

    struct Stop(PathBuf);

    impl Drop for Stop {
        fn drop(&mut self) {
            stop(&self.0);
        }
    }
}
