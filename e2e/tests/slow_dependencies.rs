//! A broker or a ClickHouse that answers slowly rather than not at all: every byte between
//! a service and it arrives late (a proxy holds it), as across a congested link or from a
//! server stalled on its disk. Slowness within the timeouts costs latency and nothing else;
//! beyond them, a clear 503 in bounded time or an insert retried, and nothing lost or
//! stored twice where analysts look.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use common::event::EventMessage;
use e2e::{ConsumerNames, DelayProxy, PrivateBroker, SnapshotFile};
use rdkafka::Message;
use reqwest::StatusCode;
use serde_json::json;
use uuid::Uuid;

fn snapshot() -> SnapshotFile {
    SnapshotFile::new(&json!({
        "version": 1,
        "experiments": [{ "id": "exp_1", "status": "live", "variants": [
            { "id": "var_1", "weight": 100, "control": true, "parts": {} }] }],
        "keys": [{ "publicKey": "pk_slow", "experiments": ["exp_1"] }]
    }))
}

/// A batch of five events with client-chosen ids, and those ids.
fn batch(session: &str) -> (serde_json::Value, Vec<Uuid>) {
    let ids: Vec<Uuid> = (0..5).map(|_| Uuid::new_v4()).collect();
    let events: Vec<_> = ids
        .iter()
        .map(|id| {
            json!({ "eventId": id.to_string(), "eventName": "impression",
                    "experimentId": "exp_1", "sessionId": session })
        })
        .collect();
    (json!({ "events": events }), ids)
}

async fn ids_in_topic(brokers: &str, topic: &str, want: usize) -> HashSet<Uuid> {
    e2e::read_topic_at(brokers, topic, want, Duration::from_secs(60))
        .await
        .iter()
        .map(|m| {
            let payload = m.payload().expect("payload");
            let event: EventMessage = serde_json::from_slice(payload).expect("event message");
            event.event_id
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_broker_slows_the_answers_and_every_acknowledged_event_is_in_kafka() {
    let broker = PrivateBroker::start_behind_proxy().await;
    let file = snapshot();
    let topic = e2e::unique("slow-");
    let brokers = format!("--kafka-brokers={}", broker.brokers);
    let ingest = e2e::start_ingest(e2e::ingest_config(&file.path, &topic, &[&brokers])).await;
    broker.set_delay(Duration::from_millis(400));

    let url = ingest.url("/api/v1/analytics");
    let http = reqwest::Client::new();
    let clients: Vec<_> = (0..4)
        .map(|c| {
            let (http, url) = (http.clone(), url.clone());
            tokio::spawn(async move {
                let mut accepted = Vec::new();
                let mut fastest = Duration::MAX;
                for _ in 0..5 {
                    let (body, ids) = batch(&format!("slow-{c}"));
                    let started = Instant::now();
                    let response = http
                        .post(&url)
                        .header("X-public-key", "pk_slow")
                        .json(&body)
                        .send()
                        .await
                        .expect("an answer");
                    assert_eq!(response.status(), StatusCode::ACCEPTED);
                    fastest = fastest.min(started.elapsed());
                    accepted.extend(ids);
                }
                (accepted, fastest)
            })
        })
        .collect();
    let mut accepted = HashSet::new();
    for client in clients {
        let (ids, fastest) = client.await.expect("client");
        // The produce request and its answer each crossed the proxy.
        assert!(
            fastest >= Duration::from_millis(800),
            "answered in {fastest:?}: the broker was not slow"
        );
        accepted.extend(ids);
    }
    assert_eq!(accepted.len(), 100);
    let found = ids_in_topic(&broker.brokers, &topic, accepted.len()).await;
    assert!(accepted.is_subset(&found), "{} found", found.len());
    ingest.stop().await.expect("clean stop");
}

#[tokio::test]
async fn a_broker_slower_than_the_delivery_timeout_gets_503_and_the_retry_lands() {
    let broker = PrivateBroker::start_behind_proxy().await;
    let file = snapshot();
    let topic = e2e::unique("slower-");
    let brokers = format!("--kafka-brokers={}", broker.brokers);
    let config = e2e::ingest_config(
        &file.path,
        &topic,
        &[&brokers, "--delivery-timeout-ms=1500"],
    );
    let ingest = e2e::start_ingest(config).await;
    let http = reqwest::Client::new();
    let (body, ids) = batch("slower");
    let post = || {
        http.post(ingest.url("/api/v1/analytics"))
            .header("X-public-key", "pk_slow")
            .json(&body)
            .send()
    };

    broker.set_delay(Duration::from_secs(3));
    let started = Instant::now();
    let response = post().await.expect("an answer");
    let waited = started.elapsed();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(response.headers().contains_key("retry-after"));
    let answer: serde_json::Value = response.json().await.expect("JSON");
    assert_eq!(answer["error"]["code"], "kafka_unavailable");
    assert!(
        waited < Duration::from_millis(1500 + 3000),
        "answered after {waited:?}"
    );

    // The client retries the same events once the broker is quick again.
    broker.set_delay(Duration::ZERO);
    e2e::eventually(Duration::from_secs(60), "202 for the retry", || async {
        (post().await.ok()?.status() == StatusCode::ACCEPTED).then_some(())
    })
    .await;
    let found = ids_in_topic(&broker.brokers, &topic, ids.len()).await;
    assert!(ids.iter().all(|id| found.contains(id)), "{found:?}");
    ingest.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_on_a_slow_broker_stores_every_event_once() {
    let broker = PrivateBroker::start_behind_proxy().await;
    let names = ConsumerNames::unique();
    let brokers = format!("--kafka-brokers={}", broker.brokers);
    let (consumer, stats) =
        e2e::start_consumer_counted(e2e::consumer_config(&names, &[&brokers])).await;
    broker.set_delay(Duration::from_millis(300));

    let events: Vec<EventMessage> = (0..60)
        .map(|i| e2e::event_message("pk_slow", &format!("slow-{}", i % 7), "impression"))
        .collect();
    let payloads: Vec<Vec<u8>> = events
        .iter()
        .map(|e| serde_json::to_vec(e).expect("serialized"))
        .collect();
    let messages: Vec<(Option<&[u8]>, &[u8])> = events
        .iter()
        .zip(&payloads)
        .map(|(e, p)| (Some(e.session_id.as_bytes()), p.as_slice()))
        .collect();
    e2e::produce_all(&broker.brokers, &names.topic, &messages).await;

    let ch = e2e::clickhouse(&names.database);
    let (_, once) = e2e::wait_for_events(&ch, 60, Duration::from_secs(120)).await;
    assert_eq!(once, 60, "every event once");
    assert_eq!(
        stats
            .messages_read
            .load(std::sync::atomic::Ordering::Relaxed),
        60,
        "each message read once"
    );
    consumer.stop().await.expect("clean stop");
}

/// Inserts answered after their timeout are retried while ClickHouse still stores the
/// first attempts: `FINAL` shows every event once all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clickhouse_slower_than_the_insert_timeout_ends_with_every_event_once() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let server = e2e::clickhouse_url();
    let target = server
        .trim_start_matches("http://")
        .parse()
        .expect("host:port");
    let proxy = DelayProxy::serve(listener, target);
    let names = ConsumerNames::unique();
    let url = format!("--clickhouse-url=http://{}", proxy.addr);
    let config = e2e::consumer_config(&names, &[&url, "--insert-timeout-ms=1000"]);
    let consumer = e2e::start_consumer(config).await;
    proxy.set_delay(Duration::from_millis(1500));

    let events: Vec<EventMessage> = (0..30)
        .map(|i| e2e::event_message("pk_slow", &format!("late-{}", i % 5), "impression"))
        .collect();
    let payloads: Vec<Vec<u8>> = events
        .iter()
        .map(|e| serde_json::to_vec(e).expect("serialized"))
        .collect();
    let messages: Vec<(Option<&[u8]>, &[u8])> = events
        .iter()
        .zip(&payloads)
        .map(|(e, p)| (Some(e.session_id.as_bytes()), p.as_slice()))
        .collect();
    e2e::produce_all(&e2e::kafka_brokers(), &names.topic, &messages).await;
    // Attempts time out (their rows may land late, more than once)...
    let readyz = consumer.url("/readyz");
    e2e::eventually(Duration::from_secs(30), "/readyz 503", || async {
        let status = reqwest::get(&readyz).await.ok()?.status();
        (status == StatusCode::SERVICE_UNAVAILABLE).then_some(())
    })
    .await;
    // ...until ClickHouse is quick again.
    proxy.set_delay(Duration::ZERO);
    let ch = e2e::clickhouse(&names.database);
    let (_, once) = e2e::wait_for_events(&ch, 30, Duration::from_secs(90)).await;
    assert_eq!(once, 30, "every event once");
    e2e::eventually(Duration::from_secs(30), "/readyz 200", || async {
        let status = reqwest::get(&readyz).await.ok()?.status();
        status.is_success().then_some(())
    })
    .await;
    consumer.stop().await.expect("clean stop");
}
