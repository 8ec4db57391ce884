//! Kafka names and client settings shared by the ingest, the consumer, the tools and the
//! tests: the topics, the flags every Kafka client takes, and the producer settings.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context;
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::types::RDKafkaErrorCode;

/// The topic that carries accepted events.
pub const EVENTS_TOPIC: &str = "analytics-events";
/// The topic that holds messages the consumer could not store.
pub const DEAD_LETTER_TOPIC: &str = "analytics-events-dlq";
/// The ingest's Kafka `client.id`, of its producer and its admin client; also that of the
/// benchmark's reference producer, which stands for the ingest's.
pub const INGEST_CLIENT_ID: &str = "ingest";
/// Hours a topic keeps a record when nothing else is said (`KAFKA_RETENTION_HOURS`): a week.
pub const DEFAULT_RETENTION_HOURS: u32 = 168;
/// The longest `segment.ms` of a created topic. Kafka deletes whole segments, the newest
/// record of a segment first past `retention.ms`: a record outlives its retention by up
/// to the segment's span, so the span is kept short against a retention in days.
pub const MAX_SEGMENT: Duration = Duration::from_secs(3600);

/// The consumer's librdkafka `fetch.wait.max.ms`, also that of the benchmark's bare
/// consumer, which stands for it. Apache Kafka answers a fetch once it has data; Tansu
/// holds every fetch this long, data or not, so on Tansu it sets how fast a backlog drains
/// (about 100 000 messages/s at 100 ms, 880 000 at 5 ms with memory storage) against the
/// empty fetches of an idle consumer (Tansu's SQLite storage: 6% of a core at 100 ms, 28%
/// at 10 ms). `KAFKA_PROPERTIES=fetch.wait.max.ms=…` changes it (docs/benchmarks.md).
pub const FETCH_WAIT_MAX_MS: &str = "100";

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

    /// Hours a record stays in the topics this service creates (their `retention.ms`;
    /// `segment.ms` is at most an hour, `cleanup.policy=delete`). This is the horizon of an
    /// erasure: `analytics-erase` removes a visitor from ClickHouse at once, but the raw
    /// events stay in the events topic and the dead-letter topic until they age out, at
    /// most this many hours (plus an hour) after they were written there. Topics that
    /// already exist keep their own settings (a start logs a warning when they differ).
    #[arg(
        long = "kafka-retention-hours",
        env = "KAFKA_RETENTION_HOURS",
        default_value_t = DEFAULT_RETENTION_HOURS,
        value_parser = clap::value_parser!(u32).range(1..=8_760_000)
    )]
    pub retention_hours: u32,

    /// Replication factor of the topics this service creates: 1 for a development broker,
    /// 3 on a production cluster (with `min.insync.replicas=2` set on the broker).
    #[arg(
        long = "kafka-replication-factor",
        env = "KAFKA_REPLICATION_FACTOR",
        default_value_t = 1,
        value_parser = clap::value_parser!(i32).range(1..=i64::from(i16::MAX))
    )]
    pub replication_factor: i32,

    /// Create the missing topics at start (`true`), or leave the topics to whoever manages
    /// them (`false`: a Strimzi `KafkaTopic`, an operator's tooling; deploy/k8s has them).
    #[arg(
        long = "kafka-create-topics",
        env = "KAFKA_CREATE_TOPICS",
        default_value_t = true,
        action = clap::ArgAction::Set
    )]
    pub create_topics: bool,

    /// librdkafka properties, `name=value` pairs separated by `;` or newlines (say,
    /// `security.protocol=SASL_SSL;sasl.mechanism=PLAIN;linger.ms=10`), over the service's
    /// own settings, except the consumer's group, offset, commit and statistics settings.
    /// In a value, `\;` is a semicolon and `\\` a backslash. An entry without `=`, or
    /// an unknown name, makes the start fail.
    #[arg(long, env = "KAFKA_PROPERTIES", hide_env_values = true, value_parser = PropertiesParser)]
    pub kafka_properties: Option<Properties>,

    /// The SASL user name (librdkafka's `sasl.username`, over one in KAFKA_PROPERTIES):
    /// each service its own, where KAFKA_PROPERTIES is shared.
    #[arg(long, env = "KAFKA_SASL_USERNAME")]
    pub kafka_sasl_username: Option<String>,

    /// The SASL password (librdkafka's `sasl.password`, over one in KAFKA_PROPERTIES): a
    /// setting of its own, so that it comes from a Secret while KAFKA_PROPERTIES (the
    /// mechanism) stays in a ConfigMap. Set it in the environment, not on the command line
    /// (which `ps` shows).
    #[arg(long, env = "KAFKA_SASL_PASSWORD", hide_env_values = true,
        value_parser = |s: &str| Ok::<_, String>(Secret(s.to_owned())))]
    pub kafka_sasl_password: Option<Secret>,

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
            retention_hours: DEFAULT_RETENTION_HOURS,
            replication_factor: 1,
            create_topics: true,
            kafka_properties: None,
            kafka_sasl_username: None,
            kafka_sasl_password: None,
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
    /// 2.3 times the CPU for 7% fewer events per second (docs/benchmarks.md).
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
        if let Some(username) = &self.kafka_sasl_username {
            config.set("sasl.username", username);
        }
        if let Some(Secret(password)) = &self.kafka_sasl_password {
            config.set("sasl.password", password);
        }
    }

    /// The settings of the topics this service creates.
    pub fn topic_settings(&self) -> TopicSettings {
        TopicSettings {
            partitions: self.topic_partitions,
            replication_factor: self.replication_factor,
            retention: Duration::from_secs(u64::from(self.retention_hours) * 3600),
        }
    }

    /// Creates the `topics` that do not exist yet with [`KafkaArgs::topic_settings`],
    /// through a client named `client_id`, unless topic creation is off
    /// (`KAFKA_CREATE_TOPICS=false`); an existing topic is left as it is, with a warning
    /// when its retention is not this service's.
    pub async fn ensure_topics(
        &self,
        client_id: &str,
        topics: &[&str],
    ) -> anyhow::Result<Vec<(String, Ensured)>> {
        if !self.create_topics {
            tracing::info!(
                ?topics,
                "Topic creation is off (KAFKA_CREATE_TOPICS=false): topics managed elsewhere."
            );
            return Ok(topics
                .iter()
                .map(|t| ((*t).to_owned(), Ensured::NotManaged))
                .collect());
        }
        create_topics(
            self.client_config(client_id),
            topics,
            &self.topic_settings(),
        )
        .await
    }
}

/// What the topics a service creates are made of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicSettings {
    pub partitions: i32,
    pub replication_factor: i32,
    /// How long a record stays (`retention.ms`).
    pub retention: Duration,
}

impl Default for TopicSettings {
    /// Three partitions, one replica, [`DEFAULT_RETENTION_HOURS`].
    fn default() -> Self {
        Self {
            partitions: 3,
            replication_factor: 1,
            retention: Duration::from_secs(u64::from(DEFAULT_RETENTION_HOURS) * 3600),
        }
    }
}

impl TopicSettings {
    /// The topic configuration: `cleanup.policy=delete` said out loud (Kafka's default,
    /// but Tansu 0.6 deletes old records only from the topics whose configuration names
    /// it), `retention.ms`, and `segment.ms` at most [`MAX_SEGMENT`].
    pub fn configs(&self) -> Vec<(&'static str, String)> {
        let retention_ms = self.retention.as_millis();
        let segment_ms = retention_ms.min(MAX_SEGMENT.as_millis()).max(1);
        vec![
            ("cleanup.policy", "delete".to_owned()),
            ("retention.ms", retention_ms.to_string()),
            ("segment.ms", segment_ms.to_string()),
        ]
    }
}

/// What [`create_topics`] found of a topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ensured {
    /// It was missing: created with the settings.
    Created,
    /// It existed and was left as it is; its `retention.ms` as the broker describes it
    /// (`None`: the broker names none for it).
    Existed { retention_ms: Option<String> },
    /// Topic creation is off: not looked at.
    NotManaged,
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
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Properties(pub Vec<(String, String)>);

/// The properties with the values of passwords and secrets left out.
impl std::fmt::Debug for Properties {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let secret = |name: &str| name.contains("password") || name.contains("secret");
        f.debug_list()
            .entries(
                self.0
                    .iter()
                    .map(|(name, value)| (name, if secret(name) { "…" } else { value.as_str() })),
            )
            .finish()
    }
}

/// A secret setting: its `Debug` shows no value, so no log of the settings holds it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(…)")
    }
}

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

/// Creates the topics that do not exist yet, through a client of `config`, with
/// `partitions` and the other [`TopicSettings`] at their defaults (for tools and tests);
/// an existing topic is left as it is.
pub async fn ensure_topics(
    config: ClientConfig,
    topics: &[&str],
    partitions: i32,
) -> anyhow::Result<()> {
    let settings = TopicSettings {
        partitions,
        ..TopicSettings::default()
    };
    create_topics(config, topics, &settings).await.map(drop)
}

/// Creates the topics that do not exist yet, through a client of `config`, with
/// `settings`. An existing topic is left as it is: its `retention.ms` is read back, and a
/// warning logged when it is not the one of `settings` (the erasure horizon that the
/// operators were told would not hold).
pub async fn create_topics(
    config: ClientConfig,
    topics: &[&str],
    settings: &TopicSettings,
) -> anyhow::Result<Vec<(String, Ensured)>> {
    let admin: AdminClient<DefaultClientContext> = config
        .create()
        .context("cannot create Kafka admin client")?;
    let configs = settings.configs();
    let new: Vec<NewTopic<'_>> = topics
        .iter()
        .map(|t| {
            let topic = NewTopic::new(
                t,
                settings.partitions,
                TopicReplication::Fixed(settings.replication_factor),
            );
            configs
                .iter()
                .fold(topic, |topic, (name, value)| topic.set(name, value))
        })
        .collect();
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let results = admin
        .create_topics(&new, &options)
        .await
        .context("cannot create Kafka topics")?;
    let wanted = settings.retention.as_millis().to_string();
    let mut ensured = Vec::with_capacity(results.len());
    for result in results {
        match result {
            Ok(topic) => {
                tracing::info!(%topic, partitions = settings.partitions,
                    replication_factor = settings.replication_factor,
                    retention_ms = %wanted, "Topic created.");
                ensured.push((topic, Ensured::Created));
            }
            Err((topic, RDKafkaErrorCode::TopicAlreadyExists)) => {
                let retention_ms = match describe_topic(&admin, &topic).await {
                    Ok(mut configs) => {
                        let found = configs.remove("retention.ms");
                        if found.as_deref() != Some(wanted.as_str()) {
                            let found = found.as_deref().unwrap_or("unset");
                            tracing::warn!(%topic, retention_ms = found, wanted = %wanted,
                                "The topic exists with another retention.ms: records stay as \
                                 long as it says, not KAFKA_RETENTION_HOURS (alter the \
                                 topic's configuration).");
                        }
                        found
                    }
                    Err(e) => {
                        let error = format!("{e:#}");
                        tracing::warn!(%topic, %error, "Topic configuration not read.");
                        None
                    }
                };
                ensured.push((topic, Ensured::Existed { retention_ms }));
            }
            Err((topic, code)) => anyhow::bail!("cannot create topic {topic}: {code}"),
        }
    }
    Ok(ensured)
}

/// The configuration of `topic` as the broker describes it, by name (Kafka lists its
/// defaults too; Tansu only what was set).
pub async fn topic_configs(
    config: ClientConfig,
    topic: &str,
) -> anyhow::Result<BTreeMap<String, String>> {
    let admin: AdminClient<DefaultClientContext> = config
        .create()
        .context("cannot create Kafka admin client")?;
    describe_topic(&admin, topic).await
}

async fn describe_topic(
    admin: &AdminClient<DefaultClientContext>,
    topic: &str,
) -> anyhow::Result<BTreeMap<String, String>> {
    let options = AdminOptions::new().request_timeout(Some(Duration::from_secs(10)));
    let results = admin
        .describe_configs([&ResourceSpecifier::Topic(topic)], &options)
        .await
        .with_context(|| format!("cannot describe topic {topic}"))?;
    let mut configs = BTreeMap::new();
    for result in results {
        let resource =
            result.map_err(|code| anyhow::anyhow!("cannot describe topic {topic}: {code}"))?;
        configs.extend(
            resource
                .entries
                .into_iter()
                .filter_map(|e| Some((e.name, e.value?))),
        );
    }
    Ok(configs)
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

    #[derive(clap::Parser)]
    struct Topics {
        #[command(flatten)]
        kafka: KafkaArgs,
    }

    fn topics(args: &[&str]) -> Result<KafkaArgs, clap::Error> {
        use clap::Parser;
        Topics::try_parse_from(["x"].iter().chain(args)).map(|t| t.kafka)
    }

    /// KAFKA_SASL_PASSWORD sets `sasl.password`, over KAFKA_PROPERTIES's, and the settings'
    /// `Debug` never shows it.
    #[test]
    fn the_sasl_password_is_a_setting_of_its_own_and_never_printed() {
        let args = topics(&[
            "--kafka-properties=sasl.mechanism=SCRAM-SHA-512;sasl.username=any;sasl.password=old",
            "--kafka-sasl-username=ingest",
            "--kafka-sasl-password=hunter2",
        ])
        .expect("parses");
        let config = args.client_config("ingest");
        assert_eq!(config.get("sasl.password"), Some("hunter2"));
        assert_eq!(config.get("sasl.username"), Some("ingest"));
        assert_eq!(config.get("sasl.mechanism"), Some("SCRAM-SHA-512"));
        let printed = format!("{args:?}");
        assert!(
            !printed.contains("hunter2") && !printed.contains("old"),
            "{printed}"
        );
        assert!(printed.contains("SCRAM-SHA-512"), "{printed}");
        let without = topics(&["--kafka-properties=sasl.password=old"]).expect("parses");
        assert_eq!(
            without.client_config("ingest").get("sasl.password"),
            Some("old")
        );
    }

    #[test]
    fn topics_are_created_with_a_week_of_retention_in_hourly_segments_by_default() {
        let args = topics(&[]).expect("parses");
        assert!(args.create_topics);
        assert_eq!(args.replication_factor, 1);
        let settings = args.topic_settings();
        assert_eq!(settings, TopicSettings::default());
        assert_eq!(
            settings.configs(),
            [
                ("cleanup.policy", "delete".to_owned()),
                ("retention.ms", "604800000".to_owned()),
                ("segment.ms", "3600000".to_owned()),
            ]
        );
    }

    #[test]
    fn retention_replication_and_creation_are_the_operators_choice() {
        let args = topics(&[
            "--kafka-retention-hours",
            "2",
            "--kafka-replication-factor",
            "3",
            "--kafka-create-topics",
            "false",
        ])
        .expect("parses");
        assert!(!args.create_topics);
        let settings = args.topic_settings();
        assert_eq!(settings.replication_factor, 3);
        assert_eq!(
            settings.configs()[1],
            ("retention.ms", "7200000".to_owned())
        );
        // A retention shorter than an hour (the tests') is its own segment span.
        let short = TopicSettings {
            retention: Duration::from_secs(3),
            ..TopicSettings::default()
        };
        assert_eq!(short.configs()[2], ("segment.ms", "3000".to_owned()));
        for refused in [
            &["--kafka-retention-hours", "0"][..],
            &["--kafka-replication-factor", "0"],
            &["--kafka-create-topics", "maybe"],
        ] {
            assert!(topics(refused).is_err(), "{refused:?} accepted");
        }
    }

    #[test]
    fn the_help_says_the_retention_is_the_erasure_horizon() {
        use clap::CommandFactory;
        let help = Topics::command().render_long_help().to_string();
        for said in [
            "KAFKA_RETENTION_HOURS",
            "default: 168",
            "horizon of an",
            "erasure",
            "KAFKA_REPLICATION_FACTOR",
            "KAFKA_CREATE_TOPICS",
        ] {
            assert!(help.contains(said), "--help does not say {said:?}:\n{help}");
        }
    }

    #[test]
    fn the_flag_takes_properties_and_refuses_a_broken_entry() {
        use clap::Parser;
        let cli =
            Topics::try_parse_from(["x", "--kafka-properties", "linger.ms=7"]).expect("parses");
        let mut config = ClientConfig::new();
        cli.kafka.apply_properties(&mut config);
        assert_eq!(config.get("linger.ms"), Some("7"));
        let error = Topics::try_parse_from(["x", "--kafka-properties", "sasl.password=hunter;2"])
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
