use clap::Parser;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let config = tools::access::AccessConfig::parse();
    if let Err(refused) = tools::access::check(&config.command) {
        eprintln!("error: {refused}");
        return std::process::ExitCode::from(2);
    }
    match tools::access::run(&config).await {
        Ok(report) => {
            print!("{report}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
