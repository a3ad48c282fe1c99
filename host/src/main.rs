//! The `gatehouse` binary.

use clap::Parser as _;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    gatehouse::allocator::return_freed_memory_at_once();
    let cli = gatehouse::cli::Cli::parse();
    gatehouse::logging::init(cli.log_format());
    match gatehouse::cli::run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) if e.downcast_ref::<gatehouse::cli::NotConfirmed>().is_some() => {
            eprintln!("gatehouse: {e}");
            std::process::ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("gatehouse: {}", gatehouse::cli::report(&e));
            std::process::ExitCode::FAILURE
        }
    }
}
