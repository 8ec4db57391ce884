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
use hyper::Uri;

use crate::cli::{Label, LoadArgs};
use crate::load::{self, LoadOptions, Workload};
use crate::stats::Tally;
use crate::watch;

#[cfg(doc)]
use crate::stats::Figure;

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

/// The socket address and path of an `http://` URL.
pub async fn target(url: &str) -> anyhow::Result<(SocketAddr, String)> {
    let uri: Uri = url.parse().with_context(|| format!("not a URL: {url}"))?;
    anyhow::ensure!(uri.scheme_str() == Some("http"), "only http:// URLs: {url}");
    let host = uri.host().context("URL without host")?;
    let port = uri.port_u16().unwrap_or(80);
    let addr = tokio::net::lookup_host((host, port))
        .await?
        .next()
        .with_context(|| format!("{host} has no address"))?;
    let path = uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
    Ok((addr, path))
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
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmHWM line")
}
