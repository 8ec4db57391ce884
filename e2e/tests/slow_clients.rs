//! Slow and idle clients cannot take a service from the others: connections that send no
//! request head are closed after the header timeout (so idle ones cannot hold every slot
//! of the connection limit), and a body trickled in byte by byte is cut off with a 408.

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
