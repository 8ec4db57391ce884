//! The clients of `scripts/chaos`: browser-like traffic through the front that behaves as
//! the SDK does under faults (every event with an `eventId`; network errors, 429 and 5xx
//! retried with the same batch, exponential backoff with jitter, never sooner than
//! `Retry-After`), keeping the ids the service acknowledged. Afterwards the verdict comes
//! from ClickHouse: acknowledged events that never landed (lost) and events `FINAL` shows
//! more than once (visible duplicates). With `--answers-log`, every answer that was not a
//! success is written down with its time, for `scripts/chaos` to lay beside its faults.

use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;

use rand::Rng;
use uuid::Uuid;

use crate::clickhouse::{ClickHouse, check_run_id};
use crate::traffic::{Sites, Traffic};

#[derive(clap::Args)]
pub struct ChaosArgs {
    /// The base URL (the front).
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
    /// The snapshot whose keys, experiments and variants the traffic uses.
    #[arg(long, default_value = "deploy/experiments.json")]
    snapshot: PathBuf,
    /// Seconds of load.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Concurrent clients.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Pause of each client between two batches, in milliseconds.
    #[arg(long, default_value_t = 50)]
    pause_ms: u64,
    /// How long a client keeps retrying a batch after the load ended, in seconds.
    #[arg(long, default_value_t = 120)]
    retry_for: u64,
    /// ClickHouse HTTP interface and database of the pipeline.
    #[arg(long, default_value = "http://127.0.0.1:8123")]
    clickhouse: String,
    #[arg(long, default_value = "analytics")]
    database: String,
    /// Seconds to wait for the acknowledged events to land.
    #[arg(long, default_value_t = 300)]
    settle: u64,
    /// Run id, the prefix of every session id (letters and digits); random by default.
    #[arg(long)]
    run: Option<String>,
    /// Writes every answer that was not a success here, one a line: the milliseconds
    /// since the Unix epoch when it came, then the answer (`503`, `network error`, …).
    #[arg(long)]
    answers_log: Option<PathBuf>,
}

/// What one client saw.
#[derive(Default)]
struct Seen {
    acknowledged: Vec<Uuid>,
    refused: u64,
    gave_up: u64,
    retries: u64,
    answers: BTreeMap<String, u64>,
    /// The answers that were not a success: when (ms since the Unix epoch), and which.
    failures: Vec<(u128, String)>,
}

/// Milliseconds since the Unix epoch, the clock `scripts/chaos` logs its faults by.
fn unix_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis()
}

/// Runs the load, then waits for the verdict; `Ok(false)` when events were lost or
/// duplicated.
pub async fn run(args: ChaosArgs) -> anyhow::Result<bool> {
    let run = args
        .run
        .clone()
        .unwrap_or_else(|| format!("chaos{:08x}", rand::random::<u32>()));
    check_run_id(&run)?;
    let sites = Arc::new(Sites::from_file(&args.snapshot)?);
    let url = format!("{}/api/v1/analytics", args.url.trim_end_matches('/'));
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()?;
    let started = Instant::now();
    let stop_at = started + Duration::from_secs(args.seconds);
    let give_up_at = stop_at + Duration::from_secs(args.retry_for);
    let pause = Duration::from_millis(args.pause_ms);
    let tasks: Vec<_> = (0..args.clients)
        .map(|c| {
            let traffic = Traffic::new(sites.clone(), &run, c as u64);
            let (http, url) = (http.clone(), url.clone());
            tokio::spawn(client(http, url, traffic, pause, stop_at, give_up_at))
        })
        .collect();
    let mut seen = Seen::default();
    for task in tasks {
        let one = task.await?;
        seen.acknowledged.extend(one.acknowledged);
        seen.refused += one.refused;
        seen.gave_up += one.gave_up;
        seen.retries += one.retries;
        for (answer, n) in one.answers {
            *seen.answers.entry(answer).or_default() += n;
        }
        seen.failures.extend(one.failures);
    }
    let loaded = started.elapsed();
    if let Some(path) = &args.answers_log {
        seen.failures.sort();
        let mut out = std::io::BufWriter::new(
            std::fs::File::create(path)
                .with_context(|| format!("cannot create {}", path.display()))?,
        );
        for (at, answer) in &seen.failures {
            writeln!(out, "{at} {answer}")?;
        }
        out.flush()?;
    }
    let settling = Instant::now();

    let clickhouse = ClickHouse::new(&args.clickhouse);
    let acknowledged: HashSet<Uuid> = seen.acknowledged.iter().copied().collect();
    let landed_query = format!(
        "SELECT toString(event_id) FROM {}.events WHERE session_id LIKE '{run}-%'",
        args.database
    );
    let deadline = Instant::now() + Duration::from_secs(args.settle);
    let landed = loop {
        let landed: HashSet<Uuid> = match clickhouse.query(&landed_query).await {
            Ok(text) => text.lines().filter_map(|l| l.parse().ok()).collect(),
            Err(e) => {
                eprintln!("chaos: ClickHouse not answering yet: {e:#}");
                HashSet::new()
            }
        };
        if acknowledged.is_subset(&landed) || Instant::now() > deadline {
            break landed;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    };
    let lost = acknowledged.difference(&landed).count();
    let unacknowledged = landed.difference(&acknowledged).count();
    let filter = format!("WHERE session_id LIKE '{run}-%'");
    let once = clickhouse
        .count(&format!(
            "SELECT count() FROM {}.events FINAL {filter}",
            args.database
        ))
        .await?;
    let duplicates = once.saturating_sub(landed.len() as u64);

    println!(
        "chaos run {run}: {:.0} s of load, {} clients; landed within {:.0} s after",
        loaded.as_secs_f64(),
        args.clients,
        settling.elapsed().as_secs_f64()
    );
    println!("events acknowledged:          {}", acknowledged.len());
    println!("events lost (acked, absent):  {lost}");
    println!("visible duplicates (FINAL):   {duplicates}");
    println!("landed without an ack:        {unacknowledged} (given up or in flight at the end)");
    println!("events given up by clients:   {}", seen.gave_up);
    println!("events refused (4xx):         {}", seen.refused);
    println!("retried requests:             {}", seen.retries);
    let answers: Vec<String> = seen
        .answers
        .iter()
        .map(|(a, n)| format!("{a}: {n}"))
        .collect();
    println!("answers:                      {}", answers.join(", "));
    Ok(lost == 0 && duplicates == 0 && seen.gave_up == 0 && seen.refused == 0)
}

async fn client(
    http: reqwest::Client,
    url: String,
    mut traffic: Traffic,
    pause: Duration,
    stop_at: Instant,
    give_up_at: Instant,
) -> Seen {
    let mut seen = Seen::default();
    while Instant::now() < stop_at {
        let batch = traffic.next_batch();
        let ids: Vec<Uuid> = batch.events.iter().map(|e| e.event_id).collect();
        let body = batch.body();
        let mut attempt = 0u32;
        loop {
            let request = if batch.beacon {
                http.post(&url)
                    .header("content-type", "text/plain;charset=UTF-8")
            } else {
                http.post(&url)
                    .header("content-type", "application/json")
                    .header("accept", "application/json")
                    .header(contract::key::PUBLIC_KEY_HEADER, &batch.key)
            };
            let (answer, retry_after) = match request.body(body.clone()).send().await {
                Ok(response) => {
                    let status = response.status();
                    let retry_after = response
                        .headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
                    if status.is_success() {
                        *seen.answers.entry(status.as_u16().to_string()).or_default() += 1;
                        seen.acknowledged.extend(&ids);
                        break;
                    }
                    if status.as_u16() != 429 && !status.is_server_error() {
                        *seen.answers.entry(status.as_u16().to_string()).or_default() += 1;
                        seen.failures.push((unix_ms(), status.as_u16().to_string()));
                        seen.refused += ids.len() as u64;
                        break;
                    }
                    (status.as_u16().to_string(), retry_after)
                }
                Err(_) => ("network error".to_owned(), None),
            };
            seen.failures.push((unix_ms(), answer.clone()));
            *seen.answers.entry(answer).or_default() += 1;
            if Instant::now() > give_up_at {
                seen.gave_up += ids.len() as u64;
                break;
            }
            attempt += 1;
            seen.retries += 1;
            let ceiling = 1000u64.saturating_mul(1 << attempt.min(5)).min(30_000);
            let jittered = ceiling / 2 + rand::rng().random_range(0..=ceiling / 2);
            let wait = jittered.max(retry_after.unwrap_or(0).saturating_mul(1000));
            tokio::time::sleep(Duration::from_millis(wait)).await;
        }
        tokio::time::sleep(pause).await;
    }
    seen
}
