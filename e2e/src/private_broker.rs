//! A Tansu broker of one test's own, for tests that pause, slow or stop their broker
//! without touching the shared one. It is killed when dropped, continued first, so a
//! failing test leaves no broker running or frozen.

use std::time::Duration;

use crate::delay_proxy::DelayProxy;
use crate::process::{ChildProcess, free_port, send_signal};
use crate::wait::eventually;

/// A Tansu broker of one test's own, for tests that pause or stop it. The binary is
/// `TEST_TANSU_BIN` (set by `scripts/test`), else `tansu` on PATH.
pub struct PrivateBroker {
    child: ChildProcess,
    pub brokers: String,
    /// The folder of the SQLite storage, when the broker has one.
    _dir: Option<tempfile::TempDir>,
    /// The proxy every client goes through, when the broker has one.
    proxy: Option<DelayProxy>,
}

impl PrivateBroker {
    /// A broker with memory storage.
    pub async fn start() -> Self {
        Self::start_in(None, None).await
    }

    /// A broker with SQLite storage, in a folder of its own: unlike the memory storage,
    /// it reports the offsets of a partition's end (the memory storage answers 1).
    pub async fn start_sqlite() -> Self {
        Self::start_in(Some(tempfile::tempdir().expect("a temporary folder")), None).await
    }

    /// A broker with memory storage that clients reach only through a [`DelayProxy`] (it
    /// advertises the proxy's address): [`PrivateBroker::set_delay`] makes it slow.
    pub async fn start_behind_proxy() -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("the proxy's port");
        Self::start_in(None, Some(listener)).await
    }

    /// How late every byte between the clients and the broker arrives, each way.
    pub fn set_delay(&self, delay: Duration) {
        self.proxy
            .as_ref()
            .expect("a broker started behind a proxy")
            .set_delay(delay);
    }

    async fn start_in(
        dir: Option<tempfile::TempDir>,
        proxy: Option<std::net::TcpListener>,
    ) -> Self {
        let port = free_port();
        let bin = std::env::var("TEST_TANSU_BIN").unwrap_or_else(|_| "tansu".into());
        let url = format!("tcp://127.0.0.1:{port}");
        let advertised = match &proxy {
            Some(listener) => format!("tcp://{}", listener.local_addr().expect("address")),
            None => url.clone(),
        };
        let mut command = std::process::Command::new(&bin);
        command.args([
            "broker",
            "--listener-url",
            &url,
            "--advertised-listener-url",
            &advertised,
        ]);
        match &dir {
            // The SQLite path is relative to the broker's working folder.
            Some(dir) => command
                .current_dir(dir.path())
                .args(["--storage-engine", "sqlite://tansu.db"]),
            None => command.args(["--storage-engine", "memory://tansu/"]),
        };
        let child = command
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {bin}: {e}"));
        let child = ChildProcess(child);
        let brokers = format!("127.0.0.1:{port}");
        let addr = brokers.clone();
        eventually(Duration::from_secs(20), "the private broker", || {
            let addr = addr.clone();
            async move { tokio::net::TcpStream::connect(addr).await.ok().map(|_| ()) }
        })
        .await;
        let proxy = proxy.map(|listener| {
            DelayProxy::serve(listener, brokers.parse().expect("the broker's address"))
        });
        Self {
            child,
            brokers: proxy.as_ref().map_or(brokers, |p| p.addr.to_string()),
            _dir: dir,
            proxy,
        }
    }

    /// SIGSTOP: the broker holds its connections but answers nothing.
    pub fn pause(&self) {
        send_signal(self.child.0.id(), "-STOP");
    }

    pub fn resume(&self) {
        send_signal(self.child.0.id(), "-CONT");
    }
}

impl Drop for PrivateBroker {
    fn drop(&mut self) {
        self.resume();
        self.child.kill();
    }
}
