//! The `gatehouse` binary.

use clap::Parser as _;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    gatehouse::logging::init();
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
