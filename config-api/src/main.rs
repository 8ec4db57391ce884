use clap::Parser;

/// mimalloc: glibc malloc showed up in the profiles, with its arena lock contended
/// between the runtime's threads (see docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    http_kit::telemetry::init_logging();
    let config = config_api::Config::parse();
    let app = config_api::Application::build(config).await?;
    tracing::info!(address = %app.local_addr(), "Config-api listening.");
    app.run_until(http_kit::ops::shutdown_signal()).await
}
