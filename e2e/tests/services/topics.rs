//! The ingest and its topic as an operator meets them: it listens at once while the broker
//! is down, `/readyz` and the 503 answers name the real cause (the broker unreachable, the
//! topic missing), a deleted topic is noticed and created again, and with topic creation
//! off a missing topic is named until someone creates it.

use std::time::{Duration, Instant};

use e2e::{PrivateBroker, SnapshotFile};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use reqwest::StatusCode;
use serde_json::Value;

fn snapshot() -> SnapshotFile {
    e2e::one_experiment_snapshot("pk_topics")
}

fn admin(brokers: &str) -> AdminClient<DefaultClientContext> {
    kafka_kit::client::client_config(brokers, "e2e-admin")
        .create()
        .expect("admin client")
}

/// `/readyz`'s status and its causes, joined.
async fn readyz(ingest: &e2e::Running) -> (StatusCode, String) {
    let answer = reqwest::get(ingest.url("/readyz")).await.expect("/readyz");
    let status = answer.status();
    let body: Value = answer.json().await.expect("JSON");
    let causes = body["causes"]
        .as_array()
        .map(|c| {
            c.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default();
    (status, causes)
}

/// Waits (30 s at most) until `/readyz` answers 503 with a cause containing `words`.
async fn until_named(ingest: &e2e::Running, words: &str) {
    e2e::eventually(
        Duration::from_secs(30),
        &format!("/readyz naming {words:?}"),
        || async {
            let (status, causes) = readyz(ingest).await;
            (status == StatusCode::SERVICE_UNAVAILABLE && causes.contains(words)).then_some(())
        },
    )
    .await;
}

/// Posts one event; the status and the error's message.
async fn post_one(ingest: &e2e::Running) -> (StatusCode, String) {
    let (batch, _) = e2e::client_batch(&e2e::unique("s-"), 1);
    post(ingest, &batch).await.expect("an answer")
}

/// Posts `batch`; the status and the error's message, `None` without an answer.
async fn post(ingest: &e2e::Running, batch: &Value) -> Option<(StatusCode, String)> {
    let answer = reqwest::Client::new()
        .post(ingest.url("/api/v1/analytics"))
        .header("x-public-key", "pk_topics")
        .json(batch)
        .send()
        .await
        .ok()?;
    let status = answer.status();
    let body: Value = answer.json().await.unwrap_or_default();
    let message = body["error"]["message"].as_str().unwrap_or("").to_owned();
    Some((status, message))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_broker_down_the_ingest_listens_at_once_and_names_the_broker() {
    let file = snapshot();
    let nobody = format!("127.0.0.1:{}", e2e::free_port());
    let started = Instant::now();
    let ingest = e2e::start_ingest_unready(e2e::ingest_config(
        &file.path,
        &e2e::unique("down-"),
        &[&format!("--kafka-brokers={nobody}")],
    ))
    .await;
    let listening = started.elapsed();
    assert!(
        listening < Duration::from_secs(5),
        "the ingest listened after {listening:?}: it waited on the broker"
    );
    until_named(&ingest, &format!("Kafka is not reachable at {nobody}.")).await;
    ingest.stop().await.expect("stops");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_topic_is_noticed_and_created_again() {
    let broker = PrivateBroker::start().await;
    let file = snapshot();
    let topic = e2e::unique("deleted-");
    let ingest = e2e::start_ingest(e2e::ingest_config(
        &file.path,
        &topic,
        &[&format!("--kafka-brokers={}", broker.brokers)],
    ))
    .await;
    assert_eq!(post_one(&ingest).await.0, StatusCode::ACCEPTED);

    let deleted = admin(&broker.brokers)
        .delete_topics(&[&topic], &AdminOptions::new())
        .await
        .expect("delete answered");
    assert!(deleted.iter().all(Result::is_ok), "{deleted:?}");
    // Created again by the ingest's watch, within its two-second period: nobody else
    // creates topics here. Then events are taken again, and read back from the new topic.
    e2e::eventually(
        Duration::from_secs(30),
        "the topic created again",
        || async {
            let reader = admin(&broker.brokers);
            let metadata = reader
                .inner()
                .fetch_metadata(Some(&topic), Duration::from_secs(5))
                .ok()?;
            let partitions = metadata
                .topics()
                .iter()
                .find(|t| t.name() == topic && t.error().is_none())?
                .partitions()
                .len();
            (partitions == 3).then_some(())
        },
    )
    .await;
    e2e::until_ready(&ingest.url("/readyz"), true, "ready again").await;
    let (batch, ids) = e2e::client_batch(&e2e::unique("after-"), 3);
    e2e::eventually(Duration::from_secs(30), "events taken again", || async {
        let (status, _) = post(&ingest, &batch).await?;
        (status == StatusCode::ACCEPTED).then_some(())
    })
    .await;
    let read =
        e2e::read_topic_at(&broker.brokers, &topic, ids.len(), Duration::from_secs(30)).await;
    let read = e2e::event_ids(&read);
    assert!(
        ids.iter().all(|id| read.contains(id)),
        "the accepted events are in the new topic"
    );
    ingest.stop().await.expect("stops");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_topic_creation_off_a_missing_topic_is_named_until_it_is_created() {
    let broker = PrivateBroker::start().await;
    let file = snapshot();
    let topic = e2e::unique("unmanaged-");
    let ingest = e2e::start_ingest_unready(e2e::ingest_config(
        &file.path,
        &topic,
        &[
            &format!("--kafka-brokers={}", broker.brokers),
            "--kafka-create-topics=false",
            "--delivery-timeout-ms=3000",
        ],
    ))
    .await;
    let missing = format!("Kafka has no topic {topic}, and topic creation is off");
    until_named(&ingest, &missing).await;
    let (status, message) = post_one(&ingest).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        message,
        "Kafka has no events topic (deleted, or not created yet); retry later."
    );
    assert!(
        readyz(&ingest).await.1.contains(&missing),
        "still missing: the ingest did not create it"
    );

    let created = admin(&broker.brokers)
        .create_topics(
            &[NewTopic::new(&topic, 3, TopicReplication::Fixed(1))],
            &AdminOptions::new(),
        )
        .await
        .expect("create answered");
    assert!(created.iter().all(Result::is_ok), "{created:?}");
    e2e::until_ready(&ingest.url("/readyz"), true, "ready once the topic exists").await;
    e2e::eventually(Duration::from_secs(30), "events taken", || async {
        (post_one(&ingest).await.0 == StatusCode::ACCEPTED).then_some(())
    })
    .await;
    ingest.stop().await.expect("stops");
}
