//! The verbs over jobs one at a time: submit, list (and `--watch`), get, describe, logs.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use corral_local::cluster::{JobState, JobSummary};
use corral_server::api_client::{Client, ClientError, LogRequest};
use jiff::Timestamp;
use serde_json::Value;

use super::bulk::Selector;
use super::common_args::{ConnArgs, NamespaceArgs, Output, declared_namespace};
use super::print::{fail, out, print_structured, structured};
use super::render::{describe_text, jobs_table, names_text};

#[derive(Args, Debug)]
pub struct SubmitArgs {
    /// TrainingJob or Kubeflow job files (YAML or JSON, several documents each); `-` or none
    /// reads standard input.
    #[arg(value_name = "FILE")]
    pub files: Vec<String>,
    /// Ship this directory with the jobs (what .gitignore leaves; at most the server's
    /// codeSnapshots.maxBytes): replicas run from a read-only copy of it, their working
    /// directory unless the job sets one (in a container: /workspace).
    #[arg(long, value_name = "DIR")]
    pub code: Option<std::path::PathBuf>,
    /// A pipeline run's parameter, NAME=VALUE (repeatable; VALUE read as YAML: `lr=0.1` is a
    /// number, `items=[1,2]` a list): set on every PipelineRun (or compiled Kubeflow
    /// pipeline) of the input.
    #[arg(short = 'p', long = "param", value_name = "NAME=VALUE")]
    pub params: Vec<String>,
    /// Store each compiled Kubeflow pipeline of the input as a Pipeline named after its
    /// `pipelineInfo.name` (a new version when it changed), for `corral run NAME` later,
    /// instead of running it at once (as `kfp pipeline upload`); `-p` then sets its
    /// parameters' defaults.
    #[arg(long)]
    pub as_pipeline: bool,
    #[command(flatten)]
    pub namespace: NamespaceArgs,
    #[command(flatten)]
    pub conn: ConnArgs,
}

#[derive(Args, Debug)]
pub struct ListArgs {
    /// Jobs of every namespace (that the token may see).
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    #[arg(short, long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
    /// After the table, print each job's line again whenever it changes, until Ctrl-C.
    #[arg(short, long)]
    pub watch: bool,
    /// Only jobs whose labels match, e.g. `team=nlp,stage!=prod` (`=`, `==`, `!=`; `key`:
    /// has the label; `!key`: has it not).
    #[arg(short = 'l', long, value_name = "SELECTOR")]
    pub selector: Option<String>,
    #[command(flatten)]
    pub namespace: NamespaceArgs,
    #[command(flatten)]
    pub conn: ConnArgs,
}

#[derive(Args, Debug)]
pub struct GetArgs {
    /// Job names; none lists the namespace's jobs.
    #[arg(value_name = "NAME", add = super::completion::job_names())]
    pub names: Vec<String>,
    /// With no names: jobs of every namespace (that the token may see).
    #[arg(short = 'A', long, conflicts_with = "names")]
    pub all_namespaces: bool,
    /// `table` shows the job's line; `json`/`yaml` the TrainingJob with its status (with
    /// no names: a `List` of them).
    #[arg(short, long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
    /// After the table, print each job's line again whenever it changes, until Ctrl-C.
    #[arg(short, long)]
    pub watch: bool,
    /// With no names: only jobs whose labels match, e.g. `team=nlp,stage!=prod` (`=`,
    /// `==`, `!=`; `key`: has the label; `!key`: has it not).
    #[arg(short = 'l', long, value_name = "SELECTOR", conflicts_with = "names")]
    pub selector: Option<String>,
    #[command(flatten)]
    pub namespace: NamespaceArgs,
    #[command(flatten)]
    pub conn: ConnArgs,
}

#[derive(Args, Debug)]
pub struct DescribeArgs {
    /// Job names; none describes every job of the namespace.
    #[arg(value_name = "NAME", add = super::completion::job_names())]
    pub names: Vec<String>,
    /// `table` is the readable report; `json`/`yaml` the whole record.
    #[arg(short, long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
    #[command(flatten)]
    pub namespace: NamespaceArgs,
    #[command(flatten)]
    pub conn: ConnArgs,
}

#[derive(Args, Debug)]
pub struct LogsArgs {
    /// The job, or `JOB/REPLICA` (e.g. `mnist/worker-1`).
    #[arg(value_name = "JOB", add = super::completion::job_names())]
    pub name: String,
    /// The replica: `<role>-<index>` (e.g. `worker-1`) or its full name (`mnist-worker-1`).
    /// Default: the first replica (chief, master or launcher, else worker 0).
    #[arg(value_name = "REPLICA")]
    pub replica_arg: Option<String>,
    /// The replica, as the second argument.
    #[arg(
        long,
        short = 'r',
        value_name = "REPLICA",
        conflicts_with = "replica_arg"
    )]
    pub replica: Option<String>,
    /// The replica's role (with --index).
    #[arg(long, value_name = "ROLE", conflicts_with_all = ["replica", "replica_arg"])]
    pub role: Option<String>,
    /// The replica's index within its role (default 0).
    #[arg(long, value_name = "N", conflicts_with_all = ["replica", "replica_arg"])]
    pub index: Option<u32>,
    /// Keep printing as the replica writes, into each new incarnation after a restart
    /// (each introduced by a `==> ... <==` line), until the job ends.
    #[arg(short, long)]
    pub follow: bool,
    /// The output of the incarnation before the current one (the run that failed).
    #[arg(short, long, conflicts_with = "follow")]
    pub previous: bool,
    /// Only the last N lines (with -f: of the output so far, then everything new).
    #[arg(long, value_name = "N")]
    pub tail: Option<u64>,
    /// Only output of the last DURATION: `30s`, `5m`, `2h`, `1d`.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_secs)]
    pub since: Option<u64>,
    /// Prefix each line with the time it arrived (RFC 3339, UTC).
    #[arg(long)]
    pub timestamps: bool,
    #[command(flatten)]
    pub namespace: NamespaceArgs,
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// `30s`, `5m`, `2h`, `1d` (or a bare number of seconds) in seconds.
pub fn parse_duration_secs(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let (digits, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("`{text}` is not a duration; use e.g. 30s, 5m, 2h or 1d"))?;
    let scale = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => {
            return Err(format!(
                "`{unit}` is not a unit of `{text}`; use s, m, h or d (e.g. 5m)"
            ));
        }
    };
    n.checked_mul(scale)
        .ok_or_else(|| format!("`{text}` is too long a duration"))
}

impl LogsArgs {
    /// The job and the replica, from `JOB REPLICA`, `JOB/REPLICA`, `--replica` or none.
    pub fn job_and_replica(&self) -> (String, Option<String>) {
        let named = self.replica_arg.clone().or_else(|| self.replica.clone());
        match self.name.split_once('/') {
            Some((job, replica)) if named.is_none() && !replica.is_empty() => {
                (job.to_string(), Some(replica.to_string()))
            }
            _ => (self.name.clone(), named),
        }
    }
}

/// `corral submit FILE...`
pub fn run_submit(args: &SubmitArgs) -> ExitCode {
    let client = args.conn.client();
    let given = args.namespace.given();
    let files = if args.files.is_empty() {
        vec!["-".to_string()]
    } else {
        args.files.clone()
    };
    let params = match args
        .params
        .iter()
        .map(|p| crate::params::parse_param(p))
        .collect::<Result<Vec<_>, _>>()
    {
        Ok(p) => p,
        Err(e) => {
            eprintln!("-p: {e}");
            return ExitCode::from(2);
        }
    };
    let mut failed = false;
    for file in &files {
        let shown = if file == "-" { "stdin" } else { file.as_str() };
        let text = crate::input::read(file)
            .and_then(|t| {
                if params.is_empty() {
                    Ok(t)
                } else {
                    crate::params::with_params(&t, &params)
                }
            })
            .and_then(|t| {
                if args.as_pipeline {
                    crate::kfp_upload::as_pipelines(&t)
                } else {
                    Ok(t)
                }
            });
        let text = match text {
            Ok(t) => t,
            Err(e) => {
                eprintln!("{shown}: {e}");
                failed = true;
                continue;
            }
        };
        let namespace = given
            .clone()
            .or_else(|| declared_namespace(&text))
            .or_else(|| client.token_namespace().ok().flatten())
            .unwrap_or_else(|| "default".to_string());
        let submitted = match &args.code {
            None => client.submit(&namespace, &text),
            Some(dir) => match crate::code_archive::upload(&text, dir) {
                Ok(up) => {
                    for p in &up.packed.left_out {
                        eprintln!(
                            "warning: {p} is left out of the code snapshot (not a regular file \
                             or directory)"
                        );
                    }
                    eprintln!(
                        "code: {} ({} files, {} bytes, {})",
                        dir.display(),
                        up.packed.files,
                        up.packed.bytes,
                        up.digest
                    );
                    client.submit_with_code(&namespace, &up.boundary, &up.body)
                }
                Err(e) => {
                    eprintln!("{e}");
                    return ExitCode::FAILURE;
                }
            },
        };
        match submitted {
            Ok(results) => {
                for r in results {
                    if let Some(kind) = &r.kind {
                        // A served model's revision: new (a new model, or what its replicas
                        // run changed) or kept (another field changed, or nothing).
                        let revision = r.revision.as_ref().map_or(String::new(), |rev| {
                            match (kind.as_str(), r.new_revision) {
                                ("Pipeline", true) => format!(" ({rev})"),
                                ("Pipeline", false) => format!(" ({rev} kept: unchanged)"),
                                (_, true) => format!(" (revision {rev})"),
                                (_, false) => format!(" (revision {rev} kept)"),
                            }
                        });
                        println!(
                            "{}/{} submitted in namespace {}{revision}",
                            kind.to_lowercase(),
                            r.name,
                            r.namespace
                        );
                        continue;
                    }
                    let from = r
                        .converted_from
                        .map(|k| format!(" (converted from {k})"))
                        .unwrap_or_default();
                    let kind = r.kind.as_deref().unwrap_or("TrainingJob");
                    println!(
                        "{}/{} submitted in namespace {}{from}",
                        kind.to_ascii_lowercase(),
                        r.name,
                        r.namespace
                    );
                    for w in &r.warnings {
                        eprintln!("warning: TrainingJob {}: {w}", r.name);
                    }
                }
            }
            Err(e @ ClientError::Connect { .. }) => {
                // The same for every file: say it once.
                return fail(&e);
            }
            Err(e) => {
                eprintln!("{shown}: {e}");
                failed = true;
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// `corral list`
pub fn run_list(args: &ListArgs) -> ExitCode {
    let client = args.conn.client();
    let ns = (!args.all_namespaces).then(|| args.namespace.resolve(&client));
    let selector = match args.selector.as_deref().map(Selector::parse).transpose() {
        Ok(s) => s,
        Err(e) => return fail(&format!("--selector: {e}")),
    };
    let jobs = match client.list(ns.as_deref()) {
        Ok(jobs) => jobs,
        Err(e) => return fail(&e),
    };
    let jobs = match &selector {
        Some(sel) => match selected(&client, jobs, Some(sel)) {
            Ok(kept) => kept.into_iter().map(|(j, _)| j).collect(),
            Err(e) => return fail(&e),
        },
        None => jobs,
    };
    let printed = match args.output {
        o if o.is_table() && jobs.is_empty() => {
            match &ns {
                Some(ns) => eprintln!("No jobs in namespace {ns}."),
                None => eprintln!("No jobs."),
            }
            ExitCode::SUCCESS
        }
        o if o.is_table() => out(&jobs_table(
            &jobs,
            args.all_namespaces,
            o == Output::Wide,
            Timestamp::now(),
        )),
        Output::Name => out(&names_text(&jobs)),
        o => print_structured(&serde_json::json!({ "items": jobs }), o),
    };
    if !args.watch || printed != ExitCode::SUCCESS {
        return printed;
    }
    // Watched by name: a job that gains the labels later is not shown (kubectl's watch
    // re-evaluates the selector; the list here has no labels to do it with).
    let names: Vec<String> = match selector {
        Some(_) => jobs.iter().map(|j| j.name.clone()).collect(),
        None => Vec::new(),
    };
    watch(&client, ns.as_deref(), &names, args.output, jobs)
}

/// The jobs of `jobs` whose labels `selector` matches (any, without one), each with its
/// TrainingJob as the server has it; a job deleted since the list is left out.
fn selected(
    client: &Client,
    jobs: Vec<JobSummary>,
    selector: Option<&Selector>,
) -> Result<Vec<(JobSummary, Value)>, ClientError> {
    let mut kept = Vec::new();
    for j in jobs {
        let job = match client.get(&j.namespace, &j.name) {
            Ok(job) => job,
            Err(ClientError::Api { status: 404, .. }) => continue,
            Err(e) => return Err(e),
        };
        if selector.is_none_or(|s| s.matches_object(&job)) {
            kept.push((j, job));
        }
    }
    Ok(kept)
}

/// `--watch`: polls the jobs and prints the line of each one that changed (or appeared)
/// since the last look, as `kubectl get -w` does; a job that went away is printed with
/// state `Deleted`. Runs until interrupted.
fn watch(
    client: &Client,
    namespace: Option<&str>,
    names: &[String],
    output: Output,
    mut last: Vec<JobSummary>,
) -> ExitCode {
    let with_ns = namespace.is_none();
    // Every job printed so far, so that a changed job's line is laid out in the columns
    // of the table above it (widths from all of them), not in columns of its own.
    let mut shown: Vec<JobSummary> = last.clone();
    loop {
        std::thread::sleep(Duration::from_secs(1));
        let now = match client.list(namespace) {
            Ok(jobs) => jobs,
            Err(e) => return fail(&e),
        };
        let now: Vec<JobSummary> = now
            .into_iter()
            .filter(|j| names.is_empty() || names.contains(&j.name))
            .collect();
        let mut changed: Vec<JobSummary> = now
            .iter()
            .filter(|j| {
                !last.iter().any(|l| {
                    l.namespace == j.namespace
                        && l.name == j.name
                        && l.state == j.state
                        && l.replicas_ready == j.replicas_ready
                        && l.restarts == j.restarts
                        && l.preemptions == j.preemptions
                })
            })
            .cloned()
            .collect();
        for gone in last.iter().filter(|l| {
            !now.iter()
                .any(|j| j.namespace == l.namespace && j.name == l.name)
        }) {
            let mut gone = gone.clone();
            gone.state = JobState::Deleting;
            changed.push(gone);
        }
        if !changed.is_empty() {
            let text = match output {
                Output::Name => names_text(&changed),
                Output::Json | Output::Yaml => changed
                    .iter()
                    .filter_map(|j| structured(j, output).ok())
                    .collect(),
                o => {
                    let first_new = shown.len();
                    shown.extend(changed.iter().cloned());
                    let table = jobs_table(&shown, with_ns, o == Output::Wide, Timestamp::now());
                    // The header and the earlier lines were printed already.
                    table
                        .lines()
                        .skip(1 + first_new)
                        .map(|l| format!("{l}\n"))
                        .collect()
                }
            };
            if out(&text) != ExitCode::SUCCESS {
                return ExitCode::FAILURE;
            }
        }
        last = now;
    }
}

/// `corral get [NAME...]`
pub fn run_get(args: &GetArgs) -> ExitCode {
    if let Some(names) = super::stored_pipelines::pipeline_names(&args.names) {
        let client = args.conn.client();
        let ns = (!args.all_namespaces).then(|| args.namespace.resolve(&client));
        return super::stored_pipelines::get(&client, ns.as_deref(), &names, args.output);
    }
    if let Some(runs) = super::pipelines::run_names(&args.names) {
        let client = args.conn.client();
        let ns = (!args.all_namespaces).then(|| args.namespace.resolve(&client));
        return super::pipelines::get(&client, ns.as_deref(), &runs, args.output);
    }
    if let Some(names) = super::serving::served_model_names(&args.names) {
        let client = args.conn.client();
        let ns = args.namespace.resolve(&client);
        return super::serving::get(&client, &ns, &names, args.output);
    }
    if args.names.is_empty() && matches!(args.output, Output::Json | Output::Yaml) {
        return get_all_objects(args);
    }
    if args.names.is_empty() {
        return run_list(&ListArgs {
            all_namespaces: args.all_namespaces,
            output: args.output,
            watch: args.watch,
            selector: args.selector.clone(),
            namespace: args.namespace.clone(),
            conn: args.conn.clone(),
        });
    }
    let client = args.conn.client();
    let ns = args.namespace.resolve(&client);
    let mut code = ExitCode::SUCCESS;
    match args.output {
        o if o.is_table() || o == Output::Name => {
            let mut rows = Vec::new();
            for name in &args.names {
                match client.describe(&ns, name) {
                    Ok(d) => rows.push(d.summary),
                    Err(e) => {
                        eprintln!("error: {e}");
                        code = ExitCode::FAILURE;
                    }
                }
            }
            if !rows.is_empty() {
                let text = if o == Output::Name {
                    names_text(&rows)
                } else {
                    jobs_table(&rows, false, o == Output::Wide, Timestamp::now())
                };
                let printed = out(&text);
                if printed != ExitCode::SUCCESS {
                    return printed;
                }
            }
            if args.watch {
                return watch(&client, Some(&ns), &args.names, o, rows);
            }
        }
        o => {
            let mut values: Vec<Value> = Vec::new();
            for name in &args.names {
                match client.get(&ns, name) {
                    Ok(v) => values.push(v),
                    Err(e) => {
                        eprintln!("error: {e}");
                        code = ExitCode::FAILURE;
                    }
                }
            }
            let v = match values.len() {
                0 => return code,
                1 => values.remove(0),
                _ => serde_json::json!({"apiVersion": "v1", "kind": "List", "items": values}),
            };
            let printed = print_structured(&v, o);
            if printed != ExitCode::SUCCESS {
                return printed;
            }
        }
    }
    code
}

/// `corral get -o yaml|json` with no names: the namespace's (or every namespace's)
/// TrainingJobs with their status, as a `List`, as kubectl prints them.
fn get_all_objects(args: &GetArgs) -> ExitCode {
    if args.watch {
        return fail(&"--watch prints lines of a table; use it without -o json|yaml");
    }
    let client = args.conn.client();
    let ns = (!args.all_namespaces).then(|| args.namespace.resolve(&client));
    let selector = match args.selector.as_deref().map(Selector::parse).transpose() {
        Ok(s) => s,
        Err(e) => return fail(&format!("--selector: {e}")),
    };
    let jobs = match client.list(ns.as_deref()) {
        Ok(jobs) => jobs,
        Err(e) => return fail(&e),
    };
    let items: Vec<Value> = match selected(&client, jobs, selector.as_ref()) {
        Ok(kept) => kept.into_iter().map(|(_, job)| job).collect(),
        Err(e) => return fail(&e),
    };
    print_structured(
        &serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items}),
        args.output,
    )
}

/// `corral describe [NAME...]`; with no names, every job of the namespace.
pub fn run_describe(args: &DescribeArgs) -> ExitCode {
    if let Some(names) = super::serving::served_model_names(&args.names) {
        let client = args.conn.client();
        let ns = args.namespace.resolve(&client);
        return super::serving::describe(&client, &ns, &names, args.output);
    }
    let client = args.conn.client();
    let ns = args.namespace.resolve(&client);
    if let Some(runs) = super::pipelines::run_names(&args.names) {
        return super::pipelines::describe(&client, &ns, &runs, args.output);
    }
    if let Some(names) = super::stored_pipelines::pipeline_names(&args.names) {
        return super::stored_pipelines::describe(&client, &ns, &names, args.output);
    }
    let names = if args.names.is_empty() {
        match client.list(Some(&ns)) {
            Ok(jobs) if jobs.is_empty() => {
                eprintln!("No jobs in namespace {ns}.");
                return ExitCode::SUCCESS;
            }
            Ok(jobs) => jobs.into_iter().map(|j| j.name).collect(),
            Err(e) => return fail(&e),
        }
    } else {
        args.names.clone()
    };
    let mut code = ExitCode::SUCCESS;
    for (i, name) in names.iter().enumerate() {
        let printed = match args.output {
            o if o.is_table() || o == Output::Name => match client.describe(&ns, name) {
                Ok(d) if o == Output::Name => out(&format!("trainingjob/{}\n", d.summary.name)),
                // A blank line between reports, as kubectl separates them.
                Ok(d) if i > 0 => out(&format!("\n{}", describe_text(&d))),
                Ok(d) => out(&describe_text(&d)),
                Err(e) => fail(&e),
            },
            o => match client.describe_value(&ns, name) {
                Ok(v) if i > 0 && o == Output::Yaml => {
                    out("---\n");
                    print_structured(&v, o)
                }
                Ok(v) => print_structured(&v, o),
                Err(e) => fail(&e),
            },
        };
        if printed != ExitCode::SUCCESS {
            code = printed;
        }
    }
    code
}

/// `corral logs JOB`
pub fn run_logs(args: &LogsArgs) -> ExitCode {
    let client = args.conn.client();
    let (job, replica) = args.job_and_replica();
    let request = LogRequest {
        replica,
        role: args.role.clone(),
        index: args.index,
        follow: args.follow,
        previous: args.previous,
        tail: args.tail,
        timestamps: args.timestamps,
        since_seconds: args.since,
    };
    let mut stdout = std::io::stdout();
    match client.logs(
        &args.namespace.resolve(&client),
        &job,
        &request,
        &mut stdout,
    ) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}
