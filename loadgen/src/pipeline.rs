//! The whole pipeline on one machine (`loadgen pipeline`): browser-like traffic through the
//! front, open loop, at rising rates, with the consumer and ClickHouse running and merging.
//! For each rate: the events accepted per second, the answers' latency, the time from an
//! accepted POST to its event being queryable in ClickHouse (sampled by event id) and then
//! counted in `experiment_metric_results`, the CPU of each watched process and of the whole
//! machine, and whether the rate was sustained.
//!
//! A sampled event is counted in the metric results once the view's `as_of` is past the
//! time it was seen in `events` (the results say they count it), and its visitor's stored
//! values come from a refresh that started after the last time it was not seen there (so
//! they can: the claim is checked, not only read).
//!
//! A rate is sustained when the front accepted at least 99% of the events offered, answered
//! nothing but 2xx, within a bound at p99 (1 s: beyond it requests queue), and every
//! sampled event became queryable and then counted, each with a p99 under its bound (10 s,
//! 30 s).
//! The first rate that is not names what saturated first: the machine's CPU, one process
//! at a full core, or neither (then the queue in front of the slowest stage: the broker,
//! the consumer's batching, ClickHouse's inserts).
//!
//! Samples are timed from when the request left to the start of the first ClickHouse poll
//! that saw the row (or counted it), so each is late by up to one poll interval
//! (`--poll-ms`); counting is timed from the end of the poll that saw it, so later still by
//! up to that poll's length and a second (`as_of` is in whole seconds). Between two
//! rates the run waits for every sample of the last one (or the drain timeout), so that a
//! backlog is charged to the rate that made it.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use hdrhistogram::Histogram;
use http_body_util::Full;
use hyper::{Request, StatusCode};

use crate::clickhouse::ClickHouse;
use crate::load::{self, LoadOptions, Workload, target};
use crate::traffic::{Sites, Traffic, accepted_events, browser_request};
use crate::watch::{self, Watch};

#[derive(clap::Args)]
pub struct PipelineArgs {
    /// The front (its `/api/v1/analytics`).
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub url: String,
    #[arg(long, default_value = "deploy/experiments.json")]
    pub snapshot: PathBuf,
    #[arg(long, default_value = "http://127.0.0.1:8123")]
    pub clickhouse_url: String,
    /// The database the consumer fills.
    #[arg(long, default_value = "analytics")]
    pub database: String,
    /// Events per second offered, one step each, in this order.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "2000,5000,10000,20000,40000"
    )]
    pub rates: Vec<f64>,
    /// Seconds of load per rate; the CPU is measured over all but the first fifth.
    #[arg(long, default_value_t = 30.0)]
    pub step_seconds: f64,
    /// Browsers, each with one request in flight.
    #[arg(long, default_value_t = 512)]
    pub connections: usize,
    /// Accepted requests whose first event is timed to ClickHouse, per second.
    #[arg(long, default_value_t = 50.0)]
    pub samples_per_second: f64,
    /// How often ClickHouse is asked for the sampled events not seen yet, milliseconds.
    #[arg(long, default_value_t = 200)]
    pub poll_ms: u64,
    /// The p99 time to queryable, in seconds, above which a rate is not sustained.
    #[arg(long, default_value_t = 10.0)]
    pub queryable_p99_bound: f64,
    /// The p99 time to counted in `experiment_metric_results`, in seconds, above which a
    /// rate is not sustained.
    #[arg(long, default_value_t = 30.0)]
    pub counted_p99_bound: f64,
    /// The answers' p99, in milliseconds, above which a rate is not sustained: requests
    /// queue in front of the slowest stage.
    #[arg(long, default_value_t = 1000.0)]
    pub answer_p99_bound_ms: f64,
    /// How long to wait after a step for its samples to become queryable, seconds.
    #[arg(long, default_value_t = 60.0)]
    pub drain_timeout: f64,
    /// Go on with the higher rates after one is not sustained.
    #[arg(long)]
    pub keep_going: bool,
    /// A process whose CPU to report, `name=pid` (`self` for this one); repeatable.
    #[arg(long = "watch")]
    pub watch: Vec<String>,
}

/// The p99s a sustained rate stays within.
struct Bounds {
    answer_ms: f64,
    queryable_s: f64,
    counted_s: f64,
}

impl PipelineArgs {
    fn bounds(&self) -> Bounds {
        Bounds {
            answer_ms: self.answer_p99_bound_ms,
            queryable_s: self.queryable_p99_bound,
            counted_s: self.counted_p99_bound,
        }
    }
}

/// One rate's figures.
struct Step {
    offered: f64,
    accepted: f64,
    failures: u64,
    answer_p50_ms: Option<f64>,
    answer_p99_ms: Option<f64>,
    samples: usize,
    seen: usize,
    queryable_p50_s: Option<f64>,
    queryable_p99_s: Option<f64>,
    /// Of the samples, those counted in the metric results, and how long after sending.
    counted: usize,
    counted_p50_s: Option<f64>,
    counted_p99_s: Option<f64>,
    machine_percent: f64,
    processes: BTreeMap<String, f64>,
}

impl Step {
    fn sustained(&self, bounds: &Bounds) -> bool {
        self.accepted >= 0.99 * self.offered
            && self.failures == 0
            && self
                .answer_p99_ms
                .is_some_and(|p99| p99 <= bounds.answer_ms)
            && self.samples > 0
            && self.seen == self.samples
            && self
                .queryable_p99_s
                .is_some_and(|p99| p99 <= bounds.queryable_s)
            && self.counted == self.samples
            && self
                .counted_p99_s
                .is_some_and(|p99| p99 <= bounds.counted_s)
    }

    /// What ran out first, in words.
    fn limit(&self, cores: usize) -> String {
        let top = self
            .processes
            .iter()
            .filter(|(name, _)| name.as_str() != "loadgen")
            .max_by(|a, b| a.1.total_cmp(b.1));
        let top_words = top.map_or(String::new(), |(name, cpu)| format!("{name} at {cpu:.0}%"));
        if self.machine_percent >= 90.0 * cores as f64 {
            format!(
                "the machine's CPU ({:.0}% of {cores} cores; the most: {top_words})",
                self.machine_percent
            )
        } else if let Some((name, cpu)) = top.filter(|(_, cpu)| **cpu >= 90.0) {
            format!("{name} at {cpu:.0}% of a core")
        } else {
            format!(
                "no CPU ({:.0}% of {cores} cores; the most: {top_words}): the queue before \
                 the slowest stage",
                self.machine_percent
            )
        }
    }
}

/// Browser traffic whose accepted requests, some of them, leave their first event's id
/// and sending time for the poller.
struct Sampled {
    traffic: Traffic,
    path: String,
    /// One request in this many is a candidate.
    every: u64,
    sent: u64,
    candidate: Option<(String, Instant)>,
    samples: Arc<Mutex<Vec<(String, Instant)>>>,
}

impl Workload for Sampled {
    fn request(&mut self) -> Request<Full<Bytes>> {
        let batch = self.traffic.next_batch();
        self.sent += 1;
        self.candidate = self
            .sent
            .is_multiple_of(self.every)
            .then(|| batch.events.first())
            .flatten()
            .map(|e| (e.event_id.to_string(), Instant::now()));
        browser_request(&self.path, &batch)
    }

    fn units(&mut self, status: StatusCode, body: &[u8]) -> u64 {
        let accepted = accepted_events(status, body);
        if let Some(sample) = self.candidate.take()
            && accepted > 0
        {
            self.samples.lock().expect("not poisoned").push(sample);
        }
        accepted
    }
}

pub async fn run(args: PipelineArgs) -> anyhow::Result<()> {
    anyhow::ensure!(!args.rates.is_empty(), "--rates names no rate");
    anyhow::ensure!(
        args.rates.iter().all(|r| *r > 0.0) && args.step_seconds > 0.0,
        "rates and --step-seconds must be positive"
    );
    let (addr, base) = target(&args.url).await?;
    let path = format!("{}/api/v1/analytics", base.trim_end_matches('/'));
    let sites = Arc::new(Sites::from_file(&args.snapshot)?);
    let per_request = events_per_request(&sites);
    let clickhouse = ClickHouse::new(&args.clickhouse_url);
    let watch = Watch::parse(&args.watch)?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let run = format!("pl{:08x}", rand::random::<u32>());
    eprintln!(
        "pipeline run {run}: {per_request:.2} events per request, {cores} cores, rates {:?}",
        args.rates
    );

    let setup = Setup {
        args: &args,
        addr,
        path,
        sites,
        clickhouse,
        watch,
        run,
        per_request,
    };
    let mut steps = Vec::new();
    for (index, &offered) in args.rates.iter().enumerate() {
        let step = setup.measure(index, offered).await?;
        let sustained = step.sustained(&args.bounds());
        eprintln!(
            "  {offered} events/s offered: {:.0} accepted, queryable p99 {:?} s, counted p99 \
             {:?} s, {}/{} samples seen, {} counted, {}",
            step.accepted,
            step.queryable_p99_s,
            step.counted_p99_s,
            step.seen,
            step.samples,
            step.counted,
            if sustained {
                "sustained"
            } else {
                "NOT sustained"
            }
        );
        steps.push(step);
        if !sustained && !args.keep_going {
            break;
        }
    }
    print!("{}", table(&steps, &args, cores));
    Ok(())
}

/// The mean events per request of the traffic, from a sample of its requests.
fn events_per_request(sites: &Arc<Sites>) -> f64 {
    let mut traffic = Traffic::new(Arc::clone(sites), "mean", 7);
    let requests = 20_000;
    let events: usize = (0..requests)
        .map(|_| traffic.next_batch().events.len())
        .sum();
    events as f64 / requests as f64
}

/// What every step of a run shares.
struct Setup<'a> {
    args: &'a PipelineArgs,
    addr: std::net::SocketAddr,
    path: String,
    sites: Arc<Sites>,
    clickhouse: ClickHouse,
    watch: Watch,
    /// Session ids start with it (and the step's index).
    run: String,
    per_request: f64,
}

impl Setup<'_> {
    /// The step of `offered` events per second, the `index`th of the run.
    async fn measure(&self, index: usize, offered: f64) -> anyhow::Result<Step> {
        let args = self.args;
        let requests_per_second = offered / self.per_request;
        let every = (requests_per_second / args.samples_per_second).max(1.0) as u64;
        let samples = Arc::new(Mutex::new(Vec::new()));
        let duration = Duration::from_secs_f64(args.step_seconds);
        let options = LoadOptions {
            addr: self.addr,
            connections: args.connections,
            // Every request of the step counts: the traffic starts at its rate at once.
            warmup: Duration::ZERO,
            duration,
            rate: Some(requests_per_second),
        };
        let cpu = watch::window(self.watch.clone(), duration / 5, duration * 4 / 5);
        let machine = watch::machine_window(duration / 5, duration * 4 / 5);
        let load_over = Arc::new(OnceLock::new());
        let poller = tokio::spawn(poll_samples(
            self.clickhouse.clone(),
            args.database.clone(),
            Arc::clone(&samples),
            Duration::from_millis(args.poll_ms),
            Arc::clone(&load_over),
            Duration::from_secs_f64(args.drain_timeout),
        ));
        let tally = load::run(&options, |worker| Sampled {
            traffic: Traffic::new(
                Arc::clone(&self.sites),
                &format!("{}-{index}", self.run),
                (index * 100_000 + worker) as u64,
            ),
            path: self.path.clone(),
            every,
            sent: 0,
            candidate: None,
            samples: Arc::clone(&samples),
        })
        .await;
        load_over.get_or_init(Instant::now);
        let tally = tally?;
        let times = poller.await.context("the poller panicked")??;
        let figure = tally.figure("pipeline", "front", "events");
        let ms = |us: Option<u64>| us.map(|us| us as f64 / 1000.0);
        let seconds = |h: &Histogram<u64>, q: f64| {
            (!h.is_empty()).then(|| h.value_at_quantile(q) as f64 / 1000.0)
        };
        Ok(Step {
            offered,
            accepted: figure.rate,
            failures: figure.failures.values().sum::<u64>() + figure.transport_errors,
            answer_p50_ms: ms(figure.p50_us),
            answer_p99_ms: ms(figure.p99_us),
            samples: times.samples,
            seen: times.queryable.len() as usize,
            queryable_p50_s: seconds(&times.queryable, 0.5),
            queryable_p99_s: seconds(&times.queryable, 0.99),
            counted: times.counted.len() as usize,
            counted_p50_s: seconds(&times.counted, 0.5),
            counted_p99_s: seconds(&times.counted, 0.99),
            machine_percent: machine.await.context("the CPU sampler panicked")?,
            processes: cpu.await.context("the CPU watch panicked")?,
        })
    }
}

/// The samples' times, in milliseconds from sending.
struct Times {
    /// The samples taken.
    samples: usize,
    /// Until seen in `events`.
    queryable: Histogram<u64>,
    /// Until counted in `experiment_metric_results`.
    counted: Histogram<u64>,
}

/// A sample not seen in `events` yet: when it was sent, and a time (microseconds since the
/// epoch) before which it was not stored, the start of the last poll that did not see it.
struct Unseen {
    sent: Instant,
    not_before_us: u64,
}

/// A sample seen in `events`, until counted in the metric results.
struct Seen {
    visitor: (String, String),
    sent: Instant,
    not_before_us: u64,
    /// When the poll that saw it returned, in microseconds since the epoch.
    seen_us: u64,
}

/// Asks ClickHouse, every `interval`, which sampled events it holds and which of those the
/// metric results count, until the load is over (`load_over` set) and every sample taken is
/// counted, or `drain` has passed since.
async fn poll_samples(
    clickhouse: ClickHouse,
    database: String,
    samples: Arc<Mutex<Vec<(String, Instant)>>>,
    interval: Duration,
    load_over: Arc<OnceLock<Instant>>,
    drain: Duration,
) -> anyhow::Result<Times> {
    let histogram = || Histogram::<u64>::new_with_bounds(1, 3_600_000, 3);
    let mut times = Times {
        samples: 0,
        queryable: histogram()?,
        counted: histogram()?,
    };
    let ms = |asked: Instant, sent: Instant| {
        u64::try_from(asked.saturating_duration_since(sent).as_millis()).unwrap_or(u64::MAX)
    };
    let mut waiting: HashMap<String, Unseen> = HashMap::new();
    let mut counting: Vec<Seen> = Vec::new();
    loop {
        let asked = Instant::now();
        let asked_us = unix_micros();
        // Read before the samples: once over, no sample is added after this.
        let over = load_over.get().copied();
        let new = std::mem::take(&mut *samples.lock().expect("not poisoned"));
        times.samples += new.len();
        waiting.extend(new.into_iter().map(|(id, sent)| {
            let ago = u64::try_from(asked.duration_since(sent).as_micros()).unwrap_or(u64::MAX);
            let not_before_us = asked_us.saturating_sub(ago);
            (
                id,
                Unseen {
                    sent,
                    not_before_us,
                },
            )
        }));
        if !waiting.is_empty() {
            let found = seen(&clickhouse, &database, waiting.keys()).await?;
            let seen_us = unix_micros();
            for (id, visitor) in found {
                if let Some(unseen) = waiting.remove(&id) {
                    times.queryable.saturating_record(ms(asked, unseen.sent));
                    counting.push(Seen {
                        visitor,
                        sent: unseen.sent,
                        not_before_us: unseen.not_before_us,
                        seen_us,
                    });
                }
            }
            for unseen in waiting.values_mut() {
                unseen.not_before_us = asked_us;
            }
        }
        if !counting.is_empty() {
            let as_of_us = clickhouse
                .count(&format!(
                    "SELECT toUInt64(refreshed_as_of) * 1000000 FROM ({})",
                    schema::metric_results_as_of(&database)
                ))
                .await?;
            let refreshed = refreshed(&clickhouse, &database, &counting).await?;
            counting.retain(|s| {
                let counted = as_of_us >= s.seen_us
                    && refreshed
                        .get(&s.visitor)
                        .is_some_and(|r| *r >= s.not_before_us);
                if counted {
                    times.counted.saturating_record(ms(asked, s.sent));
                }
                !counted
            });
        }
        if let Some(over) = over
            && ((waiting.is_empty() && counting.is_empty()) || over.elapsed() >= drain)
        {
            return Ok(times);
        }
        tokio::time::sleep_until((asked + interval).into()).await;
    }
}

fn unix_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// The ids among `ids` that `database.events` holds, each with its visitor (public key,
/// visitor id).
async fn seen(
    clickhouse: &ClickHouse,
    database: &str,
    ids: impl Iterator<Item = &String>,
) -> anyhow::Result<Vec<(String, (String, String))>> {
    let list: Vec<String> = ids.map(|id| format!("'{id}'")).collect();
    let mut found = Vec::new();
    for chunk in list.chunks(2000) {
        let answer = clickhouse
            .query(&format!(
                "SELECT toString(event_id), toString(public_key), visitor_id \
                 FROM {database}.events WHERE event_id IN ({}) LIMIT 1 BY event_id",
                chunk.join(",")
            ))
            .await?;
        for line in answer.lines() {
            let mut fields = line.split('\t').map(str::to_owned);
            if let (Some(id), Some(key), Some(visitor)) =
                (fields.next(), fields.next(), fields.next())
            {
                found.push((id, (key, visitor)));
            }
        }
    }
    Ok(found)
}

/// The latest refresh (its start, in microseconds since the epoch) of the stored metric
/// values of each visitor of `seen` that has some.
async fn refreshed(
    clickhouse: &ClickHouse,
    database: &str,
    seen: &[Seen],
) -> anyhow::Result<HashMap<(String, String), u64>> {
    // The traffic's keys and visitor ids are its own: letters, digits and dashes.
    let list: Vec<String> = seen
        .iter()
        .map(|s| format!("('{}','{}')", s.visitor.0, s.visitor.1))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut latest = HashMap::new();
    for chunk in list.chunks(2000) {
        let answer = clickhouse
            .query(&format!(
                "SELECT toString(public_key), visitor_id, max(refresh_id) \
                 FROM {database}.experiment_metric_values \
                 WHERE (toString(public_key), visitor_id) IN ({}) \
                 GROUP BY public_key, visitor_id",
                chunk.join(",")
            ))
            .await?;
        for line in answer.lines() {
            let fields: Vec<&str> = line.split('\t').collect();
            if let [key, visitor, refresh] = fields[..] {
                latest.insert(
                    (key.to_owned(), visitor.to_owned()),
                    refresh.parse().context("a refresh id")?,
                );
            }
        }
    }
    Ok(latest)
}

/// The steps as a Markdown table, then the sustainable rate and what limits it.
fn table(steps: &[Step], args: &PipelineArgs, cores: usize) -> String {
    let names: Vec<&String> = steps
        .iter()
        .flat_map(|s| s.processes.keys())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let opt =
        |v: Option<f64>, digits: usize| v.map_or("n/a".to_owned(), |v| format!("{v:.digits$}"));
    let mut out = String::from(
        "| offered events/s | accepted events/s | answer p50 / p99 ms | queryable p50 / p99 s \
         | counted in metric results p50 / p99 s | samples seen / counted | machine CPU % |",
    );
    for name in &names {
        out += &format!(" {name} % |");
    }
    out += " sustained |\n|---:|---:|---:|---:|---:|---:|---:|";
    out += &"---:|".repeat(names.len());
    out += ":-:|\n";
    for s in steps {
        out += &format!(
            "| {:.0} | {:.0} | {} / {} | {} / {} | {} / {} | {}/{} / {} | {:.0} |",
            s.offered,
            s.accepted,
            opt(s.answer_p50_ms, 1),
            opt(s.answer_p99_ms, 1),
            opt(s.queryable_p50_s, 2),
            opt(s.queryable_p99_s, 2),
            opt(s.counted_p50_s, 2),
            opt(s.counted_p99_s, 2),
            s.seen,
            s.samples,
            s.counted,
            s.machine_percent
        );
        for name in &names {
            out += &format!(" {} |", opt(s.processes.get(*name).copied(), 0));
        }
        out += if s.sustained(&args.bounds()) {
            " yes |\n"
        } else {
            " NO |\n"
        };
    }
    let bounds = args.bounds();
    let best = steps
        .iter()
        .filter(|s| s.sustained(&bounds))
        .map(|s| s.accepted)
        .fold(None, |a: Option<f64>, r| Some(a.map_or(r, |a| a.max(r))));
    out += &format!(
        "\nSustainable: {} events/s (accepted, answered within {} ms and every sampled event \
         queryable within {} s and counted in the metric results within {} s, at p99; times \
         ±{} ms).\n",
        best.map_or("none of the rates".to_owned(), |r| format!("{r:.0}")),
        bounds.answer_ms,
        bounds.queryable_s,
        bounds.counted_s,
        args.poll_ms
    );
    match steps.iter().find(|s| !s.sustained(&bounds)) {
        Some(s) => {
            out += &format!(
                "First not sustained: {:.0} events/s offered; saturated first: {}.\n",
                s.offered,
                s.limit(cores)
            );
        }
        None => out += "Every rate was sustained: offer higher ones to find the limit.\n",
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step() -> Step {
        Step {
            offered: 10_000.0,
            accepted: 9_950.0,
            failures: 0,
            answer_p50_ms: Some(2.0),
            answer_p99_ms: Some(30.0),
            samples: 500,
            seen: 500,
            queryable_p50_s: Some(1.0),
            queryable_p99_s: Some(2.5),
            counted: 500,
            counted_p50_s: Some(4.0),
            counted_p99_s: Some(12.0),
            machine_percent: 120.0,
            processes: BTreeMap::from([
                ("ingest".to_owned(), 60.0),
                ("clickhouse".to_owned(), 30.0),
                ("loadgen".to_owned(), 99.0),
            ]),
        }
    }

    #[test]
    fn a_rate_is_sustained_only_when_accepted_answered_and_queryable_in_time() {
        let bounds = Bounds {
            answer_ms: 100.0,
            queryable_s: 10.0,
            counted_s: 30.0,
        };
        assert!(step().sustained(&bounds));
        let short = Step {
            accepted: 9_800.0,
            ..step()
        };
        assert!(!short.sustained(&bounds), "under 99% of the offer accepted");
        let refused = Step {
            failures: 1,
            ..step()
        };
        assert!(!refused.sustained(&bounds), "a refusal");
        let lost = Step {
            seen: 499,
            ..step()
        };
        assert!(!lost.sustained(&bounds), "a sample never queryable");
        let tight = Bounds {
            queryable_s: 2.0,
            ..bounds
        };
        assert!(!step().sustained(&tight), "queryable p99 over the bound");
        let uncounted = Step {
            counted: 499,
            ..step()
        };
        assert!(!uncounted.sustained(&bounds), "a sample never counted");
        let stale = Bounds {
            counted_s: 10.0,
            ..bounds
        };
        assert!(!step().sustained(&stale), "counted p99 over the bound");
        let queued = Step {
            answer_p99_ms: Some(1500.0),
            ..step()
        };
        assert!(!queued.sustained(&bounds), "answers queued");
        let unsampled = Step {
            samples: 0,
            seen: 0,
            queryable_p99_s: None,
            ..step()
        };
        assert!(!unsampled.sustained(&bounds), "nothing timed");
    }

    #[test]
    fn the_limit_is_the_machine_then_a_full_core_then_the_queue() {
        let machine = Step {
            machine_percent: 190.0,
            ..step()
        };
        let words = machine.limit(2);
        assert!(
            words.starts_with("the machine's CPU (190% of 2 cores"),
            "{words}"
        );
        assert!(
            words.contains("ingest at 60%"),
            "the load tool is not the pipeline: {words}"
        );
        let mut one = step();
        one.processes.insert("tansu".to_owned(), 97.0);
        assert_eq!(one.limit(2), "tansu at 97% of a core");
        assert!(step().limit(2).starts_with("no CPU (120% of 2 cores"));
    }

    #[test]
    fn the_table_names_the_sustainable_rate_and_the_first_limit() {
        let args = PipelineArgs::parse_from(["pipeline"]);
        let slow = Step {
            offered: 20_000.0,
            accepted: 15_000.0,
            machine_percent: 195.0,
            ..step()
        };
        let text = table(&[step(), slow], &args, 2);
        assert!(
            text.contains(
                "| 10000 | 9950 | 2.0 / 30.0 | 1.00 / 2.50 | 4.00 / 12.00 | 500/500 / 500 | 120 \
                 | 30 | 60 | 99 | yes |"
            ),
            "{text}"
        );
        assert!(text.contains("| 20000 | 15000 |"), "{text}");
        assert!(text.contains("Sustainable: 9950 events/s"), "{text}");
        assert!(
            text.contains(
                "First not sustained: 20000 events/s offered; saturated first: the machine's CPU"
            ),
            "{text}"
        );
    }

    #[derive(clap::Parser)]
    struct One {
        #[command(flatten)]
        args: PipelineArgs,
    }

    impl PipelineArgs {
        fn parse_from(argv: [&str; 1]) -> Self {
            <One as clap::Parser>::parse_from(argv).args
        }
    }
}
