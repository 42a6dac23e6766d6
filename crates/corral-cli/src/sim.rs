//! `corral sim`: replays a cluster trace through Corral's scheduler and baseline policies on
//! a simulated clock and cluster (crate `corral-sim`), and prints a table, JSON or an HTML
//! report. Wall-clock timing and the progress bar live here, not in the library.

use std::path::Path;
use std::time::Instant;

use corral_sim::cluster::ClusterSpec;
use corral_sim::trace::{self, Format};
use corral_sim::{EngineConfig, PolicyKind, SimJob, report};

/// Arguments of `corral sim`.
#[derive(clap::Args, Debug, Clone)]
pub struct SimArgs {
    /// The trace file (e.g. ../shared/traces/gavel/dev-seed1.trace).
    #[arg(long, value_name = "FILE")]
    pub trace: String,
    /// Trace format: gavel, philly, sia or alibaba (when left out: sia if the file starts
    /// with Sia's header `name,time,application,num_replicas,batch_size`, else guessed from
    /// the file name). `alibaba` (an `openb_pod_list_*.csv`) runs the fragmentation
    /// experiment of "Beware of Fragmentation" (ATC 2023) instead of the round-based
    /// simulation. `sia` derives each job's length and per-GPU-type speed from Sia's
    /// profiles (see --profiles).
    #[arg(long, value_name = "FORMAT")]
    pub format: Option<String>,
    /// Alibaba node list (default: openb_node_list_gpu_node.csv next to the trace).
    #[arg(long, value_name = "FILE")]
    pub nodes_file: Option<String>,
    /// Gavel's throughput matrix (default: simulation_throughputs.json next to the trace).
    #[arg(long, value_name = "FILE")]
    pub throughputs: Option<String>,
    /// Sia's profiles directory, with one `<model>/` of placements-, scalability- and
    /// validation-*.csv files per application (default: `<workload>/../../traces`).
    #[arg(long, value_name = "DIR")]
    pub profiles: Option<String>,
    /// GPUs per type, e.g. `k80:12,p100:12,v100:12` or `v100:64/8` (64 GPUs on 8-GPU nodes).
    /// Default: k80:12,p100:12,v100:12 for Gavel traces; for Sia workloads the Sia paper's
    /// t4:24/4,a100:16/8,rtx2080ti:24/8 (types t4, v100, a100, rtx6000, rtx2080ti or Sia's
    /// machine names aws, azure, dgx-ext, dgx, quad, rtx); gpu:2048/8 otherwise.
    #[arg(long, value_name = "TYPE:GPUS,...", conflicts_with = "cluster_file")]
    pub cluster: Option<String>,
    /// A YAML cluster file (pools of gpu_type with gpus or nodes, gpus_per_node).
    #[arg(long, value_name = "FILE")]
    pub cluster_file: Option<String>,
    /// GPUs per node for `--cluster` entries that do not say.
    #[arg(long, default_value_t = 1)]
    pub gpus_per_node: u32,
    /// Policy name, comma-separated names, or `all`: corral, fifo, sjf, las, gandiva,
    /// max_min_fairness, max_min_fairness_perf (gavel), max_sum_throughput_perf (Sia's
    /// gavel baseline). For `--format alibaba`: corral,
    /// first_fit, best_fit.
    #[arg(long, default_value = "all")]
    pub policy: String,
    /// Round length in seconds (default: 360, Gavel's; 60 for Sia workloads, Sia's round,
    /// since its jobs run for minutes on fast GPUs).
    #[arg(long, value_name = "SECONDS")]
    pub round_s: Option<f64>,
    /// Seconds a preempted or migrated job spends restarting (checkpoint + restart). Sia
    /// workloads use each model's own restart time instead.
    #[arg(long, default_value_t = 30.0)]
    pub restart_s: f64,
    /// Productive seconds between checkpoints; work since the last one is lost on
    /// preemption (0: jobs checkpoint when stopped, within the restart cost).
    #[arg(long, default_value_t = 0.0)]
    pub checkpoint_s: f64,
    /// Seed of the random choices (Gavel's FIFO picks random GPU types).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Corral's dwell between two resizes of an elastic job (`corral-elastic`; default 60,
    /// as `resizeDwellSeconds` of `corral up` and `--resize-dwell-secs` of the operator).
    #[arg(long, value_name = "SECONDS")]
    pub resize_dwell_seconds: Option<u64>,
    /// Simulate only the first N jobs of the trace.
    #[arg(long, value_name = "N")]
    pub limit: Option<usize>,
    /// Output: table, json or html.
    #[arg(long, default_value = "table", value_parser = ["table", "json", "html"])]
    pub output: String,
    /// Also write report.html and results.json into this directory.
    #[arg(long, value_name = "DIR")]
    pub report: Option<String>,
    /// A published simulator's results for the same trace, shown beside Corral's in the
    /// report (Gavel's `reference-results-*.json` format). Default for Gavel traces: the
    /// `reference-results-*.json` beside the trace whose `trace` field names it.
    #[arg(long, value_name = "FILE")]
    pub reference: Option<String>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

/// Why Corral's numbers differ from Gavel's simulator's for a policy, where they do by
/// design.
fn gavel_note(policy: &str, restart_s: f64) -> String {
    let restart = if restart_s > 0.0 {
        format!(
            " Corral charges {restart_s} s each time a preempted job restarts; Gavel's simulator \
             charges nothing (run with --restart-s 0 for its cost model)."
        )
    } else {
        " Same cost model as Gavel's (no restart cost).".to_string()
    };
    let why = match policy {
        "fifo" => {
            "Gavel's fifo is not first-in-first-out: in its default mode it draws a random GPU \
             type but allocates the job to the last type of its list of types with free GPUs \
             (scheduler/policies/fifo.py, get_allocation: `worker_type` keeps the loop \
             variable's value; the random index only decides which type is dropped from the \
             list), so V100s are over-committed and Gavel's round mechanism time-slices the \
             jobs on them. Corral's fifo runs each job to completion in arrival order; policy \
             fifo_gavel reproduces Gavel's code, quirk included."
        }
        "fifo_gavel" => {
            "Gavel's fifo code, quirk included (see fifo). Its result depends strongly on the \
             random draws (which GPU type leaves the list when one fills up), and Python's \
             random numbers are not reproduced: compare across --seed values."
        }
        "gandiva" => {
            "Gavel's gandiva also pairs jobs of equal scale factor on one GPU when the jobs \
             ask for more GPUs than exist, at measured co-location throughputs; Corral's \
             engine gives a GPU to one job at a time, so that packing is not modelled."
        }
        _ => {
            "Same policy and round mechanism (LP allocation, 360 s rounds, recomputed at most \
              every 1920 s)."
        }
    };
    format!("{why}{restart}")
}

/// The reference results for `trace` (Gavel's format): `--reference`, else a
/// `reference-results-*.json` beside the trace that names it. Policies not run are left
/// out.
fn load_references(
    args: &SimArgs,
    format: Format,
    ran: &[String],
) -> Result<Vec<report::Reference>, String> {
    let path = match (&args.reference, format) {
        (Some(p), _) => Some(std::path::PathBuf::from(p)),
        (None, Format::Gavel) => {
            let trace = Path::new(&args.trace);
            let name = trace.file_name().map(|n| n.to_string_lossy().into_owned());
            let dir = trace.parent().unwrap_or(Path::new("."));
            let mut found = None;
            if let (Ok(entries), Some(name)) = (std::fs::read_dir(dir), name) {
                let mut files: Vec<_> = entries
                    .filter_map(|e| e.ok())
                    .map(|e| e.path())
                    .filter(|p| {
                        p.file_name().is_some_and(|n| {
                            let n = n.to_string_lossy();
                            n.starts_with("reference-results-") && n.ends_with(".json")
                        })
                    })
                    .collect();
                files.sort();
                for f in files {
                    let Ok(text) = std::fs::read_to_string(&f) else {
                        continue;
                    };
                    let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
                        continue;
                    };
                    if v.get("trace").and_then(|t| t.as_str()) == Some(name.as_str()) {
                        found = Some(f);
                        break;
                    }
                }
            }
            found
        }
        (None, _) => None,
    };
    let Some(path) = path else {
        return Ok(Vec::new());
    };
    let shown = path.display().to_string();
    let v: serde_json::Value =
        serde_json::from_str(&read(&shown)?).map_err(|e| format!("{shown}: not JSON: {e}"))?;
    let results = v
        .get("results")
        .and_then(|r| r.as_object())
        .ok_or_else(|| format!("{shown}: expected an object `results` of policy -> result"))?;
    let mut out = Vec::new();
    // Gavel's `fifo` number is also the reference of `fifo_gavel` (its code, reproduced).
    let rows = results.iter().flat_map(|(p, r)| {
        let alias = (p == "fifo").then(|| ("fifo_gavel".to_string(), r));
        std::iter::once((p.clone(), r)).chain(alias)
    });
    for (policy, r) in rows {
        let policy = &policy;
        if !ran.contains(policy) {
            continue;
        }
        let Some(avg) = r.get("avg_jct_s").and_then(|x| x.as_f64()) else {
            continue; // a failed run (e.g. Gavel's allox) has no numbers
        };
        out.push(report::Reference {
            policy: policy.clone(),
            avg_jct_s: avg,
            makespan_s: r.get("makespan_s").and_then(|x| x.as_f64()),
            source: format!(
                "Gavel's simulator ({})",
                path.file_name()
                    .map_or(String::new(), |n| n.to_string_lossy().into_owned())
            ),
            note: gavel_note(policy, args.restart_s),
            ours_at_their_costs_s: None,
        });
    }
    Ok(out)
}

/// A published result beside Corral's, for the JSON output: theirs, ours, the difference
/// and why they differ.
fn reference_json(r: &report::Reference, ours_avg_jct_s: f64) -> serde_json::Value {
    serde_json::json!({
        "source": r.source,
        "avg_jct_s": r.avg_jct_s,
        "makespan_s": r.makespan_s,
        "avg_jct_difference_percent": (ours_avg_jct_s / r.avg_jct_s - 1.0) * 100.0,
        "ours_at_their_costs_avg_jct_s": r.ours_at_their_costs_s,
        "why": r.note,
    })
}

/// Words of `text` in lines of at most `width` characters (a longer word has its own line).
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.len() + 1 + word.len() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

fn read(path: &str) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))
}

/// The jobs of the trace, and notes on how they were derived (Sia).
fn load_jobs(
    args: &SimArgs,
    format: Format,
    cluster: &corral_sim::SimCluster,
) -> Result<(Vec<SimJob>, Vec<String>), String> {
    if format == Format::Sia {
        return trace::sia::load(
            &args.trace,
            args.profiles.as_deref(),
            &cluster.types,
            args.limit,
        );
    }
    let text = read(&args.trace)?;
    let jobs = match format {
        Format::Gavel => {
            let tp = match &args.throughputs {
                Some(p) => p.clone(),
                None => Path::new(&args.trace)
                    .with_file_name("simulation_throughputs.json")
                    .to_string_lossy()
                    .into_owned(),
            };
            let t = trace::gavel::Throughputs::parse(&read(&tp)?, &tp)?;
            let mut jobs = trace::gavel::parse_trace(&text, &args.trace, &t)?;
            if let Some(n) = args.limit {
                jobs.truncate(n);
            }
            jobs
        }
        Format::Philly => trace::philly::parse(&text, &args.trace, args.limit)?,
        Format::Alibaba | Format::Sia => {
            return Err("the alibaba format is not a job trace".into());
        }
    };
    Ok((jobs, Vec::new()))
}

/// The first line of a file (empty when it cannot be read: the reader reports that).
fn first_line(path: &str) -> String {
    use std::io::BufRead;
    std::fs::File::open(path)
        .ok()
        .and_then(|f| std::io::BufReader::new(f).lines().next()?.ok())
        .unwrap_or_default()
}

/// `--format alibaba`: the fragmentation experiment (pods placed in trace order, never
/// removed, until the first one that does not fit), per policy.
fn run_alibaba(args: &SimArgs) -> Result<String, String> {
    use corral_sim::fragmentation::{self, FragPolicy};
    let nodes_path = match &args.nodes_file {
        Some(p) => p.clone(),
        None => Path::new(&args.trace)
            .with_file_name("openb_node_list_gpu_node.csv")
            .to_string_lossy()
            .into_owned(),
    };
    let t0 = Instant::now();
    let nodes = trace::alibaba::parse_nodes(&read(&nodes_path)?, &nodes_path)?;
    let pods = trace::alibaba::parse_pods(&read(&args.trace)?, &args.trace, args.limit)?;
    let parse_s = t0.elapsed().as_secs_f64();
    let policies = FragPolicy::parse_list(&args.policy)?;
    let mut results = Vec::new();
    let mut walls = Vec::new();
    for p in policies {
        let start = Instant::now();
        results.push(fragmentation::run(&nodes, &pods, p)?);
        walls.push(start.elapsed().as_secs_f64());
    }
    let fractional = pods.iter().filter(|p| p.is_fractional()).count();
    let gpus: u32 = nodes.iter().map(|n| n.gpus).sum();
    Ok(match args.output.as_str() {
        "json" => {
            let arr: Vec<serde_json::Value> = results
                .iter()
                .zip(&walls)
                .map(|(r, w)| {
                    let mut v = serde_json::to_value(r).unwrap_or_default();
                    if let Some(o) = v.as_object_mut() {
                        o.insert("wall_s".into(), serde_json::json!(w));
                        o.insert(
                            "note".into(),
                            serde_json::json!("fractional-GPU pods take a whole GPU"),
                        );
                    }
                    v
                })
                .collect();
            serde_json::to_string_pretty(&arr).map_err(|e| e.to_string())? + "\n"
        }
        "html" => return Err("--output html is not available for the alibaba format".into()),
        _ => {
            let mut s = format!(
                "corral sim (fragmentation): {} ({} pods) on {} ({} nodes, {gpus} GPUs)\n\
                 pods arrive in trace order and stay; placement stops at the first pod that \
                 does not fit.\n\
                 NOTE: {fractional} pods ask for part of one GPU (gpu_milli < 1000); Corral \
                 allocates whole GPUs, so every policy here gives them a whole GPU.\n\
                 'skipped': pods that fit no node even of the empty cluster (not failures).\n\
                 'free unalloc.': free GPUs on nodes where no remaining GPU pod fits.\n\n{}",
                args.trace,
                pods.len(),
                nodes_path,
                nodes.len(),
                fragmentation::table(&results)
            );
            s.push_str(&format!("\nparsed the trace in {parse_s:.2} s\n"));
            for (r, w) in results.iter().zip(&walls) {
                s.push_str(&format!("{:<10} placed in {w:.2} s\n", r.policy));
                if let Some(reason) = &r.first_unplaceable_reason {
                    s.push_str(&format!("{:<10} first failure: {reason}\n", ""));
                }
            }
            s
        }
    })
}

/// Runs the simulation and returns the rendered output (table, JSON or HTML).
pub fn run(args: SimArgs) -> Result<String, String> {
    let format = match &args.format {
        Some(f) => Format::parse(f)?,
        None => Format::sniff(&args.trace, &first_line(&args.trace)).ok_or_else(|| {
            format!(
                "{}: cannot tell the trace format; give --format",
                args.trace
            )
        })?,
    };
    if format == Format::Alibaba {
        return run_alibaba(&args);
    }
    let spec = match (&args.cluster, &args.cluster_file) {
        (_, Some(f)) => ClusterSpec::parse_yaml(&read(f)?, f)?,
        (Some(c), None) => ClusterSpec::parse_flag(c, args.gpus_per_node)?,
        (None, None) => {
            let default = match format {
                Format::Gavel => "k80:12,p100:12,v100:12",
                Format::Sia => trace::sia::DEFAULT_CLUSTER,
                Format::Philly | Format::Alibaba => "gpu:2048/8",
            };
            ClusterSpec::parse_flag(default, args.gpus_per_node)?
        }
    };
    let cluster = spec.build()?;
    let kinds = PolicyKind::parse_list(&args.policy)?;
    let t0 = Instant::now();
    let (jobs, notes) = load_jobs(&args, format, &cluster)?;
    let round_s = args
        .round_s
        .unwrap_or(if format == Format::Sia { 60.0 } else { 360.0 });
    let parse_s = t0.elapsed().as_secs_f64();
    let cfg = EngineConfig {
        round_s,
        restart_s: args.restart_s,
        checkpoint_s: args.checkpoint_s,
        seed: args.seed,
    };
    let mut results = Vec::new();
    let mut metrics = Vec::new();
    let mut timing = Vec::new();
    let mut failures: Vec<(&str, String)> = Vec::new();
    for kind in kinds {
        // Sia workloads: the Gavel-style policies as Sia's simulator runs its gavel.
        let mut policy =
            kind.build_with(args.seed, format == Format::Sia, args.resize_dwell_seconds);
        let bar = if args.quiet {
            indicatif::ProgressBar::hidden()
        } else {
            indicatif::ProgressBar::new(1000)
        };
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{prefix:>22} [{bar:40}] {percent:>3}% {elapsed_precise} eta {eta}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        bar.set_prefix(kind.name());
        let start = Instant::now();
        let run = corral_sim::run_policy(&jobs, &cluster, policy.as_mut(), &cfg, &mut |f| {
            bar.set_position((f * 1000.0) as u64)
        });
        bar.finish_and_clear();
        let (r, m) = match run {
            Ok(x) => x,
            Err(e) => {
                // One policy failing (e.g. livelock under heavy checkpoint loss) is a result;
                // the others still run.
                failures.push((kind.name(), e));
                continue;
            }
        };
        let wall = start.elapsed().as_secs_f64();
        timing.push((wall, m.jobs_completed as f64 / wall.max(1e-9)));
        results.push(r);
        metrics.push(m);
    }
    if metrics.is_empty() {
        let msgs: Vec<String> = failures.iter().map(|(p, e)| format!("{p}: {e}")).collect();
        return Err(msgs.join("; "));
    }
    let arrivals: Vec<f64> = jobs.iter().map(|j| j.arrival_s).collect();
    let ran: Vec<String> = metrics.iter().map(|m| m.policy.clone()).collect();
    let mut references = load_references(&args, format, &ran)?;
    // Gavel's simulator charges nothing for a restart: rerun the compared policies under
    // that cost model too, so the page shows both numbers.
    if args.restart_s > 0.0 {
        let zero = EngineConfig {
            restart_s: 0.0,
            ..cfg.clone()
        };
        for r in &mut references {
            let Ok(kinds) = PolicyKind::parse_list(&r.policy) else {
                continue;
            };
            let Some(kind) = kinds.first() else { continue };
            let mut p = kind.build_with(args.seed, false, args.resize_dwell_seconds);
            if let Ok((_, m)) =
                corral_sim::run_policy(&jobs, &cluster, p.as_mut(), &zero, &mut |_| {})
            {
                r.ours_at_their_costs_s = Some(m.avg_jct_s);
            }
        }
    }
    let json = {
        let arr: Vec<serde_json::Value> = metrics
            .iter()
            .zip(&timing)
            .map(|(m, (wall, jps))| {
                let mut v = serde_json::to_value(m).unwrap_or_default();
                if let Some(o) = v.as_object_mut() {
                    o.insert("wall_s".into(), serde_json::json!(wall));
                    o.insert("jobs_per_s".into(), serde_json::json!(jps));
                    if let Some(r) = references.iter().find(|r| r.policy == m.policy) {
                        o.insert("reference".into(), reference_json(r, m.avg_jct_s));
                    }
                }
                v
            })
            .chain(
                failures
                    .iter()
                    .map(|(p, e)| serde_json::json!({"policy": p, "error": e})),
            )
            .collect();
        serde_json::to_string_pretty(&arr).map_err(|e| e.to_string())?
    };
    let title = format!(
        "corral sim: {} ({} jobs) on {} ({} GPUs), {} s rounds, restart {} s, checkpoint every {} s",
        args.trace,
        jobs.len(),
        cluster.describe(),
        cluster.total_gpus(),
        round_s,
        args.restart_s,
        args.checkpoint_s
    );
    let restart = if format == Format::Sia {
        "each model's own checkpoint-restore time (Sia's rescale_time, 15-250 s), on every \
         start"
            .to_string()
    } else {
        format!(
            "{} s per restart after a preemption or migration",
            args.restart_s
        )
    };
    let inputs = report::Inputs {
        title: format!(
            "corral sim: {}",
            Path::new(&args.trace)
                .file_name()
                .map_or_else(|| args.trace.clone(), |n| n.to_string_lossy().into_owned())
        ),
        lines: vec![
            (
                "trace".into(),
                format!("{} ({} jobs, {:?} format)", args.trace, jobs.len(), format),
            ),
            (
                "cluster".into(),
                format!("{} ({} GPUs)", cluster.describe(), cluster.total_gpus()),
            ),
            ("seed".into(), args.seed.to_string()),
            (
                "Corral version".into(),
                env!("CARGO_PKG_VERSION").to_string(),
            ),
            ("round".into(), format!("{round_s} s")),
            ("restart cost".into(), restart),
            (
                "checkpoints".into(),
                if args.checkpoint_s > 0.0 {
                    format!(
                        "every {} s of progress; work since the last is lost on preemption",
                        args.checkpoint_s
                    )
                } else {
                    "when stopped (no work lost on preemption)".into()
                },
            ),
        ],
        notes: notes.clone(),
    };
    let html = || report::html(&inputs, &metrics, &results, &arrivals, &references);
    if let Some(dir) = &args.report {
        std::fs::create_dir_all(dir).map_err(|e| format!("{dir}: {e}"))?;
        let p = Path::new(dir);
        std::fs::write(p.join("report.html"), html())
            .map_err(|e| format!("{dir}/report.html: {e}"))?;
        std::fs::write(p.join("results.json"), &json)
            .map_err(|e| format!("{dir}/results.json: {e}"))?;
    }
    Ok(match args.output.as_str() {
        "json" => json + "\n",
        "html" => html(),
        _ => {
            let mut s = format!("{title}\n");
            if format == Format::Sia {
                s.push_str(
                    "job length: iterations Sia's simulator needs at the job's batch size \
                     (progress per epoch / statistical gain, over the model's epoch budget); \
                     speed per GPU type and size: 1 / (iteration time of its compact placement x \
                     Sia's per-model slowdown), the job's batch adapted to its size as Sia's \
                     jobs do (the batch with the most progress a second); restart and first start cost the model's \
                     checkpoint-restore time (Sia's rescale_time), not --restart-s\n",
                );
                for n in &notes {
                    s.push_str(&format!("note: {n}\n"));
                }
            }
            s.push_str(&format!("\n{}", report::table(&metrics, &references)));
            if !references.is_empty() {
                s.push_str(
                    "\nref JCT: the published simulator's avg JCT for the policy on this trace; \
                     where the two differ, each line below says why\n",
                );
            }
            for r in &references {
                if let Some(m) = metrics.iter().find(|m| m.policy == r.policy) {
                    let zero = r.ours_at_their_costs_s.map_or(String::new(), |z| {
                        format!(
                            "; with no restart cost, as Gavel: {:.2} h, {:+.1}%",
                            z / 3600.0,
                            (z / r.avg_jct_s - 1.0) * 100.0
                        )
                    });
                    s.push_str(&format!(
                        "{:<22} {}: avg JCT {:.2} h (Corral sim {:.2} h, {:+.1}%{zero})\n",
                        r.policy,
                        r.source,
                        r.avg_jct_s / 3600.0,
                        m.avg_jct_s / 3600.0,
                        (m.avg_jct_s / r.avg_jct_s - 1.0) * 100.0
                    ));
                    // A difference is never left without its reason.
                    for line in wrap(&format!("why: {}", r.note), 88) {
                        s.push_str(&format!("{:<22} {line}\n", ""));
                    }
                }
            }
            s.push_str(&format!("\nparsed the trace in {parse_s:.2} s\n"));
            for (m, (wall, jps)) in metrics.iter().zip(&timing) {
                s.push_str(&format!(
                    "{:<22} simulated in {wall:.2} s: {jps:.0} jobs/s\n",
                    m.policy
                ));
            }
            for (p, e) in &failures {
                s.push_str(&format!("{p:<22} FAILED: {e}\n"));
            }
            s
        }
    })
}
