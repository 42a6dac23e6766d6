//! Runs `corral sim` without the corral binary: it compiles the CLI's `sim.rs` stand-alone.
//! `cargo run --release -p corral-sim --example sim -- --trace ../shared/traces/gavel/dev-seed1.trace`

#[path = "../../corral-cli/src/sim.rs"]
mod sim;

use clap::Parser;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: sim::SimArgs,
}

fn main() -> std::process::ExitCode {
    match sim::run(Cli::parse().args) {
        Ok(out) => {
            print!("{out}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
