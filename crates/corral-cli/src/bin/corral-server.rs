//! `corral-server`: the embedded cluster's server (`corral up`). A program of its own so that
//! the server does not map the code of the CLI's other verbs (the simulator, the benches, the
//! Kubernetes manifests, the client): its resident memory is mostly the pages of its program
//! it touches. `corral up ARGS` runs this program in its own place when it is installed beside.

use std::process::ExitCode;

use clap::Parser;

#[derive(Parser)]
#[command(
    name = "corral-server",
    version,
    about = "Run the embedded cluster (store, scheduler, executor, HTTP API, /metrics) until Ctrl-C"
)]
struct Cli {
    #[command(flatten)]
    up: corral_cli::up::UpArgs,
}

fn main() -> ExitCode {
    // `corral-server rsh HOST COMMAND...`: the MPI launcher's rsh agent. The cluster names
    // its own program as the agent (`OMPI_MCA_plm_rsh_agent`), and under `corral up` that
    // program is this one.
    let mut args = std::env::args_os().skip(1);
    if args.next().is_some_and(|a| a == "rsh") {
        std::process::exit(corral_cli::remote::run_rsh(args));
    }
    // A leading `up` is skipped, so that `corral-server up ARGS` works as `corral up ARGS`.
    let args = std::env::args_os()
        .enumerate()
        .filter(|(i, a)| !(*i == 1 && a == "up"))
        .map(|(_, a)| a);
    corral_cli::up::run_up(&Cli::parse_from(args).up)
}
