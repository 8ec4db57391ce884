//! `devtool`: the developers' runs, as Vector's `vdev` is theirs. Each command is the body
//! of a script and drives the pipeline of `scripts/up` with `loadgen`'s load (a child
//! process): `bench` (scripts/bench), `bench-results` (scripts/bench-results), `chaos`
//! (scripts/chaos) and `chaos-verdict` (the chaos run's verdict from its folder), and
//! `report` and `latencies` print a run's tables again from its figures.
//!
//! [`bench`] and [`bench_results`] measure and [`report`] tabulates the figures; [`chaos`]
//! injects faults and [`chaos_verdict`] judges them; [`supervise`] is what they share to
//! start, watch and stop processes.

#![cfg_attr(test, allow(clippy::unwrap_used))]

mod bench;
mod bench_results;
mod chaos;
mod chaos_verdict;
mod report;
mod supervise;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "The developers' runs: the benchmark and the chaos run")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The body of scripts/bench (see its --help): starts the scripts/up pipeline,
    /// measures each section next to its reference, the series on brokers of their own
    /// whose every round is refused on a dead broker, and prints the tables. Exits 1 when
    /// something could not run, a refused round included.
    Bench(bench::BenchArgs),
    /// The body of scripts/bench-results (see its --help): times the results views over
    /// millions of events in a database of its own, dropped at the end, and prints the
    /// table. Exits 1 when a step fails.
    BenchResults(bench_results::BenchResultsArgs),
    /// The body of scripts/chaos (which passes its arguments on; see its --help): starts
    /// the scripts/up pipeline with the run's settings, runs `loadgen chaos` while a nemesis
    /// injects faults in turn and memory is sampled every second, then writes the run's
    /// summary.md with the verdict. Exits 1 when it fails, 2 on a usage error.
    Chaos(chaos::ChaosArgs),
    /// The verdict of scripts/chaos from its run's folder (faults.log, answers.log,
    /// rss.log), written to verdict.md: exits 1 when it fails, 3 when it cannot be made.
    ChaosVerdict(chaos_verdict::VerdictArgs),
    /// Prints the comparison table of the figures (`loadgen`'s JSON lines) in FILE.
    Report { file: std::path::PathBuf },
    /// Prints the latency table of the figures in FILE: per bench and subject measured at
    /// a rate, the medians over its rounds of the rate, p50 and p99.
    Latencies { file: std::path::PathBuf },
}

/// Runs the command; its exit code is the process's (the only `exit` of the crate).
#[tokio::main]
async fn main() {
    let code = match Cli::parse().command {
        Command::Bench(args) => bench::command(args).await,
        Command::BenchResults(args) => bench_results::command(args).await,
        Command::Chaos(args) => chaos::command(args).await,
        Command::ChaosVerdict(args) => chaos_verdict::command(&args),
        Command::Report { file } => report::print(&file, report::render),
        Command::Latencies { file } => report::print(&file, report::latencies),
    };
    std::process::exit(code);
}
