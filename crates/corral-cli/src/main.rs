//! `corral`: the command-line entry point. Only the arguments and which subcommand runs
//! live here; the subcommands are in the `corral_cli` library (so that tests call them).

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use corral_cli::output::{Format, emit, print_values};
use corral_cli::{
    api_bench, artifacts_tool, doctor, manifests, operator_bench, pipeline_bench, plan, programs,
    quickstart, remote, sched_bench, serve_bench, sim, up,
};
use serde_json::Value;

#[derive(Parser)]
#[command(
    name = "corral",
    version,
    about = "Distributed ML training on shared GPU clusters"
)]
struct Cli {
    /// The server of the commands that talk to one, given before the command (`corral
    /// --server URL list`); the command's own `--server` wins.
    #[arg(long = "server", id = "global_server", value_name = "URL")]
    server: Option<String>,
    /// API token of the commands that talk to a server, given before the command.
    #[arg(long = "token", id = "global_token", value_name = "TOKEN")]
    token: Option<String>,
    /// Namespace of the commands that act in one, given before the command
    /// (`corral -n team-a list`).
    #[arg(
        short = 'n',
        long = "namespace",
        id = "global_namespace",
        value_name = "NAMESPACE"
    )]
    namespace: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the embedded cluster (store, scheduler, executor, HTTP API, /metrics) until Ctrl-C.
    Up(up::UpArgs),
    /// What this machine offers Corral (GPUs, cgroups, container runtime, ports, the data
    /// directory's lock) and what Corral will do with it; each finding OK or WARN with its fix.
    Doctor(doctor::DoctorArgs),
    /// Start a throw-away cluster, run the distributed quickstart job, print its result.
    Quickstart(quickstart::QuickstartArgs),
    /// Keep the server, token and how to trust its certificate (a CA file or a pinned
    /// fingerprint) for the other commands, after checking them against the server.
    Login(remote::login::LoginArgs),
    /// Submit TrainingJob or Kubeflow job files (`-` or none: stdin).
    Submit(remote::SubmitArgs),
    /// Start a run of a stored Pipeline: `corral run PIPELINE -p NAME=VALUE` (the pipeline
    /// was stored with `corral submit`; `corral get pipelines` lists them).
    Run(remote::stored_pipelines::RunArgs),
    /// List jobs.
    List(remote::ListArgs),
    /// Show jobs (table, or the TrainingJob with -o yaml|json).
    Get(remote::GetArgs),
    /// Conditions, replicas, events, and why a job waits.
    Describe(remote::DescribeArgs),
    /// A replica's output (-f follows).
    Logs(remote::LogsArgs),
    /// Run a command inside a running replica: `corral exec JOB REPLICA -- CMD...`; exits
    /// with the command's status (-i passes standard input).
    Exec(remote::ExecArgs),
    /// Delete jobs: replicas stop, then the job, its logs and its code snapshot are removed.
    Delete(remote::JobArgs),
    /// Suspend jobs: replicas stop, the admission is given back.
    Suspend(remote::JobArgs),
    /// Resume suspended jobs.
    Resume(remote::JobArgs),
    /// Print a shell completion script: `source <(corral completion bash)`, or save it
    /// where the shell loads completions (zsh: a `_corral` file on $fpath; fish:
    /// ~/.config/fish/completions/corral.fish). Job names complete from the server
    /// ($CORRAL_SERVER, $CORRAL_TOKEN, $CORRAL_NAMESPACE).
    Completion {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Served models' traffic between revisions: `canary NAME PERCENT`, `promote NAME`,
    /// `rollback NAME` (docs/serving.md, "Revisions and canaries").
    Serve {
        #[command(subcommand)]
        command: remote::serving::ServeCommand,
    },
    /// Queues: usage per pool, pending and admitted jobs.
    Queues(remote::ClusterViewArgs),
    /// Nodes: GPU inventory and who uses what.
    Nodes(remote::ClusterViewArgs),
    /// CPU, memory and GPUs of every running replica.
    Top(remote::TopArgs),
    /// The audit trail: who wrote what through the API, when, and how it ended (a token
    /// of every namespace).
    Audit(remote::AuditArgs),
    /// GPU-hours (and CPU-hours) used per day or month, namespace, queue and GPU type, or
    /// per job, from the usage ledger; queue budgets and where they stand.
    Usage(remote::UsageArgs),
    /// Check TrainingJob, Queue, NodePool, JobPriorityClass and Kubeflow job files; explain
    /// each valid one. `-` reads standard input. With a reachable server, jobs are checked
    /// as `submit` would (priority classes, queues, GPUs); exits 1 if anything is invalid.
    Validate(manifests::ValidateArgs),
    /// Print a file's jobs as Corral TrainingJobs (Kubeflow kinds are converted).
    Convert {
        #[arg(value_name = "FILE")]
        file: String,
        #[arg(short, long, value_enum, default_value_t = Format::Yaml)]
        output: Format,
        /// Fill in every default (restart policies, ports, queue) as Corral applies them.
        #[arg(long)]
        with_defaults: bool,
    },
    /// Make or read pipeline artifacts from inside a pod: what the Kubernetes operator runs
    /// in the pods it makes around a pipeline's steps (not for people).
    #[command(hide = true)]
    Artifacts {
        #[command(subcommand)]
        what: artifacts_tool::ArtifactsCommand,
    },
    /// Print the CustomResourceDefinitions of Corral's kinds (apiextensions.k8s.io/v1).
    Crd {
        #[arg(short, long, value_enum, default_value_t = Format::Yaml)]
        output: Format,
        /// Print the CRDs of Kubeflow's job kinds instead (TFJob, PyTorchJob, XGBoostJob,
        /// JAXJob, MPIJob), for `corral operator --kubeflow serve`.
        #[arg(long, conflicts_with = "kserve")]
        kubeflow: bool,
        /// Print the CRD of KServe's InferenceService instead, for `corral operator
        /// --kserve` where KServe is not installed.
        #[arg(long)]
        kserve: bool,
    },
    /// Run one real scheduling cycle over the files' jobs, queues, pools and priority
    /// classes, and show what would be admitted where (down to GPU indices) and why the
    /// rest waits.
    Plan {
        #[arg(required = true, value_name = "FILE")]
        files: Vec<String>,
        /// `corral.yaml`: plan on this machine as `corral up --config FILE` runs it (its node
        /// overrides, pools, queues and priority classes).
        #[arg(long, value_name = "FILE")]
        config: Option<std::path::PathBuf>,
        /// Nodes per pool, e.g. `h100=2,a100=4` (pools not named get --default-nodes).
        #[arg(long, value_name = "POOL=COUNT")]
        nodes: Vec<String>,
        #[arg(long, default_value_t = 2)]
        default_nodes: u32,
        /// CPU cores per node.
        #[arg(long, default_value_t = 128)]
        node_cpu: u64,
        /// Memory per node in GiB.
        #[arg(long, default_value_t = 1024)]
        node_memory_gib: u64,
    },
    /// Replay a cluster trace through Corral's scheduler and baseline policies on a
    /// simulated cluster, and compare them (table, JSON or an HTML report).
    Sim(sim::SimArgs),
    /// Run the Kubernetes operator (CRDs, pods bound by Corral's scheduler, status, events):
    /// runs the `corral-operator` program beside `corral` with these arguments
    /// (`corral operator --help` lists them).
    #[command(disable_help_flag = true)]
    Operator {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
    /// Benchmarks that print JSON.
    Bench {
        #[command(subcommand)]
        which: BenchCommand,
    },
}

#[derive(Subcommand)]
enum BenchCommand {
    /// The API: submit -> all replicas running, sustained submissions/s, list time, idle RSS.
    Api(api_bench::BenchApiArgs),
    /// The served models' router: overhead against calling a replica directly, requests/s,
    /// cold start from zero.
    Serve(serve_bench::BenchServeArgs),
    /// Pipelines: a step's end to its successor's start over a 1,000-step DAG, runs
    /// accepted per second.
    Pipeline(pipeline_bench::BenchPipelineArgs),
    /// The Kubernetes operator at scale on a real kube-apiserver (KUBEBUILDER_ASSETS): fake
    /// GPU nodes and kubelet, a burst of jobs; jobs/s, create->bound, writes per pod, CPU, RSS.
    Operator(operator_bench::BenchOperatorArgs),
    /// A full scheduling pass over a generated cluster and workload, then one-job decisions.
    Scheduler {
        #[arg(long, default_value_t = 10_000)]
        nodes: usize,
        #[arg(long, default_value_t = 100_000)]
        jobs: usize,
        #[arg(long, default_value_t = 4)]
        gpu_types: usize,
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Output format (JSON only).
        #[arg(long, value_enum, default_value_t = BenchOutput::Json)]
        output: BenchOutput,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum BenchOutput {
    Json,
}

fn main() -> ExitCode {
    // `corral shim <replica dir>` supervises one replica (started by the embedded cluster,
    // not for users). It runs once per replica start, so it skips the command-line parser.
    let mut args = std::env::args_os().skip(1);
    match args.next() {
        Some(a) if a == "shim" => std::process::exit(corral_local::shim::run(args)),
        // `corral rsh HOST COMMAND...`: the MPI launcher's rsh agent (mpirun runs it), not
        // for people; its words are mpirun's, not options of this program.
        Some(a) if a == "rsh" => std::process::exit(remote::run_rsh(args)),
        _ => {}
    }
    // A shell asking for completions (`COMPLETE=bash corral ...`, from the script that
    // `corral completion` prints): answer and exit.
    clap_complete::CompleteEnv::with_factory(Cli::command)
        .var(remote::COMPLETE_VAR)
        .complete();
    let cli = Cli::parse();
    remote::set_global_flags(remote::GlobalFlags {
        server: cli.server,
        token: cli.token,
        namespace: cli.namespace,
    });
    match cli.command {
        // The server's own program when it is beside (same pid; see `programs`).
        Command::Up(a) => match programs::find_server() {
            Some(server) => programs::exec(
                &server,
                std::env::args_os().skip(1).skip_while(|arg| arg != "up"),
            ),
            None => up::run_up(&a),
        },
        Command::Doctor(a) => doctor::run(&a),
        Command::Quickstart(a) => quickstart::run_quickstart(&a),
        Command::Submit(a) => remote::run_submit(&a),
        Command::List(a) => remote::run_list(&a),
        Command::Get(a) => remote::run_get(&a),
        Command::Describe(a) => remote::run_describe(&a),
        Command::Logs(a) => remote::run_logs(&a),
        Command::Exec(a) => remote::run_exec(&a),
        Command::Delete(a) => remote::run_delete(&a),
        Command::Suspend(a) => remote::run_suspend(&a),
        Command::Resume(a) => remote::run_resume(&a),
        Command::Completion { shell } => match remote::registration(shell) {
            Ok(script) => emit(&script),
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Serve { command } => remote::serving::run_serve(&command),
        Command::Run(a) => remote::stored_pipelines::run_pipeline(&a),
        Command::Queues(a) => remote::run_queues(&a),
        Command::Nodes(a) => remote::run_nodes(&a),
        Command::Top(a) => remote::run_top(&a),
        Command::Audit(a) => remote::run_audit(&a),
        Command::Login(a) => remote::login::run_login(&a),
        Command::Usage(a) => remote::run_usage(&a),
        Command::Bench {
            which: BenchCommand::Api(a),
        } => api_bench::run_bench_api(&a),
        Command::Bench {
            which: BenchCommand::Serve(a),
        } => serve_bench::run_bench_serve(&a),
        Command::Bench {
            which: BenchCommand::Pipeline(a),
        } => pipeline_bench::run_bench_pipeline(&a),
        Command::Bench {
            which: BenchCommand::Operator(a),
        } => operator_bench::run_bench_operator(&a),
        Command::Sim(args) => match sim::run(args) {
            Ok(out) => emit(&out),
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Artifacts { what } => artifacts_tool::run(&what),
        Command::Operator { args } => programs::exec_operator(args),
        Command::Validate(args) => manifests::validate(&args),
        Command::Convert {
            file,
            output,
            with_defaults,
        } => manifests::convert(&file, output, with_defaults),
        Command::Crd {
            output,
            kubeflow,
            kserve,
        } => {
            let crds: Vec<Value> = if kubeflow {
                corral_kube::kubeflow::crds::all_crds()
            } else if kserve {
                vec![corral_kube::kserve::crds::crd()]
            } else {
                corral_api::crd::all_crds()
            };
            print_values(&crds, output)
        }
        Command::Plan {
            files,
            config,
            nodes,
            default_nodes,
            node_cpu,
            node_memory_gib,
        } => {
            let args = plan::PlanArgs {
                files: &files,
                config,
                nodes: &nodes,
                default_nodes,
                node_cpu,
                node_memory_gib,
            };
            match plan::run(&args) {
                Ok(text) => emit(&text),
                Err(e) => {
                    eprintln!("{e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Bench {
            which:
                BenchCommand::Scheduler {
                    nodes,
                    jobs,
                    gpu_types,
                    seed,
                    output: BenchOutput::Json,
                },
        } => {
            if nodes == 0 || jobs == 0 || gpu_types == 0 {
                eprintln!("--nodes, --jobs and --gpu-types must be at least 1");
                return ExitCode::FAILURE;
            }
            let result = sched_bench::scheduler_bench(nodes, jobs, gpu_types, seed);
            print_values(&[result], Format::Json)
        }
    }
}
