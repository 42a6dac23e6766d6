//! `corral plan`: one step of the real control plane (`ControlPlane`, as `corral up` runs
//! it) over the given documents, on a fresh cluster, so that what it prints is what the
//! plane decides. The cluster is this machine as `corral up --config FILE` sees it (its
//! node overrides, pools, queues and priority classes) with `--config`; else the files'
//! NodePools (`--nodes pool=count` nodes each), or this machine when they declare none. It
//! shows what would be admitted now, where, and why the rest waits.

use std::collections::BTreeMap;
use std::path::PathBuf;

use corral_api::document::{Document, parse_documents};
use corral_api::validate::ValidationContext;
use corral_api::{JobPriorityClass, NodePool, Queue, TrainingJob};
use corral_core::control::{
    ControlConfig, ControlPlane, HeldAdmission, JobRecord, Platform, SchedulingHints, Settling,
};
use corral_core::sched::{ClusterSnapshot, Node, NodePoolConfig, QueueConfig};
use corral_local::config::ClusterFileConfig;
use corral_local::inventory::NodeInventory;

use crate::input;

pub struct PlanArgs<'a> {
    pub files: &'a [String],
    /// `corral.yaml`: plan on this machine exactly as `corral up` with it would.
    pub config: Option<PathBuf>,
    /// `pool=count` for each NodePool; pools not named get `default_nodes`.
    pub nodes: &'a [String],
    pub default_nodes: u32,
    pub node_cpu: u64,
    pub node_memory_gib: u64,
}

/// Everything the files declare.
#[derive(Default)]
struct Declared {
    jobs: Vec<TrainingJob>,
    pools: Vec<NodePool>,
    queues: Vec<Queue>,
    classes: Vec<JobPriorityClass>,
    /// What is refused before the plane sees it (a model served from a job's output).
    refused: Vec<String>,
}

/// What the plane decided in its first step.
#[derive(Debug)]
pub struct Planned {
    /// The cluster in words.
    pub cluster: String,
    /// Every job the plane took, in the files' order: its key, its name and the admission
    /// it holds after the step (`None`: it waits).
    pub jobs: Vec<(String, String, Option<HeldAdmission>)>,
    /// Why each waiting job waits, by key.
    pub reasons: BTreeMap<String, String>,
    /// Jobs the plane refused, in its words.
    pub refused: Vec<String>,
}

pub fn run(args: &PlanArgs) -> Result<String, String> {
    Ok(render(&decide(args)?))
}

fn read_declared(files: &[String], base: &ValidationContext) -> Result<Declared, String> {
    let mut declared = Declared::default();
    let mut texts = Vec::new();
    for f in files {
        texts.push((f, input::read(f).map_err(|e| format!("{f}: {e}"))?));
    }
    let all: Vec<&str> = texts.iter().map(|(_, t)| t.as_str()).collect();
    let ctx = input::shared_context(&all, base);
    let mut problems = Vec::new();
    let mut served_from_jobs = Vec::new();
    for (f, text) in &texts {
        for r in parse_documents(text, &ctx) {
            match r {
                Ok(p) => match p.document {
                    Document::TrainingJob(j) => declared.jobs.push(*j),
                    // What a served model runs at first: its minimum, placed as every
                    // replica is, by the plane.
                    Document::ServedModel(m) if m.spec.model.is_some() => {
                        served_from_jobs.push(m);
                    }
                    Document::ServedModel(m) => declared.jobs.extend(
                        (0..m.spec.autoscaling.min_replicas)
                            .map(|i| corral_api::served_model::replica_job(&m, i)),
                    ),
                    Document::NodePool(n) => declared.pools.push(n),
                    Document::Queue(q) => declared.queues.push(q),
                    Document::JobPriorityClass(c) => declared.classes.push(c),
                    // Kept for runs to name: runs nothing by itself.
                    Document::Pipeline(_) => {}
                    // What a run starts with, as the core decides it on an empty cache.
                    Document::PipelineRun(r) => {
                        // A run named at submit (generateName) shows `xxxxx` for its suffix.
                        let mut meta = r.metadata.clone();
                        if meta.name.is_empty() {
                            meta.name = format!(
                                "{}{}",
                                meta.generate_name.as_deref().unwrap_or_default(),
                                "x".repeat(corral_api::pipeline::GENERATED_SUFFIX_LEN)
                            );
                        }
                        let run = corral_api::PipelineRun {
                            metadata: meta,
                            ..(*r).clone()
                        };
                        declared
                            .jobs
                            .extend(corral_core::control::pipeline::first_steps(
                                &run,
                                jiff::Timestamp::now(),
                            ));
                    }
                },
                Err(e) => problems.push(format!("{f}: {e}")),
            }
        }
    }
    // A model served from a job's output, as `corral up` resolves it at submit: on this
    // fresh cluster no job has succeeded yet (one of these files included), so it is
    // refused in the same words.
    for m in served_from_jobs {
        let Some(source) = &m.spec.model else {
            continue;
        };
        let ns = m.metadata.namespace_or_default();
        let job = declared.jobs.iter().find(|j| {
            j.metadata.name == source.training_job && j.metadata.namespace_or_default() == ns
        });
        // A run of these files has not run yet on a fresh cluster: no step has succeeded.
        let resolved = match &source.pipeline_run {
            Some(_) => {
                corral_core::control::serving::resolve_model_from_run(source, ns, None, &mut |_| {
                    None
                })
            }
            None => {
                corral_core::control::serving::resolve_model(source, ns, job, "", &mut |_| None)
            }
        };
        match resolved {
            Err(e) => declared.refused.push(format!(
                "servedmodel {ns}/{}: {}: {}",
                m.metadata.name, e.path, e.message
            )),
            Ok(_) => declared.jobs.extend(
                (0..m.spec.autoscaling.min_replicas)
                    .map(|i| corral_api::served_model::replica_job(&m, i)),
            ),
        }
    }
    if problems.is_empty() {
        Ok(declared)
    } else {
        Err(problems.join("\n"))
    }
}

/// The cluster and the plane's settings: this machine with `corral.yaml` (the embedded
/// shell's own functions), or nodes made for the files' pools.
fn cluster(
    args: &PlanArgs,
    declared: &mut Declared,
    machine: Option<(ClusterFileConfig, Node, NodeInventory)>,
) -> Result<PlanTarget, String> {
    if let Some((mut file, _, inv)) = machine {
        file.node_pools.append(&mut declared.pools);
        file.queues.append(&mut declared.queues);
        file.priority_classes.append(&mut declared.classes);
        let (node, pools, queues) =
            corral_local::cluster::build_cluster(&file, &inv).map_err(|e| e.to_string())?;
        let config = corral_local::cluster::control_config(&file, &node);
        let line = machine_line(&node);
        let unhealthy = vec![(
            node.name.clone(),
            corral_local::cluster::unhealthy_gpus(&inv, node.gpus),
        )];
        let snapshot = ClusterSnapshot {
            nodes: vec![node],
            pools,
            queues,
            running: Vec::new(),
        };
        return Ok(PlanTarget {
            snapshot,
            config,
            line,
            unhealthy,
        });
    }
    let counts = parse_counts(args.nodes, &declared.pools)?;
    let (nodes, line, unhealthy) = build_nodes(&declared.pools, &counts, args)?;
    let queues: Vec<QueueConfig> = declared
        .queues
        .iter()
        .map(QueueConfig::from_queue)
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    let pools: Vec<NodePoolConfig> = declared
        .pools
        .iter()
        .map(NodePoolConfig::from_node_pool)
        .collect();
    // Jobs that name no queue go to `default`: the control plane's rule, as in every shell.
    let queues = corral_core::control::with_default_queue(queues, &pools, &nodes);
    let config = ControlConfig::builder(Platform::Processes)
        .gpu_types(nodes.iter().filter_map(|n| n.gpu_type.as_deref()))
        .priority_classes(declared.classes.clone())
        .queues(&declared.queues)
        .build();
    let snapshot = ClusterSnapshot {
        nodes,
        pools,
        queues,
        running: Vec::new(),
    };
    Ok(PlanTarget {
        snapshot,
        config,
        line,
        unhealthy,
    })
}

/// The cluster a plan runs on.
struct PlanTarget {
    snapshot: ClusterSnapshot,
    config: ControlConfig,
    /// The cluster in words.
    line: String,
    /// GPUs the machine reports unhealthy, by node (as `corral up` tells its plane).
    unhealthy: UnhealthyByNode,
}

/// GPU indices reported unhealthy, by node name.
type UnhealthyByNode = Vec<(String, Vec<u32>)>;

/// Submits the files' jobs to a fresh plane, in the files' order one millisecond apart,
/// and runs one step.
pub fn decide(args: &PlanArgs) -> Result<Planned, String> {
    // With corral.yaml, jobs are checked as `corral up` checks a submission: against its
    // objects and this node, so that what it refuses is refused here.
    let machine = match &args.config {
        Some(_) if !args.nodes.is_empty() => {
            return Err("--nodes: not with --config (the cluster is this machine)".into());
        }
        Some(path) => {
            let file = ClusterFileConfig::load(path).map_err(|e| e.to_string())?;
            // Read once: the node for the submit checks and the cluster come from it.
            let inv = corral_local::inventory::inventory();
            let node = corral_local::cluster::local_node(&file.settings.node, &inv)
                .map_err(|e| e.to_string())?;
            Some((file, node, inv))
        }
        None => None,
    };
    let base = match &machine {
        Some((file, node, _)) => corral_local::cluster::validation_context(file, node),
        None => ValidationContext::default(),
    };
    let mut declared = read_declared(args.files, &base)?;
    let cluster = cluster(args, &mut declared, machine)?;
    let cluster_line = cluster.line;
    let mut plane =
        ControlPlane::new(cluster.snapshot, cluster.config).map_err(|e| e.to_string())?;
    for (node, gpus) in &cluster.unhealthy {
        plane.observe_unhealthy_gpus(node, gpus);
    }
    let mut keys = Vec::new();
    let mut refused = std::mem::take(&mut declared.refused);
    for (i, job) in declared.jobs.iter().enumerate() {
        let record = JobRecord {
            job: job.clone(),
            uid: format!("plan-{i}"),
            submitted: i as u64,
            hints: SchedulingHints::default(),
        };
        let key = record.key();
        match plane.submit(record) {
            Ok(()) => keys.push((key, job.metadata.name.clone())),
            Err(e) => refused.push(e.to_string()),
        }
    }
    let now =
        jiff::Timestamp::from_millisecond(declared.jobs.len() as i64).map_err(|e| e.to_string())?;
    // One pass by the plane's settle rule; nothing runs here, so nothing is observed.
    let mut settling = Settling::default();
    let mut asked = !plane.step(now).is_empty();
    while settling.again(asked, false) {
        asked = !plane.settle(now).is_empty();
    }
    let mut reasons = BTreeMap::new();
    let jobs = keys
        .into_iter()
        .map(|(key, name)| {
            let held = plane.admission(&key).cloned();
            if held.is_none() {
                let reason = plane
                    .waiting_reason(&key)
                    .unwrap_or_else(|| "waiting for the next scheduling cycle".to_string());
                reasons.insert(key.clone(), reason);
            }
            (key, name, held)
        })
        .collect();
    Ok(Planned {
        cluster: cluster_line,
        jobs,
        reasons,
        refused,
    })
}

fn render(p: &Planned) -> String {
    let admitted = p.jobs.iter().filter(|(_, _, h)| h.is_some()).count();
    let mut out = String::new();
    out.push_str(&format!("cluster: {}\n", p.cluster));
    out.push_str(&format!(
        "{} jobs: {admitted} admitted, {} pending{}\n",
        p.jobs.len() + p.refused.len(),
        p.jobs.len() - admitted,
        if p.refused.is_empty() {
            String::new()
        } else {
            format!(", {} refused", p.refused.len())
        }
    ));
    for (_, job, held) in &p.jobs {
        let Some(held) = held else { continue };
        let a = &held.admission;
        let gpus: usize = a.placements.iter().map(|p| p.gpu_indices.len()).sum();
        let gpu_type = a.gpu_type.as_deref().unwrap_or("no GPU");
        out.push_str(&format!(
            "\nADMITTED {} on pool {} ({gpu_type}), {gpus} GPUs\n",
            a.job, a.pool
        ));
        for p in &a.placements {
            let gpus = if p.gpu_indices.is_empty() {
                String::new()
            } else {
                let list: Vec<String> = p.gpu_indices.iter().map(u32::to_string).collect();
                format!(" GPUs [{}]", list.join(","))
            };
            out.push_str(&format!(
                "  {job}-{}-{} -> {}{gpus}\n",
                p.role, p.index, p.node
            ));
        }
    }
    for (key, reason) in &p.reasons {
        out.push_str(&format!("\nPENDING  {key}: {reason}\n"));
    }
    for r in &p.refused {
        out.push_str(&format!("\nREFUSED  {r}\n"));
    }
    out
}

/// This machine in words, as `corral nodes` would say.
fn machine_line(node: &Node) -> String {
    let gpus = match &node.gpu_type {
        Some(t) if node.gpus > 0 => format!("{} x {t}", node.gpus),
        _ => match corral_local::gpu::unavailable_reason() {
            Some(why) => format!("no GPUs ({why})"),
            None => "no GPUs".to_string(),
        },
    };
    format!(
        "this machine: {} CPUs, {} GiB, {gpus}",
        node.cpu_milli / 1000,
        node.memory_bytes >> 30
    )
}

fn parse_counts(specs: &[String], pools: &[NodePool]) -> Result<BTreeMap<String, u32>, String> {
    let mut counts = BTreeMap::new();
    for spec in specs
        .iter()
        .flat_map(|s| s.split(','))
        .filter(|s| !s.is_empty())
    {
        let (pool, n) = spec
            .split_once('=')
            .ok_or_else(|| format!("--nodes: `{spec}` should be POOL=COUNT, e.g. a100=4"))?;
        if !pools.iter().any(|p| p.metadata.name == pool) {
            let names: Vec<&str> = pools.iter().map(|p| p.metadata.name.as_str()).collect();
            return Err(format!(
                "--nodes: no NodePool `{pool}` in the files; pools: {}",
                if names.is_empty() {
                    "(none)".to_string()
                } else {
                    names.join(", ")
                }
            ));
        }
        let n: u32 = n
            .parse()
            .ok()
            .filter(|n| *n <= 100_000)
            .ok_or_else(|| format!("--nodes: `{n}` is not a node count (0-100000)"))?;
        counts.insert(pool.to_string(), n);
    }
    Ok(counts)
}

fn build_nodes(
    pools: &[NodePool],
    counts: &BTreeMap<String, u32>,
    args: &PlanArgs,
) -> Result<(Vec<Node>, String, UnhealthyByNode), String> {
    let memory_bytes = args.node_memory_gib.saturating_mul(1 << 30);
    if pools.is_empty() {
        // No pools declared: this machine, exactly as `corral up` sees it (the embedded
        // shell's inventory, NVML included).
        let inv = corral_local::inventory::inventory();
        let node = corral_local::cluster::local_node(&Default::default(), &inv)
            .map_err(|e| e.to_string())?;
        let line = machine_line(&node);
        let unhealthy = vec![(
            node.name.clone(),
            corral_local::cluster::unhealthy_gpus(&inv, node.gpus),
        )];
        return Ok((vec![node], line, unhealthy));
    }
    let mut nodes = Vec::new();
    let mut parts = Vec::new();
    let mut total_gpus = 0u64;
    for pool in pools {
        let name = &pool.metadata.name;
        let count = counts.get(name).copied().unwrap_or(args.default_nodes);
        let gpus = pool.spec.gpus_per_node.unwrap_or(0);
        for i in 0..count {
            nodes.push(Node {
                labels: pool.spec.node_selector.clone(),
                // Four nodes to a rack, so gangs show their topology preference.
                topology: Some(format!("{name}-rack-{}", i / 4)),
                ..Node::new(
                    format!("{name}-{i}"),
                    pool.spec.gpu_type.clone(),
                    gpus,
                    args.node_cpu * 1000,
                    memory_bytes,
                )
            });
        }
        total_gpus += u64::from(count) * u64::from(gpus);
        parts.push(format!("{name} {count} x {gpus} GPUs"));
    }
    let line = format!(
        "{} nodes ({}), {total_gpus} GPUs",
        nodes.len(),
        parts.join(", ")
    );
    Ok((nodes, line, Vec::new()))
}
