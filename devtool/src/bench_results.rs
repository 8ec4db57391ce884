//! `devtool bench-results`, the body of `scripts/bench-results` (whose --help says what it
//! times): the results views over BENCH_RESULTS_EVENTS events in a database of its own on
//! scripts/up's ClickHouse, dropped at the end however the run ends.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;
use stack_kit::log;

use crate::supervise;

/// The database the run fills and drops.
const DATABASE: &str = "bench_results";
/// The key of the demo experiments it fills.
const KEY: &str = "pk_demo_coffee";

#[derive(clap::Args)]
pub struct BenchResultsArgs {
    /// The repository whose scripts/up pipeline and consumer to use.
    #[arg(long)]
    repo: PathBuf,
    #[command(flatten)]
    settings: Settings,
}

/// What the run is told, by argument or by variable (`devtool bench-results --help`).
#[derive(clap::Args, Debug, PartialEq, Eq)]
struct Settings {
    /// Events to fill, five per visitor: a multiple of 5.
    #[arg(long, env = "BENCH_RESULTS_EVENTS", default_value_t = 10_000_000,
          value_parser = multiple_of_five)]
    events: u64,
    /// scripts/up's ClickHouse.
    #[arg(
        long = "clickhouse-url",
        env = "CLICKHOUSE_URL",
        default_value = "http://127.0.0.1:8123"
    )]
    url: String,
}

/// A positive multiple of 5, or the refusal that says so.
fn multiple_of_five(text: &str) -> Result<u64, String> {
    text.parse::<u64>()
        .ok()
        .filter(|n| *n > 0 && n % 5 == 0)
        .ok_or_else(|| format!("must be a multiple of 5, not {text}"))
}

/// The exit code: 0 when every step ran, 1 when one failed; 130 or 143 when interrupted.
/// The database is dropped in every case.
pub async fn command(args: BenchResultsArgs) -> i32 {
    let settings = &args.settings;
    let client = ClickHouse::new(&settings.url);
    let code =
        supervise::exit_code(async { run(&args.repo, settings, &client).await.map(|()| true) })
            .await;
    let _ = client
        .statement("", &format!("DROP DATABASE IF EXISTS {DATABASE}"))
        .await;
    code
}

async fn run(repo: &Path, settings: &Settings, clickhouse: &ClickHouse) -> anyhow::Result<()> {
    let events = settings.events;
    let visitors = events / 5;
    let half = visitors / 2;
    supervise::scripts_up(repo).await?;

    clickhouse
        .statement("", &format!("DROP DATABASE IF EXISTS {DATABASE}"))
        .await?;
    consumer(
        repo,
        &settings.url,
        "--migrate-only",
        "bench-results-migrate.log",
    )
    .await
    .context("migrations failed")?;
    let sql = |statement: String| async move { clickhouse.statement(DATABASE, &statement).await };
    sql(VARIANTS.to_owned()).await?;
    sql(METRICS.to_owned()).await?;

    log(&format!("Inserting {events} events"));
    let started = Instant::now();
    sql(events_insert(events, visitors, half)).await?;
    let insert_seconds = started.elapsed();
    // As the script did: a merge that fails only leaves the timings a little slower.
    let _ = sql("OPTIMIZE TABLE experiment_visitors FINAL".to_owned()).await;

    let sweep = |name: &'static str| async move {
        let started = Instant::now();
        consumer(
            repo,
            &settings.url,
            "--refresh-metrics-only",
            "bench-results-sweep.log",
        )
        .await
        .context("the sweep failed")?;
        anyhow::Ok(row(name, &seconds(started.elapsed())))
    };
    let sweep_row = sweep("consumer sweep: every visitor's metric values stored (once)").await?;
    // The queries are timed on a quiet server: a merge of the swept parts still running
    // would take a core from whichever query it overlaps.
    let settled = merges_settled(clickhouse).await?;

    let rows = sql("SELECT count() FROM experiment_visitors".to_owned()).await?;
    let version = sql("SELECT version()".to_owned()).await?;
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!();
    println!(
        "{events} events ({visitors} visitors) inserted in {} s; experiment_visitors: {} rows",
        seconds(insert_seconds),
        rows.trim()
    );
    println!("ClickHouse {}, nproc {cores}", version.trim());
    println!("{settled}");
    println!();
    println!("| query | time (warm, 3 runs) |");
    println!("|---|---|");
    println!("{sweep_row}");
    // Warm, then three rounds of every query in turn: the ratio of each round compares
    // queries run seconds apart, on the same state of the machine.
    let queries: Vec<String> = TIMED
        .iter()
        .map(|(_, q)| format!("{q} FORMAT Null"))
        .collect();
    for query in &queries {
        sql(query.clone()).await?;
    }
    let mut times = vec![Vec::new(); queries.len()];
    for _ in 0..3 {
        for (query, times) in queries.iter().zip(&mut times) {
            let started = Instant::now();
            sql(query.clone()).await?;
            times.push(started.elapsed().as_secs_f64());
        }
    }
    for ((name, _), times) in TIMED.iter().zip(&times) {
        let shown: Vec<String> = times.iter().map(|t| format!("{t:.2}")).collect();
        println!("{}", row(name, &shown.join("-")));
    }
    let ratios: Vec<String> = times[METRICS_TIMED]
        .iter()
        .zip(&times[PLAIN_TIMED])
        .map(|(metric, plain)| format!("{:.2}", metric / plain))
        .collect();
    println!(
        "| experiment_metric_results ÷ experiment_results, each round | {} |",
        ratios.join("-")
    );
    sql(STALE_CLICKS.to_owned()).await?;
    let started = Instant::now();
    sql(format!(
        "SELECT * FROM experiment_metric_results WHERE public_key = '{KEY}' FORMAT Null"
    ))
    .await?;
    println!(
        "{}",
        row(
            "experiment_metric_results with 1 000 visitors stale: as of their refresh (once)",
            &seconds(started.elapsed())
        )
    );
    println!(
        "{}",
        sweep("consumer sweep: the 1 000 stale visitors' values stored (once)").await?
    );
    println!();
    print!("{}", sql(SUMMARY.to_owned()).await?);
    Ok(())
}

/// Waits until no merge of the run's database is running (at most [`MERGES_LONGEST`]),
/// and says how long it waited.
async fn merges_settled(clickhouse: &ClickHouse) -> anyhow::Result<String> {
    let started = Instant::now();
    let query = format!("SELECT count() FROM system.merges WHERE database = '{DATABASE}'");
    loop {
        let running = clickhouse.statement("", &query).await?;
        if running.trim() == "0" {
            return Ok(format!(
                "merges settled {} s after the sweep",
                seconds(started.elapsed())
            ));
        }
        if started.elapsed() > MERGES_LONGEST {
            return Ok(format!(
                "{} merges still running {} s after the sweep",
                running.trim(),
                seconds(started.elapsed())
            ));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// How long the run waits for the merges after the sweep.
const MERGES_LONGEST: Duration = Duration::from_secs(300);

/// A row of the table.
fn row(name: &str, seconds: &str) -> String {
    format!("| {name} | {seconds} s |")
}

/// Seconds with two decimals.
fn seconds(elapsed: Duration) -> String {
    format!("{:.2}", elapsed.as_secs_f64())
}

/// The consumer of the repository with `flag`, on the run's database, its output in
/// `.run/up/LOG`.
async fn consumer(repo: &Path, url: &str, flag: &str, log: &str) -> anyhow::Result<()> {
    let log = repo.join(".run/up").join(log);
    let out =
        std::fs::File::create(&log).with_context(|| format!("cannot write {}", log.display()))?;
    let status = tokio::process::Command::new(repo.join("target/release/consumer"))
        .arg(flag)
        .env("CLICKHOUSE_URL", url)
        .env("CLICKHOUSE_DATABASE", DATABASE)
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .status()
        .await
        .context("the consumer does not run")?;
    anyhow::ensure!(status.success(), "{status} (log: {})", log.display());
    Ok(())
}

/// scripts/up's ClickHouse over HTTP.
struct ClickHouse {
    client: reqwest::Client,
    url: String,
}

impl ClickHouse {
    fn new(url: &str) -> Self {
        Self {
            // The 10-million-event insert takes minutes on a 2-core machine.
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(900))
                .build()
                .unwrap_or_default(),
            url: url.trim_end_matches('/').to_owned(),
        }
    }

    /// Runs `sql` in `database` (empty: the server's default); its answer as text.
    async fn statement(&self, database: &str, sql: &str) -> anyhow::Result<String> {
        let mut request = self.client.post(format!("{}/", self.url));
        if !database.is_empty() {
            request = request.query(&[("database", database)]);
        }
        let response = request.body(sql.to_owned()).send().await?;
        let status = response.status();
        let text = response.text().await?;
        anyhow::ensure!(status.is_success(), "ClickHouse answered {status}: {text}");
        Ok(text)
    }
}

const VARIANTS: &str = "INSERT INTO experiment_variants (experiment_id, variant_id, version, \
     weight, is_control, status, parts, loaded_at, phase) VALUES
     ('exp_home_headline', 'var_home_control', 'bench', 50, 1, 'live', '{}', 0, 1),
     ('exp_home_headline', 'var_home_urgency', 'bench', 50, 0, 'live', '{}', 0, 1),
     ('exp_checkout_button', 'var_checkout_blue', 'bench', 34, 1, 'live', '{}', 0, 1),
     ('exp_checkout_button', 'var_checkout_green', 'bench', 33, 0, 'live', '{}', 0, 1),
     ('exp_checkout_button', 'var_checkout_orange', 'bench', 33, 0, 'live', '{}', 0, 1)";

/// Five metrics per experiment: a proportion, two means (one capped at a percentile), a
/// ratio, and the default goal.
const METRICS: &str = "INSERT INTO experiment_metrics (experiment_id, version, phase, \
     metric_id, role, position, kind, num_event, num_conversion, num_field, num_aggregate, \
     den_aggregate, cap_percentile, cuped_lookback_days, loaded_at)
     SELECT experiment_id, 'bench', 1, metric.1, metric.2, metric.3, metric.4, metric.5,
       metric.6, metric.7, metric.8, metric.9, metric.10, 14, 0
     FROM (SELECT arrayJoin(['exp_home_headline', 'exp_checkout_button']) AS experiment_id,
       arrayJoin([
         ('conversion', 'goal', 0, 'proportion', '', 1, '', 'any', '', 0.),
         ('clicked', 'secondary', 1, 'proportion', 'click', 0, '', 'any', '', 0.),
         ('clicks', 'secondary', 2, 'mean', 'click', 0, '', 'count', '', 0.),
         ('time_on_page', 'guardrail', 3, 'mean', 'click', 0, 'time_on_page', 'max', '', 0.99),
         ('clicks_per_session', 'secondary', 4, 'ratio', 'click', 0, '', 'count', 'sessions', 0.)
       ]) AS metric)";

/// Each visitor: an impression, three clicks over two sessions (the first with a time on
/// page), and a 20% conversion in the second session.
fn events_insert(events: u64, visitors: u64, half: u64) -> String {
    format!(
        "INSERT INTO events (event_id, received_at, received_at_ms, event_time, public_key,
    event_name, experiment_id, variant_id, session_id, visitor_id, phase, is_bot, conversion,
    time_on_page, test)
SELECT generateUUIDv4(), toDateTime(1795300000 + intDiv(number, 1000)),
  (1795300000 + intDiv(number, 1000)) * 1000 + number % 1000 AS ms, ms, '{KEY}',
  multiIf(intDiv(number, {visitors}) = 0, 'impression',
          intDiv(number, {visitors}) = 4 AND cityHash64(number % {visitors}) % 10 < 2, 'conversion',
          'click'),
  if(number % {visitors} < {half}, 'exp_home_headline', 'exp_checkout_button'),
  if(number % {visitors} < {half},
     if(cityHash64(number % {visitors}) % 2 = 0, 'var_home_control', 'var_home_urgency'),
     multiIf(cityHash64(number % {visitors}) % 100 < 34, 'var_checkout_blue',
             cityHash64(number % {visitors}) % 100 < 67, 'var_checkout_green', 'var_checkout_orange')),
  concat('s', toString(number % {visitors}), '-', toString(intDiv(number, {visitors}) >= 3)),
  concat('v', toString(number % {visitors})), 1, 0, NULL,
  if(intDiv(number, {visitors}) = 1, (number % 600) / 10, NULL), 0
FROM numbers({events})"
    )
}

/// Where `experiment_results` and `experiment_metric_results` are in [`TIMED`].
const PLAIN_TIMED: usize = 0;
const METRICS_TIMED: usize = 2;

/// The queries timed, warm, three rounds.
const TIMED: [(&str, &str); 4] = [
    (
        "experiment_results of the key (5 variants, z-tests, always-valid, SRM)",
        "SELECT * FROM experiment_results WHERE public_key = 'pk_demo_coffee'",
    ),
    (
        "experiment_results_over_time of the key (every hour as of its end, sequential SRM)",
        "SELECT * FROM experiment_results_over_time WHERE public_key = 'pk_demo_coffee'",
    ),
    (
        "experiment_metric_results of the key (5 metrics per experiment: t-tests, \
         always-valid, CUPED, caps)",
        "SELECT * FROM experiment_metric_results WHERE public_key = 'pk_demo_coffee'",
    ),
    (
        "reference: uniqExact(visitor_id) of impressions per variant over events FINAL",
        "SELECT experiment_id, variant_id, uniqExact(visitor_id) FROM events FINAL
         WHERE public_key = 'pk_demo_coffee' AND event_name = 'impression'
         GROUP BY experiment_id, variant_id",
    ),
];

/// One more click for 1 000 visitors: their stored values stale.
const STALE_CLICKS: &str = "INSERT INTO events (event_id, received_at, received_at_ms, \
    event_time, public_key, event_name, experiment_id, variant_id, session_id, visitor_id, \
    phase, is_bot, test)
SELECT generateUUIDv4(), toDateTime(1795400000), 1795400000000, 1795400000000,
  'pk_demo_coffee', 'click', 'exp_home_headline', '', concat('s', toString(number), '-1'),
  concat('v', toString(number)), 1, 0, 0
FROM numbers(1000)";

const SUMMARY: &str = "SELECT experiment_id, variant_id, exposed, converted, \
     round(diff, 4) AS diff, round(always_valid_p_value, 4) AS av_p, \
     round(srm_p_value, 4) AS srm
     FROM experiment_results WHERE public_key = 'pk_demo_coffee'
     ORDER BY experiment_id, variant_id FORMAT PrettyCompact";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_event_count_is_a_multiple_of_5() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            settings: Settings,
        }
        let parse = |args: &[&str]| {
            <Cli as clap::Parser>::try_parse_from(std::iter::once("x").chain(args.iter().copied()))
                .map(|cli| cli.settings)
        };
        let defaults = parse(&[]).unwrap();
        assert_eq!(defaults.events, 10_000_000);
        assert_eq!(parse(&["--events=2000000"]).unwrap().events, 2_000_000);
        for refused in ["7", "0", "-5", "ten", ""] {
            let flag = format!("--events={refused}");
            let error = parse(&[&flag]).unwrap_err().to_string();
            assert!(
                error.contains(&format!("must be a multiple of 5, not {refused}")),
                "{error}"
            );
        }
        let command = <Cli as clap::CommandFactory>::command();
        let events = command
            .get_arguments()
            .find(|a| a.get_id() == "events")
            .unwrap();
        assert_eq!(events.get_env().unwrap(), "BENCH_RESULTS_EVENTS");
    }

    #[test]
    fn the_events_are_five_per_visitor_in_two_experiments() {
        let sql = events_insert(10, 2, 1);
        assert!(sql.contains("FROM numbers(10)"));
        assert!(sql.contains("if(number % 2 < 1, 'exp_home_headline'"));
    }
}
