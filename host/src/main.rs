//! The `gatehouse` binary.

use clap::Parser as _;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("GATEHOUSE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    match gatehouse::cli::run(gatehouse::cli::Cli::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) if e.downcast_ref::<gatehouse::cli::NotConfirmed>().is_some() => {
            eprintln!("gatehouse: {e}");
            std::process::ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("gatehouse: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
