//! Kafka: the raw producer and consumer, topics, a group's progress, and ClickHouse's
//! Kafka table engine as the consumer's peer.

use std::sync::Arc;
use std::time::Duration;

use super::watched;
use crate::cli::{ConsumeArgs, CreateTopicsArgs, KafkaEngineAction, ProduceArgs, SettleArgs};
use crate::clickhouse::ClickHouse;
use crate::kafka;
use crate::kafka_engine;
use crate::traffic::{Sites, Traffic};
use loadgen::stats::Figure;

pub async fn produce(args: ProduceArgs) -> anyhow::Result<Figure> {
    let target = args.kafka.clone();
    kafka_kit::client::ensure_topics(
        kafka_kit::client::client_config(&target.brokers, "loadgen"),
        &[&target.topic],
        args.partitions,
    )
    .await?;
    let sites = Arc::new(Sites::from_file(&args.snapshot)?);
    let count = if args.top_up {
        let kafka = target.clone();
        let held = tokio::task::spawn_blocking(move || kafka::held(&kafka)).await??;
        eprintln!("{} holds {held} messages", target.topic);
        args.events.saturating_sub(held)
    } else {
        args.events
    };
    let mut messages = kafka::messages(&mut Traffic::new(sites, &args.run, 1), count);
    if let Some(at) = args.poison_at {
        messages.insert(
            at.min(messages.len()),
            ("poison".into(), b"not an event".to_vec()),
        );
    }
    let bytes: usize = messages.iter().map(|(k, v)| k.len() + v.len()).sum();
    let bytes_per_unit = (count > 0).then(|| bytes as f64 / count as f64);
    let linger_ms = args.linger_ms;
    let send = tokio::task::spawn_blocking(move || kafka::produce(&target, linger_ms, &messages));
    let (outcome, cpu) = watched(&args.label, async { send.await? }).await?;
    anyhow::ensure!(
        outcome.failed == 0,
        "{} of {count} messages failed",
        outcome.failed
    );
    let rate = outcome.delivered as f64 / outcome.elapsed.as_secs_f64().max(1e-9);
    Ok(Figure {
        bytes_per_unit,
        ..args.label.figure("events", rate, outcome.delivered, cpu)
    })
}

pub async fn consume(args: ConsumeArgs) -> anyhow::Result<Figure> {
    let ConsumeArgs {
        label,
        kafka,
        group,
        events,
    } = args;
    let read = tokio::task::spawn_blocking(move || kafka::consume(&kafka, &group, events));
    let (elapsed, cpu) = watched(&label, async { read.await? }).await?;
    let rate = events as f64 / elapsed.as_secs_f64().max(1e-9);
    Ok(label.figure("messages", rate, events, cpu))
}

pub async fn settle(args: SettleArgs) -> anyhow::Result<()> {
    let SettleArgs {
        brokers,
        topic,
        group,
        timeout,
    } = args;
    let timeout = Duration::from_secs(timeout);
    tokio::task::spawn_blocking(move || kafka::settle(&brokers, &topic, &group, timeout)).await?
}

pub async fn create_topics(args: CreateTopicsArgs) -> anyhow::Result<()> {
    let topics: Vec<&str> = args.topics.iter().map(String::as_str).collect();
    kafka_kit::client::ensure_topics(
        kafka_kit::client::client_config(&args.brokers, "loadgen"),
        &topics,
        args.partitions,
    )
    .await
}

pub async fn engine(action: KafkaEngineAction) -> anyhow::Result<()> {
    match action {
        KafkaEngineAction::Start(args) => {
            let source = kafka_engine::Source {
                brokers: &args.brokers,
                topic: &args.topic,
                group: &args.group,
                block_rows: args.block_rows,
                consumers: args.consumers,
            };
            let clickhouse = ClickHouse::new(&args.clickhouse);
            kafka_engine::create(&clickhouse, &args.database, &source).await
        }
        KafkaEngineAction::Stop {
            clickhouse,
            database,
        } => kafka_engine::stop(&ClickHouse::new(&clickhouse), &database).await,
    }
}
