//! Section 3 with the peers: the consumer against ClickHouse's Kafka engine, which fills
//! the consumer's schema through materialized views, both into one ClickHouse server of
//! their own that loads BENCH_CLICKHOUSE_LIBRDKAFKA's librdkafka, rounds alternated; then
//! the two databases must hold the same rows, and what each stores of a topic with a
//! message that is not JSON, and when killed (SIGKILL) mid-backlog, is kept in
//! `guarantees.txt` (printed after the tables).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;

use super::consumer::{TOPIC, nanos};
use super::context::{Run, log, sql_to};
use super::measure::{Measure, Stderr, Stdout, strings};
use super::plan;
use super::series::{Round, Series};
use crate::supervise;

/// The peers' ClickHouse.
struct Peer<'a> {
    run: &'a Run<'a>,
    dir: PathBuf,
    url: String,
    http_port: u16,
    tcp_port: u16,
    config: PathBuf,
    /// The librdkafka folder.
    librdkafka: PathBuf,
    pid: u32,
}

impl Peer<'_> {
    /// The peers' ClickHouse, started as scripts/up starts its own, with the librdkafka of
    /// the peers' folder.
    async fn start(&mut self) -> anyhow::Result<()> {
        let (repo, dir, config) = (
            self.run.repo.to_owned(),
            self.dir.clone(),
            self.config.clone(),
        );
        let (http_port, tcp_port) = (self.http_port, self.tcp_port);
        let env = [(
            "LD_LIBRARY_PATH".to_owned(),
            self.librdkafka.display().to_string(),
        )];
        supervise::blocking(move || {
            stack_kit::clickhouse::start(
                &repo,
                &stack_kit::clickhouse::Server {
                    dir: &dir,
                    http_port,
                    tcp_port,
                    extra_config: Some(&config),
                    env: &env,
                },
            )
        })
        .await
        .context("the Kafka engine's ClickHouse did not start")?;
        self.pid = supervise::read_pid(&self.dir.join("clickhouse.pid"))?;
        self.run.services.adopt(self.pid);
        Ok(())
    }

    /// The consumer into the peers' ClickHouse: its pid and port.
    async fn consumer(
        &self,
        series: &Series<'_>,
        group: &str,
        topic: &str,
        database: &str,
    ) -> anyhow::Result<(u32, u16)> {
        let port = supervise::free_port_from(8193);
        let pid = series
            .service(
                "consumer",
                port,
                &[
                    ("KAFKA_TOPIC", topic.to_owned()),
                    ("KAFKA_DLQ_TOPIC", format!("{topic}-dlq")),
                    ("KAFKA_GROUP_ID", group.to_owned()),
                    (
                        "KAFKA_PROPERTIES",
                        format!("fetch.wait.max.ms={}", self.run.settings.fetch_wait_ms),
                    ),
                    ("CLICKHOUSE_URL", self.url.clone()),
                    ("CLICKHOUSE_DATABASE", database.to_owned()),
                    ("CONSUMER_LISTEN", format!("127.0.0.1:{port}")),
                ],
            )
            .await?;
        Ok((pid, port))
    }

    /// `loadgen kafka-engine start|stop` on a database of the peers' ClickHouse.
    async fn engine(
        &self,
        brokers: Option<(&str, &str, &str)>,
        database: &str,
    ) -> anyhow::Result<()> {
        let mut args = vec![
            "kafka-engine",
            if brokers.is_some() { "start" } else { "stop" },
        ];
        args.extend(["--clickhouse", &self.url, "--database", database]);
        if let Some((brokers, topic, group)) = brokers {
            args.extend(["--brokers", brokers, "--topic", topic, "--group", group]);
        }
        self.run.tool(&args).await
    }

    /// `loadgen rows`: waits for `ids` distinct events in `database` or `timeout` seconds;
    /// its answer (rows and distinct ids), tab-separated, when it answered.
    async fn rows(&self, database: &str, ids: u64, timeout: u64) -> anyhow::Result<(i32, String)> {
        self.run
            .bench
            .run(
                &strings(&[
                    "rows",
                    "--clickhouse",
                    &self.url,
                    "--database",
                    database,
                    "--ids",
                    &ids.to_string(),
                    "--timeout",
                    &timeout.to_string(),
                ]),
                Stdout::Capture,
                Stderr::Inherit,
            )
            .await
    }

    /// A line of the guarantees: what `database` holds once it holds `events` distinct
    /// events or `timeout` seconds have passed.
    async fn guarantee(
        &self,
        subject: &str,
        database: &str,
        events: u64,
        timeout: u64,
    ) -> anyhow::Result<()> {
        let (_, rows) = self.rows(database, events, timeout).await?;
        let rows = rows.trim_end_matches('\n').replace('\t', " ");
        guarantees_line(
            self.run.out,
            &format!("{subject}: rows and distinct ids of {events} events sent: {rows}"),
        )
    }
}

/// Appends a line to the run's guarantees.txt, and shows it.
fn guarantees_line(out: &Path, line: &str) -> anyhow::Result<()> {
    eprintln!("{line}");
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(out.join("guarantees.txt"))?
        .write_all(format!("{line}\n").as_bytes())?;
    Ok(())
}

/// The peers' ClickHouse configuration: the engine reads a new group from the start, with
/// the consumer's fetch wait.
fn kafka_config(fetch_wait_ms: u64) -> String {
    format!(
        "<yandex>\n  <kafka>\n    <auto_offset_reset>smallest</auto_offset_reset>\n    \
         <fetch_wait_max_ms>{fetch_wait_ms}</fetch_wait_max_ms>\n  </kafka>\n</yandex>\n"
    )
}

/// Every insert of the server (the engine's too) is squashed to 100,000 rows at least, so
/// that both insert blocks of the consumer's BATCH_MAX_ROWS (the engine's stream would make
/// one block of everything it reads in 7.5 s).
const INSERT_BLOCKS: &str = "<yandex>\n  <profiles><default><min_insert_block_size_rows>100000</min_insert_block_size_rows></default></profiles>\n</yandex>\n";

/// The topic of the poison guarantees: 20,000 events, one partition, with a message that is
/// not an event among them.
const POISON: &str = "analytics-bench-poison";

impl<'a> Peer<'a> {
    /// The peers' ClickHouse, not yet started: its folder, ports and configuration files.
    fn prepare(run: &'a Run<'a>) -> anyhow::Result<Self> {
        let s = run.settings;
        let dir = run.out.join("clickhouse-peer");
        let http_port = supervise::free_port_from(8133);
        let config = run.out.join("clickhouse-peer.xml");
        std::fs::write(&config, kafka_config(s.fetch_wait_ms))?;
        std::fs::create_dir_all(dir.join("users.d"))?;
        std::fs::write(dir.join("users.d/insert-blocks.xml"), INSERT_BLOCKS)?;
        let tcp_port = supervise::free_port_from(9010);
        let librdkafka = s
            .peers()
            .and_then(|p| p.clickhouse_librdkafka.clone())
            .unwrap_or_default();
        Ok(Peer {
            run,
            dir,
            url: format!("http://127.0.0.1:{http_port}"),
            http_port,
            tcp_port,
            config,
            librdkafka,
            pid: 0,
        })
    }

    /// Fails unless the running server mapped the librdkafka of the peers' folder.
    fn ensure_librdkafka(&self) -> anyhow::Result<()> {
        let loaded = std::fs::canonicalize(&self.librdkafka)
            .map(|p| format!("{}/librdkafka.so.1", p.display()))
            .unwrap_or_default();
        let maps = std::fs::read_to_string(format!("/proc/{}/maps", self.pid)).unwrap_or_default();
        anyhow::ensure!(
            !loaded.is_empty() && maps.contains(&loaded),
            "the Kafka engine's ClickHouse did not load {}/librdkafka.so.1",
            self.librdkafka.display()
        );
        Ok(())
    }

    /// A round of the consumer into `bench_peer_consumer`, stopped when its figures are kept.
    async fn consumer_round(&self, series: &Series<'_>) -> anyhow::Result<Round> {
        let pid = self.pid.to_string();
        sql_to(&self.url, "DROP DATABASE IF EXISTS bench_peer_consumer").await?;
        let (consumer, _) = self
            .consumer(
                series,
                &format!("bench-{}", nanos()),
                TOPIC,
                "bench_peer_consumer",
            )
            .await?;
        let measure = Measure::loadgen(strings(&[
            "wait-rows",
            "--bench",
            "consumer-peers",
            "--subject",
            "consumer",
            "--clickhouse",
            &self.url,
            "--table",
            "bench_peer_consumer.events",
            "--rows",
            &self.run.settings.backlog.to_string(),
            "--pid",
            &consumer.to_string(),
            "--watch",
            &format!("bench-consumer={consumer}"),
            "--watch",
            &format!("clickhouse-peer={pid}"),
        ]))
        .unsettled();
        let round = series.round(&measure).await?;
        if round == Round::Kept {
            self.run.services.stop(consumer).await?;
        }
        Ok(round)
    }

    /// A round of the Kafka engine into `bench_peer_engine`, stopped when its figures are
    /// kept.
    async fn engine_round(&self, series: &Series<'_>) -> anyhow::Result<Round> {
        let pid = self.pid.to_string();
        let group = format!("bench-engine-{}", nanos());
        self.engine(
            Some((series.brokers.as_str(), TOPIC, &group)),
            "bench_peer_engine",
        )
        .await?;
        let measure = Measure::loadgen(strings(&[
            "wait-rows",
            "--bench",
            "consumer-peers",
            "--subject",
            "clickhouse-kafka-engine",
            "--clickhouse",
            &self.url,
            "--table",
            "bench_peer_engine.events",
            "--rows",
            &self.run.settings.backlog.to_string(),
            "--pid",
            &pid,
            "--watch",
            &format!("clickhouse-peer={pid}"),
        ]))
        .unsettled();
        let round = series.round(&measure).await?;
        if round == Round::Kept {
            self.engine(None, "bench_peer_engine").await?;
        }
        Ok(round)
    }

    /// `loadgen same-rows`: the engine's database must hold the rows of the consumer's.
    async fn same_rows(&self) -> anyhow::Result<()> {
        self.run
            .tool(&[
                "same-rows",
                "--clickhouse",
                &self.url,
                "--expected",
                "bench_peer_consumer",
                "--actual",
                "bench_peer_engine",
                "events",
                "experiment_results",
            ])
            .await
    }

    /// The consumer's guarantee on the poison topic, and the dead letters it counts.
    async fn poison_consumer(&self, series: &Series<'_>) -> anyhow::Result<()> {
        let (consumer, port) = self
            .consumer(
                series,
                &format!("bench-poison-{}", nanos()),
                POISON,
                "bench_poison_consumer",
            )
            .await?;
        self.guarantee(
            "a poison message, the consumer",
            "bench_poison_consumer",
            20000,
            60,
        )
        .await?;
        let metrics = reqwest::get(format!("http://127.0.0.1:{port}/metrics"))
            .await?
            .error_for_status()?
            .text()
            .await?;
        let dead_letters: Vec<&str> = metrics
            .lines()
            .filter(|l| l.starts_with("consumer_dead_letters_total"))
            .collect();
        anyhow::ensure!(
            !dead_letters.is_empty(),
            "the consumer counts no dead letters"
        );
        for line in dead_letters {
            guarantees_line(self.run.out, &format!("  {line}"))?;
        }
        self.run.services.stop(consumer).await
    }

    /// The Kafka engine's guarantee on the poison topic, and the last error it logged.
    async fn poison_engine(&self, series: &Series<'_>) -> anyhow::Result<()> {
        let group = format!("bench-engine-poison-{}", nanos());
        self.engine(
            Some((series.brokers.as_str(), POISON, &group)),
            "bench_poison_engine",
        )
        .await?;
        self.guarantee(
            "a poison message, the Kafka engine",
            "bench_poison_engine",
            20000,
            60,
        )
        .await?;
        let errors = std::fs::read_to_string(self.dir.join("log/clickhouse-server.err.log"))
            .unwrap_or_default();
        let last = errors
            .lines()
            .rfind(|l| l.contains("<Error> void DB::StorageKafka"))
            .context("the Kafka engine's ClickHouse logged no error of its Kafka engine")?;
        guarantees_line(
            self.run.out,
            &format!("  {}", last.chars().take(400).collect::<String>()),
        )?;
        self.engine(None, "bench_poison_engine").await
    }

    /// The consumer's guarantee when killed (SIGKILL) once `third` events are stored, and
    /// started again in its group after the dead member's session.
    async fn crash_consumer(&self, series: &Series<'_>, third: u64) -> anyhow::Result<()> {
        let group = format!("bench-crash-{}", nanos());
        let (consumer, _) = self
            .consumer(series, &group, TOPIC, "bench_crash_consumer")
            .await?;
        let (code, _) = self.rows("bench_crash_consumer", third, 300).await?;
        anyhow::ensure!(code == 0, "loadgen rows failed (exit {code})");
        self.run.services.kill(consumer).await?;
        tokio::time::sleep(Duration::from_secs(50)).await;
        let (consumer, _) = self
            .consumer(series, &group, TOPIC, "bench_crash_consumer")
            .await?;
        self.guarantee(
            "SIGKILL a third into the backlog, the consumer",
            "bench_crash_consumer",
            self.run.settings.backlog,
            300,
        )
        .await?;
        self.run.services.stop(consumer).await
    }

    /// The Kafka engine's guarantee when its ClickHouse is killed (SIGKILL) once `third`
    /// events are stored, and started again after the dead member's session.
    async fn crash_engine(&mut self, series: &Series<'_>, third: u64) -> anyhow::Result<()> {
        let group = format!("bench-engine-crash-{}", nanos());
        self.engine(
            Some((series.brokers.as_str(), TOPIC, &group)),
            "bench_crash_engine",
        )
        .await?;
        let (code, _) = self.rows("bench_crash_engine", third, 300).await?;
        anyhow::ensure!(code == 0, "loadgen rows failed (exit {code})");
        supervise::signal(self.pid, "KILL")?;
        while supervise::is_running(self.pid) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(Duration::from_secs(50)).await;
        self.start().await?;
        self.guarantee(
            "SIGKILL a third into the backlog, the Kafka engine (ClickHouse)",
            "bench_crash_engine",
            self.run.settings.backlog,
            300,
        )
        .await?;
        self.engine(None, "bench_crash_engine").await
    }
}

/// `loadgen produce` of the poison topic: 20,000 events in one partition, the 10,000th not
/// an event.
async fn produce_poison(run: &Run<'_>, brokers: &str) -> anyhow::Result<()> {
    run.bench
        .tool(
            &strings(&[
                "produce",
                "--bench",
                "guarantees",
                "--subject",
                "fill",
                "--brokers",
                brokers,
                "--topic",
                POISON,
                "--partitions",
                "1",
                "--events",
                "20000",
                "--poison-at",
                "10000",
                "--snapshot",
                &run.snapshot(),
            ]),
            Stdout::Null,
            Stderr::Null,
        )
        .await?;
    Ok(())
}

/// Section 3 with the peers: starts their ClickHouse, measures the rounds, checks both
/// databases hold the same rows, keeps the guarantees, and stops it.
pub async fn section(run: &Run<'_>, series: &Series<'_>) -> anyhow::Result<()> {
    log(&format!(
        "   the consumer vs ClickHouse's Kafka engine, into a ClickHouse of their own ({} rounds)",
        run.settings.consumer_rounds
    ));
    let mut peer = Peer::prepare(run)?;
    peer.start().await?;
    peer.ensure_librdkafka()?;
    for (_, subject) in plan::consumer_peers(run.settings.consumer_rounds) {
        let round = if subject == "consumer" {
            peer.consumer_round(series).await?
        } else {
            peer.engine_round(series).await?
        };
        if round == Round::Refused {
            return Ok(());
        }
    }
    peer.same_rows().await?;
    // What each does with a message that is not an event among 20,000 (one partition), and
    // when the process that reads the topic is killed (SIGKILL) a third into a backlog and
    // started again: rows and distinct event ids stored, against the events sent. It starts
    // again after the dead member's session (45 s): Tansu leaves a group that a member
    // rejoins sooner without partitions (docs/operating.md, "The development broker").
    produce_poison(run, &series.brokers).await?;
    peer.poison_consumer(series).await?;
    peer.poison_engine(series).await?;
    let third = run.settings.backlog / 3;
    peer.crash_consumer(series, third).await?;
    peer.crash_engine(series, third).await?;
    stop_peer(run.out).await
}

/// Stops the peers' ClickHouse.
pub async fn stop_peer(out: &Path) -> anyhow::Result<()> {
    let dir = out.join("clickhouse-peer");
    supervise::blocking(move || stack_kit::clickhouse::stop(&dir, "the Kafka engine's ClickHouse"))
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peers_clickhouse_reads_from_the_start_with_the_consumer_s_wait() {
        assert_eq!(
            kafka_config(5),
            "<yandex>\n  <kafka>\n    <auto_offset_reset>smallest</auto_offset_reset>\n    \
             <fetch_wait_max_ms>5</fetch_wait_max_ms>\n  </kafka>\n</yandex>\n"
        );
        let dir = tempfile::tempdir().unwrap();
        guarantees_line(dir.path(), "a: 1 1").unwrap();
        guarantees_line(dir.path(), "  b").unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("guarantees.txt")).unwrap(),
            "a: 1 1\n  b\n"
        );
    }
}
