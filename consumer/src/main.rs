use clap::Parser;

/// mimalloc: glibc malloc showed up in the profiles, with its arena lock contended
/// between the runtime's threads (see docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = consumer::Config::parse();
    if let Some(profile) = config.profile.filter(|_| config.print_schema) {
        print!("{}", profile.render());
        return Ok(());
    }
    http_kit::telemetry::init_logging();
    if config.migrate_only {
        consumer::Application::migrate(&config).await?;
        tracing::info!("Schema migrated.");
        return Ok(());
    }
    if config.refresh_metrics_only {
        let topology = consumer::Application::migrate(&config).await?;
        let database = &config.clickhouse.clickhouse_database;
        let per_statement = config.metrics_visitors_per_statement;
        let visitors = consumer::refresh::sweep_once(topology, database, per_statement).await?;
        tracing::info!(visitors, "Metric values stored.");
        return Ok(());
    }
    let app = consumer::Application::build(config).await?;
    tracing::info!(address = %app.local_addr(), "Consumer started.");
    app.run_until(http_kit::ops::shutdown_signal()).await
}
