//! The commands that talk to a Corral server: submit, list, get, describe, logs, delete,
//! suspend, resume, queues, nodes, top. Each reads its arguments, calls
//! [`corral_server::api_client::Client`] and prints; a server error is printed as the user's
//! problem and its fix (`path: message` lines), never as an HTTP dump.

use std::fmt::Write as _;
use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use corral_local::cluster::{
    JobDetails, JobState, JobSummary, NodeInfo, QueueInfo, ReplicaUsageRow,
};
use corral_server::api_client::{Client, ClientError, LogRequest};
use jiff::Timestamp;
use serde::Serialize;
use serde_json::Value;

use crate::output::plural;

/// Where the server is and who is asking.
#[derive(Args, Clone, Debug, Default)]
pub struct ConnArgs {
    /// The server (default: $CORRAL_SERVER, else http://127.0.0.1:7443).
    #[arg(long, value_name = "URL", global = true)]
    pub server: Option<String>,
    /// API token (default: $CORRAL_TOKEN).
    #[arg(long, value_name = "TOKEN", global = true)]
    pub token: Option<String>,
}

impl ConnArgs {
    pub fn client(&self) -> Client {
        let server = self
            .server
            .clone()
            .or_else(|| {
                std::env::var("CORRAL_SERVER")
                    .ok()
                    .filter(|s| !s.is_empty())
            })
            .unwrap_or_else(|| corral_server::DEFAULT_SERVER.to_string());
        let token = self
            .token
            .clone()
            .or_else(|| std::env::var("CORRAL_TOKEN").ok());
        Client::new(&server, token.as_deref())
    }
}

/// The namespace a command acts in.
#[derive(Args, Clone, Debug, Default)]
pub struct NamespaceArgs {
    /// Namespace (default: $CORRAL_NAMESPACE, else the API token's namespace, else `default`).
    #[arg(short, long, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
}

impl NamespaceArgs {
    /// `-n`, else $CORRAL_NAMESPACE.
    pub fn given(&self) -> Option<String> {
        self.namespace.clone().or_else(|| {
            std::env::var("CORRAL_NAMESPACE")
                .ok()
                .filter(|s| !s.is_empty())
        })
    }

    pub fn get(&self) -> String {
        self.given().unwrap_or_else(|| "default".to_string())
    }

    /// `-n`, else $CORRAL_NAMESPACE, else the namespace of the client's token (as kubectl
    /// uses its context's), else `default`.
    pub fn resolve(&self, client: &Client) -> String {
        self.given()
            .or_else(|| client.token_namespace().ok().flatten())
            .unwrap_or_else(|| "default".to_string())
    }
}

/// The one namespace that every document of `text` names, if they all name the same one (as
/// kubectl submits a file to the namespace it declares when no -n is given).
pub fn declared_namespace(text: &str) -> Option<String> {
    let docs = corral_api::document::raw_documents(text).ok()?;
    let mut found: Option<String> = None;
    for d in &docs {
        let ns = d.pointer("/metadata/namespace")?.as_str()?;
        match &found {
            Some(f) if f != ns => return None,
            _ => found = Some(ns.to_string()),
        }
    }
    found
}

/// How to print.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Aligned columns.
    #[default]
    Table,
    /// The table with more columns (jobs: preemptions, creation time, uid).
    Wide,
    Json,
    Yaml,
    /// `trainingjob/<name>`, one a line (for scripts: `corral get -o name | xargs ...`).
    Name,
}

impl Output {
    /// Table or wide: columns for people.
    fn is_table(self) -> bool {
        matches!(self, Output::Table | Output::Wide)
    }
}

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
    #[command(flatten)]
    pub namespace: NamespaceArgs,
    #[command(flatten)]
    pub conn: ConnArgs,
}

#[derive(Args, Debug)]
pub struct GetArgs {
    /// Job names; none lists the namespace's jobs.
    #[arg(value_name = "NAME")]
    pub names: Vec<String>,
    /// With no names: jobs of every namespace (that the token may see).
    #[arg(short = 'A', long, conflicts_with = "names")]
    pub all_namespaces: bool,
    /// `table` shows the job's line; `json`/`yaml` the TrainingJob with its status.
    #[arg(short, long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
    /// After the table, print each job's line again whenever it changes, until Ctrl-C.
    #[arg(short, long)]
    pub watch: bool,
    #[command(flatten)]
    pub namespace: NamespaceArgs,
    #[command(flatten)]
    pub conn: ConnArgs,
}

#[derive(Args, Debug)]
pub struct JobArgs {
    #[arg(value_name = "NAME", required_unless_present_any = ["all", "selector"])]
    pub names: Vec<String>,
    /// Every job of the namespace.
    #[arg(long, conflicts_with_all = ["names", "selector"])]
    pub all: bool,
    /// Jobs whose labels match, e.g. `team=nlp,stage!=prod` (`=`, `==`, `!=`; a bare key:
    /// has the label).
    #[arg(short = 'l', long, value_name = "SELECTOR", conflicts_with = "names")]
    pub selector: Option<String>,
    /// Do not ask before acting on more than one job.
    #[arg(short, long)]
    pub yes: bool,
    #[command(flatten)]
    pub namespace: NamespaceArgs,
    #[command(flatten)]
    pub conn: ConnArgs,
}

#[derive(Args, Debug)]
pub struct DescribeArgs {
    #[arg(value_name = "NAME", required = true)]
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
    #[arg(value_name = "JOB")]
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

#[derive(Args, Debug)]
pub struct ClusterViewArgs {
    #[arg(short, long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
    #[command(flatten)]
    pub conn: ConnArgs,
}

#[derive(Args, Debug)]
pub struct TopArgs {
    /// Refresh every N seconds until interrupted.
    #[arg(short, long, value_name = "SECONDS")]
    pub watch: Option<u64>,
    #[arg(short, long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// Prints a failure and returns exit code 1.
fn fail(e: &dyn std::fmt::Display) -> ExitCode {
    eprintln!("error: {e}");
    ExitCode::FAILURE
}

/// Writes to stdout; a reader that went away ends the output quietly.
fn out(text: &str) -> ExitCode {
    let mut o = std::io::stdout().lock();
    match o.write_all(text.as_bytes()).and_then(|()| o.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => fail(&format!("cannot write output: {e}")),
    }
}

fn structured<T: Serialize>(value: &T, output: Output) -> Result<String, String> {
    match output {
        Output::Yaml => serde_saphyr::to_string(value).map_err(|e| e.to_string()),
        _ => serde_json::to_string_pretty(value)
            .map(|s| s + "\n")
            .map_err(|e| e.to_string()),
    }
}

fn print_structured<T: Serialize>(value: &T, output: Output) -> ExitCode {
    match structured(value, output) {
        Ok(s) => out(&s),
        Err(e) => fail(&format!("cannot print: {e}")),
    }
}

/// Plain aligned columns.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let mut s = String::new();
    let line = |s: &mut String, cells: &mut dyn Iterator<Item = &str>| {
        let mut first = true;
        let mut text = String::new();
        for (i, cell) in cells.enumerate() {
            if !first {
                text.push_str("   ");
            }
            first = false;
            let w = widths.get(i).copied().unwrap_or(0);
            let _ = write!(text, "{cell:<w$}");
        }
        s.push_str(text.trim_end());
        s.push('\n');
    };
    line(&mut s, &mut header.iter().copied());
    for row in rows {
        line(&mut s, &mut row.iter().map(String::as_str));
    }
    s
}

/// `3s`, `5m`, `2h`, `4d` since `t`.
pub fn age(t: Timestamp, now: Timestamp) -> String {
    let secs = now.as_second().saturating_sub(t.as_second()).max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

pub fn bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "Ki", "Mi", "Gi", "Ti"];
    let mut v = b as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{b}B")
    } else {
        format!("{v:.1}{}", UNITS[unit])
    }
}

fn cpu(milli: u64) -> String {
    if milli.is_multiple_of(1000) {
        (milli / 1000).to_string()
    } else {
        format!("{milli}m")
    }
}

/// The jobs' table, ages as of `now`; `wide` adds preemptions, creation time and uid.
pub fn jobs_table(jobs: &[JobSummary], with_namespace: bool, wide: bool, now: Timestamp) -> String {
    let mut header = vec![];
    if with_namespace {
        header.push("NAMESPACE");
    }
    header.extend([
        "NAME",
        "STATE",
        "FRAMEWORK",
        "QUEUE",
        "REPLICAS",
        "GPUS",
        "RESTARTS",
        "AGE",
    ]);
    if wide {
        header.extend(["PREEMPTIONS", "CREATED", "UID"]);
    }
    let rows: Vec<Vec<String>> = jobs
        .iter()
        .map(|j| {
            let mut row = Vec::new();
            if with_namespace {
                row.push(j.namespace.clone());
            }
            row.extend([
                j.name.clone(),
                j.state.to_string(),
                j.framework.clone(),
                j.queue.clone(),
                format!("{}/{}", j.replicas_ready, j.replicas_total),
                j.gpus.to_string(),
                j.restarts.to_string(),
                age(j.created, now),
            ]);
            if wide {
                row.extend([
                    j.preemptions.to_string(),
                    j.created
                        .round(jiff::Unit::Second)
                        .unwrap_or(j.created)
                        .to_string(),
                    j.uid.clone(),
                ]);
            }
            row
        })
        .collect();
    table(&header, &rows)
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
    let mut failed = false;
    for file in &files {
        let shown = if file == "-" { "stdin" } else { file.as_str() };
        let text = match crate::input::read(file) {
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
            Some(dir) => match crate::snapshot::upload(&text, dir) {
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
                    let from = r
                        .converted_from
                        .map(|k| format!(" (converted from {k})"))
                        .unwrap_or_default();
                    println!(
                        "trainingjob/{} submitted in namespace {}{from}",
                        r.name, r.namespace
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
    let jobs = match client.list(ns.as_deref()) {
        Ok(jobs) => jobs,
        Err(e) => return fail(&e),
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
    watch(&client, ns.as_deref(), &[], args.output, jobs)
}

/// `trainingjob/<name>` lines.
pub fn names_text(jobs: &[JobSummary]) -> String {
    jobs.iter()
        .map(|j| format!("trainingjob/{}\n", j.name))
        .collect()
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
                    let table = jobs_table(&changed, with_ns, o == Output::Wide, Timestamp::now());
                    // The header was printed once, at the top.
                    table.lines().skip(1).map(|l| format!("{l}\n")).collect()
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
    if args.names.is_empty() {
        return run_list(&ListArgs {
            all_namespaces: args.all_namespaces,
            output: args.output,
            watch: args.watch,
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

/// The readable report of `corral describe`.
pub fn describe_text(d: &JobDetails) -> String {
    let now = Timestamp::now();
    let s = &d.summary;
    let mut t = String::new();
    let _ = writeln!(t, "Name:        {}", s.name);
    let _ = writeln!(t, "Namespace:   {}", s.namespace);
    let _ = writeln!(t, "Framework:   {}", s.framework);
    let _ = writeln!(t, "Queue:       {}", s.queue);
    if let Some(p) = &d.job.spec.priority_class {
        let _ = writeln!(t, "Priority:    {p}");
    }
    let _ = writeln!(t, "State:       {}", s.state);
    let _ = writeln!(
        t,
        "Replicas:    {}/{} ready, {} GPUs",
        s.replicas_ready, s.replicas_total, s.gpus
    );
    let _ = writeln!(
        t,
        "Created:     {} ({} ago)",
        s.created,
        age(s.created, now)
    );
    if let Some(st) = d.job.status.as_ref() {
        if let Some(start) = st.start_time {
            let _ = writeln!(t, "Started:     {start}");
        }
        if let Some(done) = st.completion_time {
            let _ = writeln!(t, "Completed:   {done}");
        }
    }
    let _ = writeln!(
        t,
        "Restarts:    {} (preempted {} times)",
        s.restarts, s.preemptions
    );
    if let Some(reason) = &d.pending_reason {
        let _ = writeln!(t, "Waiting:     {reason}");
    }
    if let Some(a) = &d.admission {
        let gpu = a.gpu_type.as_deref().unwrap_or("no GPU");
        let _ = writeln!(
            t,
            "Admitted:    pool {} ({gpu}) at {}",
            a.pool, a.admitted_at
        );
        for p in &a.placements {
            let gpus = if p.gpu_indices.is_empty() {
                String::new()
            } else {
                format!(
                    " GPUs {}",
                    p.gpu_indices
                        .iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                )
            };
            let _ = writeln!(t, "  {}-{} on {}{gpus}", p.role, p.index, p.node);
        }
    }
    if let Some(st) = d.job.status.as_ref()
        && !st.conditions.is_empty()
    {
        t.push_str("\nConditions:\n");
        let rows: Vec<Vec<String>> = st
            .conditions
            .iter()
            .map(|c| {
                vec![
                    format!("{:?}", c.type_),
                    format!("{:?}", c.status),
                    c.reason.clone(),
                    age(c.last_transition_time, now),
                    c.message.clone(),
                ]
            })
            .collect();
        t.push_str(&indent(&table(
            &["TYPE", "STATUS", "REASON", "AGE", "MESSAGE"],
            &rows,
        )));
    }
    if !d.replicas.is_empty() {
        t.push_str("\nReplicas:\n");
        let rows: Vec<Vec<String>> = d
            .replicas
            .iter()
            .map(|r| {
                let exit = match (r.exit_code, &r.reason) {
                    (Some(c), Some(why)) => format!("{c} ({why})"),
                    (Some(c), None) => c.to_string(),
                    (None, Some(why)) => why.clone(),
                    (None, None) => String::new(),
                };
                vec![
                    r.name.clone(),
                    r.phase.clone(),
                    r.pid.map(|p| p.to_string()).unwrap_or_default(),
                    r.port.map(|p| p.to_string()).unwrap_or_default(),
                    r.gpus
                        .iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(","),
                    r.restarts.to_string(),
                    exit,
                ]
            })
            .collect();
        t.push_str(&indent(&table(
            &["NAME", "PHASE", "PID", "PORT", "GPUS", "RESTARTS", "EXIT"],
            &rows,
        )));
        for r in &d.replicas {
            if let Some(message) = &r.message {
                t.push_str(&format!("  {}: {message}\n", r.name));
            }
        }
    }
    t.push_str("\nEvents:\n");
    if d.events.is_empty() {
        t.push_str("  <none>\n");
    } else {
        let rows: Vec<Vec<String>> = d
            .events
            .iter()
            .map(|e| {
                vec![
                    age(e.time, now),
                    e.type_.as_str().to_string(),
                    e.reason.clone(),
                    e.message.clone(),
                ]
            })
            .collect();
        t.push_str(&indent(&table(
            &["AGE", "TYPE", "REASON", "MESSAGE"],
            &rows,
        )));
    }
    t
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("  {l}\n")).collect()
}

/// `corral describe NAME...`
pub fn run_describe(args: &DescribeArgs) -> ExitCode {
    let client = args.conn.client();
    let ns = args.namespace.resolve(&client);
    let mut code = ExitCode::SUCCESS;
    for (i, name) in args.names.iter().enumerate() {
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

/// The jobs a command acts on: the names given, or with `--all` / `-l` those of the
/// namespace that match, confirmed by the user when more than one would go.
fn targets(
    args: &JobArgs,
    client: &Client,
    ns: &str,
    verb: &str,
    confirm: &Confirm<'_>,
) -> Result<Vec<String>, String> {
    if !args.all && args.selector.is_none() {
        return Ok(args.names.clone());
    }
    let selector = match &args.selector {
        Some(s) => Some(Selector::parse(s)?),
        None => None,
    };
    let jobs = client.list(Some(ns)).map_err(|e| e.to_string())?;
    let mut names = Vec::new();
    // A job already being deleted is on its way out: acting on it again would only fail
    // once it is gone.
    for j in jobs.into_iter().filter(|j| j.state != JobState::Deleting) {
        if let Some(sel) = &selector {
            let job = match client.get(ns, &j.name) {
                Ok(job) => job,
                Err(e) if is_not_found(&e) => continue,
                Err(e) => return Err(e.to_string()),
            };
            let labels = job.pointer("/metadata/labels").and_then(Value::as_object);
            let label = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
            if !sel.matches(label) {
                continue;
            }
        }
        names.push(j.name);
    }
    if names.len() > 1 && !args.yes {
        let question = format!(
            "{verb} {} in namespace {ns}: {}?",
            plural(names.len() as u64, "job"),
            names.join(", ")
        );
        if !confirm(&question)? {
            return Err("answered no, so nothing changed".into());
        }
    }
    Ok(names)
}

fn is_not_found(e: &ClientError) -> bool {
    matches!(e, ClientError::Api { status: 404, .. })
}

/// Asks the user a yes/no question; `Err` when nobody can be asked.
pub type Confirm<'a> = dyn Fn(&str) -> Result<bool, String> + 'a;

/// Asks on the terminal; without one (a script), refuses and names `--yes`.
pub fn confirm_on_terminal(question: &str) -> Result<bool, String> {
    use std::io::IsTerminal;
    if !std::io::stdin().is_terminal() {
        return Err(format!(
            "{question} Not asked (no terminal): pass --yes to go ahead"
        ));
    }
    eprint!("{question} [y/N] ");
    let mut answer = String::new();
    std::io::stdin()
        .read_line(&mut answer)
        .map_err(|e| format!("cannot read the answer: {e}"))?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
}

/// A label selector: `k=v`, `k==v`, `k!=v`, `k` (has it), `!k` (has it not), comma-joined
/// (all must hold), as kubectl's equality-based selectors.
#[derive(Debug, PartialEq)]
pub struct Selector(Vec<(String, SelectorOp)>);

#[derive(Debug, PartialEq)]
enum SelectorOp {
    Is(String),
    IsNot(String),
    Exists,
    Absent,
}

impl Selector {
    pub fn parse(text: &str) -> Result<Selector, String> {
        let mut out = Vec::new();
        for part in text.split(',').map(str::trim) {
            let bad = || {
                format!(
                    "`{part}` is not a selector term; use `key=value`, `key!=value`, `key` or `!key`"
                )
            };
            let (key, op) = if let Some((k, v)) = part.split_once("!=") {
                (k, SelectorOp::IsNot(v.trim().to_string()))
            } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                (k, SelectorOp::Is(v.trim().to_string()))
            } else if let Some(k) = part.strip_prefix('!') {
                (k, SelectorOp::Absent)
            } else {
                (part, SelectorOp::Exists)
            };
            let key = key.trim();
            if key.is_empty() || key.contains(['=', '!', ' ']) {
                return Err(bad());
            }
            out.push((key.to_string(), op));
        }
        Ok(Selector(out))
    }

    pub fn matches<'a>(&self, label: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.0.iter().all(|(k, op)| match op {
            SelectorOp::Is(v) => label(k) == Some(v.as_str()),
            SelectorOp::IsNot(v) => label(k) != Some(v.as_str()),
            SelectorOp::Exists => label(k).is_some(),
            SelectorOp::Absent => label(k).is_none(),
        })
    }
}

fn each_job(
    args: &JobArgs,
    verb: &str,
    confirm: &Confirm<'_>,
    f: impl Fn(&Client, &str, &str) -> Result<(), ClientError>,
) -> ExitCode {
    let client = args.conn.client();
    let ns = args.namespace.resolve(&client);
    let names = match targets(args, &client, &ns, verb_base(verb), confirm) {
        Ok(n) => n,
        Err(e) => return fail(&e),
    };
    if names.is_empty() {
        eprintln!("No jobs in namespace {ns} match.");
        return ExitCode::SUCCESS;
    }
    let mut code = ExitCode::SUCCESS;
    let selected = args.all || args.selector.is_some();
    for name in &names {
        match f(&client, &ns, name) {
            Ok(()) => println!("trainingjob/{name} {verb}"),
            // Selected from a list that another client changed since: the job went meanwhile,
            // which is no fault of this command.
            Err(e) if selected && is_not_found(&e) => {
                eprintln!("trainingjob/{name} was deleted meanwhile")
            }
            Err(e) => {
                eprintln!("error: {e}");
                code = ExitCode::FAILURE;
            }
        }
    }
    code
}

/// `delete` of `deleted`, for the question before acting.
fn verb_base(done: &str) -> &str {
    match done {
        "deleted" => "delete",
        "suspended" => "suspend",
        "resumed" => "resume",
        other => other,
    }
}

/// `corral delete NAME...`
pub fn run_delete(args: &JobArgs) -> ExitCode {
    delete_with(args, &confirm_on_terminal)
}

/// `corral delete`, asking with `confirm` before more than one job goes.
pub fn delete_with(args: &JobArgs, confirm: &Confirm<'_>) -> ExitCode {
    each_job(args, "deleted", confirm, |c, ns, n| c.delete(ns, n))
}

/// `corral suspend NAME...`
pub fn run_suspend(args: &JobArgs) -> ExitCode {
    each_job(args, "suspended", &confirm_on_terminal, |c, ns, n| {
        c.suspend(ns, n)
    })
}

/// `corral resume NAME...`
pub fn run_resume(args: &JobArgs) -> ExitCode {
    each_job(args, "resumed", &confirm_on_terminal, |c, ns, n| {
        c.resume(ns, n)
    })
}

pub fn queues_table(queues: &[QueueInfo]) -> String {
    let rows: Vec<Vec<String>> = queues
        .iter()
        .map(|q| {
            let usage: Vec<String> = q
                .usage
                .iter()
                .map(|u| {
                    let used = u.used.gpu;
                    match u.nominal.map(|n| n.gpu) {
                        Some(Some(n)) => format!("{}: {used} of {} used", u.pool, plural(n, "GPU")),
                        Some(None) => {
                            format!("{}: {} used, unlimited", u.pool, plural(used, "GPU"))
                        }
                        None => format!("{}: {} used, no quota", u.pool, plural(used, "GPU")),
                    }
                })
                .collect();
            vec![
                q.name.clone(),
                q.cohort.clone().unwrap_or_else(|| "-".into()),
                q.weight.to_string(),
                q.pending.to_string(),
                q.admitted.to_string(),
                usage.join("; "),
            ]
        })
        .collect();
    table(
        &["QUEUE", "COHORT", "WEIGHT", "PENDING", "ADMITTED", "USAGE"],
        &rows,
    )
}

/// `corral queues`
pub fn run_queues(args: &ClusterViewArgs) -> ExitCode {
    match args.conn.client().queues() {
        Ok(q) if args.output.is_table() => out(&queues_table(&q)),
        Ok(q) => print_structured(&serde_json::json!({ "items": q }), args.output),
        Err(e) => fail(&e),
    }
}

/// A value or `-` (absent: not measured here, e.g. no NVML).
fn opt(v: Option<String>) -> String {
    v.unwrap_or_else(|| "-".into())
}

pub fn nodes_text(nodes: &[NodeInfo]) -> String {
    let rows: Vec<Vec<String>> = nodes
        .iter()
        .map(|n| {
            let used = n.gpus.iter().filter(|g| g.used_by.is_some()).count();
            vec![
                n.name.clone(),
                n.pool.clone().unwrap_or_else(|| "-".into()),
                n.gpu_type.clone().unwrap_or_else(|| "-".into()),
                format!("{used}/{}", n.gpus.len()),
                format!("{}/{}", cpu(n.cpu_milli_allocated), cpu(n.cpu_milli)),
                format!(
                    "{}/{}",
                    bytes(n.memory_bytes_allocated),
                    bytes(n.memory_bytes)
                ),
            ]
        })
        .collect();
    let mut t = table(
        &["NODE", "POOL", "GPU TYPE", "GPUS USED", "CPU", "MEMORY"],
        &rows,
    );
    let gpu_rows: Vec<Vec<String>> = nodes
        .iter()
        .flat_map(|n| {
            n.gpus.iter().map(move |g| {
                let used = match (g.memory_used_bytes, g.memory_bytes) {
                    (Some(u), Some(t)) => format!("{}/{}", bytes(u), bytes(t)),
                    (None, Some(t)) => bytes(t),
                    _ => "-".into(),
                };
                vec![
                    n.name.clone(),
                    g.index.to_string(),
                    g.name.clone(),
                    used,
                    opt(g.utilization_percent.map(|u| format!("{u}%"))),
                    opt(g.power_watts.map(|w| format!("{w:.0}W"))),
                    opt(g.temperature_celsius.map(|c| format!("{c}C"))),
                    match &g.unhealthy {
                        Some(why) => format!("UNHEALTHY: {why}"),
                        None if g.uuid.is_some() => "ok".into(),
                        None => "-".into(),
                    },
                    g.used_by.clone().unwrap_or_else(|| "free".into()),
                ]
            })
        })
        .collect();
    if !gpu_rows.is_empty() {
        t.push('\n');
        t.push_str(&table(
            &[
                "NODE", "GPU", "NAME", "MEMORY", "UTIL", "POWER", "TEMP", "HEALTH", "USED BY",
            ],
            &gpu_rows,
        ));
    }
    t
}

/// `corral nodes`
pub fn run_nodes(args: &ClusterViewArgs) -> ExitCode {
    match args.conn.client().nodes() {
        Ok(n) if args.output.is_table() => out(&nodes_text(&n)),
        Ok(n) => print_structured(&serde_json::json!({ "items": n }), args.output),
        Err(e) => fail(&e),
    }
}

/// `corral top` rows with CPU use as a percentage of one core between two samples.
pub fn top_table(
    before: &[ReplicaUsageRow],
    after: &[ReplicaUsageRow],
    elapsed: Duration,
) -> String {
    let secs = elapsed.as_secs_f64().max(1e-3);
    let rows: Vec<Vec<String>> = after
        .iter()
        .map(|r| {
            let prev = before
                .iter()
                .find(|b| {
                    b.namespace == r.namespace
                        && b.job == r.job
                        && b.replica == r.replica
                        && b.pid == r.pid
                })
                .and_then(|b| b.cpu_seconds);
            let cpu = match (prev, r.cpu_seconds) {
                (Some(a), Some(b)) => format!("{:.0}%", ((b - a).max(0.0) / secs) * 100.0),
                (None, Some(b)) => format!("{b:.1}s"),
                _ => "-".into(),
            };
            vec![
                r.namespace.clone(),
                r.job.clone(),
                r.replica.clone(),
                r.pid.map(|p| p.to_string()).unwrap_or_else(|| "-".into()),
                cpu,
                r.memory_bytes.map(bytes).unwrap_or_else(|| "-".into()),
                if r.gpus.is_empty() {
                    "-".into()
                } else {
                    r.gpus
                        .iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                },
                opt(r.gpu_utilization_percent.map(|u| format!("{u}%"))),
                opt(r.gpu_memory_bytes.map(bytes)),
            ]
        })
        .collect();
    table(
        &[
            "NAMESPACE",
            "JOB",
            "REPLICA",
            "PID",
            "CPU",
            "MEMORY",
            "GPUS",
            "GPU UTIL",
            "GPU MEM",
        ],
        &rows,
    )
}

/// `corral top`: samples twice, a second apart, to show CPU as a rate.
pub fn run_top(args: &TopArgs) -> ExitCode {
    let client = args.conn.client();
    if !args.output.is_table() {
        return match client.top() {
            Ok(rows) => print_structured(&serde_json::json!({ "items": rows }), args.output),
            Err(e) => fail(&e),
        };
    }
    let mut before = match client.top() {
        Ok(r) => r,
        Err(e) => return fail(&e),
    };
    let mut at = Instant::now();
    loop {
        std::thread::sleep(Duration::from_secs(args.watch.unwrap_or(1).max(1)));
        let after = match client.top() {
            Ok(r) => r,
            Err(e) => return fail(&e),
        };
        let text = if after.is_empty() {
            "No replicas are running.\n".to_string()
        } else {
            top_table(&before, &after, at.elapsed())
        };
        if args.watch.is_some() {
            // Clear the screen and print again.
            let code = out(&format!("\x1b[2J\x1b[H{text}"));
            if code != ExitCode::SUCCESS {
                return code;
            }
        } else {
            return out(&text);
        }
        before = after;
        at = Instant::now();
    }
}

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
    let options = corral_server::bench::ApiBenchOptions {
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
    match corral_server::bench::api_bench(&options) {
        Ok(v) => print_structured(&v, Output::Json),
        Err(e) => fail(&e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use corral_core::sched::ResourceAmount;
    use corral_local::cluster::{QueuePoolUsage, QuotaLimits};

    fn at(s: &str) -> Timestamp {
        s.parse().expect("timestamp")
    }

    fn jobs() -> Vec<JobSummary> {
        let job = |ns: &str, name: &str, state, ready, total, gpus, restarts, created| JobSummary {
            namespace: ns.into(),
            name: name.into(),
            uid: format!("{name}-0001"),
            framework: "pytorch".into(),
            queue: "team-a".into(),
            state,
            replicas_ready: ready,
            replicas_total: total,
            gpus,
            created: at(created),
            restarts,
            preemptions: 0,
        };
        vec![
            job(
                "vision",
                "resnet",
                JobState::Running,
                4,
                4,
                8,
                2,
                "2026-11-23T10:00:00Z",
            ),
            job(
                "nlp",
                "bert",
                JobState::Queued,
                0,
                1,
                1,
                0,
                "2026-11-23T11:59:30Z",
            ),
        ]
    }

    const NOW: &str = "2026-11-23T12:00:00Z";

    #[test]
    fn jobs_tables() {
        insta::assert_snapshot!("jobs", jobs_table(&jobs(), false, false, at(NOW)));
        insta::assert_snapshot!(
            "jobs_all_namespaces_wide",
            jobs_table(&jobs(), true, true, at(NOW))
        );
        insta::assert_snapshot!("jobs_names", names_text(&jobs()));
    }

    #[test]
    fn queues_table_says_of_what() {
        let usage = |pool: &str, used, nominal: Option<ResourceAmount>| QueuePoolUsage {
            pool: pool.into(),
            used: ResourceAmount::gpus(used),
            nominal: nominal.map(QuotaLimits::from),
            borrowing_limit: None,
        };
        let queues = vec![QueueInfo {
            name: "team-a".into(),
            cohort: Some("research".into()),
            weight: 1,
            pending: 1,
            admitted: 1,
            usage: vec![
                usage("h100", 12, Some(ResourceAmount::gpus(16))),
                usage("a100", 1, Some(ResourceAmount::UNLIMITED)),
                usage("v100", 0, None),
            ],
        }];
        insta::assert_snapshot!("queues", queues_table(&queues));
    }

    #[test]
    fn ages_have_units() {
        let now = at(NOW);
        assert_eq!(age(at("2026-11-23T11:59:55Z"), now), "5s");
        assert_eq!(age(at("2026-11-23T11:50:00Z"), now), "10m");
        assert_eq!(age(at("2026-11-23T07:00:00Z"), now), "5h");
        assert_eq!(age(at("2026-11-20T12:00:00Z"), now), "3d");
    }

    #[test]
    fn selectors() {
        let labels = |k: &str| match k {
            "team" => Some("nlp"),
            "stage" => Some("dev"),
            _ => None,
        };
        for (sel, want) in [
            ("team=nlp", true),
            ("team==nlp", true),
            ("team=vision", false),
            ("team=nlp,stage!=prod", true),
            ("team=nlp,stage!=dev", false),
            ("stage", true),
            ("owner", false),
            ("!owner", true),
        ] {
            let s = Selector::parse(sel).expect("valid");
            assert_eq!(s.matches(labels), want, "{sel}");
        }
        for bad in ["", "=x", "a b=c"] {
            let e = Selector::parse(bad).expect_err(bad);
            assert!(e.contains("is not a selector term"), "{e}");
        }
    }
}
