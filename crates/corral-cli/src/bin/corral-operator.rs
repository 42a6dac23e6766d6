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
    // A leading `operator` is skipped, so that a Deployment's `args: [operator, ...]`,
    // written for `corral`, also works where the image's entrypoint is corral-operator
    // (`corral operator ARGS` itself passes ARGS without it).
    let args = std::env::args_os()
        .enumerate()
        .filter(|(i, a)| !(*i == 1 && a == "operator"))
        .map(|(_, a)| a);
    let cli = Cli::parse_from(args);
    // Before the runtime's threads: each pass allocates its world and plane anew.
    corral_cli::programs::limit_malloc_arenas();
    match corral_kube::run_operator(cli.operator) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("operator: {e}");
            ExitCode::FAILURE
        }
    }
}
