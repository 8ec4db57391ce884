//! Whether the benchmark's broker is alive: its recorded process lives and it answers a
//! Kafka request on its port (an open port alone is not enough: a stopped or wedged
//! process still accepts connections). A round on a dead broker is refused, and each
//! refusal is kept in the run's `refused.txt`, printed after the tables.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::supervise;

/// A broker of a series: its pid file and port.
#[derive(Debug, Clone)]
pub struct Broker {
    pub pidfile: PathBuf,
    pub port: u16,
}

impl Broker {
    /// `Ok` when the broker lives and answers; otherwise why not, as the refusal says it.
    pub async fn alive(&self) -> Result<(), String> {
        let pid = match std::fs::read_to_string(&self.pidfile) {
            Ok(text) => text.trim().to_owned(),
            Err(_) => return Err(format!("no pid file {}", self.pidfile.display())),
        };
        if !pid.parse().is_ok_and(supervise::is_running) {
            return Err(format!("its process (pid {pid}) is gone"));
        }
        if !kafka_answers(self.port).await {
            return Err(format!(
                "its process (pid {pid}) lives but does not answer on port {}",
                self.port
            ));
        }
        Ok(())
    }
}

/// ApiVersions v0 with correlation id 1 and client id `bench`, length first.
const API_VERSIONS: &[u8] = b"\0\0\0\x0f\0\x12\0\0\0\0\0\x01\0\x05bench";

/// A Kafka broker on 127.0.0.1:`port` answers ApiVersions (its correlation id back)
/// within 2 s.
pub async fn kafka_answers(port: u16) -> bool {
    let ask = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        stream.write_all(API_VERSIONS).await?;
        let mut head = [0; 8];
        stream.read_exact(&mut head).await?;
        std::io::Result::Ok(head[4..8] == [0, 0, 0, 1])
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(2), ask).await,
        Ok(Ok(true))
    )
}

/// The refusals of a run, each a line of its file.
pub struct Refusals {
    pub path: PathBuf,
}

impl Refusals {
    /// Records the refusal of a round of `series` (`when`: before, during or after which
    /// round) on stderr and in the file.
    pub fn refuse(&self, series: &str, when: &str, why: &str) {
        let line = format!(
            "REFUSED {series}: {when}, the broker is dead: {why}; figures not used, series ended\n"
        );
        eprint!("{line}");
        let appended = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = appended {
            eprintln!(
                "error: cannot record the refusal in {}: {e}",
                self.path.display()
            );
        }
    }

    /// What was refused, empty when nothing was.
    pub fn text(&self) -> String {
        std::fs::read_to_string(&self.path).unwrap_or_default()
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;

    /// A broker stand-in on a port of its own: it answers ApiVersions with the correlation
    /// id while `answer` holds, and accepts without a word otherwise.
    pub async fn fake_broker(answer: std::sync::Arc<std::sync::atomic::AtomicBool>) -> u16 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                let answer = answer.clone();
                tokio::spawn(async move {
                    let mut request = [0; 19];
                    if stream.read_exact(&mut request).await.is_err() {
                        return;
                    }
                    if answer.load(std::sync::atomic::Ordering::SeqCst) {
                        let _ = stream.write_all(&[0, 0, 0, 4, 0, 0, 0, 1]).await;
                    } else {
                        tokio::time::sleep(Duration::from_secs(5)).await;
                    }
                });
            }
        });
        port
    }

    #[tokio::test]
    async fn a_broker_is_alive_only_when_its_process_lives_and_it_answers() {
        let dir = tempfile::tempdir().unwrap();
        let answer = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let port = fake_broker(answer.clone()).await;
        let broker = Broker {
            pidfile: dir.path().join("tansu.pid"),
            port,
        };
        assert_eq!(
            broker.alive().await,
            Err(format!("no pid file {}", broker.pidfile.display()))
        );
        std::fs::write(&broker.pidfile, format!("{}\n", std::process::id())).unwrap();
        assert_eq!(broker.alive().await, Ok(()));

        answer.store(false, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(
            broker.alive().await,
            Err(format!(
                "its process (pid {}) lives but does not answer on port {port}",
                std::process::id()
            ))
        );

        let mut gone = std::process::Command::new("true").spawn().unwrap();
        gone.wait().unwrap();
        std::fs::write(&broker.pidfile, gone.id().to_string()).unwrap();
        assert_eq!(
            broker.alive().await,
            Err(format!("its process (pid {}) is gone", gone.id()))
        );
    }

    #[test]
    fn each_refusal_is_a_line_of_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let refusals = Refusals {
            path: dir.path().join("refused.txt"),
        };
        assert_eq!(refusals.text(), "");
        refusals.refuse(
            "ingest",
            "before round ingest/ingest",
            "its process (pid 7) is gone",
        );
        refusals.refuse("consumer", "after round consumer/consumer", "why");
        assert_eq!(
            refusals.text(),
            "REFUSED ingest: before round ingest/ingest, the broker is dead: its process \
             (pid 7) is gone; figures not used, series ended\n\
             REFUSED consumer: after round consumer/consumer, the broker is dead: why; \
             figures not used, series ended\n"
        );
    }
}
