//! HTTP load: browser-like analytics traffic against the ingest, GETs of one URL.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, StatusCode, header};

use super::{run_load, target};
use crate::cli::{GetArgs, IngestArgs};
use crate::clickhouse::{self, ClickHouse};
use crate::load::{Get, Workload};
use crate::stats::Figure;
use crate::traffic::{Batch, Sites, Traffic};

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

/// The POST of `batch` to `path` as a browser sends it.
pub fn browser_request(path: &str, batch: &Batch) -> Request<Full<Bytes>> {
    let mut builder = Request::post(path).header(header::USER_AGENT, batch.user_agent);
    builder = if batch.beacon {
        // navigator.sendBeacon with a string: text/plain, no custom headers.
        builder.header(header::CONTENT_TYPE, "text/plain;charset=UTF-8")
    } else {
        builder
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json")
            .header(contract::key::PUBLIC_KEY_HEADER, &batch.key)
    };
    builder
        .body(Full::new(Bytes::from(batch.body())))
        .unwrap_or_else(|_| Request::new(Full::new(Bytes::new())))
}

/// The events an answer of the ingest accepted: its `accepted` count if 2xx, else none.
pub fn accepted_events(status: StatusCode, body: &[u8]) -> u64 {
    if !status.is_success() {
        return 0;
    }
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["accepted"].as_u64())
        .unwrap_or(0)
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
