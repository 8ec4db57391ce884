//! One measurement of the benchmark: a `loadgen` command (a child process, as every figure
//! has always been taken, so that `--watch loadgen=self` counts the load alone), after the
//! settle its series asks for, with the CPU of the watched processes; its figure appended
//! to a figures file, its summary on stderr (the lines of detail, indented, left out).

use std::cell::{Cell, RefCell};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context;
use tokio::io::AsyncBufReadExt;

use crate::supervise;

/// What a measurement's command is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tool {
    /// `loadgen ARGS… WATCH…`.
    Loadgen(Vec<String>),
    /// `loadgen wrk OWN… WATCH… --warmup 2 --duration SECONDS -- WRK…`.
    Wrk { own: Vec<String>, wrk: Vec<String> },
}

/// A measurement: its command, and whether the settle of its series comes first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Measure {
    pub tool: Tool,
    pub settle: bool,
}

/// Strings of a command line.
pub fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

impl Measure {
    pub fn loadgen(args: Vec<String>) -> Self {
        Self {
            tool: Tool::Loadgen(args),
            settle: true,
        }
    }

    pub fn wrk(own: Vec<String>, wrk: Vec<String>) -> Self {
        Self {
            tool: Tool::Wrk { own, wrk },
            settle: true,
        }
    }

    /// Without the settle first (`NO_SETTLE=1`).
    pub fn unsettled(self) -> Self {
        Self {
            settle: false,
            ..self
        }
    }

    /// `round BENCH/SUBJECT`, the name of a round in a refusal.
    pub fn label(&self) -> String {
        let args = match &self.tool {
            Tool::Loadgen(args) => args,
            Tool::Wrk { own, .. } => own,
        };
        let values: Vec<&str> = args
            .windows(2)
            .filter(|w| w[0] == "--bench" || w[0] == "--subject")
            .map(|w| w[1].as_str())
            .collect();
        format!("round {}", values.join("/"))
    }

    /// The whole `loadgen` command line with the watched processes.
    pub fn command(&self, watch: &[String], seconds: u64) -> Vec<String> {
        let watch = watch.iter().flat_map(|w| ["--watch".to_owned(), w.clone()]);
        match &self.tool {
            Tool::Loadgen(args) => args.iter().cloned().chain(watch).collect(),
            Tool::Wrk { own, wrk } => std::iter::once("wrk".to_owned())
                .chain(own.iter().cloned())
                .chain(watch)
                .chain(strings(&["--warmup", "2", "--duration"]))
                .chain([seconds.to_string(), "--".to_owned()])
                .chain(wrk.iter().cloned())
                .collect(),
        }
    }
}

/// What comes before a measurement.
#[derive(Debug, Clone)]
pub enum Settle {
    /// scripts/up's consumer has stored what the last measurement sent.
    Pipeline,
    /// The ingest series': its consumer (continued) has stored what the last round sent
    /// to the series' broker, then it is frozen until the next settle and ClickHouse has
    /// finished its merges and statements, so that the ingest is measured alone.
    Ingest { consumer: u32, brokers: String },
}

/// Where a `loadgen` command's stdout goes.
pub enum Stdout<'a> {
    Inherit,
    Null,
    Append(&'a Path),
    Create(&'a Path),
    Capture,
}

/// Where its stderr goes.
#[derive(Clone, Copy)]
pub enum Stderr {
    Inherit,
    Null,
    /// Without the indented lines of detail.
    Summary,
}

/// The context of every measurement of a run.
pub struct Bench {
    pub loadgen: PathBuf,
    /// figures.jsonl: every figure kept.
    pub figures: PathBuf,
    pub seconds: u64,
    /// `name=pid` of every process whose CPU each figure reports.
    pub watch: RefCell<Vec<String>>,
    pub settle: RefCell<Settle>,
    /// The measuring process running now, for a round stopped by its broker's death.
    pub running: Cell<Option<u32>>,
}

impl Bench {
    /// Adds `name=pid` entries to the watched processes; the list before, to restore.
    pub fn watch_also(&self, more: &[(&str, u32)]) -> Vec<String> {
        let before = self.watch.borrow().clone();
        self.watch
            .borrow_mut()
            .extend(more.iter().map(|(name, pid)| format!("{name}={pid}")));
        before
    }

    pub fn watch_restore(&self, before: Vec<String>) {
        *self.watch.borrow_mut() = before;
    }

    /// Runs a measurement, its figure appended to `into`; the exit code of its command
    /// (an error when the settle before it fails).
    pub async fn measure(&self, measure: &Measure, into: &Path) -> anyhow::Result<i32> {
        if measure.settle {
            self.settle().await?;
        }
        let command = measure.command(&self.watch.borrow(), self.seconds);
        let (code, _) = self
            .run(&command, Stdout::Append(into), Stderr::Summary)
            .await?;
        Ok(code)
    }

    /// A measurement whose figure goes straight into the figures; its failure is the run's.
    pub async fn measure_kept(&self, measure: &Measure) -> anyhow::Result<()> {
        let code = self.measure(measure, &self.figures).await?;
        anyhow::ensure!(code == 0, "{} failed (exit {code})", measure.label());
        Ok(())
    }

    /// A `loadgen` tool that must succeed; its stdout when captured.
    pub async fn tool(
        &self,
        args: &[String],
        stdout: Stdout<'_>,
        stderr: Stderr,
    ) -> anyhow::Result<String> {
        let (code, out) = self.run(args, stdout, stderr).await?;
        anyhow::ensure!(
            code == 0,
            "loadgen {} failed (exit {code})",
            args.first().map_or("", String::as_str)
        );
        Ok(out)
    }

    /// Runs `loadgen ARGS`; its exit code (128 + the signal when killed) and captured
    /// stdout.
    pub async fn run(
        &self,
        args: &[String],
        stdout: Stdout<'_>,
        stderr: Stderr,
    ) -> anyhow::Result<(i32, String)> {
        let mut command = tokio::process::Command::new(&self.loadgen);
        command.args(args).stdin(Stdio::null()).kill_on_drop(true);
        let capture = matches!(stdout, Stdout::Capture);
        command.stdout(match stdout {
            Stdout::Inherit => Stdio::inherit(),
            Stdout::Null => Stdio::null(),
            Stdout::Capture => Stdio::piped(),
            Stdout::Append(path) => std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .with_context(|| format!("cannot open {}", path.display()))?
                .into(),
            Stdout::Create(path) => std::fs::File::create(path)
                .with_context(|| format!("cannot create {}", path.display()))?
                .into(),
        });
        command.stderr(match stderr {
            Stderr::Inherit => Stdio::inherit(),
            Stderr::Null => Stdio::null(),
            Stderr::Summary => Stdio::piped(),
        });
        let mut child = command.spawn().context("loadgen does not run")?;
        self.running.set(child.id());
        let filter = child
            .stderr
            .take()
            .map(|err| tokio::spawn(summary_only(err)));
        let mut out = String::new();
        if capture && let Some(mut pipe) = child.stdout.take() {
            use tokio::io::AsyncReadExt;
            pipe.read_to_string(&mut out).await?;
        }
        let status = child
            .wait()
            .await
            .context("loadgen could not be waited for");
        self.running.set(None);
        if let Some(filter) = filter {
            let _ = filter.await;
        }
        Ok((exit_code(status?), out))
    }

    /// The settle of the current series before a measurement.
    pub async fn settle(&self) -> anyhow::Result<()> {
        let settle = self.settle.borrow().clone();
        match settle {
            Settle::Pipeline => {
                self.tool(
                    &strings(&["settle", "--timeout", "900"]),
                    Stdout::Inherit,
                    Stderr::Inherit,
                )
                .await?;
            }
            Settle::Ingest { consumer, brokers } => {
                supervise::signal(consumer, "CONT")?;
                self.tool(
                    &strings(&[
                        "settle",
                        "--brokers",
                        &brokers,
                        "--group",
                        "bench-pipeline",
                        "--timeout",
                        "900",
                    ]),
                    Stdout::Inherit,
                    Stderr::Inherit,
                )
                .await?;
                // Frozen first: a statement it sent before still runs in ClickHouse,
                // and so would one it sent while the merges were waited for.
                supervise::signal(consumer, "STOP")?;
                for _ in 0..120 {
                    if clickhouse_busy().await == Some(0) {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
        Ok(())
    }
}

/// The merges and statements (but this one) that ClickHouse (scripts/up's) is running, as
/// it answers.
async fn clickhouse_busy() -> Option<u64> {
    let id = format!("bench-settle-{}", std::process::id());
    let answer = reqwest::Client::new()
        .post("http://127.0.0.1:8123/")
        .query(&[("query_id", id.as_str())])
        .body(format!(
            "SELECT (SELECT count() FROM system.merges) \
             + (SELECT count() FROM system.processes WHERE query_id != '{id}')"
        ))
        .send()
        .await
        .ok()?
        .error_for_status()
        .ok()?;
    answer.text().await.ok()?.trim().parse().ok()
}

/// A child's exit code as a shell reports it.
pub fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// Copies a measurement's stderr to ours without its indented lines of detail.
async fn summary_only(err: tokio::process::ChildStderr) {
    let mut lines = tokio::io::BufReader::new(err);
    let mut line = Vec::new();
    while lines
        .read_until(b'\n', &mut line)
        .await
        .is_ok_and(|n| n > 0)
    {
        if !line.starts_with(b" ") {
            use std::io::Write;
            let mut ours = std::io::stderr().lock();
            let _ = ours.write_all(&line);
            let _ = ours.flush();
        }
        line.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_measurement_s_command_and_label() {
        let watch = strings(&["loadgen=self", "tansu=7"]);
        let get = Measure::loadgen(strings(&[
            "get",
            "--bench",
            "config-api",
            "--subject",
            "nginx",
        ]));
        assert_eq!(
            get.command(&watch, 3).join(" "),
            "get --bench config-api --subject nginx --watch loadgen=self --watch tansu=7"
        );
        assert_eq!(get.label(), "round config-api/nginx");
        assert!(get.settle);
        let wrk = Measure::wrk(
            strings(&[
                "--bench",
                "ingest-wrk",
                "--subject",
                "ingest",
                "--unit",
                "events",
            ]),
            strings(&["-t", "2", "http://x", "--", "batches.tsv"]),
        )
        .unsettled();
        assert!(!wrk.settle);
        assert_eq!(
            wrk.command(&watch, 3).join(" "),
            "wrk --bench ingest-wrk --subject ingest --unit events --watch loadgen=self \
             --watch tansu=7 --warmup 2 --duration 3 -- -t 2 http://x -- batches.tsv"
        );
        assert_eq!(wrk.label(), "round ingest-wrk/ingest");
    }

    #[tokio::test]
    async fn the_summary_goes_on_without_its_lines_of_detail() {
        let dir = tempfile::tempdir().unwrap();
        let bench = Bench {
            loadgen: PathBuf::from("sh"),
            figures: dir.path().join("figures.jsonl"),
            seconds: 1,
            watch: RefCell::new(Vec::new()),
            settle: RefCell::new(Settle::Pipeline),
            running: Cell::new(None),
        };
        let script = strings(&[
            "-c",
            "echo '{}'; echo ' detail' >&2; echo summary >&2; exit 4",
        ]);
        let (code, _) = bench
            .run(&script, Stdout::Append(&bench.figures), Stderr::Summary)
            .await
            .unwrap();
        assert_eq!(code, 4);
        assert_eq!(std::fs::read_to_string(&bench.figures).unwrap(), "{}\n");
        let (code, out) = bench
            .run(
                &strings(&["-c", "kill -TERM $$"]),
                Stdout::Capture,
                Stderr::Null,
            )
            .await
            .unwrap();
        assert_eq!((code, out.as_str()), (143, ""));
    }
}
