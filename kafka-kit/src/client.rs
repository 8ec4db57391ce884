//! Kafka names and client settings shared by the ingest, the consumer, the tools and the
//! tests: the topics, the flags every Kafka client takes, and the producer settings.

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
/// The ingest's Kafka `client.id`, of its producer and its admin client; also that of the
/// benchmark's reference producer, which stands for the ingest's.
pub const INGEST_CLIENT_ID: &str = "ingest";

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

    /// librdkafka properties, `name=value` pairs separated by `;` or newlines (say,
    /// `security.protocol=SASL_SSL;sasl.mechanism=PLAIN;linger.ms=10`), over the service's
    /// own settings, except the consumer's group, offset, commit and statistics settings.
    /// In a value, `\;` is a semicolon and `\\` a backslash. An entry without `=`, or
    /// an unknown name, makes the start fail.
    #[arg(long, env = "KAFKA_PROPERTIES", hide_env_values = true, value_parser = PropertiesParser)]
    pub kafka_properties: Option<Properties>,

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

    /// A client configuration: the settings every client here shares, with `client_id`
    /// (the service's name: the broker's logs and metrics tell the clients apart by it),
    /// the debug contexts and the operator's properties.
    pub fn client_config(&self, client_id: &str) -> ClientConfig {
        let mut config = client_config(&self.kafka_brokers, client_id);
        if let Some(contexts) = &self.kafka_debug {
            config.set("debug", contexts).set("log_level", "7");
        }
        self.apply_properties(&mut config);
        config
    }

    /// A producer's configuration: every message acknowledged by all in-sync replicas
    /// (`acks=all`), idempotent or not, with the producer's own `settings`, then the
    /// operator's properties over them.
    pub fn producer_config(
        &self,
        client_id: &str,
        idempotent: bool,
        settings: &[(&str, String)],
    ) -> ClientConfig {
        let mut config = self.client_config(client_id);
        config
            .set("acks", "all")
            .set("enable.idempotence", idempotent.to_string());
        for (name, value) in settings {
            config.set(*name, value);
        }
        self.apply_properties(&mut config);
        config
    }

    /// The producer settings of the events topic, the ingest's: every event acknowledged by
    /// all in-sync replicas before the client hears 202. Not idempotent: a retry of
    /// librdkafka's own may write an event twice, with the same `event_id`, which the
    /// `events` table collapses like any other redelivery; and the idempotent producer cost
    /// 2.3 times the CPU for 7% fewer events per second (BENCHMARKS.md).
    /// `KAFKA_PROPERTIES=enable.idempotence=true` turns it back on. `queue_messages` bounds
    /// the messages waiting in the producer (a request waits for room for all its events
    /// before enqueuing any). The benchmark's reference producer runs with these settings.
    pub fn events_producer_config(
        &self,
        linger_ms: u64,
        delivery_timeout_ms: u64,
        queue_messages: usize,
    ) -> ClientConfig {
        self.producer_config(
            INGEST_CLIENT_ID,
            false,
            &[
                ("queue.buffering.max.messages", queue_messages.to_string()),
                ("linger.ms", linger_ms.to_string()),
                ("message.timeout.ms", delivery_timeout_ms.to_string()),
            ],
        )
    }

    /// Sets the operator's properties over what the code set. Call it last when setting
    /// properties after [`KafkaArgs::client_config`], so that the operator's word wins.
    pub fn apply_properties(&self, config: &mut ClientConfig) {
        for (name, value) in self.kafka_properties.iter().flat_map(|p| &p.0) {
            config.set(name, value);
        }
    }

    /// Creates the `topics` that do not exist yet, with this many partitions, through a
    /// client named `client_id`.
    pub async fn ensure_topics(&self, client_id: &str, topics: &[&str]) -> anyhow::Result<()> {
        ensure_topics(self.client_config(client_id), topics, self.topic_partitions).await
    }
}

/// A client configuration for `brokers` with the settings every client here shares, named
/// `client_id` (for tools and tests; the services start from [`KafkaArgs::client_config`]).
pub fn client_config(brokers: &str, client_id: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", brokers)
        .set("client.id", client_id)
        .set("log_level", "4");
    config
}

/// Parses `KAFKA_PROPERTIES` with an error that does not repeat the value (clap's own
/// errors quote it, and it may hold a password).
#[derive(Clone)]
pub struct PropertiesParser;

impl clap::builder::TypedValueParser for PropertiesParser {
    type Value = Properties;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        _arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<Properties, clap::Error> {
        let refuse = |kind, why: &str| {
            clap::Error::raw(kind, format!("invalid KAFKA_PROPERTIES: {why}\n")).with_cmd(cmd)
        };
        let raw = value
            .to_str()
            .ok_or_else(|| refuse(clap::error::ErrorKind::InvalidUtf8, "not UTF-8"))?;
        raw.parse()
            .map_err(|why: String| refuse(clap::error::ErrorKind::ValueValidation, &why))
    }
}

/// Operator-given librdkafka properties (`KAFKA_PROPERTIES`), in their order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Properties(pub Vec<(String, String)>);

impl std::str::FromStr for Properties {
    type Err = String;

    /// `name=value` entries separated by `;` or newlines; blanks around entries, names and
    /// values are dropped; in a value, `\;` is a semicolon and `\\` a backslash (a
    /// password may hold either).
    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        let mut entries = vec![String::new()];
        let mut chars = raw.chars();
        while let Some(c) = chars.next() {
            let entry = entries.last_mut().expect("one entry at least");
            match c {
                '\\' => match chars.next() {
                    Some(escaped @ (';' | '\\')) => entry.push(escaped),
                    Some(other) => entry.extend(['\\', other]),
                    None => entry.push('\\'),
                },
                ';' | '\n' => entries.push(String::new()),
                c => entry.push(c),
            }
        }
        // An error names the entry by its place, never by its text: it may be a secret.
        entries
            .iter()
            .map(|entry| entry.trim())
            .filter(|entry| !entry.is_empty())
            .enumerate()
            .map(|(i, entry)| match entry.split_once('=') {
                Some((name, value)) if !name.trim().is_empty() => {
                    Ok((name.trim().to_owned(), value.trim().to_owned()))
                }
                _ => Err(format!(
                    "entry {} is not `name=value` (a semicolon in a value is written `\\;`)",
                    i + 1
                )),
            })
            .collect::<Result<_, _>>()
            .map(Self)
    }
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

    fn pairs(raw: &str) -> Result<Vec<(String, String)>, String> {
        raw.parse::<Properties>().map(|p| p.0)
    }

    fn owned(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn properties_are_name_value_pairs_separated_by_semicolons_or_newlines() {
        assert_eq!(
            pairs(" linger.ms=10 ; debug=cgrp,fetch;;\n sasl.password=a=b \n"),
            Ok(owned(&[
                ("linger.ms", "10"),
                ("debug", "cgrp,fetch"),
                ("sasl.password", "a=b")
            ]))
        );
        assert_eq!(pairs(""), Ok(vec![]));
    }

    #[test]
    fn a_value_can_hold_an_escaped_semicolon_or_backslash() {
        assert_eq!(
            pairs(r"sasl.password=p\;w\\d\x;linger.ms=5"),
            Ok(owned(&[("sasl.password", r"p;w\d\x"), ("linger.ms", "5")]))
        );
    }

    #[test]
    fn an_entry_that_is_not_name_value_is_refused_by_its_place() {
        // A password with a bare semicolon: its second half is entry 3, never quoted.
        let error = pairs("linger.ms=5;sasl.password=hunter;2").expect_err("refused");
        assert!(error.contains("entry 3 "), "{error}");
        let error = pairs("=secret").expect_err("refused");
        assert!(
            error.contains("entry 1 ") && !error.contains("secret"),
            "{error}"
        );
    }

    #[test]
    fn the_flag_takes_properties_and_refuses_a_broken_entry() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            kafka: KafkaArgs,
        }
        let cli = Cli::try_parse_from(["x", "--kafka-properties", "linger.ms=7"]).expect("parses");
        let mut config = ClientConfig::new();
        cli.kafka.apply_properties(&mut config);
        assert_eq!(config.get("linger.ms"), Some("7"));
        let error = Cli::try_parse_from(["x", "--kafka-properties", "sasl.password=hunter;2"])
            .err()
            .expect("refused")
            .to_string();
        assert!(error.contains("entry 2 is not `name=value`"), "{error}");
        assert!(
            !error.contains("hunter"),
            "the error quotes the value: {error}"
        );
    }
}
