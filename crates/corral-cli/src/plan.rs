//! `corral plan`: one real scheduling cycle of corral-core over the given documents. The
//! cluster is made of the files' NodePools (`--nodes pool=count`), or of this machine when
//! there are none. It shows what `corral up` would admit now, where, and why the rest waits.

use std::collections::BTreeMap;

use corral_api::document::{Document, parse_documents};
use corral_api::validate::ValidationContext;
use corral_api::{JobPriorityClass, NodePool, Queue, TrainingJob};
use corral_core::sched::{
    ClusterSnapshot, JobRequest, Node, NodePoolConfig, QueueConfig, SchedulerConfig,
    known_gpu_speeds, priority_of, schedule,
};

use crate::input;

pub struct PlanArgs<'a> {
    pub files: &'a [String],
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
}

pub fn run(args: &PlanArgs) -> Result<String, String> {
    let mut declared = Declared::default();
    let mut texts = Vec::new();
    for f in args.files {
        texts.push((f, input::read(f).map_err(|e| format!("{f}: {e}"))?));
    }
    let all: Vec<&str> = texts.iter().map(|(_, t)| t.as_str()).collect();
    let ctx = input::shared_context(&all, &ValidationContext::default());
    let mut problems = Vec::new();
    for (f, text) in &texts {
        for r in parse_documents(text, &ctx) {
            match r {
                Ok(p) => match p.document {
                    Document::TrainingJob(j) => declared.jobs.push(*j),
                    Document::NodePool(n) => declared.pools.push(n),
                    Document::Queue(q) => declared.queues.push(q),
                    Document::JobPriorityClass(c) => declared.classes.push(c),
                },
                Err(e) => problems.push(format!("{f}: {e}")),
            }
        }
    }
    if !problems.is_empty() {
        return Err(problems.join("\n"));
    }
    let counts = parse_counts(args.nodes, &declared.pools)?;
    let (nodes, cluster_line) = build_nodes(&declared.pools, &counts, args)?;
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
    let snapshot = ClusterSnapshot {
        nodes,
        pools,
        queues,
        running: Vec::new(),
    };
    // Submission order is the files' order, one millisecond apart.
    let mut requests = Vec::new();
    let mut names = BTreeMap::new();
    for (i, job) in declared.jobs.iter().enumerate() {
        let mut job = job.clone();
        job.spec.apply_defaults();
        let req =
            JobRequest::from_training_job(&job, priority_of(&job, &declared.classes), i as u64)
                .map_err(|e| e.to_string())?;
        names.insert(req.key.clone(), job.metadata.name.clone());
        requests.push(req);
    }
    // Without measured throughput, newer GPU generations rank first.
    let config = SchedulerConfig {
        gpu_type_speed: known_gpu_speeds(
            declared
                .pools
                .iter()
                .filter_map(|p| p.spec.gpu_type.as_deref()),
        ),
        ..SchedulerConfig::default()
    };
    let outcome =
        schedule(&snapshot, &requests, config, requests.len() as u64).map_err(|e| e.to_string())?;

    let mut out = String::new();
    out.push_str(&format!("cluster: {cluster_line}\n"));
    out.push_str(&format!(
        "{} jobs: {} admitted, {} pending\n",
        requests.len(),
        outcome.admitted.len(),
        outcome.pending.len()
    ));
    for a in &outcome.admitted {
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
            let job = names.get(&a.job).map(String::as_str).unwrap_or(&a.job);
            out.push_str(&format!(
                "  {job}-{}-{} -> {}{gpus}\n",
                p.role, p.index, p.node
            ));
        }
    }
    for p in &outcome.pending {
        out.push_str(&format!("\nPENDING  {}: {}\n", p.job, p.reason));
    }
    Ok(out)
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
) -> Result<(Vec<Node>, String), String> {
    let memory_bytes = args.node_memory_gib.saturating_mul(1 << 30);
    if pools.is_empty() {
        // No pools declared: this machine, exactly as `corral up` sees it (the embedded
        // shell's inventory, NVML included).
        let inv = corral_local::inventory::inventory();
        let node = corral_local::cluster::local_node(&Default::default(), &inv)
            .map_err(|e| e.to_string())?;
        let gpus = match &node.gpu_type {
            Some(t) if node.gpus > 0 => format!("{} x {t}", node.gpus),
            _ => match corral_local::gpu::unavailable_reason() {
                Some(why) => format!("no GPUs ({why})"),
                None => "no GPUs".to_string(),
            },
        };
        let line = format!(
            "this machine: {} CPUs, {} GiB, {gpus}",
            node.cpu_milli / 1000,
            node.memory_bytes >> 30
        );
        return Ok((vec![node], line));
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
    Ok((nodes, line))
}
