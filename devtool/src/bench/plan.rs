//! The order of a series' measurements: rounds alternated, each round measuring every
//! subject once, ours next to its reference, so that a drift of the machine over the run
//! falls on both alike.

/// The load tool of a measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    /// `loadgen` itself (or its reference tools: producer, insert, wait-rows).
    Loadgen,
    Wrk,
}

/// A measurement of a series: its tool and its subject (`--subject`).
pub type Step = (Tool, &'static str);

/// `rounds` rounds of `each`, in order.
pub fn alternate(rounds: u64, each: &[Step]) -> Vec<Step> {
    (0..rounds).flat_map(|_| each.iter().copied()).collect()
}

/// Section 1: the config-api and nginx (and Unleash Edge's two APIs with the peers), every
/// round with loadgen, then every round with wrk.
pub fn config_api(rounds: u64, peers: bool) -> Vec<Step> {
    let mut subjects = vec!["config-api", "nginx-static"];
    if peers {
        subjects.extend(["unleash-edge-client", "unleash-edge-frontend"]);
    }
    let with = |tool| subjects.iter().map(|s| (tool, *s)).collect::<Vec<_>>();
    let mut steps = alternate(rounds, &with(Tool::Loadgen));
    steps.extend(alternate(rounds, &with(Tool::Wrk)));
    steps
}

/// Section 2: the ingest and the raw producer (loadgen), then with wrk the ingest, its
/// floor (nginx's fixed 202), its stack without the events' work (HTTP alone, then with
/// Kafka) and, with the peers, PostHog capture.
pub fn ingest(rounds: u64, peers: bool) -> Vec<Step> {
    let mut each = vec![
        (Tool::Loadgen, "ingest"),
        (Tool::Loadgen, "librdkafka-producer"),
        (Tool::Wrk, "ingest"),
        (Tool::Wrk, "nginx-202"),
        (Tool::Wrk, "stack-http"),
        (Tool::Wrk, "stack-kafka"),
    ];
    if peers {
        each.push((Tool::Wrk, "posthog-capture"));
    }
    alternate(rounds, &each)
}

/// Section 3: the consumer draining the backlog, then ClickHouse inserting it itself.
pub fn consumer(rounds: u64) -> Vec<Step> {
    alternate(
        rounds,
        &[
            (Tool::Loadgen, "consumer"),
            (Tool::Loadgen, "clickhouse-jsoneachrow"),
        ],
    )
}

/// Section 3 with the peers: the consumer, then ClickHouse's Kafka engine, into the
/// peers' ClickHouse.
pub fn consumer_peers(rounds: u64) -> Vec<Step> {
    alternate(
        rounds,
        &[
            (Tool::Loadgen, "consumer"),
            (Tool::Loadgen, "clickhouse-kafka-engine"),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(steps: &[Step]) -> String {
        steps
            .iter()
            .map(|(tool, subject)| match tool {
                Tool::Loadgen => (*subject).to_owned(),
                Tool::Wrk => format!("wrk:{subject}"),
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn rounds_alternate_ours_and_the_references() {
        assert_eq!(
            names(&config_api(2, false)),
            "config-api nginx-static config-api nginx-static \
             wrk:config-api wrk:nginx-static wrk:config-api wrk:nginx-static"
        );
        assert_eq!(
            names(&config_api(1, true)),
            "config-api nginx-static unleash-edge-client unleash-edge-frontend \
             wrk:config-api wrk:nginx-static wrk:unleash-edge-client wrk:unleash-edge-frontend"
        );
        assert_eq!(
            names(&ingest(2, false)),
            "ingest librdkafka-producer wrk:ingest wrk:nginx-202 wrk:stack-http wrk:stack-kafka \
             ingest librdkafka-producer wrk:ingest wrk:nginx-202 wrk:stack-http wrk:stack-kafka"
        );
        assert_eq!(
            names(&ingest(1, true)),
            "ingest librdkafka-producer wrk:ingest wrk:nginx-202 wrk:stack-http wrk:stack-kafka \
             wrk:posthog-capture"
        );
        assert_eq!(
            names(&consumer(3)),
            "consumer clickhouse-jsoneachrow consumer clickhouse-jsoneachrow \
             consumer clickhouse-jsoneachrow"
        );
        assert_eq!(
            names(&consumer_peers(1)),
            "consumer clickhouse-kafka-engine"
        );
        assert!(config_api(0, true).is_empty());
    }
}
