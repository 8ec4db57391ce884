//! Slow and idle clients cannot take a service from the others: connections that send no
//! request head are closed after the header timeout (so idle ones cannot hold every slot
//! of the connection limit), a body trickled in byte by byte is cut off with a 408, and the
//! rest of an oversized body, which the ingest reads and throws away before its 413 (so
//! that the answer is not lost to a reset connection), is read only so far and so long.

use std::time::Duration;

use e2e::SnapshotFile;
use reqwest::StatusCode;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const LIMITS: [&str; 2] = ["--max-connections=20", "--header-read-timeout-ms=1000"];

fn snapshot() -> SnapshotFile {
    e2e::one_experiment_snapshot("pk_slow")
}

/// Opens `n` connections that never send a byte, then checks that a real client is
/// served anyway and that the idle connections were closed.
async fn idle_connections_do_not_starve(addr: std::net::SocketAddr, n: usize) {
    let mut idle = Vec::new();
    for _ in 0..n {
        idle.push(TcpStream::connect(addr).await.expect("connects"));
    }
    let healthz = format!("http://{addr}/healthz");
    let status = tokio::time::timeout(Duration::from_secs(20), async {
        reqwest::get(&healthz).await.expect("answer").status()
    })
    .await
    .expect("served while idle connections filled the limit");
    assert_eq!(status, StatusCode::OK);
    let mut buffer = [0u8; 16];
    let read = tokio::time::timeout(Duration::from_secs(10), idle[0].read(&mut buffer))
        .await
        .expect("the idle connection was closed");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_beyond_the_limit_do_not_stop_others_being_served() {
    let file = snapshot();
    let topic = e2e::unique("idle-");
    let ingest = e2e::start_ingest(e2e::ingest_config(&file.path, &topic, &LIMITS)).await;
    idle_connections_do_not_starve(ingest.addr, 60).await;
    ingest.stop().await.expect("clean stop");

    let mut args = vec![
        "config-api".to_owned(),
        "--listen=127.0.0.1:0".into(),
        format!("--snapshot={}", file.path.display()),
    ];
    args.extend(LIMITS.iter().map(|s| s.to_string()));
    let config_api =
        e2e::start_config_api_with(<config_api::Config as clap::Parser>::parse_from(args)).await;
    idle_connections_do_not_starve(config_api.addr, 60).await;
    config_api.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_trickled_byte_by_byte_is_cut_off_while_others_are_served() {
    let file = snapshot();
    let topic = e2e::unique("trickle-");
    let ingest = e2e::start_ingest(e2e::ingest_config(
        &file.path,
        &topic,
        &["--body-read-timeout-ms=1500"],
    ))
    .await;
    let mut slow = TcpStream::connect(ingest.addr).await.expect("connects");
    slow.write_all(
        b"POST /api/v1/analytics HTTP/1.1\r\nHost: x\r\nX-public-key: pk_slow\r\n\
          Content-Type: application/json\r\nContent-Length: 200\r\n\r\n{",
    )
    .await
    .expect("head sent");
    let trickle = tokio::spawn(async move {
        let mut answer = Vec::new();
        for _ in 0..30 {
            if slow.write_all(b" ").await.is_err() {
                break;
            }
            let mut buffer = [0u8; 512];
            match tokio::time::timeout(Duration::from_millis(500), slow.read(&mut buffer)).await {
                Ok(Ok(0)) | Ok(Err(_)) => break,
                Ok(Ok(n)) => {
                    answer.extend_from_slice(&buffer[..n]);
                    break;
                }
                Err(_) => {}
            }
        }
        String::from_utf8_lossy(&answer).into_owned()
    });
    // Meanwhile an ordinary client is served.
    let response = reqwest::Client::new()
        .post(ingest.url("/api/v1/analytics"))
        .header("X-public-key", "pk_slow")
        .json(&json!({ "events": [{ "eventName": "click", "experimentId": "exp_1", "sessionId": "s" }] }))
        .send()
        .await
        .expect("answer");
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let answer = trickle.await.expect("trickle task");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer:?}");
    assert!(answer.contains("\"request_timeout\""), "{answer:?}");
    ingest.stop().await.expect("clean stop");
}

/// The head of a request to the ingest, its body still to come.
fn head(extra: &str) -> Vec<u8> {
    format!(
        "POST /api/v1/analytics HTTP/1.1\r\nHost: x\r\nX-public-key: pk_slow\r\n\
         Content-Type: application/json\r\n{extra}\r\n"
    )
    .into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_oversized_body_is_read_only_so_far_and_so_long() {
    const MIB: u64 = 1024 * 1024;
    let file = snapshot();
    let topic = e2e::unique("endless-");
    let ingest = e2e::start_ingest(e2e::ingest_config(
        &file.path,
        &topic,
        &["--body-read-timeout-ms=1500"],
    ))
    .await;

    // As fast as it goes: the ingest stops reading after its 1 MiB and 16 MiB more.
    let mut fast = TcpStream::connect(ingest.addr).await.expect("connects");
    fast.write_all(&head("Transfer-Encoding: chunked\r\n"))
        .await
        .expect("head sent");
    let chunk = [
        format!("{:x}\r\n", 64 * 1024).as_bytes(),
        &[b' '; 64 * 1024],
        b"\r\n",
    ]
    .concat();
    let mut sent = 0u64;
    while sent < 64 * MIB {
        let write = tokio::time::timeout(Duration::from_secs(3), fast.write_all(&chunk)).await;
        if !matches!(write, Ok(Ok(()))) {
            break;
        }
        sent += 64 * 1024;
    }
    // What the ingest read, and what the two sockets' buffers held (a few MiB each way
    // with loopback autotuning; an ingest reading on would take all 64).
    eprintln!("{} MiB sent before the ingest stopped reading", sent / MIB);
    assert!(
        (17 * MIB..48 * MIB).contains(&sent),
        "{} MiB sent before the ingest stopped reading",
        sent / MIB
    );

    // Slowly: the ingest stops reading at the body's deadline, answers 413 and closes the
    // connection (the answer may be lost to the reset: a body beyond the bounds).
    let mut slow = TcpStream::connect(ingest.addr).await.expect("connects");
    let started = tokio::time::Instant::now();
    slow.write_all(&head("Content-Length: 8000000\r\n"))
        .await
        .expect("head sent");
    slow.write_all(&vec![b' '; 1_100_000]).await.expect("sent");
    let mut answer = Vec::new();
    while started.elapsed() < Duration::from_secs(10) {
        let wrote = slow.write_all(&[b' '; 1024]).await.is_ok();
        let mut buffer = [0u8; 512];
        match tokio::time::timeout(Duration::from_millis(100), slow.read(&mut buffer)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => {
                answer.extend_from_slice(&buffer[..n]);
                break;
            }
            Err(_) if !wrote => break,
            Err(_) => {}
        }
    }
    let elapsed = started.elapsed();
    let answer = String::from_utf8_lossy(&answer);
    eprintln!("a slow oversized body ended after {elapsed:?}: {answer:?}");
    assert!(
        elapsed > Duration::from_millis(1400) && elapsed < Duration::from_secs(5),
        "the connection ended after {elapsed:?}"
    );
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 413"),
        "{answer:?}"
    );

    // A client that waits for 100 Continue is answered at once and sends nothing.
    let mut polite = TcpStream::connect(ingest.addr).await.expect("connects");
    polite
        .write_all(&head("Content-Length: 8000000\r\nExpect: 100-continue\r\n"))
        .await
        .expect("head sent");
    let mut buffer = [0u8; 512];
    let n = tokio::time::timeout(Duration::from_secs(5), polite.read(&mut buffer))
        .await
        .expect("answered")
        .expect("read");
    let answer = String::from_utf8_lossy(&buffer[..n]);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer:?}");
    ingest.stop().await.expect("clean stop");
}
