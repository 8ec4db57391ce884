use clap::Parser;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let config = tools::erase::EraseConfig::parse();
    let subject = match tools::erase::Subject::parse(&config) {
        Ok(subject) => subject,
        Err(refused) => {
            eprintln!("error: {refused}");
            return std::process::ExitCode::from(2);
        }
    };
    match tools::erase::erase(&config, &subject).await {
        Ok(erased) => {
            print!("{}", erased.report(&subject));
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
