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

/// The Kafka settings of every binary that talks to Kafka, flattened into its flags so
/// that `--help` lists them all.
#[derive(clap::Args, Clone, Debug)]
pub struct KafkaArgs {
    /// Kafka bootstrap servers, comma-separated.
    #[arg(long, env = "KAFKA_BROKERS", default_value = "127.0.0.1:9092")]
    pub kafka_brokers: String,

    /// Topic of the accepted events.
    #[arg(long, env = "KAFKA_TOPIC", default_value = EVENTS_TOPIC)]
    pub topic: String,

    /// Partitions of the topics when this service has to create them at start.
    #[arg(long, env = "KAFKA_TOPIC_PARTITIONS", default_value_t = 3)]
    pub topic_partitions: i32,

    /// librdkafka properties, `name=value` pairs separated by `;` (say,
    /// `security.protocol=SASL_SSL;sasl.mechanism=PLAIN;linger.ms=10`), over the service's
    /// own settings, except the consumer's group, offset and commit settings. An unknown
    /// name makes the start fail.
    #[arg(long, env = "KAFKA_PROPERTIES", hide_env_values = true)]
    pub kafka_properties: Option<String>,

    /// librdkafka debug contexts (say, `cgrp,fetch`), logged at debug level.
    #[arg(long, env = "KAFKA_DEBUG")]
    pub kafka_debug: Option<String>,
}

impl KafkaArgs {
    /// The defaults with these brokers: for tools and tests that build a service's
    /// client the way the service does.
    pub fn for_brokers(brokers: &str) -> Self {
        Self {
            kafka_brokers: brokers.to_owned(),
            topic: EVENTS_TOPIC.to_owned(),
            topic_partitions: 3,
            kafka_properties: None,
            kafka_debug: None,
        }
    }

    /// A client configuration: the settings every client here shares, the debug contexts
    /// and the operator's properties.
    pub fn client_config(&self) -> ClientConfig {
        let mut config = client_config(&self.kafka_brokers);
        if let Some(contexts) = &self.kafka_debug {
            config.set("debug", contexts).set("log_level", "7");
        }
        self.apply_properties(&mut config);
        config
    }

    /// Sets the operator's properties over what the code set. Call it last when setting
    /// properties after [`KafkaArgs::client_config`], so that the operator's word wins.
    pub fn apply_properties(&self, config: &mut ClientConfig) {
        for (name, value) in parse_properties(self.kafka_properties.as_deref().unwrap_or("")) {
            config.set(name, value);
        }
    }

    /// Creates the `topics` that do not exist yet, with this many partitions.
    pub async fn ensure_topics(&self, topics: &[&str]) -> anyhow::Result<()> {
        ensure_topics(self.client_config(), topics, self.topic_partitions).await
    }
}

/// A client configuration for `brokers` with the settings every client here shares (for
/// tools and tests; the services start from [`KafkaArgs::client_config`]).
pub fn client_config(brokers: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", brokers)
        .set("client.id", env!("CARGO_PKG_NAME"))
        .set("log_level", "4");
    config
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

/// Creates the topics that do not exist yet, through a client of `config`; an existing
/// topic is left as it is.
pub async fn ensure_topics(
    config: ClientConfig,
    topics: &[&str],
    partitions: i32,
) -> anyhow::Result<()> {
    let admin: AdminClient<DefaultClientContext> = config
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
