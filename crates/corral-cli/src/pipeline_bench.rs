//! `corral bench pipeline` (JSON): Corral's own overhead between the steps of a pipeline,
//! through a real embedded server: a DAG of trivial steps (by default 1,000: 10 chains of 100),
//! each step writing the wall-clock time it started and ended (`date +%s%N`) into a file of
//! its own, and for every edge the time from the step's end to its successor's start (the
//! exit seen, the run decided, its status and the successor's job stored, the replica
//! started: everything Corral does in between, and the successor's process start), and the
//! control plane's share of it from the jobs' status (the end seen -> the successor's replica
//! started). Then the runs accepted per second: small runs submitted one after another, all
//! of them stored.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use corral_api::pipeline::RunPhase;
use corral_server::api_client::Client;
use serde_json::{Value, json};

use crate::remote::Output;
use crate::remote::print::{fail, print_structured};

#[derive(Args, Debug)]
pub struct BenchPipelineArgs {
    /// Chains of steps in the DAG, run side by side (the run's parallelism). Each step asks
    /// 100m CPU (a step asking 10m is throttled to 1 ms of CPU per 100 ms, and its own
    /// start then dominates what is measured).
    #[arg(long, default_value_t = 10)]
    pub chains: usize,
    /// Steps in each chain.
    #[arg(long, default_value_t = 100)]
    pub length: usize,
    /// Runs submitted one after another for the runs accepted per second (0: skip).
    #[arg(long, default_value_t = 200)]
    pub runs: usize,
}

/// The target: a step's end to its successor's start, p50, embedded.
const TARGET_P50_MS: f64 = 20.0;

/// `corral bench pipeline`: prints JSON.
pub fn run_bench_pipeline(args: &BenchPipelineArgs) -> ExitCode {
    if args.chains == 0 || args.length < 2 {
        return fail(
            &"--chains must be at least 1 and --length at least 2 (a chain needs an edge)",
        );
    }
    match bench(args) {
        Ok(report) => print_structured(&report, Output::Json),
        Err(e) => fail(&e),
    }
}

fn step_name(chain: usize, index: usize) -> String {
    format!("c{chain}-{index}")
}

/// The run: `chains` chains of `length` steps, each recording its start and end in
/// `stamps/<step>`.
fn dag(args: &BenchPipelineArgs, stamps: &Path) -> String {
    let mut steps = String::new();
    for c in 0..args.chains {
        for i in 0..args.length {
            let name = step_name(c, i);
            let file = stamps.join(&name).display().to_string();
            let needs = if i == 0 {
                String::new()
            } else {
                format!(", dependsOn: [{}]", step_name(c, i - 1))
            };
            steps.push_str(&format!(
                "      - {{name: {name}{needs}, task: {{command: [sh, -c, 'echo $(date +%s%N) > {file}; \
                 date +%s%N >> {file}'], resources: {{cpu: 100m, memory: 16Mi}}}}}}\n"
            ));
        }
    }
    format!(
        "apiVersion: corral.dev/v1alpha1\nkind: PipelineRun\nmetadata: {{name: dag}}\nspec:\n  \
         pipelineSpec:\n    parallelism: {}\n    steps:\n{steps}",
        args.chains
    )
}

/// A step's start and end, in nanoseconds since the epoch.
fn stamps_of(path: &Path) -> Result<(i128, i128), String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{}: {e} (did the step run?)", path.display()))?;
    let mut lines = text.lines().map(|l| l.trim().parse::<i128>());
    match (lines.next(), lines.next()) {
        (Some(Ok(start)), Some(Ok(end))) => Ok((start, end)),
        _ => Err(format!("{}: not two times: {text:?}", path.display())),
    }
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn round(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

fn bench(args: &BenchPipelineArgs) -> Result<Value, String> {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    // As root, steps run as their namespace's uid: they pass through the directory and
    // write their stamps into one open to them.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711))
        .map_err(|e| e.to_string())?;
    let stamps = dir.path().join("stamps");
    std::fs::create_dir(&stamps).map_err(|e| e.to_string())?;
    std::fs::set_permissions(&stamps, std::fs::Permissions::from_mode(0o777))
        .map_err(|e| e.to_string())?;
    let mut options = corral_server::ServerOptions::new(corral_local::ClusterConfig::new(
        dir.path().join("data"),
    ));
    options.listen = SocketAddr::from(([127, 0, 0, 1], 0));
    options.stop_replicas_on_exit = true;
    let server = corral_server::Server::start(options)?;
    let client = Client::new(&server.url(), None);
    let result = measure(args, &client, &stamps);
    let _ = server.stop();
    result
}

fn measure(args: &BenchPipelineArgs, client: &Client, stamps: &Path) -> Result<Value, String> {
    let err = |e: corral_server::api_client::ClientError| e.to_string();
    let steps = args.chains * args.length;
    let started = Instant::now();
    client.submit("default", &dag(args, stamps)).map_err(err)?;
    let deadline = started + Duration::from_secs(60 + steps as u64);
    let phase = loop {
        let d = client
            .describe_pipeline_run("default", "dag")
            .map_err(err)?;
        let phase = d.run.status.as_ref().map(|s| s.phase);
        if let Some(p) = phase.filter(|p| p.is_finished()) {
            break p;
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the run did not end within {} s",
                deadline.duration_since(started).as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let wall = started.elapsed().as_secs_f64();
    if phase != RunPhase::Succeeded {
        return Err(format!("the run ended {phase:?}"));
    }
    let mut times: BTreeMap<String, (i128, i128)> = BTreeMap::new();
    for c in 0..args.chains {
        for i in 0..args.length {
            let name = step_name(c, i);
            times.insert(name.clone(), stamps_of(&stamps.join(&name))?);
        }
    }
    let mut handoffs: Vec<f64> = Vec::new();
    for c in 0..args.chains {
        for i in 1..args.length {
            let (_, end) = times[&step_name(c, i - 1)];
            let (start, _) = times[&step_name(c, i)];
            handoffs.push((start - end) as f64 / 1e6);
        }
    }
    handoffs.sort_by(f64::total_cmp);
    let p50 = quantile(&handoffs, 0.5);
    // The plane's share: the predecessor's completion as the server recorded it to the
    // successor's start as it recorded it (the replica's process running).
    let mut planes: Vec<f64> = Vec::new();
    let times_of = |name: &str| -> Result<(Option<f64>, Option<f64>), String> {
        let job = client
            .get("default", &format!("dag-{name}"))
            .map_err(|e| e.to_string())?;
        let at = |field: &str| {
            job["status"][field]
                .as_str()
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                .map(|t| t.as_nanosecond() as f64 / 1e6)
        };
        Ok((at("startTime"), at("completionTime")))
    };
    for c in 0..args.chains {
        let mut before = times_of(&step_name(c, 0))?;
        for i in 1..args.length {
            let now = times_of(&step_name(c, i))?;
            if let (Some(end), Some(start)) = (before.1, now.0) {
                planes.push(start - end);
            }
            before = now;
        }
    }
    planes.sort_by(f64::total_cmp);
    let accepted = if args.runs > 0 {
        Some(accept_runs(client, args.runs)?)
    } else {
        None
    };
    Ok(json!({
        "steps": steps,
        "chains": args.chains,
        "edges": handoffs.len(),
        "wallSeconds": round(wall),
        "stepsPerSecond": round(steps as f64 / wall),
        "handoffMs": {
            "p50": round(p50),
            "p95": round(quantile(&handoffs, 0.95)),
            "p99": round(quantile(&handoffs, 0.99)),
            "max": round(handoffs.last().copied().unwrap_or(f64::NAN)),
            "what": "a step's end to its successor's start, both read by the steps' own clock",
        },
        "controlPlaneMs": {
            "p50": round(quantile(&planes, 0.5)),
            "p99": round(quantile(&planes, 0.99)),
            "edges": planes.len(),
            "what": "a step's job completed -> its successor's replica running, as the server recorded both (each at the time of its pass: 0 is the same pass)",
        },
        "runsAccepted": accepted,
        "targets": {
            "handoff_p50_at_most_20ms": p50 <= TARGET_P50_MS,
        },
    }))
}

/// `runs` small runs (two steps) submitted one after another: runs/s, and every one stored.
fn accept_runs(client: &Client, runs: usize) -> Result<Value, String> {
    let err = |e: corral_server::api_client::ClientError| e.to_string();
    let text = |i: usize| {
        format!(
            "apiVersion: corral.dev/v1alpha1\nkind: PipelineRun\nmetadata: {{name: small-{i}}}\n\
             spec:\n  pipelineSpec:\n    steps:\n      \
             - {{name: a, cache: {{enabled: false}}, task: {{command: ['true'], resources: {{cpu: 10m, memory: 16Mi}}}}}}\n      \
             - {{name: b, dependsOn: [a], cache: {{enabled: false}}, task: {{command: ['true'], resources: {{cpu: 10m, memory: 16Mi}}}}}}\n"
        )
    };
    let mut latencies = Vec::with_capacity(runs);
    let started = Instant::now();
    for i in 0..runs {
        let t = Instant::now();
        client.submit("bench", &text(i)).map_err(err)?;
        latencies.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let seconds = started.elapsed().as_secs_f64();
    let stored = client.pipeline_runs(Some("bench")).map_err(err)?.len();
    latencies.sort_by(f64::total_cmp);
    Ok(json!({
        "runs": runs,
        "perSecond": round(runs as f64 / seconds),
        "submitMs": {"p50": round(quantile(&latencies, 0.5)), "p99": round(quantile(&latencies, 0.99))},
        "stored": stored,
        "lost": runs.saturating_sub(stored),
    }))
}
