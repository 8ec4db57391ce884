use clap::Parser;

/// mimalloc: glibc malloc showed up in the profiles, with its arena lock contended
/// between the runtime's threads (see docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    http_kit::telemetry::init_logging();
    let config = ingest::Config::parse();
    let app = ingest::Application::build(config).await?;
    tracing::info!(address = %app.local_addr(), "Ingest listening.");
    app.run_until(http_kit::ops::shutdown_signal()).await
}
