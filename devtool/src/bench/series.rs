//! A series of rounds on the benchmark's broker (the ingest's, the consumer's): a Tansu of
//! its own with memory storage, started fresh for the series and stopped at its end (memory
//! Tansu keeps every message, and one broker for a whole run has died under it). A round's
//! figures are kept only if the broker was alive before it, all through it (checked every
//! second; a death stops the round) and after it; otherwise the round is refused, recorded,
//! and the series ends.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;

use super::broker::{Broker, Refusals};
use super::context::Run;
use super::measure::{Bench, Measure};
use super::services::{Ready, Services, Start};
use crate::supervise;

/// What became of a round.
#[derive(Debug, PartialEq, Eq)]
pub enum Round {
    /// Its figures are kept.
    Kept,
    /// The broker was dead before, during or after it: the series ends.
    Refused,
}

/// Who watches a series' broker, and where refusals go.
pub struct Guard<'a> {
    pub series: String,
    pub broker: Broker,
    pub refusals: &'a Refusals,
}

impl Guard<'_> {
    /// The broker lives and answers; if not, the refusal (`when`, the reason) is recorded.
    pub async fn alive(&self, when: &str) -> bool {
        match self.broker.alive().await {
            Ok(()) => true,
            Err(why) => {
                self.refusals.refuse(&self.series, when, &why);
                false
            }
        }
    }

    /// Runs `job` (a round named `label`, whose outcome is its exit code) when the broker
    /// is alive, checking it every second; on its death `stop` is called (it stops the
    /// job) and the job awaited. A failure of the job with the broker alive is an error.
    pub async fn round<F>(&self, label: &str, job: F, stop: impl Fn()) -> anyhow::Result<Round>
    where
        F: Future<Output = anyhow::Result<i32>>,
    {
        if !self.alive(&format!("before {label}")).await {
            return Ok(Round::Refused);
        }
        let mut job = std::pin::pin!(job);
        let mut dead = false;
        let outcome = loop {
            tokio::select! {
                outcome = &mut job => break outcome,
                () = tokio::time::sleep(Duration::from_secs(1)) => {
                    if self.broker.alive().await.is_err() {
                        dead = true;
                        stop();
                        break job.await;
                    }
                }
            }
        };
        if dead && !self.alive(&format!("during {label}")).await {
            return Ok(Round::Refused);
        }
        if !self.alive(&format!("after {label}")).await {
            return Ok(Round::Refused);
        }
        match outcome {
            Ok(0) => Ok(Round::Kept),
            Ok(code) => anyhow::bail!("{label} failed (exit {code}) with the broker alive"),
            Err(e) => Err(e.context(format!("{label} failed with the broker alive"))),
        }
    }
}

/// A series running: its broker, and what to undo at its end.
pub struct Series<'a> {
    pub guard: Guard<'a>,
    /// `127.0.0.1:PORT`.
    pub brokers: String,
    dir: PathBuf,
    out: &'a Path,
    bench: &'a Bench,
    services: &'a Services,
    mark: usize,
    watch_before: Vec<String>,
}

impl<'a> Series<'a> {
    /// A fresh broker for the series `name` (memory storage), started as scripts/up starts its own.
    pub async fn start(name: &str, run: &Run<'a>) -> anyhow::Result<Self> {
        let dir = run.out.join(format!("tansu-{name}"));
        let port = supervise::free_port_from(9192);
        let tansu = supervise::tansu()?;
        let broker_dir = dir.clone();
        supervise::blocking(move || {
            stack_kit::tansu::start(&stack_kit::tansu::Broker {
                bin: &tansu,
                dir: &broker_dir,
                port,
                storage: stack_kit::tansu::Storage::Memory,
                maintenance_interval: None,
            })
        })
        .await
        .with_context(|| format!("the broker of series {name} did not start"))?;
        let pidfile = dir.join("tansu.pid");
        let pid = supervise::read_pid(&pidfile)?;
        eprintln!("==>    series {name}: a fresh broker, pid {pid}, port {port}");
        let watch_before = run.bench.watch_also(&[("bench-tansu", pid)]);
        Ok(Self {
            guard: Guard {
                series: name.to_owned(),
                broker: Broker { pidfile, port },
                refusals: run.refusals,
            },
            brokers: format!("127.0.0.1:{port}"),
            dir,
            out: run.out,
            bench: run.bench,
            services: run.services,
            mark: run.services.mark(),
            watch_before,
        })
    }

    /// One round of the series: `measure`, its figures kept when the broker lived through it.
    pub async fn round(&self, measure: &Measure) -> anyhow::Result<Round> {
        let figures = self.out.join("round.jsonl");
        std::fs::write(&figures, "")?;
        let stop = || {
            if let Some(pid) = self.bench.running.get() {
                let _ = supervise::signal(pid, "TERM");
            }
        };
        let round = self
            .guard
            .round(
                &measure.label(),
                self.bench.measure(measure, &figures),
                stop,
            )
            .await?;
        if round == Round::Kept {
            let kept = std::fs::read(&figures)?;
            use std::io::Write;
            std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .open(&self.bench.figures)?
                .write_all(&kept)?;
        }
        Ok(round)
    }

    /// `bench_service`: target/dist/NAME against the series' broker, ready when its
    /// `/readyz` is.
    pub async fn service(
        &self,
        name: &str,
        port: u16,
        env: &[(&str, String)],
    ) -> anyhow::Result<u32> {
        let mut all = vec![("KAFKA_BROKERS".to_owned(), self.brokers.clone())];
        all.extend(env.iter().map(|(k, v)| ((*k).to_owned(), v.clone())));
        self.services
            .start(Start {
                name: &format!("{name}-{port}"),
                ready: Ready::Http(format!("http://127.0.0.1:{port}/readyz")),
                command: vec![format!("target/dist/{name}")],
                env: all,
                unset: Vec::new(),
            })
            .await
    }

    /// Stops what the series started that still runs (all of it, after a refusal), then
    /// its broker.
    pub async fn end(self) -> anyhow::Result<()> {
        self.services.stop_since(self.mark).await;
        stop_broker(&self.dir, &self.guard.series).await?;
        self.bench.watch_restore(self.watch_before);
        Ok(())
    }
}

/// Stops the broker of a series.
pub async fn stop_broker(dir: &Path, series: &str) -> anyhow::Result<()> {
    let (dir, name) = (dir.to_owned(), format!("the broker of series {series}"));
    supervise::blocking(move || stack_kit::tansu::stop(&dir, &name)).await
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;
    use crate::bench::broker::tests::fake_broker;

    async fn guard(
        dir: &Path,
        refusals: &'static Refusals,
        answer: Arc<AtomicBool>,
    ) -> Guard<'static> {
        let pidfile = dir.join("tansu.pid");
        std::fs::write(&pidfile, std::process::id().to_string()).unwrap();
        Guard {
            series: "ingest".to_owned(),
            broker: Broker {
                pidfile,
                port: fake_broker(answer).await,
            },
            refusals,
        }
    }

    fn refusals(dir: &Path) -> &'static Refusals {
        Box::leak(Box::new(Refusals {
            path: dir.join("refused.txt"),
        }))
    }

    #[tokio::test]
    async fn a_round_on_a_live_broker_is_kept_and_its_failure_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let refusals = refusals(dir.path());
        let guard = guard(dir.path(), refusals, Arc::new(AtomicBool::new(true))).await;
        let round = guard
            .round("round a/b", async { Ok(0) }, || {})
            .await
            .unwrap();
        assert_eq!(round, Round::Kept);
        let error = guard
            .round("round a/b", async { Ok(3) }, || {})
            .await
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "round a/b failed (exit 3) with the broker alive"
        );
        assert_eq!(refusals.text(), "");
    }

    #[tokio::test]
    async fn a_round_on_a_dead_broker_is_refused_before_it_runs() {
        let dir = tempfile::tempdir().unwrap();
        let refusals = refusals(dir.path());
        let guard = guard(dir.path(), refusals, Arc::new(AtomicBool::new(false))).await;
        let ran = AtomicBool::new(false);
        let job = async {
            ran.store(true, Ordering::SeqCst);
            Ok(0)
        };
        assert_eq!(
            guard.round("round a/b", job, || {}).await.unwrap(),
            Round::Refused
        );
        assert!(!ran.load(Ordering::SeqCst));
        assert!(
            refusals
                .text()
                .starts_with("REFUSED ingest: before round a/b, the broker is dead: its process"),
            "{}",
            refusals.text()
        );
    }

    #[tokio::test]
    async fn a_broker_dying_during_a_round_stops_it_and_refuses_it() {
        let dir = tempfile::tempdir().unwrap();
        let refusals = refusals(dir.path());
        let answer = Arc::new(AtomicBool::new(true));
        let guard = guard(dir.path(), refusals, answer.clone()).await;
        let stopped = Arc::new(tokio::sync::Notify::new());
        let job = {
            let stopped = stopped.clone();
            async move {
                // The round runs until it is stopped (its failure then is not an error), or
                // ends well after the broker died if nothing stops it.
                tokio::select! {
                    () = stopped.notified() => Ok(143),
                    () = tokio::time::sleep(Duration::from_secs(8)) => Ok(0),
                }
            }
        };
        let kill = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(1500)).await;
            answer.store(false, Ordering::SeqCst);
        });
        let started = std::time::Instant::now();
        let stopped_at = std::cell::Cell::new(None);
        let round = guard
            .round("round a/b", job, || {
                stopped_at.set(Some(started.elapsed()));
                stopped.notify_one();
            })
            .await
            .unwrap();
        kill.await.unwrap();
        assert_eq!(round, Round::Refused);
        // Found dead within a check (every second, 2 s for an answer) of its death.
        let stopped_at = stopped_at.get().expect("the round was stopped");
        assert!(stopped_at < Duration::from_secs(5), "{stopped_at:?}");
        assert!(
            refusals
                .text()
                .starts_with("REFUSED ingest: during round a/b, the broker is dead: "),
            "{}",
            refusals.text()
        );
        assert_eq!(refusals.text().lines().count(), 1);
    }
}
