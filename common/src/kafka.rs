//! Kafka names and helpers shared by the ingest, the consumer and the tests.

use std::time::Duration;

use anyhow::Context;
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::types::RDKafkaErrorCode;

/// The topic that carries accepted events.
pub const EVENTS_TOPIC: &str = "analytics-events";
/// The topic that holds messages the consumer could not store.
pub const DEAD_LETTER_TOPIC: &str = "analytics-events-dlq";

/// A client configuration for `brokers` with the settings every client here shares.
/// `KAFKA_DEBUG` (librdkafka debug contexts, e.g. `cgrp,consumer`) turns on its debug log;
/// `KAFKA_PROPERTIES` adds any librdkafka properties (see [`apply_properties`]).
pub fn client_config(brokers: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", brokers)
        .set("client.id", env!("CARGO_PKG_NAME"))
        .set("log_level", "4");
    if let Ok(contexts) = std::env::var("KAFKA_DEBUG") {
        config.set("debug", contexts).set("log_level", "7");
    }
    apply_properties(&mut config);
    config
}

/// Sets the librdkafka properties of `KAFKA_PROPERTIES`, `name=value` pairs separated by
/// `;` (say, `security.protocol=SASL_SSL;sasl.mechanism=PLAIN;linger.ms=10`), over what
/// the code set. Call it last when setting properties after [`client_config`], so that
/// the operator's word wins. An unknown name makes the client's creation fail.
pub fn apply_properties(config: &mut ClientConfig) {
    let Ok(raw) = std::env::var("KAFKA_PROPERTIES") else {
        return;
    };
    for (name, value) in parse_properties(&raw) {
        config.set(name, value);
    }
}

fn parse_properties(raw: &str) -> Vec<(&str, &str)> {
    raw.split(';')
        .map(str::trim)
        .filter(|pair| !pair.is_empty())
        .filter_map(|pair| match pair.split_once('=') {
            Some((name, value)) => Some((name.trim(), value.trim())),
            None => {
                tracing::warn!(%pair, "KAFKA_PROPERTIES entry without '=' ignored.");
                None
            }
        })
        .collect()
}

/// Creates the topics that do not exist yet; an existing topic is left as it is.
pub async fn ensure_topics(brokers: &str, topics: &[&str], partitions: i32) -> anyhow::Result<()> {
    let admin: AdminClient<DefaultClientContext> = client_config(brokers)
        .create()
        .context("cannot create Kafka admin client")?;
    let new: Vec<NewTopic<'_>> = topics
        .iter()
        .map(|t| NewTopic::new(t, partitions, TopicReplication::Fixed(1)))
        .collect();
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let results = admin
        .create_topics(&new, &options)
        .await
        .context("cannot create Kafka topics")?;
    for result in results {
        match result {
            Ok(topic) => tracing::info!(%topic, partitions, "Topic created."),
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((topic, code)) => anyhow::bail!("cannot create topic {topic}: {code}"),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_are_name_value_pairs_separated_by_semicolons() {
        assert_eq!(
            parse_properties(" linger.ms=10 ; debug=cgrp,fetch;;broken; sasl.password=a=b "),
            vec![
                ("linger.ms", "10"),
                ("debug", "cgrp,fetch"),
                ("sasl.password", "a=b")
            ]
        );
    }
}
