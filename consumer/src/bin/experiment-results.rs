use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = consumer::results::ResultsConfig::parse();
    print!("{}", consumer::results::run(&config).await?);
    Ok(())
}
