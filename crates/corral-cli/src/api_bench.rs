//! `corral bench api`: its arguments, and the report of
//! [`corral_server::api_bench::api_bench`] printed as JSON.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use crate::remote::Output;
use crate::remote::print::{fail, print_structured};

#[derive(Args, Debug)]
pub struct BenchApiArgs {
    /// Jobs for each submit -> all replicas running measurement. 50: the p50 of 20 moved by
    /// up to 20% between two runs of the idle server on a 2-core VM.
    #[arg(long, default_value_t = 50)]
    pub startup_jobs: usize,
    /// Jobs on each server in the alternating measurement (with history, idle alongside)
    /// whose p50s make the history ratio. 150: with 50, the ratio moved by +-15% between
    /// runs, as wide as the spread of one start (3-11 ms on a 2-core VM).
    #[arg(long, default_value_t = 150)]
    pub ratio_pairs: usize,
    /// Replicas per startup job.
    #[arg(long, default_value_t = 8)]
    pub startup_replicas: u32,
    /// Skip the 500-job throughput measurement.
    #[arg(long)]
    pub no_throughput: bool,
    /// Target submissions per second.
    #[arg(long, default_value_t = 6000)]
    pub rate: u64,
    /// Seconds to sustain the rate.
    #[arg(long, default_value_t = 5)]
    pub seconds: u64,
    /// Client threads.
    #[arg(long, default_value_t = 8)]
    pub clients: usize,
    /// Jobs of the namespace whose `list` is timed.
    #[arg(long, default_value_t = 10_000)]
    pub list_jobs: usize,
    /// Finished one-replica jobs run and kept before the second startup measurement and
    /// the memory with history.
    #[arg(long, default_value_t = 20_000)]
    pub history_jobs: usize,
}

/// `corral bench api`: prints JSON.
pub fn run_bench_api(args: &BenchApiArgs) -> ExitCode {
    let program = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            return fail(&format!(
                "cannot find this program to start the server: {e}"
            ));
        }
    };
    let options = corral_server::api_bench::ApiBenchOptions {
        server_program: program,
        startup_jobs: args.startup_jobs,
        ratio_pairs: args.ratio_pairs.max(1),
        startup_replicas: args.startup_replicas.max(1),
        throughput: !args.no_throughput,
        rate: args.rate.max(1),
        duration: Duration::from_secs(args.seconds.max(1)),
        clients: args.clients.max(1),
        list_jobs: args.list_jobs,
        history_jobs: args.history_jobs,
    };
    match corral_server::api_bench::api_bench(&options) {
        Ok(v) => print_structured(&v, Output::Json),
        Err(e) => fail(&e),
    }
}
