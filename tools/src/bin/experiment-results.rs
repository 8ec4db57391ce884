use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = tools::results::ResultsConfig::parse();
    print!("{}", tools::results::run(&config).await?);
    Ok(())
}
