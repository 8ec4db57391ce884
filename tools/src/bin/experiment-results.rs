use clap::{CommandFactory, FromArgMatches, Parser};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // `experiment-results plan ...` sizes a test before it starts (an experiment named
    // "plan" is read with `experiment-results -- plan`).
    if std::env::args_os().nth(1).is_some_and(|a| a == "plan") {
        let args = std::env::args_os().skip(2);
        let config = tools::plan::PlanConfig::parse_from(
            std::iter::once("experiment-results plan".into()).chain(args),
        );
        match tools::plan::run(&config) {
            Ok(plan) => print!("{plan}"),
            Err(e) => {
                eprintln!("experiment-results plan: {e:#}");
                std::process::exit(2);
            }
        }
        return Ok(());
    }
    let command = tools::results::ResultsConfig::command().after_help(
        "Before a test starts: experiment-results plan --help (the visitors it needs).",
    );
    let config = tools::results::ResultsConfig::from_arg_matches(&command.get_matches())?;
    let reports = tools::results::reports(&config).await?;
    if let Some(path) = &config.html {
        let client = config.clickhouse.client();
        tools::report::write(&client, &config.experiment, &reports, path).await?;
    }
    print!("{}", tools::results::text(&config, &reports)?);
    Ok(())
}
