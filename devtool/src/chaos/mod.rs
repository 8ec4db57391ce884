//! `devtool chaos`, the body of `scripts/chaos`: starts the scripts/up pipeline with
//! the run's settings, runs the load (`loadgen chaos`, a child process) while the nemesis
//! injects a round of faults after another and the sampler records memory, then makes the
//! verdict (`chaos_verdict`) and the run's `summary.md`. Whatever it stopped is continued
//! and whatever it started is ended, however the run ends.

mod memory;
mod metrics;
pub mod nemesis;
mod process;
mod settings;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::chaos_verdict::{self, VerdictArgs};
use crate::supervise;
use nemesis::Nemesis;
use process::Pipeline;
use settings::{Settings, Topology};

#[derive(clap::Args)]
pub struct ChaosArgs {
    /// The repository whose scripts/up pipeline to run (scripts/chaos passes its own).
    #[arg(long)]
    repo: PathBuf,
    /// scripts/chaos's own arguments, checked as its --help describes them: [SECONDS].
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
}

use stack_kit::log;

/// The exit code: 0 when the run passed, 1 when it failed or could not be made, 2 on a
/// usage error; 130 or 143 when interrupted, after letting go of what it started or
/// stopped.
pub async fn command(args: ChaosArgs) -> i32 {
    let settings = match Settings::parse(&args.args, |name| std::env::var(name).ok()) {
        Ok(settings) => settings,
        Err(usage) => {
            eprintln!("{usage}");
            return 2;
        }
    };
    // Once it returns, the run's future is gone: its guards continued what was stopped
    // and killed the load.
    supervise::exit_code(run(&args, &settings)).await
}

/// The first three figures of /proc/loadavg.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// A git command's output in the repository, trimmed.
fn git(repo: &Path, args: &[&str]) -> anyhow::Result<String> {
    let output = std::process::Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .stderr(Stdio::inherit())
        .output()
        .context("git does not run")?;
    anyhow::ensure!(output.status.success(), "git {args:?}: {}", output.status);
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// The run's folder name: its UTC start and topology.
fn run_name(topology: Topology) -> String {
    let format = time::macros::format_description!("[year][month][day]T[hour][minute][second]Z");
    let now = time::OffsetDateTime::now_utc();
    format!(
        "{}-{}",
        now.format(&format).unwrap_or_default(),
        topology.name()
    )
}

/// The end of `path` from byte `from` on (a service's log since the run began); `to` is
/// made even when `path` is missing, as the run's folder has always held one per service.
fn copy_tail(path: &Path, from: u64, to: &Path) -> std::io::Result<()> {
    use std::io::{Seek, SeekFrom};
    let mut kept = std::fs::File::create(to)?;
    let mut file = std::fs::File::open(path)?;
    file.seek(SeekFrom::Start(from))?;
    std::io::copy(&mut file, &mut kept)?;
    Ok(())
}

/// The services whose logs are kept with the run.
const KEPT_LOGS: [&str; 3] = ["ingest", "consumer", "config-api"];

/// The whole run; true when its verdict is PASS.
async fn run(args: &ChaosArgs, settings: &Settings) -> anyhow::Result<bool> {
    let repo = args.repo.as_path();
    let topology = settings.topology;
    let (name, out) = run_folder(repo, topology)?;
    let load_average_start = load_average();
    let wall = Instant::now();

    let (snapshot, pipeline) = start_pipeline(repo, &out, settings).await?;
    let faults = settings::round(topology);
    let services = settings::services(topology);
    let sampler = memory::Sampler::start(
        out.join("rss.log"),
        services
            .iter()
            .map(|s| (s.clone(), pipeline.pidfile(s)))
            .collect(),
    )?;
    // The services' logs, from here on, are kept with the run.
    let log_from = log_sizes(&pipeline);

    // However the run ends, the load is killed (as it is dropped) before the sampler stops:
    // locals are dropped in the reverse of their order here.
    let mut load = start_load(&out, &snapshot, settings)?;
    let started = Instant::now();
    let mut nemesis = Nemesis::new(
        &pipeline,
        settings,
        settings::clickhouses(topology),
        snapshot,
        out.join("faults.log"),
    )?;
    inject_faults(&mut nemesis, &faults, settings, started).await?;
    pipeline.up().await?; // whatever a fault left down comes back before the verdict

    let status = exit_status(&mut load).await?;
    sampler.stop();
    keep_logs(&pipeline, log_from, &out);
    if status > 1 {
        let errors = std::fs::read_to_string(out.join("load.err")).unwrap_or_default();
        eprint!("{errors}");
        anyhow::bail!("the load did not run (exit {status})");
    }

    let verdict = verdict_args(
        &out,
        status,
        nemesis.snapshot_misses.len(),
        &faults,
        &services,
        settings,
    );
    let passed = chaos_verdict::run(&verdict).context("the summary could not be made")?;
    summarise(repo, settings, &name, &out, &load_average_start, wall)?;
    Ok(passed)
}

/// Makes the run's folder under `.run/chaos` and points `latest` at it; its name and path.
fn run_folder(repo: &Path, topology: Topology) -> anyhow::Result<(String, PathBuf)> {
    let chaos_dir = repo.join(".run/chaos");
    let name = run_name(topology);
    let out = chaos_dir.join(&name);
    std::fs::create_dir_all(&chaos_dir)
        .with_context(|| format!("cannot create {}", chaos_dir.display()))?;
    std::fs::create_dir(&out).map_err(|_| {
        anyhow::anyhow!(
            "{} exists already (another run started this second?)",
            out.display()
        )
    })?;
    let latest = chaos_dir.join("latest");
    let _ = std::fs::remove_file(&latest);
    std::os::unix::fs::symlink(&name, &latest)
        .with_context(|| format!("cannot link {}", latest.display()))?;
    log(&format!("chaos: keeping this run in {}", out.display()));
    Ok((name, out))
}

/// Starts the scripts/up pipeline with the run's settings, serving the run's copy of the
/// demo snapshot (which the nemesis rewrites); that copy's path and the pipeline.
async fn start_pipeline(
    repo: &Path,
    out: &Path,
    settings: &Settings,
) -> anyhow::Result<(PathBuf, Pipeline)> {
    let snapshot = out.join("experiments.json");
    std::fs::copy(repo.join("deploy/experiments.json"), &snapshot)
        .context("cannot copy deploy/experiments.json")?;
    let env = vec![
        (
            "EXPERIMENTS_SNAPSHOT".to_owned(),
            snapshot.display().to_string(),
        ),
        (
            "INGEST_DELIVERY_TIMEOUT_MS".to_owned(),
            settings.delivery_ms.to_string(),
        ),
        (
            "CLICKHOUSE_INSERT_TIMEOUT_MS".to_owned(),
            settings.insert_ms.to_string(),
        ),
        (
            "KAFKA_SESSION_TIMEOUT_MS".to_owned(),
            settings.session_ms.to_string(),
        ),
    ];
    let pipeline = Pipeline::new(repo, out.join("up.log"), env);
    pipeline.up().await?;
    Ok((snapshot, pipeline))
}

/// Each kept service's log size now, where its copy in the run's folder will begin.
fn log_sizes(pipeline: &Pipeline) -> Vec<(&'static str, u64)> {
    KEPT_LOGS
        .iter()
        .map(|s| {
            let size = std::fs::metadata(pipeline.log_of(s)).map_or(0, |m| m.len());
            (*s, size)
        })
        .collect()
}

/// Starts the load, `loadgen chaos` on the run's snapshot, its output in `load.out` and
/// `load.err`; killed when dropped.
fn start_load(
    out: &Path,
    snapshot: &Path,
    settings: &Settings,
) -> anyhow::Result<tokio::process::Child> {
    let open = |file: &str| {
        let path = out.join(file);
        std::fs::File::create(&path).with_context(|| format!("cannot create {}", path.display()))
    };
    tokio::process::Command::new(supervise::loadgen()?)
        .arg("chaos")
        .arg("--snapshot")
        .arg(snapshot)
        .arg("--seconds")
        .arg(settings.seconds.to_string())
        .arg("--answers-log")
        .arg(out.join("answers.log"))
        .stdin(Stdio::null())
        .stdout(open("load.out")?)
        .stderr(open("load.err")?)
        .kill_on_drop(true)
        .spawn()
        .context("the load does not start")
}

/// Injects the round's faults in turn, each when due from the load's start, until none
/// is due before the load ends.
async fn inject_faults(
    nemesis: &mut Nemesis<'_>,
    faults: &[settings::Fault],
    settings: &Settings,
    started: Instant,
) -> anyhow::Result<()> {
    let every = settings::every(settings.seconds, faults.len());
    for i in 0.. {
        let Some(due) = settings::due(i, every, started.elapsed(), settings) else {
            break;
        };
        tokio::time::sleep_until((started + due).into()).await;
        let fault = faults[i as usize % faults.len()];
        log(&format!("chaos: {}", fault.name()));
        nemesis.inject(fault).await?;
    }
    Ok(())
}

/// Waits for the load to end; its exit code, or 128 + the signal that killed it, as a
/// shell reports it.
async fn exit_status(load: &mut tokio::process::Child) -> anyhow::Result<i32> {
    let status = load
        .wait()
        .await
        .context("the load could not be waited for")?;
    Ok(status.code().unwrap_or_else(|| {
        use std::os::unix::process::ExitStatusExt;
        128 + status.signal().unwrap_or(0)
    }))
}

/// Copies each kept service's log, from where the run began, into the run's folder.
fn keep_logs(pipeline: &Pipeline, log_from: Vec<(&str, u64)>, out: &Path) {
    for (service, from) in log_from {
        let _ = copy_tail(
            &pipeline.log_of(service),
            from,
            &out.join(format!("{service}.log")),
        );
    }
}

/// What the verdict is to judge: the run's folder, the load's exit status, the snapshot
/// versions missed, the round's fault kinds and each service's bound on memory growth.
fn verdict_args(
    out: &Path,
    load_status: i32,
    snapshot_misses: usize,
    faults: &[settings::Fault],
    services: &[String],
    settings: &Settings,
) -> VerdictArgs {
    VerdictArgs {
        out: out.to_owned(),
        load_status,
        snapshot_misses,
        faults: faults
            .iter()
            .map(|f| f.name())
            .collect::<Vec<_>>()
            .join(" "),
        bounds: services
            .iter()
            .map(|s| format!("{s}={}", settings::rss_bound_mib(s)))
            .collect::<Vec<_>>()
            .join(" "),
        pause: settings.pause,
        delivery_ms: settings.delivery_ms,
        insert_ms: settings.insert_ms,
    }
}

/// Writes `summary.md` (the run's settings, machine and events above the verdict's
/// tables) in place of `verdict.md`, and prints it.
fn summarise(
    repo: &Path,
    settings: &Settings,
    name: &str,
    out: &Path,
    load_average_start: &str,
    wall: Instant,
) -> anyhow::Result<()> {
    let changes = if git(repo, &["status", "--porcelain", "--untracked-files=no"])?.is_empty() {
        ""
    } else {
        " with local changes"
    };
    let summary = Summary {
        settings,
        run_name: name,
        commit: &git(repo, &["rev-parse", "--short", "HEAD"])?,
        changes,
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        load_average: (load_average_start, &load_average()),
        wall_clock: wall.elapsed(),
        events: &std::fs::read_to_string(out.join("load.out")).unwrap_or_default(),
        verdict: &std::fs::read_to_string(out.join("verdict.md"))
            .context("the summary could not be made")?,
    }
    .text();
    let path = out.join("summary.md");
    std::fs::write(&path, &summary).with_context(|| format!("cannot write {}", path.display()))?;
    let _ = std::fs::remove_file(out.join("verdict.md"));
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(summary.as_bytes())?;
    stdout.flush()?;
    log(&format!("chaos: kept in {}", out.display()));
    Ok(())
}

/// What `summary.md` says above the verdict's tables.
struct Summary<'a> {
    settings: &'a Settings,
    run_name: &'a str,
    commit: &'a str,
    /// Empty, or ` with local changes`.
    changes: &'a str,
    cores: usize,
    /// At the start and at the end.
    load_average: (&'a str, &'a str),
    wall_clock: Duration,
    /// The load's output (load.out).
    events: &'a str,
    /// The verdict's tables (verdict.md).
    verdict: &'a str,
}

impl Summary<'_> {
    fn text(&self) -> String {
        let s = self.settings;
        format!(
            "# scripts/chaos {} ({})\n\n\
             - run: `{}`, commit {}{}\n\
             - settings: CHAOS_PAUSE={} s, INGEST_DELIVERY_TIMEOUT_MS={}, CLICKHOUSE_INSERT_TIMEOUT_MS={}, \
             KAFKA_SESSION_TIMEOUT_MS={}\n\
             - machine: {} cores; load average {} at the start, {} at the end\n\
             - wall clock: {} s, starting the pipeline and settling included\n\n\
             ## Events\n\n```text\n{}```\n\n{}",
            s.seconds,
            s.topology.name(),
            self.run_name,
            self.commit,
            self.changes,
            s.pause,
            s.delivery_ms,
            s.insert_ms,
            s.session_ms,
            self.cores,
            self.load_average.0,
            self.load_average.1,
            self.wall_clock.as_secs(),
            self.events,
            self.verdict
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_opens_with_the_run_s_settings_and_events() {
        let settings = Settings {
            seconds: 90,
            pause: 5,
            delivery_ms: 2000,
            insert_ms: 2000,
            session_ms: 15000,
            topology: Topology::Cluster,
        };
        let text = Summary {
            settings: &settings,
            run_name: "20261126T151626Z-cluster",
            commit: "39b70da",
            changes: " with local changes",
            cores: 2,
            load_average: ("1.00 2.00 3.00", "4.00 5.00 6.00"),
            wall_clock: Duration::from_millis(157_900),
            events: "events acknowledged: 1\n",
            verdict: "## Faults\n",
        }
        .text();
        assert_eq!(
            text,
            "# scripts/chaos 90 (cluster)\n\n\
             - run: `20261126T151626Z-cluster`, commit 39b70da with local changes\n\
             - settings: CHAOS_PAUSE=5 s, INGEST_DELIVERY_TIMEOUT_MS=2000, CLICKHOUSE_INSERT_TIMEOUT_MS=2000, \
             KAFKA_SESSION_TIMEOUT_MS=15000\n\
             - machine: 2 cores; load average 1.00 2.00 3.00 at the start, 4.00 5.00 6.00 at the end\n\
             - wall clock: 157 s, starting the pipeline and settling included\n\n\
             ## Events\n\n```text\nevents acknowledged: 1\n```\n\n## Faults\n"
        );
    }

    #[test]
    fn a_log_is_kept_from_where_the_run_began() {
        let dir = tempfile::tempdir().unwrap();
        let (from, to) = (dir.path().join("a.log"), dir.path().join("b.log"));
        std::fs::write(&from, "before\nduring\n").unwrap();
        copy_tail(&from, 7, &to).unwrap();
        assert_eq!(std::fs::read_to_string(&to).unwrap(), "during\n");
        let empty = dir.path().join("c.log");
        assert!(copy_tail(&dir.path().join("missing.log"), 0, &empty).is_err());
        assert_eq!(std::fs::read_to_string(&empty).unwrap(), "");
        assert!(run_name(Topology::Single).ends_with("Z-single"));
    }
}
