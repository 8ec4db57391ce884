//! Section 3, on a broker of its own: a consumer (built as the images are) draining a
//! backlog into ClickHouse against ClickHouse's own JSONEachRow insert of the same rows,
//! rounds alternated; what the rows take on disk; the rate at which a bare librdkafka
//! consumer reads the backlog. With the peers, ClickHouse's Kafka engine follows
//! (`consumer_peers`). A refused round ends the series.

use super::context::{Run, log};
use super::measure::{Measure, Stderr, Stdout, strings};
use super::plan;
use super::series::{Round, Series};
use crate::supervise;

/// The backlog's topic, kept in the series' broker for its rounds.
pub const TOPIC: &str = "analytics-bench-backlog";

/// Nanoseconds since the epoch (`date +%s%N`), which makes a consumer group new.
pub fn nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// The series; `Refused` when it ended early.
pub async fn section(run: &Run<'_>, series: &Series<'_>) -> anyhow::Result<Round> {
    let s = run.settings;
    let backlog = s.backlog.to_string();
    let snapshot = run.snapshot();
    let brokers = series.brokers.as_str();
    log(&format!(
        "3. consumer vs ClickHouse JSONEachRow insert, {} events ({} rounds)",
        s.backlog, s.consumer_rounds
    ));
    log(&format!("   filling {TOPIC} with {} events", s.backlog));
    run.bench
        .tool(
            &strings(&[
                "produce",
                "--bench",
                "backlog",
                "--subject",
                "fill",
                "--brokers",
                brokers,
                "--topic",
                TOPIC,
                "--events",
                &backlog,
                "--top-up",
                "--snapshot",
                &snapshot,
            ]),
            Stdout::Null,
            Stderr::Summary,
        )
        .await?;
    for (_, subject) in plan::consumer(s.consumer_rounds) {
        let round = if subject == "consumer" {
            run.clickhouse_sql("DROP DATABASE IF EXISTS bench_consumer")
                .await?;
            let port = supervise::free_port_from(8193);
            let pid = series
                .service(
                    "consumer",
                    port,
                    &[
                        ("KAFKA_TOPIC", TOPIC.to_owned()),
                        ("KAFKA_DLQ_TOPIC", format!("{TOPIC}-dlq")),
                        ("KAFKA_GROUP_ID", format!("bench-{}", nanos())),
                        (
                            "KAFKA_PROPERTIES",
                            format!("fetch.wait.max.ms={}", s.fetch_wait_ms),
                        ),
                        ("CLICKHOUSE_URL", "http://127.0.0.1:8123".to_owned()),
                        ("CLICKHOUSE_DATABASE", "bench_consumer".to_owned()),
                        ("CONSUMER_LISTEN", format!("127.0.0.1:{port}")),
                    ],
                )
                .await?;
            let measure = Measure::loadgen(strings(&[
                "wait-rows",
                "--bench",
                "consumer",
                "--subject",
                "consumer",
                "--table",
                "bench_consumer.events",
                "--rows",
                &backlog,
                "--pid",
                &pid.to_string(),
                "--watch",
                &format!("bench-consumer={pid}"),
            ]))
            .unsettled();
            let round = series.round(&measure).await?;
            if round == Round::Kept {
                run.services.stop(pid).await?;
            }
            round
        } else {
            let measure = Measure::loadgen(strings(&[
                "clickhouse-insert",
                "--bench",
                "consumer",
                "--subject",
                "clickhouse-jsoneachrow",
                "--database",
                "bench_reference",
                "--rows",
                &backlog,
                "--snapshot",
                &snapshot,
            ]))
            .unsettled();
            series.round(&measure).await?
        };
        if round == Round::Refused {
            return Ok(round);
        }
    }
    // What the last consumer round's events take on disk (every table: the views' too).
    run.bench
        .tool(
            &strings(&[
                "clickhouse-disk",
                "--bench",
                "clickhouse-disk",
                "--subject",
                "bench_consumer",
                "--database",
                "bench_consumer",
            ]),
            Stdout::Append(&run.bench.figures),
            Stderr::Summary,
        )
        .await?;
    for wait_ms in [s.fetch_wait_ms, 100] {
        let measure = Measure::loadgen(strings(&[
            "consume",
            "--bench",
            &format!("broker-read fetch.wait.max.ms={wait_ms}"),
            "--subject",
            "librdkafka-consumer",
            "--brokers",
            brokers,
            "--topic",
            TOPIC,
            "-X",
            &format!("fetch.wait.max.ms={wait_ms}"),
            "--group",
            &format!("bench-raw-{}", nanos()),
            "--events",
            &backlog,
        ]))
        .unsettled();
        if series.round(&measure).await? == Round::Refused {
            return Ok(Round::Refused);
        }
    }
    run.clickhouse_sql("DROP DATABASE IF EXISTS bench_consumer")
        .await?;
    run.clickhouse_sql("DROP DATABASE IF EXISTS bench_reference")
        .await?;
    Ok(Round::Kept)
}
