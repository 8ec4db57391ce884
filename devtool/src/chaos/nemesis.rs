//! The nemesis: injects one fault, waits until the pipeline is whole again, and writes the
//! fault's line in `faults.log` (start, end, target, the consumer's insert retries over
//! it), which the verdict reads. ClickHouse faults hit the servers in turn.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;

use super::memory::unix_ms;
use super::metrics;
use super::process::Pipeline;
use super::settings::{Fault, Settings};
use crate::supervise::{Stopped, signal};

/// `faults.log`'s first line.
pub const HEADER: &str =
    "# started (UTC)\tended (UTC)\tseconds\tfault\ttarget\tinsert retries\tstarted_ms\tended_ms";

/// The consumer's port and the counter read around each fault.
const CONSUMER_PORT: u16 = 8083;
const INSERT_RETRIES: &str = "consumer_insert_retries_total";

/// The services that must take a snapshot change: name, port, metrics prefix.
const SNAPSHOT_READERS: [(&str, u16, &str); 3] = [
    ("ingest", 8081, "ingest"),
    ("config-api", 8082, "config_api"),
    ("consumer", CONSUMER_PORT, "consumer"),
];

pub struct Nemesis<'a> {
    pub pipeline: &'a Pipeline,
    pub settings: &'a Settings,
    /// The ClickHouse servers, hit in turn.
    pub clickhouses: Vec<String>,
    /// The run's snapshot, whose version a snapshot change sets.
    pub snapshot: PathBuf,
    pub faults_log: File,
    pub http: reqwest::Client,
    turn: usize,
    version: u32,
    /// Snapshot versions some service never took: `chaos-N: services`.
    pub snapshot_misses: Vec<String>,
}

/// One fault as `faults.log` records it.
pub struct Record<'a> {
    pub fault: Fault,
    pub target: &'a str,
    pub begun_ms: u128,
    pub ended_ms: u128,
    /// When the target went down, for the faults that take it down.
    pub down_ms: Option<u128>,
    /// The insert retries counter before and after (`None`: no answer).
    pub retries_before: Option<u64>,
    pub retries_after: Option<u64>,
}

/// `S.mmm` seconds between two times in milliseconds.
pub fn seconds_between(from_ms: u128, to_ms: u128) -> String {
    let ms = to_ms.saturating_sub(from_ms);
    format!("{}.{:03}", ms / 1000, ms % 1000)
}

/// A time in milliseconds since the Unix epoch as `2026-11-26T10:00:00.000Z`.
pub fn utc(ms: u128) -> String {
    let at = time::OffsetDateTime::UNIX_EPOCH + Duration::from_millis(ms as u64);
    let format = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
    );
    at.format(&format).unwrap_or_default()
}

impl Record<'_> {
    /// The line of `faults.log`, tab-separated.
    pub fn line(&self) -> String {
        let mut target = self.target.to_owned();
        if let Some(down) = self.down_ms {
            target = format!(
                "{target}: down after {} s, ready {} s later",
                seconds_between(self.begun_ms, down),
                seconds_between(down, self.ended_ms)
            );
        }
        // The consumer's counter starts again with the process.
        let retries = match (self.retries_before, self.retries_after) {
            (Some(before), Some(after)) if self.fault != Fault::ConsumerKill && after >= before => {
                (after - before).to_string()
            }
            _ => "-".to_owned(),
        };
        [
            utc(self.begun_ms),
            utc(self.ended_ms),
            seconds_between(self.begun_ms, self.ended_ms),
            self.fault.name().to_owned(),
            target,
            retries,
            self.begun_ms.to_string(),
            self.ended_ms.to_string(),
        ]
        .join("\t")
    }
}

impl<'a> Nemesis<'a> {
    pub fn new(
        pipeline: &'a Pipeline,
        settings: &'a Settings,
        clickhouses: Vec<String>,
        snapshot: PathBuf,
        faults_log: PathBuf,
    ) -> anyhow::Result<Self> {
        let mut file = File::create(&faults_log)
            .with_context(|| format!("cannot create {}", faults_log.display()))?;
        writeln!(file, "{HEADER}")?;
        Ok(Self {
            pipeline,
            settings,
            clickhouses,
            snapshot,
            faults_log: file,
            http: reqwest::Client::new(),
            turn: 0,
            version: 0,
            snapshot_misses: Vec::new(),
        })
    }

    /// The ClickHouse server the next ClickHouse fault hits.
    fn next_clickhouse(&mut self) -> String {
        let target = self.clickhouses[self.turn % self.clickhouses.len()].clone();
        self.turn += 1;
        target
    }

    /// SIGSTOP for the pause, then SIGCONT.
    async fn pause(&self, service: &str) -> anyhow::Result<()> {
        let _stopped = Stopped::new(self.pipeline.pid_of(service)?)?;
        tokio::time::sleep(self.settings.pause()).await;
        Ok(())
    }

    /// Injects one fault, waits until the pipeline is whole again, logs it.
    pub async fn inject(&mut self, fault: Fault) -> anyhow::Result<()> {
        let begun_ms = unix_ms();
        let retries_before = metrics::counter(&self.http, CONSUMER_PORT, INSERT_RETRIES).await;
        let mut down_ms = None;
        let pipeline = self.pipeline;
        let target = match fault {
            Fault::ClickhouseHang => {
                let target = self.next_clickhouse();
                self.pause(&target).await?;
                target
            }
            Fault::ClickhouseRestart => {
                let target = self.next_clickhouse();
                pipeline.stop(&target).await?;
                down_ms = Some(unix_ms());
                pipeline.up().await?;
                target
            }
            Fault::ZookeeperPause => {
                self.pause("zookeeper").await?;
                "zookeeper".to_owned()
            }
            Fault::BrokerPause => {
                self.pause("tansu").await?;
                "tansu".to_owned()
            }
            Fault::BrokerRestart => {
                pipeline.stop("tansu").await?;
                down_ms = Some(unix_ms());
                pipeline.start_broker().await?;
                "tansu".to_owned()
            }
            Fault::ConsumerKill => {
                signal(pipeline.pid_of("consumer")?, "KILL")?;
                down_ms = Some(unix_ms());
                pipeline.up().await?;
                "consumer".to_owned()
            }
            Fault::IngestRestart => {
                pipeline.stop("ingest").await?;
                down_ms = Some(unix_ms());
                pipeline.up().await?;
                "ingest".to_owned()
            }
            Fault::SnapshotChange => self.change_snapshot().await?,
        };
        let ended_ms = unix_ms();
        let retries_after = metrics::counter(&self.http, CONSUMER_PORT, INSERT_RETRIES).await;
        let record = Record {
            fault,
            target: &target,
            begun_ms,
            ended_ms,
            down_ms,
            retries_before,
            retries_after,
        };
        writeln!(self.faults_log, "{}", record.line())?;
        Ok(())
    }

    /// A new version of the run's snapshot, ended when every service serves it (they look
    /// once a second) or after 15 s; the target names the services that did not take it.
    async fn change_snapshot(&mut self) -> anyhow::Result<String> {
        self.version += 1;
        let version = format!("chaos-{}", self.version);
        set_snapshot_version(&self.snapshot, &version)?;
        let mut missing = Vec::new();
        for _ in 0..75 {
            missing.clear();
            for (service, port, prefix) in SNAPSHOT_READERS {
                let taken = metrics::scrape(&self.http, port)
                    .await
                    .is_some_and(|text| metrics::serves_snapshot(&text, prefix, &version));
                if !taken {
                    missing.push(service);
                }
            }
            if missing.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let mut target = format!("version {version}");
        if !missing.is_empty() {
            target = format!("{target}, not taken by {}", missing.join(" "));
            self.snapshot_misses
                .push(format!("{version}: {}", missing.join(" ")));
        }
        Ok(target)
    }
}

/// Sets a snapshot file's `version`, replacing the file whole (written beside it, then
/// renamed), as an editor that saves by rename does.
pub fn set_snapshot_version(path: &Path, version: &str) -> anyhow::Result<()> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut snapshot: serde_json::Value = serde_json::from_slice(&bytes)
        .with_context(|| format!("{} is not JSON", path.display()))?;
    snapshot
        .as_object_mut()
        .with_context(|| format!("{} is not a JSON object", path.display()))?
        .insert("version".to_owned(), version.into());
    let temporary = path.with_extension("json.tmp");
    std::fs::write(&temporary, serde_json::to_vec(&snapshot)?)
        .with_context(|| format!("cannot write {}", temporary.display()))?;
    std::fs::rename(&temporary, path)
        .with_context(|| format!("cannot replace {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fault_s_line_is_the_one_the_verdict_reads() {
        let record = Record {
            fault: Fault::BrokerRestart,
            target: "tansu",
            begun_ms: 1_764_151_200_000,
            ended_ms: 1_764_151_205_250,
            down_ms: Some(1_764_151_205_004),
            retries_before: Some(3),
            retries_after: Some(5),
        };
        assert_eq!(
            record.line(),
            "2025-11-26T10:00:00.000Z\t2025-11-26T10:00:05.250Z\t5.250\tbroker-restart\t\
             tansu: down after 5.004 s, ready 0.246 s later\t2\t1764151200000\t1764151205250"
        );
        // Across the consumer's restart, or without an answer, the retries are unknown.
        let kill = Record {
            fault: Fault::ConsumerKill,
            down_ms: None,
            ..record
        };
        assert_eq!(kill.line().split('\t').nth(5), Some("-"));
        let unanswered = Record {
            fault: Fault::ClickhouseHang,
            retries_after: None,
            ..kill
        };
        assert_eq!(unanswered.line().split('\t').nth(5), Some("-"));
        let fewer = Record {
            retries_after: Some(1),
            ..unanswered
        };
        assert_eq!(fewer.line().split('\t').nth(4), Some("tansu"));
        assert_eq!(fewer.line().split('\t').nth(5), Some("-"));
        assert_eq!(seconds_between(1000, 63_007), "62.007");
    }

    #[test]
    fn a_snapshot_gets_its_new_version_and_keeps_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("experiments.json");
        std::fs::write(&path, r#"{"version": "1", "experiments": [{"id": "x"}]}"#).unwrap();
        set_snapshot_version(&path, "chaos-2").unwrap();
        let written: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(
            written,
            serde_json::json!({"version": "chaos-2", "experiments": [{"id": "x"}]})
        );
        std::fs::write(&path, "[1]").unwrap();
        assert!(
            set_snapshot_version(&path, "chaos-2").is_err(),
            "not an object"
        );
    }
}
