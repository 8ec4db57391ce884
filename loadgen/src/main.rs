//! `loadgen`: the benchmark's load generator and reference tools. Every measuring command
//! prints one JSON line (a `Figure`) on stdout and a readable summary on stderr;
//! `devtool report FILE` turns the collected lines into the comparison table.
//!
//! [`cli`] is the command line; [`scenario`] runs each command, with the load
//! ([`load`], [`traffic`]), the clients ([`kafka`], [`clickhouse`], [`wrk`]) and the
//! measures (`loadgen::stats`, [`watch`]) it needs.

#![cfg_attr(test, allow(clippy::unwrap_used))]

mod chaos;
mod cli;
mod clickhouse;
mod demo;
mod kafka;
mod kafka_engine;
mod load;
mod peers;
mod pipeline;
mod scenario;
mod traffic;
mod watch;
mod wrk;

use clap::Parser;

use crate::cli::{Cli, Command};
use crate::scenario::{clickhouse as ch, http, kafka as k, tools, wrk as w};
use loadgen::stats::Figure;

/// What a command ends with.
enum Outcome {
    /// A measuring command's figure (boxed: it is large, the others are not).
    Figure(Box<Figure>),
    /// A tool's work, done.
    Done,
    /// A driver's exit code (the chaos run, the bench, its verdicts).
    Exit(i32),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match run(Cli::parse().command).await? {
        Outcome::Figure(figure) => {
            eprintln!("{}", figure.summary());
            println!("{}", serde_json::to_string(&figure)?);
        }
        Outcome::Done => {}
        // The only exit besides main's own return: the drivers' codes.
        Outcome::Exit(code) => std::process::exit(code),
    }
    Ok(())
}

/// Runs a command: the figure of a measuring one, or how a tool or a driver ended.
async fn run(command: Command) -> anyhow::Result<Outcome> {
    let done = |()| Outcome::Done;
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
        Command::KafkaEngine { action } => return k::engine(action).await.map(done),
        Command::Rows(args) => return ch::rows(args).await.map(done),
        Command::SameRows(args) => return ch::same_rows(args).await.map(done),
        Command::Settle(args) => return k::settle(args).await.map(done),
        Command::CreateTopics(args) => return k::create_topics(args).await.map(done),
        Command::WrkBatches(args) => return w::batches(args).map(done),
        Command::UnleashFeatures { answer } => return tools::unleash_features(&answer).map(done),
        Command::SnapshotKey { snapshot } => return tools::snapshot_key(&snapshot).map(done),
        // Exits 1 when the chaos run lost or duplicated an acknowledged event.
        Command::Chaos(args) => {
            let held = tools::chaos(args).await?;
            return Ok(if held {
                Outcome::Done
            } else {
                Outcome::Exit(1)
            });
        }
        Command::Demo(args) => return demo::run(args).await.map(done),
        Command::Pipeline(args) => return pipeline::run(args).await.map(done),
    };
    Ok(Outcome::Figure(Box::new(figure)))
}
