//! `devtool bench`, the body of `scripts/bench` (whose --help says what it measures):
//! starts the scripts/up pipeline, then each section in turn (the config-api, the ingest
//! and the consumer against their references, each series on the broker of its own, then
//! the whole pipeline), each figure a `loadgen` command appended to the run's
//! figures.jsonl, and prints the tables. Whatever it started is ended however the run ends;
//! a round refused on a dead broker makes it exit 1 after the tables.

mod broker;
mod config_api;
mod consumer;
mod consumer_peers;
mod context;
mod ingest;
mod measure;
mod nginx;
mod plan;
mod series;
mod services;
mod settings;

use std::cell::{Cell, RefCell};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::report;
use crate::supervise;
use broker::Refusals;
use context::{Run, log};
use measure::{Bench, Settle, Stderr, Stdout, strings};
use series::{Round, Series};
use services::Services;
use settings::{Section, Settings};

#[derive(clap::Args)]
pub struct BenchArgs {
    /// The repository whose scripts/up pipeline to measure (scripts/bench passes its own).
    #[arg(long)]
    repo: PathBuf,
    #[command(flatten)]
    settings: Settings,
}

/// The exit code: 0 when every round ran, 1 when something could not run (a refused round
/// included); 130 or 143 when interrupted, after stopping what it started.
pub async fn command(args: BenchArgs) -> i32 {
    if let Err(refusal) = args.settings.check_peers(&settings::probe) {
        eprintln!("error: {refusal}");
        return 1;
    }
    // Once it returns, the run's future is gone: its guard stopped what it started.
    supervise::exit_code(run(&args.repo, &args.settings)).await
}

/// The run's folder name: its UTC start.
fn stamp() -> String {
    let format = time::macros::format_description!("[year][month][day]T[hour][minute][second]Z");
    time::OffsetDateTime::now_utc()
        .format(&format)
        .unwrap_or_default()
}

/// `realpath -m`: absolute, symbolic links resolved as far as the path exists.
fn absolute(path: &Path) -> PathBuf {
    if let Ok(path) = std::fs::canonicalize(path) {
        return path;
    }
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    let mut clean = PathBuf::new();
    for part in absolute.components() {
        match part {
            std::path::Component::ParentDir => {
                clean.pop();
            }
            std::path::Component::CurDir => {}
            other => clean.push(other),
        }
    }
    clean
}

/// What the end of the run stops, however it ends (the script's EXIT trap): everything
/// started, a series' broker still running, the static nginx.
struct Cleanup<'a> {
    out: &'a Path,
    services: &'a Services,
}

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        self.services.cleanup();
        for series in ["ingest", "consumer"] {
            let pidfile = self.out.join(format!("tansu-{series}/tansu.pid"));
            if pidfile.exists() {
                let _ = stack_kit::process::stop(&pidfile, "the benchmark's tansu");
            }
        }
        if self.out.join("nginx/nginx.conf").exists() {
            nginx::stop(&self.out.join("nginx"));
        }
    }
}

/// The whole run; false when a round was refused.
async fn run(repo: &Path, settings: &Settings) -> anyhow::Result<bool> {
    let out = repo.join(".run/bench").join(stamp());
    std::fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
    supervise::scripts_up(repo).await?;

    let up = repo.join(".run/up");
    let mut watch = vec!["loadgen=self".to_owned()];
    for service in ["tansu", "clickhouse", "ingest", "config-api", "consumer"] {
        let pid = supervise::read_pid(&supervise::pidfile(&up, service))?;
        watch.push(format!("{service}={pid}"));
    }
    let bench = Bench {
        loadgen: supervise::loadgen()?,
        figures: out.join("figures.jsonl"),
        seconds: settings.seconds,
        watch: RefCell::new(watch),
        settle: RefCell::new(Settle::Pipeline),
        running: Cell::new(None),
    };
    let snapshot = absolute(
        &settings
            .snapshot
            .clone()
            .unwrap_or_else(|| repo.join("deploy/experiments.json")),
    );
    let key = bench
        .run(
            &strings(&[
                "snapshot-key",
                "--snapshot",
                &snapshot.display().to_string(),
            ]),
            Stdout::Capture,
            Stderr::Inherit,
        )
        .await?;
    let key = match key {
        (0, key) => key.trim().to_owned(),
        _ => anyhow::bail!("no public key in {}", snapshot.display()),
    };
    let services = Services::new(repo, &out);
    let _cleanup = Cleanup {
        out: &out,
        services: &services,
    };
    let refusals = Refusals {
        path: out.join("refused.txt"),
    };
    let run = Run {
        repo,
        out: &out,
        settings,
        bench: &bench,
        services: &services,
        refusals: &refusals,
        snapshot,
        key,
    };

    let static_nginx = if settings.wanted(Section::ConfigApi) || settings.wanted(Section::Ingest) {
        Some(nginx::Static::start(&out).await?)
    } else {
        None
    };
    if let Some(nginx) = static_nginx
        .as_ref()
        .filter(|_| settings.wanted(Section::ConfigApi))
    {
        config_api::section(&run, nginx).await?;
    }
    if let Some(nginx) = static_nginx
        .as_ref()
        .filter(|_| settings.wanted(Section::Ingest))
    {
        let series = Series::start("ingest", &run).await?;
        ingest::section(&run, &series, nginx).await?;
        series.end().await?;
        run.clickhouse_sql("DROP DATABASE IF EXISTS bench_ingest")
            .await?;
    }
    if settings.wanted(Section::Consumer) {
        let series = Series::start("consumer", &run).await?;
        if consumer::section(&run, &series).await? == Round::Kept && settings.peers().is_some() {
            consumer_peers::section(&run, &series).await?;
        }
        series.end().await?;
        run.clickhouse_sql("DROP DATABASE IF EXISTS bench_consumer")
            .await?;
        run.clickhouse_sql("DROP DATABASE IF EXISTS bench_reference")
            .await?;
        if settings.peers().is_some() {
            consumer_peers::stop_peer(&out).await?;
        }
    }
    if settings.wanted(Section::Pipeline) {
        pipeline(&run).await?;
    }
    for service in ["ingest", "config-api", "consumer"] {
        let pid = supervise::read_pid(&supervise::pidfile(&up, service))?;
        bench
            .tool(
                &strings(&[
                    "rss",
                    "--bench",
                    "whole run (scripts/up)",
                    "--subject",
                    service,
                    "--pid",
                    &pid.to_string(),
                ]),
                Stdout::Append(&bench.figures),
                Stderr::Null,
            )
            .await?;
    }
    tables(&run).await
}

/// Section 5, the whole pipeline of scripts/up on this machine: browser traffic through the front
/// at rising rates, open loop, with the consumer and ClickHouse running and merging; the
/// time from POST to queryable row sampled by event id, the CPU of every process and of
/// the machine, the sustainable rate and what saturated first (loadgen pipeline).
async fn pipeline(run: &Run<'_>) -> anyhow::Result<()> {
    let s = run.settings;
    log(&format!(
        "The whole pipeline: rates {} events/s, {} s each",
        s.pipeline_rates, s.pipeline_seconds
    ));
    run.bench.settle().await?;
    let master = supervise::read_pid(&run.repo.join(".run/up/nginx/nginx.pid"))?;
    let mut args = strings(&[
        "pipeline",
        "--url",
        "http://127.0.0.1:8080",
        "--snapshot",
        &run.snapshot(),
        "--rates",
        &s.pipeline_rates,
        "--step-seconds",
        &s.pipeline_seconds.to_string(),
    ]);
    for watched in run.bench.watch.borrow().iter() {
        args.extend(["--watch".to_owned(), watched.clone()]);
    }
    for worker in nginx::children(master) {
        args.extend(["--watch".to_owned(), format!("nginx={worker}")]);
    }
    run.bench
        .tool(
            &args,
            Stdout::Create(&run.out.join("pipeline.md")),
            Stderr::Inherit,
        )
        .await
        .map(drop)
}

/// The machine: cores, memory (GiB, rounded down as `free -g` shows it), kernel.
fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let kib: u64 = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!(
        "Machine: {cores} cores, {} GiB, {}",
        kib / 1024 / 1024,
        kernel.trim()
    )
}

/// The tables; false when a round was refused (listed last).
async fn tables(run: &Run<'_>) -> anyhow::Result<bool> {
    let figures = run.bench.figures.display().to_string();
    let print = |text: &str| -> anyhow::Result<()> {
        let mut stdout = std::io::stdout().lock();
        stdout.write_all(text.as_bytes())?;
        stdout.flush()?;
        Ok(())
    };
    print(&format!("\n{}; figures in {figures}\n\n", machine()))?;
    // Read once, for both tables: every round's line is written by now.
    let kept = report::figures(&run.bench.figures)?;
    print(&report::render(&kept))?;
    if let Ok(guarantees) = std::fs::read_to_string(run.out.join("guarantees.txt")) {
        print(&format!("\n{guarantees}"))?;
    }
    if let Ok(pipeline) = std::fs::read_to_string(run.out.join("pipeline.md")) {
        print(&format!(
            "\nThe whole pipeline on this machine (scripts/up, through the front)\n\n{pipeline}"
        ))?;
    }
    // Every rate with its latency: medians over the rounds of p50 and p99 as the load tool
    // measured them (loadgen's histogram, wrk's --latency); n/a for the tools that send no
    // requests (producer, consumers, inserts).
    print(
        "\nLatency beside each rate (medians over the rounds kept; n/a: the tool measures no \
         request latency)\n\n",
    )?;
    print(&report::latencies(&kept))?;
    let refused = run.refusals.text();
    if refused.is_empty() {
        return Ok(true);
    }
    print(&format!(
        "\nRefused rounds (the broker was dead; their figures are in no table above):\n{refused}"
    ))?;
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_is_made_absolute_as_realpath_m_does() {
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(absolute(Path::new("no/such/../file")), cwd.join("no/file"));
        assert_eq!(absolute(Path::new("/")), Path::new("/"));
        assert!(machine().starts_with("Machine: "));
        assert_eq!(stamp().len(), "20261126T151626Z".len());
    }
}
