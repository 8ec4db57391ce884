use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    http_kit::telemetry::init_logging();
    let config = tools::gate::GateConfig::parse();
    let app = tools::gate::Application::build(config).await?;
    tracing::info!(address = %app.local_addr(), "Analytics gate listening.");
    app.run_until(http_kit::ops::shutdown_signal()).await;
    Ok(())
}
