//! The analysts' gate (`analytics-gate`) in front of a real 18.16 server, attacked as the
//! analysts of the review did: the query shapes that 18.x exempts from its own caps, a
//! flood past the caps, functions that reach other databases, and queries that time out
//! or are abandoned to dodge the hourly time quota. Meanwhile the consumer's inserts and
//! the operator's queries go through, and the figures of both are printed.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use clap::Parser;
use tools::gate::{Application, GateConfig};

use super::{grant, migrate, query};

/// Grants made with the gate's default source address, as operators make them.
const GATED: &[&str] = &["--network", tools::gate::SOURCE_ADDRESS];

/// A gate in front of `url` with `args`, serving until the test ends.
async fn gate(url: &str, args: &[&str]) -> SocketAddr {
    let mut argv = vec![
        "analytics-gate".to_owned(),
        "--listen=127.0.0.1:0".to_owned(),
        format!("--clickhouse-url={url}"),
    ];
    argv.extend(args.iter().map(|a| (*a).to_owned()));
    let app = Application::build(GateConfig::parse_from(argv))
        .await
        .expect("the gate starts");
    let address = app.local_addr();
    tokio::spawn(app.run_until(std::future::pending()));
    address
}

/// A query through the gate: its status and body.
async fn through(gate: SocketAddr, user: &str, password: &str, sql: &str) -> (u16, String) {
    let response = reqwest::Client::new()
        .post(format!("http://{gate}/"))
        .basic_auth(user, Some(password))
        .timeout(Duration::from_secs(60))
        .body(sql.to_owned())
        .send()
        .await
        .expect("the gate answers");
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}

/// A server with the schema and a consumer's user; its URL and the consumer's password.
async fn server(dir: &std::path::Path) -> (e2e::ScriptedClickHouse, String, String) {
    let root = dir.join("clickhouse");
    let secret = dir.join("secrets/clickhouse-consumer");
    stack_kit::clickhouse::service_user(&root, "consumer", &secret).expect("the user made");
    let (http, tcp) = (e2e::free_port(), e2e::free_port());
    let server = e2e::ScriptedClickHouse::start(&root, http, tcp);
    let url = format!("http://127.0.0.1:{http}");
    migrate(&url).await;
    let password = std::fs::read_to_string(&secret).expect("the consumer's password");
    (server, url, password)
}

/// An insert as the consumer makes one: 2,000 events. Its time, or why it failed.
async fn insert(url: &str, password: &str) -> Result<Duration, String> {
    let sql = "INSERT INTO analytics.events (event_id, received_at, public_key, event_name, \
               experiment_id, variant_id, session_id, visitor_id) SELECT generateUUIDv4(), \
               now(), 'pk_a', 'impression', 'exp_a', 'var_a', toString(number), \
               concat('v', toString(rand() % 100000)) FROM numbers(2000)";
    let started = Instant::now();
    query(url, "consumer", password, sql).await?;
    Ok(started.elapsed())
}

/// Inserts every 200 ms for `length`; their times, and the failures.
async fn inserts_for(url: &str, password: &str, length: Duration) -> (Vec<Duration>, Vec<String>) {
    let (mut times, mut failed) = (Vec::new(), Vec::new());
    let end = Instant::now() + length;
    while Instant::now() < end {
        match insert(url, password).await {
            Ok(time) => times.push(time),
            Err(e) => failed.push(e),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    times.sort_unstable();
    (times, failed)
}

fn figures(times: &[Duration]) -> String {
    let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize].as_millis();
    format!(
        "{} inserts, median {} ms, p90 {} ms, max {} ms",
        times.len(),
        at(0.5),
        at(0.9),
        at(1.0)
    )
}

/// The most analysts' queries the server ran at once while `work` ran.
async fn most_running<T>(url: &str, work: impl Future<Output = T>) -> (usize, T) {
    let sample = "SELECT count() FROM system.processes WHERE user IN ('alice', 'bob')";
    let most = std::sync::atomic::AtomicUsize::new(0);
    let watch = async {
        loop {
            if let Ok(n) = query(url, "default", "", sample).await {
                most.fetch_max(n.parse().unwrap_or(0), std::sync::atomic::Ordering::Relaxed);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let result = tokio::select! {
        result = work => result,
        () = watch => unreachable!("the watch never ends"),
    };
    (most.into_inner(), result)
}

#[tokio::test]
async fn no_analyst_query_shape_takes_the_server_from_the_consumer_or_the_operators() {
    let dir = tempfile::tempdir().expect("temporary folder");
    let (_server, url, consumer) = server(dir.path()).await;
    let users = dir.path().join("clickhouse/users.d");
    let password = "long enough!";
    for user in ["alice", "bob"] {
        let mut args = GATED.to_vec();
        args.extend(["--max-concurrent-queries", "4"]);
        grant(&url, &users, user, password, &["pk_a"], &args).await;
    }
    let gate = gate(
        &url,
        &["--max-concurrent=3", "--max-concurrent-per-analyst=2"],
    )
    .await;

    // Past the gate there is no way in: not as the analyst from elsewhere, not as the
    // operators' passwordless `default` through it or from its address.
    let direct = query(&url, "alice", password, "SELECT 1").await;
    assert!(
        direct
            .as_ref()
            .is_err_and(|e| e.contains("not allowed to connect")),
        "{direct:?}"
    );
    assert_eq!(through(gate, "default", "", "SELECT 1").await.0, 403);
    let from_gate = reqwest::Client::builder()
        .local_address(tools::gate::SOURCE_ADDRESS.parse::<std::net::IpAddr>().ok())
        .build()
        .expect("a client")
        .post(&url)
        .body("SELECT 1")
        .send()
        .await
        .expect("answered");
    assert!(
        !from_gate.status().is_success(),
        "default from the gate's address"
    );
    assert_eq!(
        through(gate, "alice", password, "SELECT 1").await,
        (200, "1\n".into())
    );

    // The baseline: the consumer alone.
    let (quiet, failed) = inserts_for(&url, &consumer, Duration::from_secs(8)).await;
    assert!(failed.is_empty(), "{failed:?}");

    // 110 queries that 18.x lets past every cap of its own, and 110 that sleep, from both
    // analysts at once, while the consumer inserts and the operator asks.
    let exempt = "SELECT 0 FROM system.processes UNION ALL SELECT sleep(3)";
    let flood = async {
        let shots = (0..220).map(|i| {
            let (user, sql) = match i % 4 {
                0 => ("alice", exempt),
                1 => ("bob", exempt),
                2 => ("alice", "SELECT sleep(3)"),
                _ => ("bob", "SELECT sleep(3)"),
            };
            through(gate, user, password, sql)
        });
        futures::future::join_all(shots).await
    };
    let (most, (answers, (busy_times, busy_failed), operator)) = most_running(&url, async {
        tokio::join!(
            flood,
            inserts_for(&url, &consumer, Duration::from_secs(8)),
            query(&url, "default", "", "SELECT 1")
        )
    })
    .await;
    assert_eq!(operator, Ok("1".to_owned()));
    assert!(busy_failed.is_empty(), "inserts failed: {busy_failed:?}");
    assert!(
        most <= 3,
        "{most} analysts' queries ran at once past the gate's 3"
    );
    let count = |status: u16| answers.iter().filter(|(s, _)| *s == status).count();
    assert_eq!(count(403), 110, "every exempt shape refused by name");
    assert_eq!(count(200) + count(429), 110, "{answers:?}");
    assert!((1..=3).contains(&count(200)), "{answers:?}");
    assert!(
        answers
            .iter()
            .filter(|(s, _)| *s == 429)
            .all(|(_, body)| body.contains("\"too_many_queries\"")),
        "{answers:?}"
    );

    // Then CPU-heavy queries at every place the gate has, for the whole measure.
    let heavy = "SELECT count() FROM system.numbers WHERE sipHash64(number) % 1000 = 1";
    let (heavy_times, heavy_failed) = tokio::select! {
        measured = inserts_for(&url, &consumer, Duration::from_secs(12)) => measured,
        _ = async {
            let place = |user| async move {
                loop {
                    through(gate, user, password, heavy).await;
                }
            };
            tokio::join!(place("alice"), place("alice"), place("bob"))
        } => unreachable!("the analysts never stop"),
    };
    assert!(heavy_failed.is_empty(), "{heavy_failed:?}");
    // The server waits for running queries when it stops: end the analysts' now.
    let kill = "KILL QUERY WHERE user IN ('alice', 'bob') SYNC";
    query(&url, "default", "", kill).await.expect("killed");
    println!("insert latency, consumer alone: {}", figures(&quiet));
    println!(
        "  beside the gate's 220-query flood: {}",
        figures(&busy_times)
    );
    println!(
        "  beside 3 CPU-heavy analysts' queries: {}",
        figures(&heavy_times)
    );
}

#[tokio::test]
async fn the_gate_refuses_what_leaves_the_copy_and_charges_every_query() {
    let dir = tempfile::tempdir().expect("temporary folder");
    let (_server, url, _) = server(dir.path()).await;
    let users = dir.path().join("clickhouse/users.d");
    let password = "long enough!";
    let caps = ["--max-execution-secs", "30"];
    for user in ["alice", "bob"] {
        let args: Vec<&str> = GATED.iter().chain(&caps).copied().collect();
        grant(&url, &users, user, password, &["pk_a"], &args).await;
    }
    // carol queries the server directly: what the server itself lets through.
    grant(&url, &users, "carol", password, &["pk_a"], &caps).await;
    let gate = gate(
        &url,
        &[
            "--max-query-secs=2",
            "--execution-secs-per-hour=2",
            "--body-read-secs=1",
        ],
    )
    .await;

    let probe = "SELECT `hasColumn\\x49nTable`('analytics', 'events', 'visitor_id')";
    assert_eq!(
        query(&url, "carol", password, probe).await,
        Ok("1".to_owned()),
        "the server answers an analyst about another database"
    );
    for sql in [
        probe,
        "SELECT hasColumnInTable('analytics', 'events', 'visitor_id')",
        "SELECT query FROM `system`.processes",
        "SHOW PROCESSLIST",
        "SELECT value FROM system.events WHERE event = 'InsertedRows'",
    ] {
        let (status, body) = through(gate, "alice", password, sql).await;
        assert_eq!(status, 403, "{sql}: {body}");
        assert!(body.contains("\"name_refused\""), "{body}");
    }
    let (status, tables) = through(
        gate,
        "alice",
        password,
        "SELECT DISTINCT database FROM system.tables WHERE database != 'system'",
    )
    .await;
    assert_eq!((status, tables.as_str()), (200, "analyst_alice\n"));

    // A query that would run for 30 s is stopped at the gate's 2 s, on the server too,
    // and its time is charged: the hour's 2 s are spent.
    let endless = "SELECT count() FROM system.numbers WHERE sipHash64(number) = 0";
    let started = Instant::now();
    let (status, body) = through(gate, "alice", password, endless).await;
    assert_eq!(status, 504, "{body}");
    assert!(started.elapsed() < Duration::from_secs(10));
    spent(gate, "alice", password).await;

    // A body that never comes is answered 408 at the gate's 1 s.
    let mut slow = tokio::net::TcpStream::connect(gate)
        .await
        .expect("connects");
    let head = "POST / HTTP/1.1\r\nHost: gate\r\nContent-Length: 100\r\n\r\nSELECT";
    tokio::io::AsyncWriteExt::write_all(&mut slow, head.as_bytes())
        .await
        .expect("sent");
    let mut answer = vec![0; 512];
    let read = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::io::AsyncReadExt::read(&mut slow, &mut answer),
    )
    .await
    .expect("answered within 5 s")
    .expect("read");
    let answer = String::from_utf8_lossy(&answer[..read]);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("\"body_too_slow\""), "{answer}");

    // Someone who sends bob's name with a wrong password, or a name nobody has: the gate
    // reads the server's answer as a refused login, which it does not charge.
    for (user, pass) in [("bob", "not bob's password"), ("nobody", password)] {
        let answer = reqwest::Client::new()
            .post(format!("http://{gate}/"))
            .basic_auth(user, Some(pass))
            .body("SELECT 1")
            .send()
            .await
            .expect("answered");
        let status = answer.status();
        let body = answer.bytes().await.expect("a body");
        assert!(
            tools::gate::login_refused(status, &body),
            "{user}: {status} {}",
            String::from_utf8_lossy(&body)
        );
    }

    // Clients that give up before the gate's cap: their queries are stopped, and charged
    // all the same (two of 1.2 s spend the 2 s).
    for _ in 0..2 {
        let abandoned = reqwest::Client::new()
            .post(format!("http://{gate}/"))
            .basic_auth("bob", Some(password))
            .timeout(Duration::from_millis(1200))
            .body(endless)
            .send()
            .await;
        assert!(abandoned.is_err(), "the client gave up");
    }
    let running = "SELECT count() FROM system.processes WHERE user IN ('alice', 'bob')";
    // Well within the server's own 30 s cap: the gate's KILL QUERY ended them.
    let deadline = Instant::now() + Duration::from_secs(10);
    while query(&url, "default", "", running).await != Ok("0".to_owned()) {
        assert!(
            Instant::now() < deadline,
            "the server still runs the stopped queries"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    spent(gate, "bob", password).await;
}

/// Waits (10 s at most) until the gate refuses `user` for their spent hour: a stopped
/// query is charged when the server has ended it. Queries of a few milliseconds never
/// spend the 2 s.
async fn spent(gate: SocketAddr, user: &str, password: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, body) = through(gate, user, password, "SELECT 1").await;
        if status == 429 {
            assert!(body.contains("\"quota_spent\""), "{body}");
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{user}'s stopped query was not charged"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
