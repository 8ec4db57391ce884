//! The commands, a module per kind of work: HTTP load, Kafka, ClickHouse, wrk, and the
//! tools that measure nothing. Each measuring command returns its [`Figure`].

pub mod clickhouse;
pub mod http;
pub mod kafka;
pub mod tools;
pub mod wrk;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;

use crate::cli::{Label, LoadArgs};
use crate::load::{self, LoadOptions, Workload};
use crate::watch;
use loadgen::stats::Tally;

#[cfg(doc)]
use loadgen::stats::Figure;

/// A load with the CPU of the watched processes over its measured window.
pub async fn run_load<W: Workload>(
    label: &Label,
    load: &LoadArgs,
    addr: SocketAddr,
    make: impl FnMut(usize) -> W,
) -> anyhow::Result<(Tally, BTreeMap<String, f64>)> {
    let options = options(load, addr);
    let cpu = watch::window(label.watch()?, options.warmup, options.duration);
    let tally = load::run(&options, make).await?;
    Ok((tally, cpu.await?))
}

/// Runs `work` and reports the CPU the watched processes used meanwhile.
pub async fn watched<T>(
    label: &Label,
    work: impl Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<(T, BTreeMap<String, f64>)> {
    let watch = label.watch()?;
    let before = watch.sample();
    let value = work.await?;
    Ok((value, watch.usage(&before, &watch.sample())))
}

fn options(load: &LoadArgs, addr: SocketAddr) -> LoadOptions {
    LoadOptions {
        addr,
        connections: load.connections,
        warmup: Duration::from_secs_f64(load.warmup),
        duration: Duration::from_secs_f64(load.duration),
        rate: load.rate,
    }
}

/// VmHWM of /proc/PID/status: the most resident memory the process ever had.
pub fn peak_rss_kib(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("no process {pid}"))?;
    stack_kit::process::status_kib(&status, "VmHWM:").context("no VmHWM line")
}
