//! The `gatehouse-bench` binary (`gatehouse bench` runs it).

use clap::Parser as _;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    gatehouse::allocator::return_freed_memory_at_once();
    let args = gatehouse_bench::BenchArgs::parse();
    // The host logs every join round, as `gatehouse serve` does (GATEHOUSE_LOG quiets it): the
    // figures include that cost, as they did when the benchmark ran inside `gatehouse`.
    gatehouse::logging::init(gatehouse::cli::LogFormat::Text);
    match gatehouse_bench::run(args).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gatehouse-bench: {}", gatehouse::cli::report(&e));
            std::process::ExitCode::FAILURE
        }
    }
}
