//! `corral`: the command-line entry point. Subcommands read files, call corral-api and
//! corral-core, and print; no scheduling or validation logic lives here.

mod bench;
mod client;
mod explain;
mod input;
mod plan;
mod quickstart;
mod sim;
mod up;

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use corral_api::document::{Document, parse_documents};
use corral_api::validate::ValidationContext;
use serde_json::Value;

#[derive(Parser)]
#[command(
    name = "corral",
    version,
    about = "Distributed ML training on shared GPU clusters"
)]
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
    /// Check TrainingJob, Queue, NodePool, PriorityClass and Kubeflow job files; explain
    /// each valid one. `-` reads standard input. Exits 1 if anything is invalid.
    Validate {
        #[arg(required = true, value_name = "FILE")]
        files: Vec<String>,
        /// Print only errors.
        #[arg(short, long)]
        quiet: bool,
    },
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
    /// Print the CustomResourceDefinitions of Corral's kinds (apiextensions.k8s.io/v1).
    Crd {
        #[arg(short, long, value_enum, default_value_t = Format::Yaml)]
        output: Format,
    },
    /// Run one real scheduling cycle over the files' jobs, queues, pools and priority
    /// classes, and show what would be admitted where (down to GPU indices) and why the
    /// rest waits.
    Plan {
        #[arg(required = true, value_name = "FILE")]
        files: Vec<String>,
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
    /// Run the Kubernetes operator (CRDs, pods bound by Corral's scheduler, status, events).
    Operator(corral_kube::OperatorArgs),
    /// Benchmarks that print JSON.
    Bench {
        #[command(subcommand)]
        which: BenchCommand,
    },
}

#[derive(Subcommand)]
enum BenchCommand {
    /// The API: submit -> all replicas running, sustained submissions/s, list time, idle RSS.
    Api(client::BenchApiArgs),
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

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Yaml,
    Json,
}

fn main() -> ExitCode {
    // `corral shim <replica dir>` supervises one replica (started by the embedded cluster,
    // not for users). It runs once per replica start, so it skips the command-line parser.
    let mut args = std::env::args_os().skip(1);
    if args.next().is_some_and(|a| a == "shim") {
        std::process::exit(corral_local::shim::run(args));
    }
    let cli = Cli::parse();
    match cli.command {
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
        Command::Bench {
            which: BenchCommand::Api(a),
        } => client::run_bench_api(&a),
        Command::Sim(args) => match sim::run(args) {
            Ok(out) => emit(&out),
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Operator(args) => match corral_kube::run_operator(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("operator: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Validate { files, quiet } => validate(&files, quiet),
        Command::Convert {
            file,
            output,
            with_defaults,
        } => convert(&file, output, with_defaults),
        Command::Crd { output } => {
            let crds: Vec<Value> = corral_api::crd::all_crds();
            print_values(&crds, output)
        }
        Command::Plan {
            files,
            nodes,
            default_nodes,
            node_cpu,
            node_memory_gib,
        } => {
            let args = plan::PlanArgs {
                files: &files,
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
            let result = bench::scheduler_bench(nodes, jobs, gpu_types, seed);
            print_values(&[result], Format::Json)
        }
    }
}

fn validate(files: &[String], quiet: bool) -> ExitCode {
    let ctx = ValidationContext::default();
    let mut failed = false;
    let mut report = String::new();
    // Documents of all files form one context, so a Queue may name a NodePool of another file.
    let mut loaded = Vec::new();
    for f in files {
        match input::read(f) {
            Ok(text) => loaded.push((f.as_str(), text)),
            Err(e) => {
                eprintln!("{f}: {e}");
                failed = true;
            }
        }
    }
    let all_text: Vec<&str> = loaded.iter().map(|(_, t)| t.as_str()).collect();
    let shared = input::shared_context(&all_text, &ctx);
    for (name, text) in &loaded {
        for result in parse_documents(text, &shared) {
            match result {
                Ok(parsed) => {
                    if !quiet {
                        report.push_str(&format!("{name}: {}\n", explain::summary(&parsed)));
                    }
                }
                Err(e) => {
                    failed = true;
                    eprintln!("{name}: {e}");
                }
            }
        }
    }
    let printed = emit(&report);
    if failed { ExitCode::FAILURE } else { printed }
}

fn convert(file: &str, output: Format, with_defaults: bool) -> ExitCode {
    let text = match input::read(file) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{file}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut out = Vec::new();
    let mut failed = false;
    for result in parse_documents(&text, &ValidationContext::default()) {
        match result {
            Ok(parsed) => match parsed.document {
                Document::TrainingJob(mut job) => {
                    if with_defaults {
                        job.spec.apply_defaults();
                    }
                    out.push(Document::TrainingJob(job).to_value());
                }
                other => out.push(other.to_value()),
            },
            Err(e) => {
                failed = true;
                eprintln!("{file}: {e}");
            }
        }
    }
    if failed {
        return ExitCode::FAILURE;
    }
    print_values(&out, output)
}

fn print_values(values: &[Value], format: Format) -> ExitCode {
    let mut text = String::new();
    match format {
        Format::Json => {
            let v = if values.len() == 1 {
                values[0].clone()
            } else {
                serde_json::json!({"apiVersion": "v1", "kind": "List", "items": values})
            };
            match serde_json::to_string_pretty(&v) {
                Ok(s) => {
                    text.push_str(&s);
                    text.push('\n');
                }
                Err(e) => {
                    eprintln!("cannot print JSON: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
        Format::Yaml => {
            for (i, v) in values.iter().enumerate() {
                if i > 0 {
                    text.push_str("---\n");
                }
                match serde_saphyr::to_string(v) {
                    Ok(s) => text.push_str(&s),
                    Err(e) => {
                        eprintln!("cannot print YAML: {e}");
                        return ExitCode::FAILURE;
                    }
                }
            }
        }
    }
    emit(&text)
}

/// Writes to stdout. A reader that went away (`corral crd | head`) ends the output quietly,
/// as every Unix tool does, instead of a panic.
fn emit(text: &str) -> ExitCode {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cannot write output: {e}");
            ExitCode::FAILURE
        }
    }
}
