//! `corral-operator`: Corral as a Kubernetes operator (see `corral_kube::operator`).
//! A binary of its own so that `corral up` does not map the operator's code (the
//! Kubernetes client, the webhook's TLS stack): the embedded server's resident memory is
//! mostly the pages of its program it touches. `corral operator ARGS` runs this program.

use std::process::ExitCode;

use clap::Parser;

#[derive(Parser)]
#[command(
    name = "corral-operator",
    version,
    about = "Run Corral as a Kubernetes operator (CRDs, pods bound by Corral's scheduler, status, events)"
)]
struct Cli {
    #[command(flatten)]
    operator: corral_kube::OperatorArgs,
}

fn main() -> ExitCode {
    // `corral operator ARGS` runs `corral-operator operator ARGS`: the word is skipped so
    // that Deployments written for `corral operator` work with either program.
    let args = std::env::args_os()
        .enumerate()
        .filter(|(i, a)| !(*i == 1 && a == "operator"))
        .map(|(_, a)| a);
    let cli = Cli::parse_from(args);
    match corral_kube::run_operator(cli.operator) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("operator: {e}");
            ExitCode::FAILURE
        }
    }
}
