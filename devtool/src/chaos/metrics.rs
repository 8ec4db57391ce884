//! What the nemesis reads from the services' Prometheus `/metrics`: a counter summed over
//! its labels (the consumer's insert retries around a fault) and which snapshot version a
//! service serves. A service that does not answer within 2 s reads as unknown, never as 0.

use std::time::Duration;

/// The text of `http://127.0.0.1:PORT/metrics`, `None` when the service does not answer
/// (or answers an error).
pub async fn scrape(http: &reqwest::Client, port: u16) -> Option<String> {
    let response = http
        .get(format!("http://127.0.0.1:{port}/metrics"))
        .timeout(Duration::from_secs(2))
        .send()
        .await
        .ok()?
        .error_for_status()
        .ok()?;
    response.text().await.ok()
}

/// A counter of a service summed over its labels; `None` if the service does not answer.
pub async fn counter(http: &reqwest::Client, port: u16, name: &str) -> Option<u64> {
    scrape(http, port)
        .await
        .map(|text| counter_sum(&text, name))
}

/// The sum of every sample of `name` (with or without labels) in an exposition text, its
/// fraction dropped; 0 when there is none.
pub fn counter_sum(text: &str, name: &str) -> u64 {
    let sum: f64 = text
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let series = fields.next()?;
            let labelled = series
                .strip_prefix(name)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('{'));
            labelled.then(|| fields.next().and_then(|v| v.parse::<f64>().ok()))?
        })
        .sum();
    sum as u64
}

/// The exposition text says the service serves `version`: its
/// `PREFIX_snapshot_info{version="…"}` gauge is 1.
pub fn serves_snapshot(text: &str, prefix: &str, version: &str) -> bool {
    let gauge = format!("{prefix}_snapshot_info{{version=\"{version}\"}} 1");
    text.lines().any(|line| line.starts_with(&gauge))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# HELP consumer_insert_retries_total Inserts retried.
# TYPE consumer_insert_retries_total counter
consumer_insert_retries_total{shard=\"1\",reason=\"timeout\"} 3
consumer_insert_retries_total{shard=\"2\",reason=\"refused\"} 4
consumer_insert_retries_total_other 100
consumer_insert_retry 50
consumer_batches_total 7.9
consumer_snapshot_info{version=\"chaos-1\"} 0
consumer_snapshot_info{version=\"chaos-2\"} 1
";

    #[test]
    fn a_counter_is_summed_over_its_labels_and_nothing_else() {
        assert_eq!(counter_sum(TEXT, "consumer_insert_retries_total"), 7);
        assert_eq!(counter_sum(TEXT, "consumer_batches_total"), 7);
        assert_eq!(counter_sum(TEXT, "consumer_missing_total"), 0);
        assert_eq!(counter_sum("", "x"), 0);
    }

    #[test]
    fn the_snapshot_served_is_the_one_whose_gauge_is_one() {
        assert!(serves_snapshot(TEXT, "consumer", "chaos-2"));
        assert!(!serves_snapshot(TEXT, "consumer", "chaos-1"));
        assert!(!serves_snapshot(TEXT, "ingest", "chaos-2"));
        assert!(!serves_snapshot(TEXT, "consumer", "chaos-3"));
    }

    #[tokio::test]
    async fn a_service_that_does_not_answer_is_unknown_not_zero() {
        // A port nothing listens on: bound, then let go.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let http = reqwest::Client::new();
        assert_eq!(counter(&http, port, "x").await, None);
    }
}
