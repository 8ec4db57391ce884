//! The nginx front of one test's own, rendered and started by the same stack-kit code as
//! `scripts/up`'s, so a test checks the configuration that is deployed. The front is
//! stopped when dropped.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use crate::process::{free_port, repo};

/// The nginx front's configuration as `scripts/up` renders it, its files in `dir`.
pub fn render_front(dir: &Path, listen: &str, ingest: &str, config_api: &str) -> String {
    stack_kit::front::render(&repo(), dir, listen, ingest, config_api).expect("rendered")
}

/// A container front's server block (`deploy/nginx/<file>`), its upstreams' service names
/// mapped to the given addresses. This machine's nginx 1.22 knows no `resolve` (1.27.3,
/// the image's nginx has it): it is left out here, and `e2e/tests/deploy/nginx.rs` checks
/// it is there.
pub fn container_server(file: &str, ingest: &str, config_api: &str) -> String {
    let path = repo().join("deploy/nginx").join(file);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .replace("ingest:8081", ingest)
        .replace("config-api:8082", config_api)
        .replace(" resolve;", ";")
}

/// An nginx front of one test's own (`deploy/nginx/local.conf.in`, rendered and started as
/// `scripts/up` starts its own) before the given ingest and config-api; it serves the SDK
/// from `sdk/dist` too.
pub struct Front {
    dir: tempfile::TempDir,
    pub port: u16,
}

impl Front {
    pub async fn start(ingest: SocketAddr, config_api: SocketAddr) -> Self {
        let dir = tempfile::tempdir().expect("temporary folder");
        let port = free_port();
        let prefix = dir.path().to_owned();
        tokio::task::spawn_blocking(move || {
            stack_kit::front::start(
                &repo(),
                &prefix,
                port,
                &ingest.to_string(),
                &config_api.to_string(),
            )
        })
        .await
        .expect("joined")
        .expect("the nginx front starts");
        Self { dir, port }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The front's access log (one line per request, nginx's combined format).
    pub fn access_log(&self) -> PathBuf {
        self.dir.path().join("access.log")
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        let _ = stack_kit::front::stop(self.dir.path());
    }
}
