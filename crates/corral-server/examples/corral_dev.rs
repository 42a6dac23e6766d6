//! TEMPORARY: the wiring corral-cli's main.rs gets, to try the commands by hand.
#[path = "../../corral-cli/src/client.rs"]
mod client;
#[path = "../../corral-cli/src/input.rs"]
#[allow(dead_code)]
mod input;
#[path = "../../corral-cli/src/quickstart.rs"]
mod quickstart;
#[path = "../../corral-cli/src/up.rs"]
mod up;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "corral")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the embedded cluster (store, scheduler, executor, HTTP API, /metrics) until Ctrl-C.
    Up(up::UpArgs),
    /// Start a throw-away cluster, run the distributed quickstart job, print its result.
    Quickstart(quickstart::QuickstartArgs),
    /// Submit TrainingJob or Kubeflow job files (`-` or none: stdin).
    Submit(client::SubmitArgs),
    /// List jobs.
    List(client::ListArgs),
    /// Show jobs (table, or the TrainingJob with -o yaml|json).
    Get(client::GetArgs),
    /// Conditions, replicas, events, and why a job waits.
    Describe(client::DescribeArgs),
    /// A replica's output (-f follows).
    Logs(client::LogsArgs),
    /// Delete jobs (replicas stop; logs are kept).
    Delete(client::JobArgs),
    /// Suspend jobs: replicas stop, the admission is given back.
    Suspend(client::JobArgs),
    /// Resume suspended jobs.
    Resume(client::JobArgs),
    /// Queues: usage per pool, pending and admitted jobs.
    Queues(client::ClusterViewArgs),
    /// Nodes: GPU inventory and who uses what.
    Nodes(client::ClusterViewArgs),
    /// CPU, memory and GPUs of every running replica.
    Top(client::TopArgs),
    #[command(hide = true)]
    Shim {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Up(a) => up::run_up(&a),
        Command::Quickstart(a) => quickstart::run_quickstart(&a),
        Command::Submit(a) => client::run_submit(&a),
        Command::List(a) => client::run_list(&a),
        Command::Get(a) => client::run_get(&a),
        Command::Describe(a) => client::run_describe(&a),
        Command::Logs(a) => client::run_logs(&a),
        Command::Delete(a) => client::run_delete(&a),
        Command::Suspend(a) => client::run_suspend(&a),
        Command::Resume(a) => client::run_resume(&a),
        Command::Queues(a) => client::run_queues(&a),
        Command::Nodes(a) => client::run_nodes(&a),
        Command::Top(a) => client::run_top(&a),
        Command::Shim { args } => {
            std::process::exit(corral_local::shim::run(args))
        }
    }
}
