//! The verdict of `scripts/chaos` (`devtool chaos-verdict`): from the run's folder, the
//! faults injected (`faults.log`), the answers other than 2xx with their times
//! (`answers.log`) and the resident memory sampled every second (`rss.log`), it writes
//! `verdict.md`: the faults with the answers each drew, the fault kinds against what each
//! must show, memory against its bounds, then PASS or FAIL with every reason.
//!
//! An answer belongs to the last fault begun before it, up to the delivery timeout + 2 s
//! after that fault ended (a request sent as it ended is answered by then). A fault kind
//! fails when it was never injected; a broker pause must draw a 503, a ZooKeeper pause an
//! insert retry, and the ClickHouse faults together an insert retry. A service fails when
//! one of its processes grew by more than its bound: its last sample less its sample
//! [`WARM_UP_SAMPLES`] seconds after its first (a process restarted under load fills its
//! pools and buffers then; a leak grows after).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::Context;

#[derive(clap::Args)]
pub struct VerdictArgs {
    /// The run's folder: faults.log, answers.log and rss.log in, verdict.md out.
    #[arg(long)]
    pub out: PathBuf,
    /// The load's exit status (non-zero: events lost or duplicated, or given up).
    #[arg(long)]
    pub load_status: i32,
    /// Snapshot versions some service never took.
    #[arg(long, default_value_t = 0)]
    pub snapshot_misses: usize,
    /// The fault kinds the run was to inject, space-separated.
    #[arg(long)]
    pub faults: String,
    /// Each service's bound on resident memory growth, `name=MiB`, space-separated.
    #[arg(long)]
    pub bounds: String,
    /// Seconds a paused process stays stopped.
    #[arg(long)]
    pub pause: u64,
    /// The ingest's Kafka delivery timeout, milliseconds.
    #[arg(long)]
    pub delivery_ms: u64,
    /// The consumer's ClickHouse insert timeout, milliseconds.
    #[arg(long)]
    pub insert_ms: u64,
}

/// One injected fault, from a line of `faults.log`.
#[derive(Debug)]
struct Fault {
    started: String,
    seconds: String,
    name: String,
    target: String,
    /// `-` across a restart of the consumer.
    retries: Option<u64>,
    begun_ms: i64,
    ended_ms: i64,
    answers: BTreeMap<String, u64>,
}

/// Writes `verdict.md`; true when the run passed.
pub fn run(args: &VerdictArgs) -> anyhow::Result<bool> {
    let read = |name: &str| {
        let path = args.out.join(name);
        std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))
    };
    let (text, passed) = verdict(
        args,
        &read("faults.log")?,
        &read("answers.log")?,
        &read("rss.log")?,
    )?;
    let path = args.out.join("verdict.md");
    std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(passed)
}

fn data_lines(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
}

fn faults(text: &str) -> anyhow::Result<Vec<Fault>> {
    data_lines(text)
        .map(|line| {
            let f: Vec<&str> = line.split('\t').collect();
            anyhow::ensure!(f.len() == 8, "faults.log: not 8 fields: {line:?}");
            Ok(Fault {
                started: f[0].to_owned(),
                seconds: f[2].to_owned(),
                name: f[3].to_owned(),
                target: f[4].to_owned(),
                retries: (f[5] != "-")
                    .then(|| f[5].parse())
                    .transpose()
                    .with_context(|| format!("faults.log: retries {:?}", f[5]))?,
                begun_ms: f[6].parse().context("faults.log: started_ms")?,
                ended_ms: f[7].parse().context("faults.log: ended_ms")?,
                answers: BTreeMap::new(),
            })
        })
        .collect()
}

fn listed(counter: &BTreeMap<String, u64>) -> String {
    if counter.is_empty() {
        return "none".to_owned();
    }
    counter
        .iter()
        .map(|(answer, n)| format!("{answer} × {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A process's memory samples (KiB).
struct Process {
    service: String,
    /// The resident memory after its warm-up (its first sample while it has fewer).
    baseline: u64,
    last: u64,
    peak: u64,
    samples: usize,
}

/// Samples (seconds) of a process's warm-up, before its growth is counted: a restarted
/// ingest reaches its working size in about that much of full load (21 MiB from a start of
/// 7 MiB in a cluster run, where the bound is 16 MiB).
const WARM_UP_SAMPLES: usize = 5;

/// The text of `verdict.md` and whether the run passed.
fn verdict(
    args: &VerdictArgs,
    faults_log: &str,
    answers_log: &str,
    rss_log: &str,
) -> anyhow::Result<(String, bool)> {
    let grace_ms = args.delivery_ms as i64 + 2000;
    let mut faults = faults(faults_log)?;
    let outside = count_answers(&mut faults, answers_log, grace_ms)?;
    let mut report = Report::default();
    if args.load_status != 0 {
        report.failures.push(
            "events lost or duplicated, or given up or refused by the clients (see above)"
                .to_owned(),
        );
    }
    report.faults_table(&faults, &outside, grace_ms)?;
    report.fault_kinds(args, &faults)?;
    let processes = processes(rss_log)?;
    report.memory(args, &processes)?;
    report.conclusion()
}

/// Counts each answer of `answers.log` against the fault that owns it (the last begun
/// before it, up to `grace_ms` after its end); returns the answers no fault owns.
fn count_answers(
    faults: &mut [Fault],
    answers_log: &str,
    grace_ms: i64,
) -> anyhow::Result<BTreeMap<String, u64>> {
    let mut outside = BTreeMap::new();
    for line in data_lines(answers_log) {
        let (at, answer) = line
            .split_once(' ')
            .with_context(|| format!("answers.log: {line:?}"))?;
        let at: i64 = at
            .parse()
            .with_context(|| format!("answers.log: {line:?}"))?;
        let owner = faults
            .iter_mut()
            .rev()
            .find(|f| f.begun_ms <= at && at <= f.ended_ms + grace_ms);
        *owner
            .map_or(&mut outside, |f| &mut f.answers)
            .entry(answer.to_owned())
            .or_insert(0) += 1;
    }
    Ok(outside)
}

/// Insert retries as the tables show them: `-` when unknown.
fn retries_cell(retries: Option<u64>) -> String {
    retries.map_or("-".to_owned(), |r| r.to_string())
}

/// The faults of one kind, as the fault kinds' table counts them.
struct Tally {
    /// How many were injected.
    injected: usize,
    /// The 503 answers they drew.
    n503: u64,
    /// Their insert retries, summed over those whose count is known; none when none is.
    retries: Option<u64>,
}

impl Tally {
    /// The tally of the faults of `kind`.
    fn of(faults: &[Fault], kind: &str) -> Self {
        let of_kind: Vec<&Fault> = faults.iter().filter(|f| f.name == kind).collect();
        let n503: u64 = of_kind
            .iter()
            .map(|f| f.answers.get("503").copied().unwrap_or(0))
            .sum();
        let known: Vec<u64> = of_kind.iter().filter_map(|f| f.retries).collect();
        let retries = (!known.is_empty()).then(|| known.iter().sum::<u64>());
        Self {
            injected: of_kind.len(),
            n503,
            retries,
        }
    }
}

/// `verdict.md` as it is written, with the reasons to fail found so far.
#[derive(Default)]
struct Report {
    /// The text so far.
    out: String,
    /// Every reason the run fails, in the order found.
    failures: Vec<String>,
}

impl Report {
    /// Writes the faults' table: each fault with the answers it drew and its insert
    /// retries, then the answers no fault owns.
    fn faults_table(
        &mut self,
        faults: &[Fault],
        outside: &BTreeMap<String, u64>,
        grace_ms: i64,
    ) -> anyhow::Result<()> {
        let out = &mut self.out;
        let grace = grace_ms as f64 / 1000.0;
        writeln!(out, "## Faults\n")?;
        writeln!(
            out,
            "Answers other than 2xx are counted against the last fault begun before them, up to \
             {grace} s after it ended; insert retries are the consumer's \
             `consumer_insert_retries_total` over the fault (`-` across its restart).\n"
        )?;
        writeln!(
            out,
            "| # | fault | target | started (UTC) | lasted (s) | answers other than 2xx | insert retries |"
        )?;
        writeln!(out, "|---|---|---|---|---|---|---|")?;
        for (i, f) in faults.iter().enumerate() {
            writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} |",
                i + 1,
                f.name,
                f.target,
                f.started,
                f.seconds,
                listed(&f.answers),
                retries_cell(f.retries)
            )?;
        }
        writeln!(out, "| | (no fault) | | | | {} | |\n", listed(outside))?;
        Ok(())
    }

    /// Writes the fault kinds' table, each kind against what it must show, and records
    /// every kind that did not show it, the ClickHouse faults' retries and snapshot misses.
    fn fault_kinds(&mut self, args: &VerdictArgs, faults: &[Fault]) -> anyhow::Result<()> {
        writeln!(
            self.out,
            "| fault kind | injected | 503 answers | insert retries | required |"
        )?;
        writeln!(self.out, "|---|---|---|---|---|")?;
        let mut clickhouse_retries = 0;
        for kind in args.faults.split_whitespace() {
            let tally = Tally::of(faults, kind);
            if tally.injected == 0 {
                self.failures.push(format!(
                    "{kind} was never injected (SECONDS too short for this machine?)"
                ));
            }
            let required = self.required(args, kind, &tally, &mut clickhouse_retries);
            writeln!(
                self.out,
                "| {kind} | {} | {} | {} | {required} |",
                tally.injected,
                tally.n503,
                retries_cell(tally.retries)
            )?;
        }
        if clickhouse_retries == 0 {
            let (pause, insert_ms) = (args.pause, args.insert_ms);
            self.failures.push(format!(
                "the ClickHouse faults drew no insert retry (a {pause} s hang outlasts the \
                 {insert_ms} ms insert timeout)"
            ));
        }
        if args.snapshot_misses > 0 {
            self.failures
                .push("a snapshot change did not reach every service (faults.log)".to_owned());
        }
        writeln!(self.out)?;
        Ok(())
    }

    /// What a fault kind must show, recording a failure when it did not; adds the
    /// ClickHouse faults' retries to `clickhouse_retries`, judged together.
    fn required(
        &mut self,
        args: &VerdictArgs,
        kind: &str,
        tally: &Tally,
        clickhouse_retries: &mut u64,
    ) -> String {
        let (pause, delivery_ms) = (args.pause, args.delivery_ms);
        match kind {
            "broker-pause" => {
                if tally.injected > 0 && tally.n503 == 0 {
                    self.failures.push("no broker pause drew a 503".to_owned());
                }
                format!(
                    "injected; a 503 (the {pause} s pause outlasts the {delivery_ms} ms delivery timeout)"
                )
            }
            "clickhouse-hang" | "clickhouse-restart" => {
                *clickhouse_retries += tally.retries.unwrap_or(0);
                "injected; an insert retry by the ClickHouse faults together".to_owned()
            }
            "zookeeper-pause" => {
                if tally.injected > 0 && tally.retries.unwrap_or(0) == 0 {
                    self.failures
                        .push("no ZooKeeper pause drew an insert retry".to_owned());
                }
                "injected; an insert retry (replicated inserts wait for ZooKeeper)".to_owned()
            }
            "snapshot-change" => {
                "injected; taken by the ingest, the config-api and the consumer".to_owned()
            }
            _ => "injected".to_owned(),
        }
    }

    /// Writes the memory table, each service against its bound in `--bounds`, recording
    /// every service without samples or over its bound.
    fn memory(&mut self, args: &VerdictArgs, processes: &[Process]) -> anyhow::Result<()> {
        writeln!(self.out, "## Memory\n")?;
        writeln!(
            self.out,
            "Resident memory (KiB) sampled every second: a process's growth is its last sample less \
             its sample {WARM_UP_SAMPLES} s after its first (its warm-up); a service's is the \
             largest of its processes'.\n"
        )?;
        writeln!(
            self.out,
            "| service | processes | after warm-up | last sample | largest growth | peak (VmHWM) | bound on growth | within |"
        )?;
        writeln!(self.out, "|---|---|---|---|---|---|---|---|")?;
        for bound in args.bounds.split_whitespace() {
            let (service, mib) = bound
                .split_once('=')
                .with_context(|| format!("--bounds: {bound:?} is not name=MiB"))?;
            let mib: u64 = mib
                .parse()
                .with_context(|| format!("--bounds: {bound:?}"))?;
            self.service_memory(service, mib, processes)?;
        }
        Ok(())
    }

    /// Writes a service's row of the memory table: its processes' growth against its
    /// bound of `mib` MiB, recording a failure when it has no samples or grew over it.
    fn service_memory(
        &mut self,
        service: &str,
        mib: u64,
        processes: &[Process],
    ) -> anyhow::Result<()> {
        let of: Vec<&Process> = processes.iter().filter(|p| p.service == service).collect();
        let (Some(first), Some(last)) = (of.first(), of.last()) else {
            writeln!(
                self.out,
                "| {service} | 0 | - | - | - | - | {mib} MiB | no samples |"
            )?;
            self.failures.push(format!("{service}: no memory samples"));
            return Ok(());
        };
        let growth = of
            .iter()
            .map(|p| p.last as i64 - p.baseline as i64)
            .max()
            .unwrap_or(0);
        let within = growth <= (mib * 1024) as i64;
        if !within {
            self.failures.push(format!(
                "{service}: resident memory grew {growth} KiB, over its bound of {mib} MiB"
            ));
        }
        writeln!(
            self.out,
            "| {service} | {} | {} | {} | {growth} | {} | {mib} MiB | {} |",
            of.len(),
            first.baseline,
            last.last,
            of.iter().map(|p| p.peak).max().unwrap_or(0),
            if within { "yes" } else { "**no**" }
        )?;
        Ok(())
    }

    /// Writes the verdict, PASS or FAIL with every reason; the whole text and whether the
    /// run passed.
    fn conclusion(mut self) -> anyhow::Result<(String, bool)> {
        writeln!(self.out, "\n## Verdict\n")?;
        if self.failures.is_empty() {
            writeln!(
                self.out,
                "**PASS**: no acknowledged event lost or duplicated, every fault kind injected \
                 and seen to bite, memory within bounds."
            )?;
        } else {
            writeln!(self.out, "**FAIL**\n")?;
            for f in &self.failures {
                writeln!(self.out, "- {f}")?;
            }
        }
        let passed = self.failures.is_empty();
        Ok((self.out, passed))
    }
}

/// Each process's memory samples from `rss.log`, in the order first sampled; each
/// process is measured against itself (a restarted service's new process starts afresh).
fn processes(rss_log: &str) -> anyhow::Result<Vec<Process>> {
    let mut processes: Vec<((String, String), Process)> = Vec::new();
    for line in data_lines(rss_log) {
        let f: Vec<&str> = line.split_whitespace().collect();
        anyhow::ensure!(f.len() >= 4, "rss.log: {line:?}");
        let rss: u64 = f[3].parse().with_context(|| format!("rss.log: {line:?}"))?;
        let hwm: u64 = f.get(4).and_then(|h| h.parse().ok()).unwrap_or(0);
        let key = (f[1].to_owned(), f[2].to_owned());
        match processes.iter_mut().find(|(k, _)| *k == key) {
            Some((_, p)) => {
                p.last = rss;
                p.peak = p.peak.max(hwm);
                p.samples += 1;
                if p.samples == WARM_UP_SAMPLES + 1 {
                    p.baseline = rss;
                }
            }
            None => processes.push((
                key,
                Process {
                    service: f[1].to_owned(),
                    baseline: rss,
                    last: rss,
                    peak: hwm,
                    samples: 1,
                },
            )),
        }
    }
    Ok(processes.into_iter().map(|(_, p)| p).collect())
}

/// `devtool chaos-verdict`'s exit code: 1 on a failed verdict, 3 when it could not be made.
pub fn command(args: &VerdictArgs) -> i32 {
    match run(args) {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(e) => {
            eprintln!("the chaos verdict could not be made: {e:#}");
            3
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn args(out: &Path, faults: &str) -> VerdictArgs {
        VerdictArgs {
            out: out.to_owned(),
            load_status: 0,
            snapshot_misses: 0,
            faults: faults.to_owned(),
            bounds: "ingest=16 consumer=128".to_owned(),
            pause: 6,
            delivery_ms: 3000,
            insert_ms: 2000,
        }
    }

    const FAULTS: &str = "# started (UTC)\tended (UTC)\tseconds\tfault\ttarget\tinsert retries\tstarted_ms\tended_ms
2026-11-26T10:00:00.000Z\t2026-11-26T10:00:06.000Z\t6.0\tbroker-pause\ttansu\t0\t1000000\t1006000
2026-11-26T10:00:20.000Z\t2026-11-26T10:00:26.000Z\t6.0\tclickhouse-hang\tclickhouse\t2\t1020000\t1026000
2026-11-26T10:00:40.000Z\t2026-11-26T10:00:41.000Z\t1.0\tconsumer-kill\tconsumer\t-\t1040000\t1041000
";
    // A 503 in the first fault, one 4.9 s after it ended (its grace), one long after.
    const ANSWERS: &str = "1003000 503\n1010900 503\n1050000 429\n";
    const RSS: &str = "# t service pid rss hwm
1 ingest 10 20000 20000
2 ingest 10 22000 22500
1 consumer 11 30000 30000
2 consumer 11 90000 95000
3 consumer 12 10000 10000
4 consumer 12 12000 12000
";

    fn write(dir: &Path, faults: &str, answers: &str, rss: &str) {
        std::fs::write(dir.join("faults.log"), faults).unwrap();
        std::fs::write(dir.join("answers.log"), answers).unwrap();
        std::fs::write(dir.join("rss.log"), rss).unwrap();
    }

    #[test]
    fn a_run_whose_faults_bite_and_whose_memory_holds_passes() {
        let folder = tempfile::tempdir().unwrap();
        let dir = folder.path();
        write(dir, FAULTS, ANSWERS, RSS);
        let args = args(dir, "broker-pause clickhouse-hang consumer-kill");
        assert!(run(&args).unwrap());
        let text = std::fs::read_to_string(dir.join("verdict.md")).unwrap();
        assert!(
            text.contains(
                "| 1 | broker-pause | tansu | 2026-11-26T10:00:00.000Z | 6.0 | 503 × 2 | 0 |"
            ),
            "{text}"
        );
        assert!(
            text.contains("| | (no fault) | | | | 429 × 1 | |"),
            "{text}"
        );
        assert!(
            text.contains("| broker-pause | 1 | 2 | 0 | injected; a 503"),
            "{text}"
        );
        assert!(
            text.contains("| consumer-kill | 1 | 0 | - | injected |"),
            "{text}"
        );
        // The consumer's first process grew 60000 KiB, within 128 MiB; two processes.
        assert!(
            text.contains("| consumer | 2 | 30000 | 12000 | 60000 | 95000 | 128 MiB | yes |"),
            "{text}"
        );
        assert!(text.contains("**PASS**"), "{text}");
    }

    #[test]
    fn every_reason_to_fail_is_listed() {
        let folder = tempfile::tempdir().unwrap();
        let dir = folder.path();
        // The broker pause drew no 503; no ClickHouse retry; the ingest grew 20 MiB.
        let faults = FAULTS.replace("\t2\t1020000", "\t0\t1020000");
        let rss = RSS.replace("2 ingest 10 22000", "2 ingest 10 40480");
        write(dir, &faults, "1030000 429\n", &rss);
        let mut args = args(dir, "broker-pause clickhouse-hang zookeeper-pause");
        args.load_status = 1;
        args.snapshot_misses = 1;
        args.bounds += " config-api=8";
        assert!(!run(&args).unwrap());
        let text = std::fs::read_to_string(dir.join("verdict.md")).unwrap();
        for reason in [
            "- events lost or duplicated",
            "- no broker pause drew a 503",
            "- the ClickHouse faults drew no insert retry (a 6 s hang outlasts the 2000 ms insert timeout)",
            "- zookeeper-pause was never injected",
            "- a snapshot change did not reach every service",
            "- ingest: resident memory grew 20480 KiB, over its bound of 16 MiB",
            "- config-api: no memory samples",
        ] {
            assert!(text.contains(reason), "{reason}: {text}");
        }
        assert!(text.contains("**FAIL**"), "{text}");
    }

    /// A process restarted under load: what it takes in its first seconds is its warm-up;
    /// what it takes after counts.
    #[test]
    fn a_process_is_measured_after_its_warm_up() {
        let dir = tempfile::tempdir().unwrap();
        let ingest = |after: u64| {
            let mut rss = "# t service pid rss hwm\n1 consumer 11 30000 30000\n".to_owned();
            let warm = 5; // seconds of a restarted ingest's warm-up, as measured
            for t in 1..=warm + 3 {
                let kib = match t {
                    t if t <= warm => 7000 + 4200 * t,
                    t if t == warm + 1 => 28000,
                    _ => 28000 + after,
                };
                rss += &format!("{t} ingest 10 {kib} {kib}\n");
            }
            rss
        };
        let verdict = |rss: &str| {
            write(dir.path(), FAULTS, ANSWERS, rss);
            let passed = run(&args(
                dir.path(),
                "broker-pause clickhouse-hang consumer-kill",
            ))
            .unwrap();
            (
                passed,
                std::fs::read_to_string(dir.path().join("verdict.md")).unwrap(),
            )
        };
        let (passed, text) = verdict(&ingest(0));
        assert!(passed, "{text}");
        let (passed, text) = verdict(&ingest(20000));
        assert!(
            !passed && text.contains("ingest: resident memory grew 20000 KiB"),
            "{text}"
        );
    }

    #[test]
    fn a_broken_log_is_an_error_not_a_verdict() {
        let folder = tempfile::tempdir().unwrap();
        let dir = folder.path();
        write(dir, "not\ttabs enough\n", "", RSS);
        assert!(run(&args(dir, "broker-pause")).is_err());
    }
}
