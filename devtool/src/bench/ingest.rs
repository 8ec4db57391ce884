//! Section 2, on a broker of its own: an ingest (built as the images are) against a raw
//! librdkafka producer sending the same messages, each measured alone (the series' consumer
//! frozen, ClickHouse's merges done); with wrk, the ingest against its floor (nginx's fixed
//! 202) and its own stack doing no work on the events (ingest/examples/stack_floor.rs), and
//! with the peers PostHog capture; then the ingest at half its rate, open loop, and a short
//! run that checks every accepted event landed. A refused round ends the series.

use anyhow::Context;

use super::context::{Run, log};
use super::measure::{Measure, Settle, Stderr, Stdout, strings};
use super::nginx::Static;
use super::plan::{self, Tool};
use super::series::{Round, Series};
use super::services::{Ready, Start};
use crate::report;
use crate::supervise;

/// The first batch of a wrk batches file: key, user agent, body.
fn first_batch(path: &std::path::Path) -> anyhow::Result<(String, String, String)> {
    let text = std::fs::read_to_string(path)?;
    let line = text.lines().next().unwrap_or_default();
    let mut fields = line.splitn(3, '\t');
    let mut next = || fields.next().unwrap_or_default().to_owned();
    Ok((next(), next(), next()))
}

/// POSTs a body with headers; the answer's text (an error on a non-2xx answer).
async fn post(url: &str, headers: &[(&str, &str)], body: String) -> anyhow::Result<String> {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("Content-Type", "application/json")
        .body(body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    Ok(request.send().await?.error_for_status()?.text().await?)
}

/// The series; it returns early, refused, when its broker dies.
pub async fn section(run: &Run<'_>, series: &Series<'_>, nginx: &Static) -> anyhow::Result<()> {
    let s = run.settings;
    let snapshot = run.snapshot();
    log(&format!(
        "2. ingest vs raw librdkafka producer ({} rounds, {} connections)",
        s.rounds, s.ingest_connections
    ));
    let port = supervise::free_port_from(8191);
    let consumer = series
        .service(
            "consumer",
            port,
            &[
                ("KAFKA_GROUP_ID", "bench-pipeline".to_owned()),
                ("CONSUMER_LISTEN", format!("127.0.0.1:{port}")),
                (
                    "KAFKA_PROPERTIES",
                    format!("fetch.wait.max.ms={}", s.fetch_wait_ms),
                ),
                ("CLICKHOUSE_URL", "http://127.0.0.1:8123".to_owned()),
                ("CLICKHOUSE_DATABASE", "bench_ingest".to_owned()),
                // It only stores the events: the metrics' refresh would be ClickHouse
                // work beside the rounds (docs/benchmarks.md).
                ("METRICS_REFRESH_MS", "0".to_owned()),
            ],
        )
        .await?;
    let port = supervise::free_port_from(8181);
    let ingest = series
        .service(
            "ingest",
            port,
            &[
                ("INGEST_LISTEN", format!("127.0.0.1:{port}")),
                ("EXPERIMENTS_SNAPSHOT", snapshot.clone()),
            ],
        )
        .await?;
    let ingest_url = format!("http://127.0.0.1:{port}");
    // The ingest is measured alone: before each round the series' consumer stores what the
    // last one sent, then it is frozen (SIGSTOP, shorter than its group session) until the
    // next settle, and ClickHouse finishes its merges and statements. Landing is checked
    // apart, after the rounds, with the consumer running.
    let settle_before = run.bench.settle.replace(Settle::Ingest {
        consumer,
        brokers: series.brokers.clone(),
    });
    let watch_before = run
        .bench
        .watch_also(&[("bench-ingest", ingest), ("bench-consumer", consumer)]);
    let outcome = rounds(run, series, nginx, &ingest_url, (consumer, ingest)).await;
    run.bench.settle.replace(settle_before);
    run.bench.watch_restore(watch_before);
    outcome.map(drop)
}

/// What the series measures once its services run; `Refused` when it ended early.
async fn rounds(
    run: &Run<'_>,
    series: &Series<'_>,
    nginx: &Static,
    ingest_url: &str,
    (consumer, ingest): (u32, u32),
) -> anyhow::Result<Round> {
    let mut rounds = Rounds::prepare(run, series, nginx, ingest_url, (consumer, ingest));
    rounds.check_batches().await?;
    rounds.start_stack().await?;
    if run.settings.peers().is_some() {
        rounds.capture = Some(start_capture(run, &series.brokers).await?);
    }
    for (tool, subject) in plan::ingest(run.settings.rounds, rounds.capture.is_some()) {
        let measure = rounds.measure(tool, subject)?;
        if series.round(&measure).await? == Round::Refused {
            return Ok(Round::Refused);
        }
    }
    rounds.stop_capture().await?;
    if rounds.half_rate().await? == Round::Refused {
        return Ok(Round::Refused);
    }
    if rounds.landing().await? == Round::Refused {
        return Ok(Round::Refused);
    }
    rounds.stop().await?;
    Ok(Round::Kept)
}

/// What the rounds of the series share: its services, wrk's batches and arguments, the
/// ingest's stack floor and, with the peers, PostHog capture.
struct Rounds<'a> {
    run: &'a Run<'a>,
    series: &'a Series<'a>,
    nginx: &'a Static,
    ingest_url: &'a str,
    /// The series' consumer, frozen between settles.
    consumer: u32,
    ingest: u32,
    snapshot: String,
    /// wrk's batches file (`batches.tsv`).
    batches: std::path::PathBuf,
    /// `--connections`, the ingest rounds' connections.
    connections: String,
    /// wrk's threads, connections and script.
    wrk_ingest: Vec<String>,
    /// The stack floor's servers, HTTP alone then with Kafka: pid and port.
    stack: Vec<(u32, u16)>,
    capture: Option<Capture>,
}

impl<'a> Rounds<'a> {
    /// The rounds' shared state, before wrk's batches are written or anything is started.
    fn prepare(
        run: &'a Run<'a>,
        series: &'a Series<'a>,
        nginx: &'a Static,
        ingest_url: &'a str,
        (consumer, ingest): (u32, u32),
    ) -> Self {
        let script = run
            .repo
            .join("loadgen/wrk/ingest.lua")
            .display()
            .to_string();
        let connections = run.settings.ingest_connections.to_string();
        let wrk_ingest = strings(&["-t", "2", "-c", &connections, "-s", &script]);
        Rounds {
            run,
            series,
            nginx,
            ingest_url,
            consumer,
            ingest,
            snapshot: run.snapshot(),
            batches: run.out.join("batches.tsv"),
            connections,
            wrk_ingest,
            stack: Vec::new(),
            capture: None,
        }
    }
}

impl Rounds<'_> {
    /// Writes wrk's batches (loadgen's traffic model, batches of five with X-public-key
    /// only) and fails unless the ingest accepts all five events of the first.
    async fn check_batches(&self) -> anyhow::Result<()> {
        self.run
            .bench
            .tool(
                &strings(&[
                    "wrk-batches",
                    "--snapshot",
                    &self.snapshot,
                    "--count",
                    "20000",
                ]),
                Stdout::Create(&self.batches),
                Stderr::Inherit,
            )
            .await?;
        let (key, agent, body) = first_batch(&self.batches)?;
        let answer = post(
            &format!("{}/api/v1/analytics", self.ingest_url),
            &[("X-public-key", &key), ("User-Agent", &agent)],
            body,
        )
        .await;
        anyhow::ensure!(
            answer.is_ok_and(|a| a.contains("\"accepted\":5")),
            "the ingest does not accept all five events of wrk's batches"
        );
        Ok(())
    }

    /// Starts the ingest's stack without its work on the events
    /// (ingest/examples/stack_floor.rs): a fixed 202, and a fixed 202 after five fixed
    /// messages acknowledged (a topic of its own).
    async fn start_stack(&mut self) -> anyhow::Result<()> {
        let brokers = self.series.brokers.as_str();
        self.run
            .tool(&[
                "create-topics",
                "--brokers",
                brokers,
                "analytics-stack-floor",
            ])
            .await?;
        for part in ["http", "kafka"] {
            let port = supervise::free_port_from(8383);
            let mut env = vec![("STACK_LISTEN".to_owned(), format!("127.0.0.1:{port}"))];
            if part == "kafka" {
                env.push(("KAFKA_BROKERS".to_owned(), brokers.to_owned()));
                env.push(("STACK_TOPIC".to_owned(), "analytics-stack-floor".to_owned()));
            }
            let pid = self
                .run
                .services
                .start(Start {
                    name: &format!("stack-{part}"),
                    ready: Ready::Tcp(port),
                    command: vec!["target/dist/examples/stack_floor".to_owned()],
                    env,
                    unset: if part == "http" {
                        vec!["KAFKA_BROKERS"]
                    } else {
                        Vec::new()
                    },
                })
                .await?;
            self.stack.push((pid, port));
        }
        Ok(())
    }

    /// loadgen's arguments `args`, then the rounds' connections, duration and warmup.
    fn load(&self, args: &[&str]) -> Vec<String> {
        let mut all = strings(args);
        all.extend(strings(&[
            "--connections",
            &self.connections,
            "--duration",
            &self.run.settings.seconds.to_string(),
            "--warmup",
            "2",
        ]));
        all
    }

    /// The measurement of a step of the plan.
    fn measure(&self, tool: Tool, subject: &str) -> anyhow::Result<Measure> {
        match tool {
            Tool::Loadgen => Ok(self.loadgen(subject)),
            Tool::Wrk => self.wrk_subject(subject),
        }
    }

    /// A loadgen round: the ingest, or else the raw librdkafka producer.
    fn loadgen(&self, subject: &str) -> Measure {
        if subject == "ingest" {
            let mut args = self.load(&["ingest", "--bench", "ingest", "--subject", "ingest"]);
            args.extend(strings(&[
                "--url",
                self.ingest_url,
                "--snapshot",
                &self.snapshot,
            ]));
            return Measure::loadgen(args);
        }
        Measure::loadgen(strings(&[
            "produce",
            "--bench",
            "ingest",
            "--subject",
            "librdkafka-producer",
            "--brokers",
            &self.series.brokers,
            "--topic",
            "analytics-events",
            "--events",
            &self.run.settings.produce_events.to_string(),
            "--snapshot",
            &self.snapshot,
        ]))
    }

    /// A wrk round of `subject`: the ingest, nginx's fixed 202, the stack floor (HTTP or
    /// Kafka), or else PostHog capture.
    fn wrk_subject(&self, subject: &str) -> anyhow::Result<Measure> {
        let batches = self.batches.display().to_string();
        Ok(match subject {
            "ingest" => self.wrk("ingest", Vec::new(), self.ingest_url, &[&batches]),
            "nginx-202" => self.wrk(
                "nginx-202",
                self.nginx.workers.clone(),
                &format!("http://127.0.0.1:{}", self.nginx.floor_port),
                &[&batches],
            ),
            "stack-http" | "stack-kafka" => {
                let (pid, port) = self.stack[usize::from(subject == "stack-kafka")];
                self.wrk(
                    subject,
                    vec![format!("bench-stack={pid}")],
                    &format!("http://127.0.0.1:{port}"),
                    &[&batches],
                )
            }
            _ => {
                let capture = self.capture.as_ref().context("no PostHog capture")?;
                self.wrk(
                    subject,
                    capture.watch.clone(),
                    &capture.url,
                    &[&capture.batches.display().to_string(), "/batch/"],
                )
            }
        })
    }

    /// A wrk measurement of `subject` (events, five a request) at `url`, with the
    /// processes `watch` watched and `tail` given to its script.
    fn wrk(&self, subject: &str, watch: Vec<String>, url: &str, tail: &[&str]) -> Measure {
        let mut own = strings(&["--bench", "ingest-wrk", "--subject", subject]);
        own.extend(strings(&["--unit", "events", "--units-per-request", "5"]));
        own.extend(watch.into_iter().flat_map(|w| ["--watch".to_owned(), w]));
        let mut args = self.wrk_ingest.clone();
        args.push(url.to_owned());
        args.push("--".to_owned());
        args.extend(strings(tail));
        Measure::wrk(own, args)
    }

    /// Shows what PostHog capture counted as acknowledged by the broker, and its errors
    /// (none expected), and stops it and its Redis; nothing without the peers.
    async fn stop_capture(&mut self) -> anyhow::Result<()> {
        let Some(capture) = self.capture.take() else {
            return Ok(());
        };
        if let Ok(metrics) = reqwest::get(format!("{}/metrics", capture.url)).await
            && let Ok(text) = metrics.text().await
        {
            for line in text.lines().filter(|l| {
                ["events_ingested", "kafka_produce_errors", "events_dropped"]
                    .iter()
                    .any(|m| l.starts_with(&format!("capture_{m}")))
            }) {
                eprintln!("   posthog-capture: {line}");
            }
        }
        self.run.services.stop(capture.pid).await?;
        self.run.services.stop(capture.redis).await
    }

    /// The ingest at half the median rate of its rounds (in requests per second), open
    /// loop; `Refused` when no round of the ingest was kept.
    async fn half_rate(&self) -> anyhow::Result<Round> {
        let s = self.run.settings;
        let figures = report::figures(&self.run.bench.figures)?;
        let Some(half) = report::half_request_rate(&figures, "ingest", "ingest", s.seconds as f64)
        else {
            eprintln!("no round of ingest in ingest");
            return Ok(Round::Refused);
        };
        let half = half.to_string();
        log(&format!(
            "   ingest at half its rate: {half} requests/s, open loop"
        ));
        let mut args = self.load(&[
            "ingest",
            "--bench",
            "ingest-half-rate",
            "--subject",
            "ingest",
        ]);
        args.extend(strings(&[
            "--rate",
            &half,
            "--url",
            self.ingest_url,
            "--snapshot",
            &self.snapshot,
        ]));
        self.series.round(&Measure::loadgen(args)).await
    }

    /// A short run, the consumer running again, that checks every event the ingest
    /// accepts lands in ClickHouse; `Refused` when the broker is dead before it.
    async fn landing(&self) -> anyhow::Result<Round> {
        if !self.series.guard.alive("before the landing check").await {
            return Ok(Round::Refused);
        }
        self.run.bench.settle().await?;
        supervise::signal(self.consumer, "CONT")?;
        log(
            "   every event the ingest accepts lands in ClickHouse (a short run, the consumer running)",
        );
        let landing = Measure::loadgen(strings(&[
            "ingest",
            "--bench",
            "ingest-landing",
            "--subject",
            "ingest",
            "--connections",
            "64",
            "--duration",
            "5",
            "--warmup",
            "1",
            "--url",
            self.ingest_url,
            "--snapshot",
            &self.snapshot,
            "--verify-clickhouse",
            "http://127.0.0.1:8123",
            "--database",
            "bench_ingest",
        ]))
        .unsettled();
        self.series.round(&landing).await
    }

    /// Stops the stack floor, the ingest and the consumer.
    async fn stop(self) -> anyhow::Result<()> {
        for (pid, _) in self.stack {
            self.run.services.stop(pid).await?;
        }
        self.run.services.stop(self.ingest).await?;
        self.run.services.stop(self.consumer).await
    }
}

/// PostHog capture with the Redis it reads, and the batches in its /batch/ form.
struct Capture {
    pid: u32,
    redis: u32,
    url: String,
    watch: Vec<String>,
    batches: std::path::PathBuf,
}

/// PostHog capture, each of its settings at its default, into the series' broker (a topic
/// of its own), with a Redis of its own (its quota limiter reads it), fed the same batches
/// in its /batch/ form.
async fn start_capture(run: &Run<'_>, brokers: &str) -> anyhow::Result<Capture> {
    let redis_port = supervise::free_port_from(6390);
    let redis = run
        .services
        .start(Start {
            name: "redis",
            ready: Ready::Tcp(redis_port),
            command: strings(&[
                "redis-server",
                "--bind",
                "127.0.0.1",
                "--port",
                &redis_port.to_string(),
                "--save",
                "",
                "--appendonly",
                "no",
            ]),
            env: Vec::new(),
            unset: Vec::new(),
        })
        .await?;
    run.tool(&[
        "create-topics",
        "--brokers",
        brokers,
        "posthog-events",
        "posthog-events-historical",
    ])
    .await?;
    let port = supervise::free_port_from(3300);
    let url = format!("http://127.0.0.1:{port}");
    let binary = run
        .settings
        .peers()
        .and_then(|p| p.posthog_capture.clone())
        .context("no BENCH_POSTHOG_CAPTURE")?;
    let env = [
        ("ADDRESS", format!("127.0.0.1:{port}")),
        ("REDIS_URL", format!("redis://127.0.0.1:{redis_port}/")),
        ("KAFKA_HOSTS", brokers.to_owned()),
        ("KAFKA_TOPIC", "posthog-events".to_owned()),
        (
            "KAFKA_HISTORICAL_TOPIC",
            "posthog-events-historical".to_owned(),
        ),
    ];
    let pid = run
        .services
        .start(Start {
            name: "posthog-capture",
            ready: Ready::Http(format!("{url}/_liveness")),
            command: vec![binary.display().to_string()],
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect(),
            unset: Vec::new(),
        })
        .await?;
    let batches = run.out.join("posthog-batches.tsv");
    run.bench
        .tool(
            &strings(&[
                "wrk-batches",
                "--format",
                "posthog",
                "--snapshot",
                &run.snapshot(),
                "--count",
                "20000",
            ]),
            Stdout::Create(&batches),
            Stderr::Inherit,
        )
        .await?;
    let (_, agent, body) = first_batch(&batches)?;
    let answer = post(&format!("{url}/batch/"), &[("User-Agent", &agent)], body).await;
    anyhow::ensure!(
        answer.is_ok_and(|a| a.contains("\"status\":\"Ok\"")),
        "PostHog capture does not take wrk's batches"
    );
    Ok(Capture {
        pid,
        redis,
        url,
        watch: vec![format!("redis={redis}"), format!("posthog-capture={pid}")],
        batches,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_batch_is_split_in_three() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("batches.tsv");
        std::fs::write(
            &path,
            "pk\tMozilla/5.0 (X)\t{\"events\":[\"a\tb\"]}\nnext\n",
        )
        .unwrap();
        let (key, agent, body) = first_batch(&path).unwrap();
        assert_eq!(
            (key.as_str(), agent.as_str(), body.as_str()),
            ("pk", "Mozilla/5.0 (X)", "{\"events\":[\"a\tb\"]}")
        );
    }
}
