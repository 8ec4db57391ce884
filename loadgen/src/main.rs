//! `loadgen`: the benchmark's load generator and reference tools. Every measuring command
//! prints one JSON line (a `Figure`) on stdout and a readable summary on stderr;
//! `loadgen report FILE` turns the collected lines into the comparison table.
//!
//! [`cli`] is the command line; [`scenario`] runs each command, with the load
//! ([`load`], [`traffic`]), the clients ([`kafka`], [`clickhouse`], [`wrk`]) and the
//! measures ([`stats`], [`watch`]) it needs; [`report`] renders the figures.

#![cfg_attr(test, allow(clippy::unwrap_used))]

mod bench_results;
mod bench_run;
mod chaos;
mod chaos_run;
mod chaos_verdict;
mod cli;
mod clickhouse;
mod demo;
mod kafka;
mod kafka_engine;
mod load;
mod peers;
mod pipeline;
mod report;
mod scenario;
mod stats;
mod supervise;
mod traffic;
mod watch;
mod wrk;

use clap::Parser;

use crate::cli::{Cli, Command};
use crate::scenario::{clickhouse as ch, http, kafka as k, tools, wrk as w};
use crate::stats::Figure;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    if let Some(figure) = run(Cli::parse().command).await? {
        eprintln!("{}", figure.summary());
        println!("{}", serde_json::to_string(&figure)?);
    }
    Ok(())
}

/// Runs a command: the figure of a measuring one, none of a tool's.
async fn run(command: Command) -> anyhow::Result<Option<Figure>> {
    let figure = match command {
        Command::Ingest(args) => http::ingest(args).await?,
        Command::Get(args) => http::get(args).await?,
        Command::Produce(args) => k::produce(args).await?,
        Command::Consume(args) => k::consume(args).await?,
        Command::ClickhouseInsert(args) => ch::insert(args).await?,
        Command::WaitRows(args) => ch::wait_rows(args).await?,
        Command::ClickhouseDisk(args) => ch::disk(args).await?,
        Command::Rss(args) => tools::rss(args)?,
        Command::Wrk(args) => w::measure(args)?,
        Command::KafkaEngine { action } => return k::engine(action).await.map(|()| None),
        Command::Rows(args) => return ch::rows(args).await.map(|()| None),
        Command::SameRows(args) => return ch::same_rows(args).await.map(|()| None),
        Command::Settle(args) => return k::settle(args).await.map(|()| None),
        Command::CreateTopics(args) => return k::create_topics(args).await.map(|()| None),
        Command::WrkBatches(args) => return w::batches(args).map(|()| None),
        Command::UnleashFeatures { answer } => {
            return tools::unleash_features(&answer).map(|()| None);
        }
        Command::Report { file } => return tools::report(&file).map(|()| None),
        Command::Latencies { file } => return tools::latencies(&file).map(|()| None),
        Command::HalfRate(args) => return tools::half_rate(&args).map(|()| None),
        Command::SnapshotKey { snapshot } => return tools::snapshot_key(&snapshot).map(|()| None),
        Command::Chaos(args) => return tools::chaos(args).await.map(|()| None),
        Command::ChaosRun(args) => chaos_run::command(args).await,
        Command::BenchRun(args) => bench_run::command(args).await,
        Command::BenchResults(args) => bench_results::command(args).await,
        Command::ChaosVerdict(args) => chaos_verdict::command(&args),
        Command::SnapshotVersion(args) => return tools::snapshot_version(&args).map(|()| None),
        Command::Demo(args) => return demo::run(args).await.map(|()| None),
        Command::Pipeline(args) => return pipeline::run(args).await.map(|()| None),
    };
    Ok(Some(figure))
}
