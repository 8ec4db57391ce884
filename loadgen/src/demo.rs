//! `loadgen demo`: a believable history for the demo site, sent through the front as the
//! SDK sends it. Visitors come back over several sessions; each is assigned with the SDK's
//! own rule (murmur3 of `experimentId:visitorId`, salted with the phase from 2 on) to
//! every experiment the config-api serves for the key, so the sample ratio follows the
//! weights. One experiment has a planted effect (its treatments convert at
//! `--treatment-rate`), the others none. Client times spread over the last `--hours`
//! hours (the ingest keeps a client time of at most 24 hours before receipt); the run is
//! idempotent for one seed: the same visitors and event ids, which ClickHouse counts once.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::clickhouse::ClickHouse;
use crate::traffic::{BATCH_EVENTS, USER_AGENTS};

#[derive(clap::Args, Clone, Debug)]
pub struct DemoArgs {
    /// The base URL (the front): config from /api/v1/experiments, events to
    /// /api/v1/analytics.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// The site's public key.
    #[arg(long, default_value = "pk_demo_coffee")]
    pub public_key: String,
    /// The experiment whose treatments convert better (at --treatment-rate).
    #[arg(long, default_value = "exp_home_headline")]
    pub planted: String,
    /// Conversion rate of every control, and of every variant without an effect.
    #[arg(long, default_value_t = 0.10)]
    pub base_rate: f64,
    /// Conversion rate of the planted experiment's treatment variants.
    #[arg(long, default_value_t = 0.14)]
    pub treatment_rate: f64,
    /// Visitors.
    #[arg(long, default_value_t = 6000)]
    pub visitors: u32,
    /// The span of the simulated history, in hours before now (at most 23: the ingest
    /// moves an older client time to 24 hours before receipt).
    #[arg(long, default_value_t = 22, value_parser = clap::value_parser!(u32).range(1..=23))]
    pub hours: u32,
    /// Seed of everything random: visitor ids, sessions, outcomes, event ids.
    #[arg(long, default_value_t = 2026)]
    pub seed: u64,
    /// Concurrent clients.
    #[arg(long, default_value_t = 8)]
    pub clients: usize,
    /// ClickHouse HTTP interface and database to wait in until every accepted event
    /// landed; `--no-wait` to return after sending.
    #[arg(long, default_value = "http://127.0.0.1:8123")]
    pub clickhouse: String,
    #[arg(long, default_value = "analytics")]
    pub database: String,
    #[arg(long)]
    pub no_wait: bool,
    /// Seconds to wait for the events to land.
    #[arg(long, default_value_t = 120)]
    pub settle: u64,
}

/// A served experiment, as the config-api answers it.
#[derive(Clone, Debug, Deserialize)]
pub struct Served {
    pub id: String,
    #[serde(default)]
    pub phase: Option<u32>,
    pub variants: Vec<ServedVariant>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct ServedVariant {
    pub id: String,
    pub weight: f64,
    #[serde(default)]
    pub control: bool,
}

#[derive(Deserialize)]
struct Config {
    experiments: Vec<Served>,
}

impl Served {
    /// The phase the SDK assigns in: 1 unless the service gives 2 or more.
    fn phase(&self) -> u32 {
        self.phase.filter(|&p| p >= 2).unwrap_or(1)
    }
}

/// MurmurHash3 x86 32-bit of `bytes` (the SDK's `murmur3`).
pub fn murmur3(bytes: &[u8], seed: u32) -> u32 {
    let mix = |k: u32| {
        k.wrapping_mul(0xcc9e_2d51)
            .rotate_left(15)
            .wrapping_mul(0x1b87_3593)
    };
    let mut h = seed;
    let mut chunks = bytes.chunks_exact(4);
    for chunk in &mut chunks {
        let k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        h = (h ^ mix(k))
            .rotate_left(13)
            .wrapping_mul(5)
            .wrapping_add(0xe654_6b64);
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        let k = tail
            .iter()
            .enumerate()
            .fold(0u32, |k, (i, &b)| k | u32::from(b) << (8 * i));
        h ^= mix(k);
    }
    h ^= bytes.len() as u32;
    h = (h ^ (h >> 16)).wrapping_mul(0x85eb_ca6b);
    h = (h ^ (h >> 13)).wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

/// The SDK's `pick`: the variant the visitor's bucket falls in, by weight.
pub fn pick<'a>(experiment: &'a Served, visitor: &str) -> Option<&'a ServedVariant> {
    let variants: Vec<&ServedVariant> = experiment
        .variants
        .iter()
        .filter(|v| v.weight > 0.0)
        .collect();
    let total: f64 = variants.iter().map(|v| v.weight).sum();
    if total <= 0.0 {
        return None;
    }
    let phase = experiment.phase();
    let salt = if phase > 1 {
        format!("{phase}:")
    } else {
        String::new()
    };
    let key = format!("{}:{salt}{visitor}", experiment.id);
    let mut point = f64::from(murmur3(key.as_bytes(), 0)) / 4_294_967_296.0 * total;
    for v in &variants {
        if point < v.weight {
            return Some(v);
        }
        point -= v.weight;
    }
    variants.last().copied()
}

/// One event in the SDK's form.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DemoEvent {
    pub event_id: uuid::Uuid,
    pub event_name: &'static str,
    pub experiment_id: String,
    pub session_id: String,
    pub visitor_id: String,
    pub variant_id: String,
    pub phase: u32,
    pub timestamp: i64,
    pub pathname: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub click_target: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_on_page: Option<f64>,
}

/// One request: a batch of up to five, or the page-unload beacon (text/plain, `pkey`).
#[derive(Clone, Debug)]
pub struct Post {
    pub beacon: bool,
    pub user_agent: &'static str,
    pub events: Vec<DemoEvent>,
}

impl Post {
    /// The body, with the client's clock at sending (`sentAt`), as the SDK writes it.
    pub fn body(&self, key: &str, sent_at: i64) -> Vec<u8> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Body<'a> {
            #[serde(skip_serializing_if = "Option::is_none")]
            pkey: Option<&'a str>,
            sent_at: i64,
            events: &'a [DemoEvent],
        }
        serde_json::to_vec(&Body {
            pkey: self.beacon.then_some(key),
            sent_at,
            events: &self.events,
        })
        .unwrap_or_default()
    }
}

/// What the demo sends, and what it planted.
#[derive(Debug)]
pub struct Plan {
    pub posts: Vec<Post>,
    pub events: usize,
    /// The prefix of every visitor id of this seed.
    pub prefix: String,
}

const PATHS: &[&str] = &["/", "/products/espresso-beans", "/pricing", "/checkout"];
const TARGETS: &[&str] = &["#cta", "button.add-to-cart", "#checkout-submit"];
const HOUR_MS: i64 = 3_600_000;

/// The whole history, for visitors arriving over `hours` before `now` (milliseconds).
pub fn plan(args: &DemoArgs, experiments: &[Served], now: i64) -> Plan {
    let mut rng = StdRng::seed_from_u64(args.seed);
    let prefix = format!("demo{}-", args.seed);
    let span = i64::from(args.hours) * HOUR_MS;
    let start = now - span;
    let mut posts = Vec::new();
    let mut events = 0;
    for i in 0..args.visitors {
        let visitor = format!("{prefix}{i:06}-{:08x}", rng.random::<u32>());
        let user_agent = USER_AGENTS.choose(&mut rng).copied().unwrap_or_default();
        // 1 to 4 sessions, the first over the span, the others later, before now.
        let sessions = 1 + (0..3).filter(|_| rng.random_bool(0.4)).count();
        let first = start + rng.random_range(0..span * 9 / 10);
        let mut at = first;
        let mut starts = Vec::new();
        for s in 0..sessions {
            if s > 0 {
                at += rng.random_range(HOUR_MS / 4..3 * HOUR_MS);
            }
            if at < now - 120_000 {
                starts.push(at);
            }
        }
        // Each experiment's variant and whether (and in which session) the visitor converts.
        let assigned: Vec<(&Served, &ServedVariant, Option<usize>)> = experiments
            .iter()
            .filter_map(|e| {
                let v = pick(e, &visitor)?;
                let rate = if e.id == args.planted && !v.control {
                    args.treatment_rate
                } else {
                    args.base_rate
                };
                let converts = rng
                    .random_bool(rate.clamp(0.0, 1.0))
                    .then(|| rng.random_range(0..starts.len()));
                Some((e, v, converts))
            })
            .collect();
        for (s, &session_start) in starts.iter().enumerate() {
            let session = format!("{visitor}-s{s}");
            let pathname = PATHS.choose(&mut rng).copied().unwrap_or("/");
            let mut t = session_start;
            let mut list = Vec::new();
            let event = |rng: &mut StdRng, name, e: &Served, v: &ServedVariant, t: i64| DemoEvent {
                event_id: uuid::Builder::from_random_bytes(rng.random()).into_uuid(),
                event_name: name,
                experiment_id: e.id.clone(),
                session_id: session.clone(),
                visitor_id: visitor.clone(),
                variant_id: v.id.clone(),
                phase: e.phase(),
                timestamp: t,
                pathname,
                click_target: None,
                time_on_page: None,
            };
            for &(e, v, _) in &assigned {
                t += rng.random_range(50..400);
                list.push(event(&mut rng, "impression", e, v, t));
            }
            for _ in 0..rng.random_range(0..3) {
                let &(e, v, _) = assigned.choose(&mut rng).expect("assigned");
                t += rng.random_range(1_000..30_000);
                let mut click = event(&mut rng, "click", e, v, t);
                click.click_target = TARGETS.choose(&mut rng).copied();
                list.push(click);
            }
            for &(e, v, converts) in &assigned {
                if converts == Some(s) {
                    t += rng.random_range(5_000..120_000);
                    list.push(event(&mut rng, "conversion", e, v, t));
                }
            }
            if let Some(&(e, v, _)) = assigned.first() {
                let mut dwell = event(&mut rng, "dwell_time", e, v, t + 1_000);
                dwell.time_on_page = Some(((t + 1_000 - session_start) / 1000) as f64);
                list.push(dwell);
            }
            events += list.len();
            // Batches of five while the page lives; what is left goes with the unload
            // beacon half of the time, else in a last ordinary batch.
            let chunks: Vec<Vec<DemoEvent>> = list
                .chunks(BATCH_EVENTS)
                .map(<[DemoEvent]>::to_vec)
                .collect();
            let last = chunks.len() - 1;
            for (c, chunk) in chunks.into_iter().enumerate() {
                let beacon = c == last && rng.random_bool(0.5);
                posts.push(Post {
                    beacon,
                    user_agent,
                    events: chunk,
                });
            }
        }
    }
    // In the order the clients' clocks sent them.
    posts.sort_by_key(|p| p.events.last().map_or(0, |e| e.timestamp));
    Plan {
        posts,
        events,
        prefix,
    }
}

/// The experiments the config-api serves for the key.
async fn served(http: &reqwest::Client, args: &DemoArgs) -> anyhow::Result<Vec<Served>> {
    let url = format!("{}/api/v1/experiments", args.url.trim_end_matches('/'));
    let response = http
        .get(&url)
        .header("X-public-key", &args.public_key)
        .send()
        .await
        .with_context(|| format!("{url} did not answer: is the pipeline up (scripts/up)?"))?;
    anyhow::ensure!(
        response.status().is_success(),
        "{url}: {}",
        response.status()
    );
    let config: Config = response.json().await.context("the experiments' JSON")?;
    anyhow::ensure!(
        !config.experiments.is_empty(),
        "{} has no live experiment",
        args.public_key
    );
    Ok(config.experiments)
}

/// Sends one post, retrying network errors, 429 and 5xx as the SDK does.
async fn send(http: &reqwest::Client, url: &str, key: &str, post: &Post) -> anyhow::Result<u64> {
    let mut delay = Duration::from_millis(100);
    for attempt in 0.. {
        let body = post.body(key, contract::event::now_millis());
        let request = http.post(url).header("User-Agent", post.user_agent);
        let request = if post.beacon {
            request.header("Content-Type", "text/plain;charset=UTF-8")
        } else {
            request
                .header("Content-Type", "application/json")
                .header("X-public-key", key)
        };
        match request.body(body).send().await {
            Ok(r) if r.status().is_success() => {
                #[derive(Deserialize)]
                struct Answer {
                    accepted: u64,
                }
                let answer: Answer = r.json().await.context("the ingest's answer")?;
                return Ok(answer.accepted);
            }
            Ok(r) if !(r.status().is_server_error() || r.status().as_u16() == 429) => {
                let status = r.status();
                anyhow::bail!("{url} refused a batch: {status} {}", r.text().await?);
            }
            _ if attempt < 8 => {
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
            Ok(r) => anyhow::bail!("{url}: {} after {attempt} retries", r.status()),
            Err(e) => return Err(e).context(format!("{url} after {attempt} retries")),
        }
    }
    unreachable!("the loop returns")
}

/// The command: sends the history, then waits until ClickHouse holds every event and the
/// metric results count them.
pub async fn run(args: DemoArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()?;
    let experiments = served(&http, &args).await?;
    let plan = plan(&args, &experiments, contract::event::now_millis());
    let posts = plan.posts.len();
    let queue = Arc::new(Mutex::new(plan.posts.into_iter().collect::<VecDeque<_>>()));
    let url = format!("{}/api/v1/analytics", args.url.trim_end_matches('/'));
    let mut clients = tokio::task::JoinSet::new();
    for _ in 0..args.clients.max(1) {
        let (queue, http, url, key) = (
            Arc::clone(&queue),
            http.clone(),
            url.clone(),
            args.public_key.clone(),
        );
        clients.spawn(async move {
            let mut accepted = 0;
            loop {
                let next = queue
                    .lock()
                    .map_err(|_| anyhow::anyhow!("poisoned"))?
                    .pop_front();
                let Some(post) = next else {
                    return anyhow::Ok(accepted);
                };
                accepted += send(&http, &url, &key, &post).await?;
            }
        });
    }
    let mut accepted = 0;
    while let Some(result) = clients.join_next().await {
        accepted += result??;
    }
    eprintln!(
        "demo: {} visitors, {} events in {posts} requests ({accepted} accepted) over the last \
         {} hours, in {:.1} s; planted: {} treatments convert at {:.0}% against {:.0}%",
        args.visitors,
        plan.events,
        args.hours,
        started.elapsed().as_secs_f64(),
        args.planted,
        args.treatment_rate * 100.0,
        args.base_rate * 100.0
    );
    anyhow::ensure!(
        accepted == plan.events as u64,
        "the ingest accepted {accepted} of {} events",
        plan.events
    );
    if args.no_wait {
        return Ok(());
    }
    let clickhouse = ClickHouse::new(&args.clickhouse);
    let query = format!(
        "SELECT uniqExact(event_id) FROM {}.events WHERE visitor_id LIKE '{}%'",
        args.database, plan.prefix
    );
    let deadline = Instant::now() + Duration::from_secs(args.settle);
    loop {
        let landed = clickhouse.count(&query).await?;
        if landed >= accepted {
            eprintln!(
                "demo: all {landed} events in ClickHouse after {:.1} s",
                started.elapsed().as_secs_f64()
            );
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "only {landed} of {accepted} events reached ClickHouse in {} s",
            args.settle
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // The metric results count them once the consumers' refreshes are past them.
    let stored_at = clickhouse.count("SELECT toUInt32(now())").await?;
    let as_of = format!(
        "SELECT min(toUInt32(as_of)) FROM {}.experiment_metric_results",
        args.database
    );
    let stored = Instant::now();
    loop {
        if clickhouse.count(&as_of).await? >= stored_at {
            eprintln!(
                "demo: the metric results count them {:.1} s later",
                stored.elapsed().as_secs_f64()
            );
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the metric results were not as of the stored events within {} s",
            args.settle
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur3_matches_the_reference_values() {
        assert_eq!(murmur3(b"", 0), 0);
        assert_eq!(murmur3(b"", 1), 0x514e_28b7);
        assert_eq!(murmur3(b"hello", 0), 0x248b_fa47);
        assert_eq!(
            murmur3(b"The quick brown fox jumps over the lazy dog", 0),
            0x2e4f_f723
        );
        // Computed by the SDK's own `murmur3` (sdk/src/assign.ts) under node.
        assert_eq!(
            murmur3(b"exp_home_headline:demo2026-000000-1a2b3c4d", 0),
            0x1b56_053b
        );
        assert_eq!(
            murmur3("exp_checkout_button:3:visitor-\u{e9}".as_bytes(), 0),
            0xa44c_b45a
        );
    }

    fn experiment(phase: Option<u32>, weights: &[f64]) -> Served {
        Served {
            id: "exp".into(),
            phase,
            variants: weights
                .iter()
                .enumerate()
                .map(|(i, &weight)| ServedVariant {
                    id: format!("v{i}"),
                    weight,
                    control: i == 0,
                })
                .collect(),
        }
    }

    #[test]
    fn assignment_follows_the_weights_and_a_new_phase_reshuffles() {
        let e = experiment(None, &[60.0, 0.0, 40.0]);
        let ids: Vec<String> = (0..20_000).map(|i| format!("visitor-{i}")).collect();
        let first = ids
            .iter()
            .filter(|v| pick(&e, v).map(|v| v.id.as_str()) == Some("v0"))
            .count();
        assert!((11_700..12_300).contains(&first), "{first} of 20000 in v0");
        assert!(
            ids.iter()
                .all(|v| pick(&e, v).is_some_and(|v| v.id != "v1"))
        );
        let again = experiment(Some(2), &[60.0, 0.0, 40.0]);
        let moved = ids
            .iter()
            .filter(|v| pick(&e, v).map(|x| &x.id) != pick(&again, v).map(|x| &x.id))
            .count();
        assert!(moved > 8_000, "{moved} moved at phase 2");
    }

    #[test]
    fn the_plan_is_fixed_by_its_seed_and_stays_within_the_span() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            args: DemoArgs,
        }
        let args = Cli::parse_from(["demo", "--visitors", "300", "--hours", "5"]).args;
        let now = 1_800_000_000_000;
        let experiments = [experiment(None, &[50.0, 50.0])];
        let a = plan(&args, &experiments, now);
        let b = plan(&args, &experiments, now);
        assert_eq!(a.posts.len(), b.posts.len());
        assert_eq!(a.posts[7].events[0].event_id, b.posts[7].events[0].event_id);
        let all: Vec<&DemoEvent> = a.posts.iter().flat_map(|p| &p.events).collect();
        assert_eq!(all.len(), a.events);
        assert!(
            all.iter()
                .all(|e| e.timestamp > now - 5 * HOUR_MS && e.timestamp < now)
        );
        assert!(
            a.posts
                .iter()
                .all(|p| (1..=BATCH_EVENTS).contains(&p.events.len()))
        );
        assert!(a.posts.iter().any(|p| p.beacon) && a.posts.iter().any(|p| !p.beacon));
        let sessions: std::collections::HashSet<_> = all.iter().map(|e| &e.session_id).collect();
        assert!(
            sessions.len() > 400,
            "{} sessions of 300 visitors",
            sessions.len()
        );
        let body: serde_json::Value = serde_json::from_slice(&a.posts[0].body("pk", now)).unwrap();
        assert_eq!(body["sentAt"], now);
        assert_eq!(body["events"][0]["phase"], 1);
    }
}
