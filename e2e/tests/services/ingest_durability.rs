//! The ingest never loses an acknowledged event: concurrent clients, a paused broker,
//! a shutdown with requests in flight.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use e2e::{PrivateBroker, SnapshotFile};
use reqwest::StatusCode;
use serde_json::json;
use uuid::Uuid;

fn snapshot() -> SnapshotFile {
    e2e::one_experiment_snapshot("pk_durable")
}

/// What a loaded machine may add to a bound the ingest keeps: a broken bound (librdkafka's
/// default message timeout is 300 s, a paused broker answers nothing) is far beyond it.
const ANSWER_MARGIN: Duration = Duration::from_secs(15);

/// A batch of five events with client-chosen ids, and those ids.
fn batch(session: &str) -> (serde_json::Value, Vec<Uuid>) {
    e2e::client_batch(session, 5)
}

async fn ids_in_topic(topic: &str, want: usize) -> HashSet<Uuid> {
    e2e::event_ids(&e2e::read_topic(topic, want, Duration::from_secs(30)).await)
        .into_iter()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_clients_every_accepted_event_is_in_kafka() {
    let file = snapshot();
    let topic = e2e::unique("concurrent-");
    let ingest = e2e::start_ingest(e2e::ingest_config(&file.path, &topic, &[])).await;
    let url = ingest.url("/api/v1/analytics");
    let http = reqwest::Client::new();
    let clients: Vec<_> = (0..16)
        .map(|c| {
            let (http, url) = (http.clone(), url.clone());
            tokio::spawn(async move {
                let mut accepted = Vec::new();
                for r in 0..20 {
                    let (body, ids) = batch(&format!("session-{c}-{}", r % 3));
                    let response = http
                        .post(&url)
                        .header("X-public-key", "pk_durable")
                        .json(&body)
                        .send()
                        .await
                        .expect("answer");
                    assert_eq!(response.status(), StatusCode::ACCEPTED);
                    accepted.extend(ids);
                }
                accepted
            })
        })
        .collect();
    let mut accepted = HashSet::new();
    for client in clients {
        accepted.extend(client.await.expect("client task"));
    }
    assert_eq!(accepted.len(), 16 * 20 * 5);
    let found = ids_in_topic(&topic, accepted.len()).await;
    assert_eq!(found.len(), accepted.len());
    assert!(
        accepted.is_subset(&found),
        "an acknowledged event is missing from Kafka"
    );
    ingest.stop().await.expect("clean stop");
}

#[tokio::test]
async fn a_paused_broker_gets_503_within_the_bound_and_readiness_follows() {
    let broker = PrivateBroker::start().await;
    let file = snapshot();
    let topic = e2e::unique("paused-");
    let config = e2e::ingest_config(
        &file.path,
        &topic,
        &[
            &format!("--kafka-brokers={}", broker.brokers),
            "--delivery-timeout-ms=1500",
        ],
    );
    let ingest = e2e::start_ingest(config).await;
    let http = reqwest::Client::new();
    let post = || {
        http.post(ingest.url("/api/v1/analytics"))
            .header("X-public-key", "pk_durable")
            .json(&batch("paused").0)
            .send()
    };
    assert_eq!(post().await.expect("answer").status(), StatusCode::ACCEPTED);

    broker.pause();
    let started = Instant::now();
    let response = post().await.expect("answer");
    let waited = started.elapsed();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(response.headers().contains_key("retry-after"));
    let body: serde_json::Value = response.json().await.expect("JSON");
    assert_eq!(body["error"]["code"], "kafka_unavailable");
    // Bounded by the delivery timeout (1.5 s, and a 1 s backstop), not by the broker's
    // return; the margin is a loaded machine's.
    assert!(
        waited < Duration::from_millis(1500) + ANSWER_MARGIN,
        "answered after {waited:?}"
    );
    e2e::eventually(Duration::from_secs(15), "/readyz 503", || async {
        let status = http.get(ingest.url("/readyz")).send().await.ok()?.status();
        (status == StatusCode::SERVICE_UNAVAILABLE).then_some(())
    })
    .await;

    broker.resume();
    e2e::eventually(Duration::from_secs(30), "202 after resume", || async {
        (post().await.ok()?.status() == StatusCode::ACCEPTED).then_some(())
    })
    .await;
    e2e::eventually(Duration::from_secs(15), "/readyz 200", || async {
        let status = http.get(ingest.url("/readyz")).send().await.ok()?.status();
        (status == StatusCode::OK).then_some(())
    })
    .await;
    ingest.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_with_requests_in_flight_loses_no_acknowledged_event() {
    let file = snapshot();
    let topic = e2e::unique("shutdown-");
    // A drain long enough for /readyz to be seen 503 during it on a loaded machine.
    let config = e2e::ingest_config(&file.path, &topic, &["--shutdown-drain-ms=3000"]);
    let ingest = e2e::start_ingest(config).await;
    let url = ingest.url("/api/v1/analytics");
    let readyz = ingest.url("/readyz");
    let http = reqwest::Client::new();
    let clients: Vec<_> = (0..8)
        .map(|c| {
            let (http, url) = (http.clone(), url.clone());
            tokio::spawn(async move {
                let mut accepted = Vec::new();
                let mut refused = 0;
                // Until the server is gone: connection refused ends the loop.
                for _ in 0..10_000 {
                    let (body, ids) = batch(&format!("s-{c}"));
                    let request = http
                        .post(&url)
                        .header("X-public-key", "pk_durable")
                        .json(&body);
                    match request.send().await {
                        Ok(r) if r.status() == StatusCode::ACCEPTED => accepted.extend(ids),
                        Ok(_) => refused += 1,
                        Err(_) => break,
                    }
                }
                (accepted, refused)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stopping = tokio::spawn(ingest.stop());
    // Not ready while draining (and still answering: a refused connection is no answer).
    e2e::eventually(
        Duration::from_secs(30),
        "/readyz 503 while draining",
        || async {
            let status = http.get(&readyz).send().await.ok()?.status();
            (status == StatusCode::SERVICE_UNAVAILABLE).then_some(())
        },
    )
    .await;
    stopping.await.expect("stop task").expect("clean stop");

    let mut accepted = HashSet::new();
    for client in clients {
        let (ids, refused) = client.await.expect("client");
        assert_eq!(refused, 0, "no request was refused while draining");
        accepted.extend(ids);
    }
    assert!(
        accepted.len() >= 5,
        "some requests went through before the stop"
    );
    let found = ids_in_topic(&topic, accepted.len()).await;
    assert!(
        accepted.is_subset(&found),
        "{} acknowledged, {} found",
        accepted.len(),
        found.len()
    );
}

/// A batch is enqueued whole or not at all. With room for 10 messages in the producer and
/// a paused broker, a batch of 8 waits in the queue; a batch of 5 then waits for room
/// (before, it enqueued 2 events, met a full queue and answered 503, and those 2 reached
/// Kafka unknown to the client). Once the broker is back both are acknowledged, and Kafka
/// holds each of the 13 events once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_waits_for_room_in_the_producer_and_is_never_half_enqueued() {
    let broker = PrivateBroker::start().await;
    let file = snapshot();
    let topic = e2e::unique("room-");
    let config = e2e::ingest_config(
        &file.path,
        &topic,
        &[
            &format!("--kafka-brokers={}", broker.brokers),
            "--producer-queue-messages=10",
            "--delivery-timeout-ms=20000",
        ],
    );
    let ingest = e2e::start_ingest(config).await;
    let http = reqwest::Client::new();
    let post = |body: serde_json::Value| {
        http.post(ingest.url("/api/v1/analytics"))
            .header("X-public-key", "pk_durable")
            .json(&body)
            .send()
    };
    let (warm, mut all) = batch("warm");
    assert_eq!(
        post(warm).await.expect("answer").status(),
        StatusCode::ACCEPTED
    );

    broker.pause();
    let (eight, ids) = e2e::client_batch("eight", 8);
    all.extend(ids);
    let first = tokio::spawn(post(eight));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (five, ids) = e2e::client_batch("five", 5);
    all.extend(ids);
    let second = tokio::spawn(post(five));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!second.is_finished(), "the second batch waits for room");
    broker.resume();

    let first = first.await.expect("task").expect("answer").status();
    let second = second.await.expect("task").expect("answer").status();
    assert_eq!(
        (first, second),
        (StatusCode::ACCEPTED, StatusCode::ACCEPTED)
    );
    let found = e2e::event_ids(
        &e2e::read_topic_at(
            &broker.brokers,
            &topic,
            all.len() + 1,
            Duration::from_secs(10),
        )
        .await,
    );
    assert_eq!(found.len(), all.len(), "each event once: {found:?}");
    assert_eq!(
        found.into_iter().collect::<HashSet<_>>(),
        all.iter().copied().collect()
    );

    // A batch larger than the whole queue can never fit: refused at once (not after
    // waiting 20 s for room that cannot come), nothing sent.
    let (eleven, eleven_ids) = e2e::client_batch("eleven", 11);
    let started = Instant::now();
    let response = post(eleven).await.expect("answer");
    let waited = started.elapsed();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(response.headers().contains_key("retry-after"));
    let body: serde_json::Value = response.json().await.expect("JSON");
    assert_eq!(body["error"]["code"], "kafka_unavailable", "{body}");
    assert!(
        waited < Duration::from_secs(10),
        "refused after {waited:?}, not at once"
    );
    let found = e2e::event_ids(
        &e2e::read_topic_at(
            &broker.brokers,
            &topic,
            all.len() + 1,
            Duration::from_secs(5),
        )
        .await,
    );
    assert!(
        eleven_ids.iter().all(|id| !found.contains(id)),
        "part of the refused batch was sent"
    );
    ingest.stop().await.expect("clean stop");
}

/// Per-key rate limits: over its `maxEventsPerSecond` a key is answered 429 with
/// `Retry-After` and nothing of that request is published; other keys are unaffected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_over_its_rate_is_answered_429_and_nothing_of_it_is_published() {
    let file = SnapshotFile::new(&json!({
        "version": 1,
        "experiments": [{ "id": "exp_1", "status": "live", "variants": [
            { "id": "var_1", "weight": 100, "control": true, "parts": {} }] }],
        "keys": [
            { "publicKey": "pk_limited", "experiments": ["exp_1"], "maxEventsPerSecond": 2.5 },
            { "publicKey": "pk_free", "experiments": ["exp_1"] }
        ]
    }));
    let topic = e2e::unique("limits-");
    let ingest = e2e::start_ingest(e2e::ingest_config(&file.path, &topic, &[])).await;
    let http = reqwest::Client::new();
    let post = |key: &'static str, body: serde_json::Value| {
        http.post(ingest.url("/api/v1/analytics"))
            .header("X-public-key", key)
            .header("Origin", "https://site.example")
            .json(&body)
            .send()
    };
    // A full bucket holds two seconds: 5 events.
    let (first, mut published) = batch("limited");
    assert_eq!(
        post("pk_limited", first).await.expect("answer").status(),
        StatusCode::ACCEPTED
    );
    let (second, refused) = batch("limited");
    let response = post("pk_limited", second).await.expect("answer");
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(response.headers()["retry-after"], "2");
    assert_eq!(
        response.headers()["access-control-expose-headers"],
        "retry-after"
    );
    let body: serde_json::Value = response.json().await.expect("JSON");
    assert_eq!(body["error"]["code"], "rate_limited");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("2.5"))
    );
    for _ in 0..4 {
        let (free, ids) = batch("free");
        assert_eq!(
            post("pk_free", free).await.expect("answer").status(),
            StatusCode::ACCEPTED
        );
        published.extend(ids);
    }

    let found: HashSet<Uuid> = e2e::event_ids(
        &e2e::read_topic(&topic, published.len() + 1, Duration::from_secs(10)).await,
    )
    .into_iter()
    .collect();
    assert_eq!(found, published.into_iter().collect::<HashSet<_>>());
    assert!(refused.iter().all(|id| !found.contains(id)));
    let metrics = e2e::metrics_text(&ingest.url("/metrics")).await;
    assert!(
        metrics.contains("ingest_rate_limited_requests_total"),
        "{metrics}"
    );
    assert!(metrics.contains("status=\"429\""), "{metrics}");
    ingest.stop().await.expect("clean stop");
}
