use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    common::telemetry::init_logging();
    let config = config_api::Config::parse();
    let app = config_api::Application::build(config).await?;
    tracing::info!(address = %app.local_addr(), "Config-api listening.");
    app.run_until(common::http::shutdown_signal()).await
}
