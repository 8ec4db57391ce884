//! The nginx front of one test's own, rendered by the same `render_front` of
//! `scripts/lib.sh` that `scripts/up` uses, so a test checks the configuration that is
//! deployed. The front is stopped when dropped.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::process::free_port;
use crate::wait::eventually;

/// The nginx front's configuration as `scripts/up` renders it (`render_front` of
/// `scripts/lib.sh`), its files in `dir`.
pub fn render_front(dir: &Path, listen: &str, ingest: &str, config_api: &str) -> String {
    let lib = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/lib.sh");
    let rendered = std::process::Command::new("bash")
        .args(["-c", r#"source "$0" && render_front "$@""#])
        .arg(&lib)
        .args([&dir.display().to_string(), listen, ingest, config_api])
        .output()
        .expect("bash runs");
    assert!(rendered.status.success(), "render_front failed");
    String::from_utf8(rendered.stdout).expect("text")
}

/// An nginx front of one test's own (`deploy/nginx/local.conf.in`, rendered by the same
/// `render_front` as `scripts/up`) before the given ingest and config-api; it serves the
/// SDK from `sdk/dist` too.
pub struct Front {
    _dir: tempfile::TempDir,
    conf: PathBuf,
    pub port: u16,
}

impl Front {
    pub async fn start(ingest: SocketAddr, config_api: SocketAddr) -> Self {
        let dir = tempfile::tempdir().expect("temporary folder");
        std::fs::create_dir_all(dir.path().join("tmp")).expect("folder");
        let port = free_port();
        let rendered = render_front(
            dir.path(),
            &format!("127.0.0.1:{port}"),
            &ingest.to_string(),
            &config_api.to_string(),
        );
        let conf = dir.path().join("nginx.conf");
        std::fs::write(&conf, rendered).expect("config written");
        let status = nginx(dir.path(), &conf).status().expect("nginx starts");
        assert!(status.success(), "nginx failed to start");
        let health = format!("http://127.0.0.1:{port}/healthz");
        eventually(Duration::from_secs(20), "the nginx front", || {
            let health = health.clone();
            async move { reqwest::get(&health).await.ok().map(|_| ()) }
        })
        .await;
        Self {
            _dir: dir,
            conf,
            port,
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The front's access log (one line per request, nginx's combined format).
    pub fn access_log(&self) -> PathBuf {
        self.conf.with_file_name("access.log")
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        let _ = nginx(self.conf.parent().expect("folder"), &self.conf)
            .args(["-s", "stop"])
            .status();
    }
}

/// `nginx` with its prefix folder and configuration file: the front's process, or a signal
/// to it (`-s`).
fn nginx(prefix: &Path, conf: &Path) -> std::process::Command {
    let mut command = std::process::Command::new("nginx");
    command.arg("-p").arg(prefix).arg("-c").arg(conf);
    command
}
