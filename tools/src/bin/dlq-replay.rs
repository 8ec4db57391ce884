use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    http_kit::telemetry::init_logging();
    let config = tools::ReplayConfig::parse();
    let replayed = tools::replay(&config).await?;
    tracing::info!(replayed, from = %config.dlq_topic, to = %config.kafka.topic, "Dead letters replayed.");
    Ok(())
}
