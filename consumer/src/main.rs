use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    common::telemetry::init_logging();
    let config = consumer::Config::parse();
    let app = consumer::Application::build(config).await?;
    tracing::info!(address = %app.local_addr(), "Consumer started.");
    app.run_until(common::http::shutdown_signal()).await
}
