//! The ingest's stack without the ingest's work, for `scripts/bench`'s decomposition of
//! the ingest's CPU per event (docs/benchmarks.md, "The ingest's floor"): the same HTTP server
//! (`http_kit`'s serving loop, axum, hyper, tokio, mimalloc) answering
//! `POST /api/v1/analytics` with a fixed 202 once it has read the body; with
//! `KAFKA_BROKERS` set, after publishing five fixed messages (an enriched event of the
//! usual size, keyed by bytes of the body so that requests spread over the partitions)
//! through the ingest's own Kafka sink and waiting for their acknowledgements, as the
//! ingest does. No parsing, validation or serialization: what the ingest costs beyond
//! this is its own work.
//!
//!   STACK_LISTEN=127.0.0.1:8383 [KAFKA_BROKERS=127.0.0.1:9092 [STACK_TOPIC=analytics-events]] \
//!     cargo run --profile dist -p ingest --example stack_floor

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::post;
use ingest::sink::kafka::KafkaSink;
use ingest::sink::{EventSink, Message};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// An event as the ingest writes it to Kafka (480 bytes: the wrk batches' average).
const PAYLOAD: &[u8] = br#"{"v":1,"event_id":"0190b0a4-7f6e-7a3b-9c1d-2e3f4a5b6c7d","received_at":1764100000000,"public_key":"pk_live_demo","user_agent":"Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36","event_name":"impression","experiment_id":"exp_pricing_annual","session_id":"wrk-00000001-3248c9dab0f4d125","variant_id":"var_pricing_annual","visitor_id":"wrk-00000001-3248c9dab0f4d125","phase":1,"pathname":"/checkout","referrer":"https://www.example.com/"}"#;

const ANSWER: &str = r#"{"accepted":5,"rejected":[]}"#;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let listen = std::env::var("STACK_LISTEN")
        .unwrap_or_else(|_| "127.0.0.1:8383".into())
        .parse()
        .context("STACK_LISTEN is host:port")?;
    let sink = match std::env::var("KAFKA_BROKERS") {
        Ok(brokers) => {
            let config = kafka_kit::client::KafkaArgs::for_brokers(&brokers)
                .events_producer_config(5, 30_000, 100_000);
            let topic = std::env::var("STACK_TOPIC")
                .unwrap_or_else(|_| kafka_kit::client::EVENTS_TOPIC.to_owned());
            Some(Arc::new(KafkaSink::new(
                config,
                topic,
                Duration::from_secs(30),
            )?))
        }
        Err(_) => None,
    };
    let router = Router::new()
        .route("/api/v1/analytics", post(answer))
        .with_state(sink);
    let http = http_kit::serve::Http::bind(
        listen,
        http_kit::serve::ServeArgs {
            max_connections: 10_000,
            header_read_timeout_ms: 10_000,
            workers: 0,
        },
    )
    .await?;
    http.serve(router, http_kit::ops::shutdown_signal()).await;
    Ok(())
}

async fn answer(State(sink): State<Option<Arc<KafkaSink>>>, body: Bytes) -> impl IntoResponse {
    if let Some(sink) = sink {
        // Bytes 20 to 60 of a wrk batch hold its first event's id.
        let key = &body[body.len().min(20)..body.len().min(60)];
        let messages = [Message {
            key,
            payload: PAYLOAD,
        }; 5];
        if sink.publish(&messages).await.is_err() {
            return (StatusCode::SERVICE_UNAVAILABLE, "{}").into_response();
        }
    }
    (
        StatusCode::ACCEPTED,
        [(header::CONTENT_TYPE, "application/json")],
        ANSWER,
    )
        .into_response()
}
