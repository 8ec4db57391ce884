//! The consumer against the real broker and ClickHouse: duplicates, poison messages and
//! their replay, a shared group, ClickHouse outages, and a SIGKILL mid-stream.

use std::collections::HashSet;
use std::time::Duration;

use e2e::{ConsumerNames, PrivateClickHouse};
use rdkafka::Message;
use rdkafka::message::Headers;

const WAIT: Duration = Duration::from_secs(90);

async fn produce_events(topic: &str, events: &[contract::event::EventMessage]) {
    e2e::produce_events_to(&e2e::kafka_brokers(), topic, events).await;
}

fn events(n: usize, tag: &str) -> Vec<contract::event::EventMessage> {
    (0..n)
        .map(|i| e2e::event_message("pk_c", &format!("{tag}-{}", i % 17), "impression"))
        .collect()
}

/// Asserts that `events` holds, by `FINAL`, the events of `all` and no other.
async fn assert_stored(ch: &clickhouse::Client, all: &[contract::event::EventMessage]) {
    let ids: Vec<String> = ch
        .query("SELECT toString(event_id) FROM events FINAL")
        .fetch_all()
        .await
        .expect("ids");
    let want: HashSet<String> = all.iter().map(|e| e.event_id.to_string()).collect();
    assert_eq!(ids.into_iter().collect::<HashSet<_>>(), want);
}

/// Waits until the consumer has the answer to the inserts of `rows` rows. A row is
/// queryable before that: ClickHouse stopped in between leaves the consumer retrying a
/// batch the test counts as stored.
async fn until_inserted(stats: &consumer::Stats, rows: u64) {
    let inserted = || {
        stats
            .rows_inserted
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    e2e::eventually(WAIT, "the consumer has its inserts' answers", || async {
        (inserted() >= rows).then_some(())
    })
    .await;
    assert_eq!(inserted(), rows, "each row inserted once");
}

#[tokio::test]
async fn a_message_delivered_twice_counts_once() {
    let names = ConsumerNames::unique();
    let (consumer, stats) = e2e::start_consumer_counted(e2e::consumer_config(&names, &[])).await;
    let event = e2e::event_message("pk_c", "twice", "click");
    produce_events(&names.topic, &[event.clone(), event]).await;
    // Both deliveries stored, by the consumer's count: a count of raw rows could see the
    // two copies merged into one already.
    until_inserted(&stats, 2).await;
    let ch = e2e::clickhouse(&names.database);
    let once: u64 = ch
        .query("SELECT count() FROM events FINAL")
        .fetch_one()
        .await
        .expect("count");
    assert_eq!(once, 1, "FINAL counts the event once");
    consumer.stop().await.expect("clean stop");
    e2e::drop_database(&names.database).await;
}

#[tokio::test]
async fn poison_messages_are_set_aside_with_their_reason_and_can_be_replayed() {
    let names = ConsumerNames::unique();
    let (consumer, stats) = e2e::start_consumer_counted(e2e::consumer_config(&names, &[])).await;

    let mut future =
        serde_json::to_value(e2e::event_message("pk_c", "v2", "impression")).expect("value");
    future["v"] = serde_json::json!(2);
    let future = future.to_string();
    let brokers = e2e::kafka_brokers();
    // One key: both letters land in one partition of the dead-letter topic, in one
    // record batch (the end Tansu reports then falls short of the last one).
    e2e::produce(&brokers, &names.topic, Some(b"k1"), b"not json at all").await;
    e2e::produce(&brokers, &names.topic, Some(b"k1"), future.as_bytes()).await;
    let good = events(3, "good");
    produce_events(&names.topic, &good).await;

    let ch = e2e::clickhouse(&names.database);
    e2e::wait_for_events(&ch, 3, WAIT).await;
    let letters = e2e::read_topic(&names.dlq_topic, 2, Duration::from_secs(30)).await;
    assert_eq!(letters.len(), 2);
    let header = |m: &rdkafka::message::OwnedMessage, key: &str| -> String {
        let headers = m.headers().expect("headers");
        let h = headers
            .iter()
            .find(|h| h.key == key)
            .expect("header present");
        String::from_utf8(h.value.expect("value").to_vec()).expect("text")
    };
    let mut payloads: Vec<Vec<u8>> = Vec::new();
    for letter in &letters {
        assert_eq!(header(letter, "dlq.source.topic"), names.topic);
        header(letter, "dlq.source.partition")
            .parse::<i32>()
            .expect("partition");
        header(letter, "dlq.source.offset")
            .parse::<i64>()
            .expect("offset");
        let reason = header(letter, "dlq.reason");
        assert_eq!(letter.key(), Some(&b"k1"[..]), "original key kept");
        let payload = letter.payload().expect("payload").to_vec();
        if payload == b"not json at all" {
            assert!(reason.starts_with("not an event message"), "{reason}");
        } else {
            assert_eq!(payload, future.as_bytes(), "original bytes kept");
            assert_eq!(reason, "unsupported message version 2");
        }
        payloads.push(payload);
    }
    assert_eq!(
        stats
            .dead_letters
            .load(std::sync::atomic::Ordering::Relaxed),
        2
    );

    // The replay command publishes them again, once.
    let target = e2e::unique("replayed-");
    kafka_kit::client::ensure_topics(
        kafka_kit::client::client_config(&brokers, "e2e"),
        &[&target],
        1,
    )
    .await
    .expect("topic");
    let config = tools::ReplayConfig {
        kafka: kafka_kit::client::KafkaArgs {
            topic: target.clone(),
            ..kafka_kit::client::KafkaArgs::for_brokers(&brokers)
        },
        dlq_topic: names.dlq_topic.clone(),
        group_id: e2e::unique("replay-"),
    };
    assert_eq!(tools::replay(&config).await.expect("replays"), 2);
    assert_eq!(
        tools::replay(&config).await.expect("replays"),
        0,
        "nothing twice"
    );
    let replayed = e2e::read_topic(&target, 3, Duration::from_secs(5)).await;
    let mut again: Vec<Vec<u8>> = replayed
        .iter()
        .map(|m| m.payload().expect("payload").to_vec())
        .collect();
    again.sort();
    payloads.sort();
    assert_eq!(again, payloads);

    consumer.stop().await.expect("clean stop");
    e2e::drop_database(&names.database).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_consumers_of_one_group_share_the_partitions() {
    let names = ConsumerNames::unique();
    let extra = ["--topic-partitions=4", "--kafka-session-timeout-ms=6000"];
    let first = consumer::Application::build(e2e::consumer_config(&names, &extra))
        .await
        .expect("builds");
    let second = consumer::Application::build(e2e::consumer_config(&names, &extra))
        .await
        .expect("builds");
    let (a, b) = (first.stats(), second.stats());
    let (stop_a, stopped_a) = tokio::sync::oneshot::channel::<()>();
    let (stop_b, stopped_b) = tokio::sync::oneshot::channel::<()>();
    let task_a = tokio::spawn(first.run_until(async move {
        let _ = stopped_a.await;
    }));
    let task_b = tokio::spawn(second.run_until(async move {
        let _ = stopped_b.await;
    }));

    // Small bursts until both consumers have stored rows (a rebalance gives the second
    // one its partitions), then everything is checked.
    let ch = e2e::clickhouse(&names.database);
    let load = std::sync::atomic::Ordering::Relaxed;
    let mut produced = 0u64;
    let deadline = tokio::time::Instant::now() + WAIT;
    while a.rows_inserted.load(load) == 0 || b.rows_inserted.load(load) == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "both consumers never stored rows"
        );
        produce_events(&names.topic, &events(20, &format!("shared-{produced}"))).await;
        produced += 20;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let (raw, once) = e2e::wait_for_events(&ch, produced, WAIT).await;
    assert_eq!(once, produced);
    assert!(raw >= produced);

    let _ = stop_a.send(());
    let _ = stop_b.send(());
    task_a.await.expect("task").expect("clean stop");
    task_b.await.expect("task").expect("clean stop");
    e2e::drop_database(&names.database).await;
}

#[tokio::test]
async fn clickhouse_paused_then_stopped_every_event_lands_once() {
    let mut server = PrivateClickHouse::start().await;
    let names = ConsumerNames::unique();
    let url = format!("--clickhouse-url={}", server.url());
    let consumer = e2e::start_consumer(e2e::consumer_config(
        &names,
        &[&url, "--insert-timeout-ms=1000"],
    ))
    .await;
    let ch = e2e::clickhouse_at(&server.url(), &names.database);
    let mut all = events(50, "before");
    produce_events(&names.topic, &all).await;
    e2e::wait_for_events(&ch, 50, WAIT).await;

    server.pause();
    let paused = events(50, "paused");
    produce_events(&names.topic, &paused).await;
    all.extend(paused);
    e2e::until_ready(
        &consumer.url("/readyz"),
        false,
        "/readyz 503 while inserts fail",
    )
    .await;
    server.resume();
    e2e::wait_for_events(&ch, 100, WAIT).await;
    e2e::until_ready(&consumer.url("/readyz"), true, "/readyz 200 again").await;

    server.stop();
    let stopped = events(50, "stopped");
    produce_events(&names.topic, &stopped).await;
    all.extend(stopped);
    tokio::time::sleep(Duration::from_secs(2)).await;
    server.start_again().await;
    let (_, once) = e2e::wait_for_events(&ch, 150, WAIT).await;
    assert_eq!(once, 150, "every event once");
    assert_stored(&ch, &all).await;
    consumer.stop().await.expect("clean stop");
}

/// The next batch is collected while the one before is being inserted: a consumer stopped
/// while ClickHouse is down holds two batches, and must commit neither.
#[tokio::test]
async fn a_consumer_stopped_while_clickhouse_is_down_commits_none_of_the_batches_it_holds() {
    let mut server = PrivateClickHouse::start().await;
    let names = ConsumerNames::unique();
    let url = format!("--clickhouse-url={}", server.url());
    let config = || {
        e2e::consumer_config(
            &names,
            &[
                &url,
                "--insert-timeout-ms=1000",
                "--batch-max-rows=10",
                "--batch-max-wait-ms=100",
            ],
        )
    };
    let (consumer, stats) = e2e::start_consumer_counted(config()).await;
    let read = || {
        stats
            .messages_read
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let ch = e2e::clickhouse_at(&server.url(), &names.database);
    let mut all = events(10, "before");
    produce_events(&names.topic, &all).await;
    e2e::wait_for_events(&ch, 10, WAIT).await;
    assert_eq!(read(), 10);
    until_inserted(&stats, 10).await;

    server.stop();
    let held = events(50, "held");
    produce_events(&names.topic, &held).await;
    all.extend(held);
    e2e::until_ready(
        &consumer.url("/readyz"),
        false,
        "/readyz 503 while inserts fail",
    )
    .await;
    // Two batches held: the one being retried (1 to 10 rows, counted once its collecting
    // ended) and the next, full at 10 rows, behind it. One batch alone is 20 at most.
    e2e::eventually(
        WAIT,
        "a second batch collected behind the one retried",
        || async { (read() > 20).then_some(()) },
    )
    .await;
    assert!(
        consumer.stop().await.is_err(),
        "a stop with batches not stored is not clean"
    );

    server.start_again().await;
    let consumer = e2e::start_consumer(config()).await;
    let (_, once) = e2e::wait_for_events(&ch, 60, WAIT).await;
    assert_eq!(once, 60, "every event once");
    assert_stored(&ch, &all).await;
    consumer.stop().await.expect("clean stop");
}

/// A batch whose wait runs out while the one before is still being inserted keeps taking
/// rows until that insert ends: it could not be inserted sooner, and flushing it would
/// only make more, smaller inserts.
#[tokio::test]
async fn a_batch_keeps_taking_rows_while_the_one_before_is_being_inserted() {
    let mut server = PrivateClickHouse::start().await;
    let names = ConsumerNames::unique();
    let url = format!("--clickhouse-url={}", server.url());
    let config = e2e::consumer_config(
        &names,
        &[
            &url,
            "--insert-timeout-ms=1000",
            "--batch-max-rows=1000",
            "--batch-max-wait-ms=100",
        ],
    );
    let (consumer, stats) = e2e::start_consumer_counted(config).await;
    let readyz = consumer.url("/readyz");
    let ch = e2e::clickhouse_at(&server.url(), &names.database);
    let mut all = events(1, "first");
    produce_events(&names.topic, &all).await;
    e2e::wait_for_events(&ch, 1, WAIT).await;
    until_inserted(&stats, 1).await;

    server.stop();
    let stuck = events(1, "stuck");
    produce_events(&names.topic, &stuck).await;
    all.extend(stuck);
    e2e::until_ready(&readyz, false, "/readyz 503 while inserts fail").await;
    // Twenty events over at least a second, ten times the next batch's wait.
    let behind = events(20, "behind");
    for event in &behind {
        produce_events(&names.topic, std::slice::from_ref(event)).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    all.extend(behind);
    tokio::time::sleep(Duration::from_millis(500)).await;

    server.start_again().await;
    let (_, once) = e2e::wait_for_events(&ch, 22, WAIT).await;
    assert_eq!(once, 22, "every event once");
    assert_stored(&ch, &all).await;
    until_inserted(&stats, 22).await;
    assert_eq!(
        stats.inserts.load(std::sync::atomic::Ordering::Relaxed),
        3,
        "the first event, the stuck one, then the twenty behind it in one insert"
    );
    consumer.stop().await.expect("clean stop");
}

/// A look at the group waits for the batch being stored, so it is taken only when none is:
/// a look that fell due during an insert held the reading of the next batch until the
/// insert ended (here, until ClickHouse is back), and a backlog drained slower.
#[tokio::test]
async fn the_next_batch_is_read_while_one_is_stored_even_when_a_look_is_due() {
    let server = PrivateClickHouse::start().await;
    let names = ConsumerNames::unique();
    let url = format!("--clickhouse-url={}", server.url());
    // Six-second sessions: a look at the group every 1.5 s.
    let config = e2e::consumer_config(
        &names,
        &[
            &url,
            "--kafka-session-timeout-ms=6000",
            "--insert-timeout-ms=1000",
            "--batch-max-rows=10",
            // Each batch closes at its 10th row, never at a wait: on a loaded machine the
            // first ten could arrive in pieces, and a batch of 5 storing beside one of 3
            // waiting would stop the reads at 8.
            "--batch-max-wait-ms=60000",
        ],
    );
    let (consumer, stats) = e2e::start_consumer_counted(config).await;
    let read = || {
        stats
            .messages_read
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let ch = e2e::clickhouse_at(&server.url(), &names.database);

    server.pause();
    let mut all = events(10, "first");
    produce_events(&names.topic, &all).await;
    e2e::eventually(WAIT, "the first batch read", || async {
        (read() == 10).then_some(())
    })
    .await;
    // Two looks fall due while the first batch's insert hangs.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let second = events(10, "second");
    produce_events(&names.topic, &second).await;
    all.extend(second);
    e2e::eventually(
        Duration::from_secs(20),
        "the second batch read while the first is stored",
        || async { (read() == 20).then_some(()) },
    )
    .await;

    server.resume();
    let (_, once) = e2e::wait_for_events(&ch, 20, WAIT).await;
    assert_eq!(once, 20, "every event once");
    assert_stored(&ch, &all).await;
    consumer.stop().await.expect("clean stop");
}

/// A consumer fills one batch while it stores the other, then uses their buffers again:
/// its looks at the group, idle or between batches, do not throw a batch away (each new
/// one was filled in fresh memory, a tenth of the CPU while it drained a backlog).
#[tokio::test]
async fn a_consumer_makes_two_batches_and_uses_them_again() {
    let names = ConsumerNames::unique();
    // Six-second sessions: a look at the group every 1.5 s.
    let config = e2e::consumer_config(
        &names,
        &[
            "--kafka-session-timeout-ms=6000",
            "--batch-max-rows=5",
            "--batch-max-wait-ms=50",
        ],
    );
    let (consumer, stats) = e2e::start_consumer_counted(config).await;
    let ch = e2e::clickhouse(&names.database);
    // Idle looks first, then forty events over four seconds: batches between looks.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let mut all = Vec::new();
    for round in 0..8 {
        let some = events(5, &format!("round-{round}"));
        produce_events(&names.topic, &some).await;
        all.extend(some);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let (_, once) = e2e::wait_for_events(&ch, 40, WAIT).await;
    assert_eq!(once, 40, "every event once");
    assert_stored(&ch, &all).await;
    assert!(stats.inserts.load(std::sync::atomic::Ordering::Relaxed) >= 8);
    assert_eq!(
        stats
            .batches_made
            .load(std::sync::atomic::Ordering::Relaxed),
        2,
        "batches made"
    );
    consumer.stop().await.expect("clean stop");
}

#[tokio::test]
async fn a_consumer_killed_mid_stream_loses_nothing_after_restart() {
    let names = ConsumerNames::unique();
    let binary = e2e::workspace_binary("consumer");
    let port = e2e::free_port();
    let spawn = || {
        std::process::Command::new(&binary)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--kafka-brokers", &e2e::kafka_brokers()])
            .args(["--topic", &names.topic, "--dlq-topic", &names.dlq_topic])
            .args(["--group-id", &names.group])
            .args(["--clickhouse-url", &e2e::clickhouse_url()])
            .args(["--clickhouse-database", &names.database])
            .args(["--batch-max-rows", "50", "--batch-max-wait-ms", "100"])
            .args(["--kafka-session-timeout-ms", "6000"])
            .args(["--kafka-max-poll-interval-ms", "10000"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map(e2e::ChildProcess)
            .expect("consumer starts")
    };
    // The backlog is written first, so that the kill falls in the middle of it.
    kafka_kit::client::ensure_topics(
        kafka_kit::client::client_config(&e2e::kafka_brokers(), "e2e"),
        &[&names.topic, &names.dlq_topic],
        3,
    )
    .await
    .expect("topics");
    let all = events(2000, "kill");
    produce_events(&names.topic, &all).await;

    let mut child = spawn();
    let ch = e2e::clickhouse(&names.database);
    // Killed once a quarter of the backlog is stored (the consumer has committed by then),
    // looking often: the backlog takes forty inserts or more.
    let distinct = || async {
        ch.query("SELECT uniqExact(event_id) FROM events")
            .fetch_one::<u64>()
            .await
            .ok()
    };
    let deadline = tokio::time::Instant::now() + WAIT;
    while distinct().await.unwrap_or(0) < 500 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "500 rows never stored"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    child.kill();
    // The kill came mid-stream, else the restart proves nothing: even if the one insert the
    // dead consumer may have left in flight (a batch, 50 rows at most) lands now, some of
    // the backlog is not stored.
    let stored_at_kill = distinct().await.expect("count");
    assert!(
        stored_at_kill + 50 < 2000,
        "{stored_at_kill} of 2000 events were stored at the kill: it came too late"
    );

    let mut child = spawn();
    let (_, once) = e2e::wait_for_events(&ch, 2000, WAIT).await;
    // The broker finished the rebalance the restart began (once the dead member's session
    // ended): the consumer must not have left the group in the middle of it, which can
    // leave Tansu with a leader that is gone and the group without an owner for good.
    let metrics = e2e::metrics_text(&format!("http://127.0.0.1:{port}/metrics")).await;
    child.kill();
    assert_eq!(
        once, 2000,
        "every event once ({stored_at_kill} rows were stored at the kill)"
    );
    assert_eq!(
        e2e::metric(&metrics, "consumer_group_rejoins_total").unwrap_or(0.0),
        0.0,
        "the consumer left the group while the broker was rebalancing it"
    );
    let distinct: u64 = ch
        .query("SELECT uniqExact(event_id) FROM events")
        .fetch_one()
        .await
        .expect("count");
    assert_eq!(distinct, 2000);
    e2e::drop_database(&names.database).await;
}

#[tokio::test]
async fn the_poll_interval_reaches_the_kafka_client() {
    // librdkafka refuses a max.poll.interval.ms below session.timeout.ms: the refusal
    // shows the setting is passed on, not just parsed.
    let names = ConsumerNames::unique();
    let config = e2e::consumer_config(
        &names,
        &[
            "--kafka-session-timeout-ms=10000",
            "--kafka-max-poll-interval-ms=6000",
        ],
    );
    let error = match consumer::Application::build(config).await {
        Ok(_) => panic!("a poll interval below the session timeout was accepted"),
        Err(e) => format!("{e:#}"),
    };
    assert!(error.contains("max.poll.interval.ms"), "{error}");
    e2e::drop_database(&names.database).await;
}

/// The dead-leader stall: a consumer SIGKILLed and restarted at once, faster than the
/// session timeout, with the settings of `scripts/up` (45 s session, SQLite Tansu). Tansu
/// gives the new member an empty assignment and never rebalances again; the consumer must
/// notice and rejoin by itself, and every event must land once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_restarted_faster_than_its_session_timeout_recovers_by_itself() {
    let broker = e2e::PrivateBroker::start_sqlite().await;
    let names = ConsumerNames::unique();
    let binary = e2e::workspace_binary("consumer");
    let port = e2e::free_port();
    let spawn = || {
        std::process::Command::new(&binary)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--kafka-brokers", &broker.brokers])
            .args(["--topic", &names.topic, "--dlq-topic", &names.dlq_topic])
            .args(["--group-id", &names.group])
            .args(["--clickhouse-url", &e2e::clickhouse_url()])
            .args(["--clickhouse-database", &names.database])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map(e2e::ChildProcess)
            .expect("consumer starts")
    };
    let produce = |events: Vec<contract::event::EventMessage>| {
        let (brokers, topic) = (broker.brokers.clone(), names.topic.clone());
        async move { e2e::produce_events_to(&brokers, &topic, &events).await }
    };
    kafka_kit::client::ensure_topics(
        kafka_kit::client::client_config(&broker.brokers, "e2e"),
        &[&names.topic, &names.dlq_topic],
        3,
    )
    .await
    .expect("topics");
    let ch = e2e::clickhouse(&names.database);
    let before = events(200, "before");
    let mut child = spawn();
    produce(before).await;
    e2e::wait_for_events(&ch, 200, WAIT).await;
    // A member of some standing (heartbeats, commits), killed; events posted while it is
    // dead; then the restart, well within its session timeout.
    tokio::time::sleep(Duration::from_secs(10)).await;
    child.kill();
    produce(events(300, "after")).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let mut child = spawn();

    // The stall shows first (the reproduction), then the recovery.
    let metrics = format!("http://127.0.0.1:{port}/metrics");
    let readyz = format!("http://127.0.0.1:{port}/readyz");
    let saw_not_ready = std::sync::atomic::AtomicBool::new(false);
    let stall = Duration::from_secs(240);
    e2e::eventually(stall, "the consumer to notice the stall and rejoin", || {
        let (metrics, readyz, saw) = (metrics.clone(), readyz.clone(), &saw_not_ready);
        async move {
            if let Ok(r) = reqwest::get(&readyz).await
                && r.status() == reqwest::StatusCode::SERVICE_UNAVAILABLE
            {
                saw.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            let text = reqwest::get(&metrics).await.ok()?.text().await.ok()?;
            (e2e::metric(&text, "consumer_group_rejoins_total")? >= 1.0).then_some(())
        }
    })
    .await;
    let (_, once) = e2e::wait_for_events(&ch, 500, stall).await;
    assert_eq!(once, 500, "every event once");
    // The gauges follow at the consumer's next look at its group (every 5 s).
    e2e::eventually(WAIT, "the group healthy again in /metrics", || {
        let metrics = metrics.clone();
        async move {
            let text = reqwest::get(&metrics).await.ok()?.text().await.ok()?;
            (e2e::metric(&text, "consumer_assigned_partitions")? >= 1.0
                && e2e::metric(&text, "consumer_group_stalled")? == 0.0)
                .then_some(())
        }
    })
    .await;
    e2e::eventually(WAIT, "/readyz 200 again", || async {
        let r = reqwest::get(&readyz).await.ok()?;
        r.status().is_success().then_some(())
    })
    .await;
    assert!(
        saw_not_ready.into_inner(),
        "/readyz never said 503 while the group was stalled"
    );
    child.kill();
    e2e::drop_database(&names.database).await;
}

/// A consumer that does not migrate (`CONSUMER_MIGRATE=false`, on Kubernetes) waits for
/// the migration Job: alive and unready, creating nothing, until the schema is current;
/// then it starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_that_does_not_migrate_waits_unready_for_the_schema() {
    let names = ConsumerNames::unique();
    let port = e2e::free_port();
    let config = e2e::consumer_config(
        &names,
        &[&format!("--listen=127.0.0.1:{port}"), "--migrate=false"],
    );
    let starting = tokio::spawn(e2e::start_consumer(config));
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    e2e::eventually(
        Duration::from_secs(20),
        "/healthz while waiting",
        || async {
            let r = http.get(format!("{base}/healthz")).send().await.ok()?;
            (r.status() == 200).then_some(())
        },
    )
    .await;
    let ready = http
        .get(format!("{base}/readyz"))
        .send()
        .await
        .expect("answers");
    assert_eq!(ready.status(), 503);
    assert!(ready.text().await.expect("body").contains("schema"));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let tables: u64 = e2e::clickhouse("default")
        .query("SELECT count() FROM system.tables WHERE database = ?")
        .bind(&names.database)
        .fetch_one()
        .await
        .expect("tables");
    assert_eq!(tables, 0, "the waiting consumer created something");
    assert!(!starting.is_finished(), "it started without the schema");

    // The migration Job runs: the consumer starts.
    let client = e2e::clickhouse(&names.database);
    schema::migrate(&client, &names.database)
        .await
        .expect("migrated");
    let consumer = tokio::time::timeout(Duration::from_secs(30), starting)
        .await
        .expect("started within 30 s of the migration")
        .expect("joined");
    e2e::eventually(Duration::from_secs(30), "/readyz once started", || async {
        let r = http.get(consumer.url("/readyz")).send().await.ok()?;
        (r.status() == 200).then_some(())
    })
    .await;
    consumer.stop().await.expect("clean stop");
}
