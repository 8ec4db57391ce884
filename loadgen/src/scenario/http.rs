//! HTTP load: browser-like analytics traffic against the ingest, GETs of one URL.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, StatusCode};

use super::run_load;
use crate::cli::{GetArgs, IngestArgs};
use crate::clickhouse::{self, ClickHouse};
use crate::load::{Get, Workload, target};
use crate::traffic::{Sites, Traffic, accepted_events, browser_request};
use loadgen::stats::Figure;

/// One browser after another on a connection; a 2xx counts the events it accepted.
struct Browser {
    traffic: Traffic,
    path: String,
}

impl Workload for Browser {
    fn request(&mut self) -> Request<Full<Bytes>> {
        browser_request(&self.path, &self.traffic.next_batch())
    }

    fn units(&mut self, status: StatusCode, body: &[u8]) -> u64 {
        accepted_events(status, body)
    }
}

pub async fn ingest(args: IngestArgs) -> anyhow::Result<Figure> {
    let (addr, base) = target(&args.url).await?;
    let path = format!("{}/api/v1/analytics", base.trim_end_matches('/'));
    let sites = Arc::new(Sites::from_file(&args.snapshot)?);
    let run = args
        .run
        .unwrap_or_else(|| format!("lg{:08x}", rand::random::<u32>()));
    clickhouse::check_run_id(&run)?;
    let (tally, cpu) = run_load(&args.label, &args.load, addr, |worker| Browser {
        traffic: Traffic::new(Arc::clone(&sites), &run, worker as u64),
        path: path.clone(),
    })
    .await?;
    if let Some(url) = &args.verify_clickhouse {
        let accepted = tally.units_all();
        eprintln!("run {run}: waiting for {accepted} accepted events in ClickHouse");
        let timeout = Duration::from_secs(args.verify_timeout);
        clickhouse::verify_landed(
            &ClickHouse::new(url),
            &args.database,
            &run,
            accepted,
            timeout,
        )
        .await?;
        eprintln!("run {run}: all {accepted} accepted events are in ClickHouse");
    }
    Ok(args.label.load_figure(&tally, "events", cpu))
}

pub async fn get(args: GetArgs) -> anyhow::Result<Figure> {
    let (addr, path) = target(&args.url).await?;
    let get = Get::new(&path, &args.headers)?;
    let (tally, cpu) = run_load(&args.label, &args.load, addr, |_| Get {
        uri: get.uri.clone(),
        headers: get.headers.clone(),
    })
    .await?;
    Ok(args.label.load_figure(&tally, "requests", cpu))
}
