use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    common::telemetry::init_logging();
    let config = consumer::ReplayConfig::parse();
    let replayed = consumer::replay(&config).await?;
    tracing::info!(replayed, from = %config.dlq_topic, to = %config.kafka.topic, "Dead letters replayed.");
    Ok(())
}
