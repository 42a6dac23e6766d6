//! The fragmentation experiment of "Beware of Fragmentation" (ATC 2023) on the Alibaba
//! cluster-trace-gpu-v2023: pods arrive in trace order onto the real heterogeneous nodes
//! (GPU type from `gpu_spec`, CPU and memory too) and are placed, never removed, until the
//! first pod that cannot be placed. At that moment we report how many GPUs are allocated
//! and how many free GPUs are unallocatable: on nodes where no remaining GPU pod (the
//! failing pod and every later one; all of the trace's if every pod was placed) fits, by
//! GPU type, GPU count, CPU and memory.
//!
//! GPUs are allocated whole: a pod asking for part of one GPU (`gpu_milli < 1000`) takes a
//! whole GPU, under every policy (Corral allocates whole GPUs); the count of such pods is
//! reported. A pod that fits no node even of the empty cluster is skipped and counted,
//! not taken as the first failure. Policies: Corral's scheduler (corral-core `Scheduler::try_admit`, each pod a
//! one-replica job, not preemptible), first-fit (nodes in file order) and best-fit (the
//! fitting node with the fewest free GPUs, then least free CPU, then file order).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use corral_core::sched::{
    ClusterSnapshot, Decision, JobRequest, Node, PoolQuota, QueueConfig, ReplicaGroup,
    ResourceAmount, Scheduler, SchedulerConfig,
};
use serde::Serialize;

use crate::trace::alibaba::{AliNode, AliPod};

/// Placement policies of the experiment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FragPolicy {
    Corral,
    FirstFit,
    BestFit,
}

impl FragPolicy {
    pub fn name(self) -> &'static str {
        match self {
            FragPolicy::Corral => "corral",
            FragPolicy::FirstFit => "first_fit",
            FragPolicy::BestFit => "best_fit",
        }
    }

    /// `all` or comma-separated names.
    pub fn parse_list(s: &str) -> Result<Vec<Self>, String> {
        let all = [
            FragPolicy::Corral,
            FragPolicy::FirstFit,
            FragPolicy::BestFit,
        ];
        if s.trim() == "all" {
            return Ok(all.to_vec());
        }
        let mut out = Vec::new();
        for n in s.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let p = all.iter().copied().find(|p| p.name() == n).ok_or_else(|| {
                format!("unknown policy `{n}` for the alibaba format: expected corral, first_fit, best_fit or all")
            })?;
            if !out.contains(&p) {
                out.push(p);
            }
        }
        if out.is_empty() {
            return Err("no policy given".into());
        }
        Ok(out)
    }
}

/// What one policy achieved.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FragResult {
    pub policy: String,
    pub pods_total: usize,
    /// Pods placed before the first one that could not be.
    pub pods_placed: usize,
    /// Pods before that point that fit no node even of the empty cluster (e.g. 120 cores
    /// on a 96-core GPU type); skipped, since they say nothing about placement.
    pub pods_skipped_never_fit: usize,
    /// Name of the first pod that could not be placed (`None`: every pod fit).
    pub first_unplaceable_pod: Option<String>,
    /// Its position in the trace (0-based).
    pub first_unplaceable_index: Option<usize>,
    /// Why, as the policy said.
    pub first_unplaceable_reason: Option<String>,
    pub gpus_total: u32,
    pub gpus_allocated: u32,
    pub gpus_allocated_pct: f64,
    pub gpus_free: u32,
    /// Free GPUs on nodes where no remaining GPU pod fits (every GPU pod of the trace
    /// when all were placed).
    pub gpus_free_unallocatable: u32,
    pub gpus_free_unallocatable_pct_of_free: f64,
    /// Placed pods that asked for part of a GPU and took a whole one.
    pub fractional_pods_rounded_up: usize,
    pub cpu_allocated_pct: f64,
    pub memory_allocated_pct: f64,
}

#[derive(Clone, Debug)]
struct Free {
    cpu: u64,
    mem: u64,
    gpus: u32,
}

fn fits(pod: &AliPod, node: &AliNode, free: &Free) -> bool {
    pod.cpu_milli <= free.cpu
        && pod.memory_mib <= free.mem
        && pod.whole_gpus() <= free.gpus
        && (pod.whole_gpus() == 0 || pod.allows(&node.model))
}

/// Runs one policy over the pods.
pub fn run(nodes: &[AliNode], pods: &[AliPod], policy: FragPolicy) -> Result<FragResult, String> {
    let mut free: Vec<Free> = nodes
        .iter()
        .map(|n| Free {
            cpu: n.cpu_milli,
            mem: n.memory_mib,
            gpus: n.gpus,
        })
        .collect();
    let mut corral = match policy {
        FragPolicy::Corral => Some(CorralPlacer::new(nodes)?),
        _ => None,
    };
    let empty = free.clone();
    let possible: Vec<bool> = pods
        .iter()
        .map(|p| nodes.iter().zip(&empty).any(|(n, f)| fits(p, n, f)))
        .collect();
    let mut failed: Option<(usize, String)> = None;
    let mut rounded = 0;
    let mut skipped = 0;
    let mut placed = 0;
    for (i, pod) in pods.iter().enumerate() {
        if !possible[i] {
            skipped += 1;
            continue;
        }
        let node = match policy {
            FragPolicy::FirstFit => (0..nodes.len())
                .find(|&n| fits(pod, &nodes[n], &free[n]))
                .ok_or_else(|| "no node fits".to_string()),
            FragPolicy::BestFit => (0..nodes.len())
                .filter(|&n| fits(pod, &nodes[n], &free[n]))
                .min_by_key(|&n| (free[n].gpus, free[n].cpu, n))
                .ok_or_else(|| "no node fits".to_string()),
            FragPolicy::Corral => match corral.as_mut() {
                Some(c) => c.place(i, pod)?,
                None => Err("no scheduler".into()),
            },
        };
        match node {
            Ok(n) => {
                let f = &mut free[n];
                if !fits(pod, &nodes[n], f) {
                    return Err(format!(
                        "{}: pod {} was placed on {}, where it does not fit",
                        policy.name(),
                        pod.name,
                        nodes[n].name
                    ));
                }
                f.cpu -= pod.cpu_milli;
                f.mem -= pod.memory_mib;
                f.gpus -= pod.whole_gpus();
                if pod.is_fractional() {
                    rounded += 1;
                }
                placed += 1;
            }
            Err(reason) => {
                failed = Some((i, reason));
                break;
            }
        }
    }
    let gpus_total: u32 = nodes.iter().map(|n| n.gpus).sum();
    let gpus_free: u32 = free.iter().map(|f| f.gpus).sum();
    let gpus_allocated = gpus_total - gpus_free;
    // Distinct shapes of the remaining GPU pods.
    // (When every pod was placed: the shapes of all the trace's GPU pods.)
    let from = failed.as_ref().map_or(0, |f| f.0);
    let shapes: BTreeSet<(u32, u64, u64, &[String])> = pods[from..]
        .iter()
        .zip(&possible[from..])
        .filter(|(p, ok)| **ok && p.whole_gpus() > 0)
        .map(|(p, _)| p)
        .map(|p| {
            (
                p.whole_gpus(),
                p.cpu_milli,
                p.memory_mib,
                p.gpu_spec.as_slice(),
            )
        })
        .collect();
    let shapes: Vec<AliPod> = shapes
        .into_iter()
        .map(|(g, c, m, s)| AliPod {
            name: String::new(),
            cpu_milli: c,
            memory_mib: m,
            num_gpu: g,
            gpu_milli: 1000,
            gpu_spec: s.to_vec(),
            creation_s: 0.0,
        })
        .collect();
    let unalloc: u32 = nodes
        .iter()
        .zip(&free)
        .filter(|(n, f)| f.gpus > 0 && !shapes.iter().any(|s| fits(s, n, f)))
        .map(|(_, f)| f.gpus)
        .sum();
    let pct = |a: f64, b: f64| if b > 0.0 { 100.0 * a / b } else { 0.0 };
    let cpu_total: u64 = nodes.iter().map(|n| n.cpu_milli).sum();
    let cpu_free: u64 = free.iter().map(|f| f.cpu).sum();
    let mem_total: u64 = nodes.iter().map(|n| n.memory_mib).sum();
    let mem_free: u64 = free.iter().map(|f| f.mem).sum();
    Ok(FragResult {
        policy: policy.name().into(),
        pods_total: pods.len(),
        pods_placed: placed,
        pods_skipped_never_fit: skipped,
        first_unplaceable_pod: failed.as_ref().map(|f| pods[f.0].name.clone()),
        first_unplaceable_index: failed.as_ref().map(|f| f.0),
        first_unplaceable_reason: failed.map(|f| f.1),
        gpus_total,
        gpus_allocated,
        gpus_allocated_pct: pct(f64::from(gpus_allocated), f64::from(gpus_total)),
        gpus_free,
        gpus_free_unallocatable: unalloc,
        gpus_free_unallocatable_pct_of_free: pct(f64::from(unalloc), f64::from(gpus_free)),
        fractional_pods_rounded_up: rounded,
        cpu_allocated_pct: pct((cpu_total - cpu_free) as f64, cpu_total as f64),
        memory_allocated_pct: pct((mem_total - mem_free) as f64, mem_total as f64),
    })
}

/// Corral's scheduler core, one pod at a time (`try_admit`).
struct CorralPlacer {
    sched: Scheduler,
    node_index: HashMap<String, usize>,
}

const QUEUE: &str = "alibaba";

impl CorralPlacer {
    fn new(nodes: &[AliNode]) -> Result<Self, String> {
        let snap_nodes: Vec<Node> = nodes
            .iter()
            .map(|n| {
                Node::new(
                    n.name.clone(),
                    (n.gpus > 0).then(|| n.model.clone()),
                    n.gpus,
                    n.cpu_milli,
                    n.memory_mib << 20,
                )
            })
            .collect();
        let mut pools: Vec<String> = nodes
            .iter()
            .map(|n| {
                if n.gpus > 0 {
                    n.model.clone()
                } else {
                    "cpu".into()
                }
            })
            .collect();
        pools.sort();
        pools.dedup();
        let quotas: BTreeMap<String, PoolQuota> = pools
            .into_iter()
            .map(|p| {
                (
                    p,
                    PoolQuota {
                        nominal: ResourceAmount::UNLIMITED,
                        borrowing_limit: None,
                        lending_limit: None,
                    },
                )
            })
            .collect();
        let snapshot = ClusterSnapshot {
            nodes: snap_nodes,
            pools: Vec::new(),
            queues: vec![QueueConfig {
                name: QUEUE.into(),
                cohort: None,
                weight: 1,
                namespaces: Vec::new(),
                quotas,
            }],
            running: Vec::new(),
        };
        // The core's defaults, except that every node is examined: the experiment measures
        // placement, not the scan shortcut.
        let config = SchedulerConfig {
            node_scan_limit: u32::MAX,
            ..SchedulerConfig::default()
        };
        let sched =
            Scheduler::new(&snapshot, config).map_err(|e| format!("corral scheduler: {e}"))?;
        let node_index = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.clone(), i))
            .collect();
        Ok(CorralPlacer { sched, node_index })
    }

    /// `Ok(Ok(node))` placed, `Ok(Err(reason))` not placed, `Err` a broken invariant.
    fn place(&mut self, i: usize, pod: &AliPod) -> Result<Result<usize, String>, String> {
        let req = JobRequest {
            key: format!("pod/{i}"),
            queue: QUEUE.into(),
            priority: 0,
            submit_time: (pod.creation_s * 1000.0).round() as u64,
            groups: vec![ReplicaGroup {
                role: "pod".into(),
                count: 1,
                cpu_milli: pod.cpu_milli,
                memory_bytes: pod.memory_mib << 20,
                gpu: pod.whole_gpus(),
                allowed_gpu_types: if pod.whole_gpus() > 0 {
                    pod.gpu_spec.clone()
                } else {
                    Vec::new()
                },
                extended: BTreeMap::new(),
            }],
            throughput: BTreeMap::new(),
            preemptible: false,
            node_selector: BTreeMap::new(),
            tolerations: Default::default(),
            elastic: None,
        };
        let now = (pod.creation_s * 1000.0).round() as u64;
        match self
            .sched
            .try_admit(req, now)
            .map_err(|e| format!("corral scheduler refused pod {}: {e}", pod.name))?
        {
            Decision::Admitted {
                admission,
                preempted,
            } => {
                if !preempted.is_empty() {
                    return Err(format!(
                        "corral preempted {} pod(s) to place {}",
                        preempted.len(),
                        pod.name
                    ));
                }
                let mut nodes = admission
                    .placements
                    .iter()
                    .filter_map(|p| self.node_index.get(&p.node).copied());
                match (nodes.next(), nodes.next()) {
                    (Some(n), None) => Ok(Ok(n)),
                    _ => Err(format!(
                        "corral placed pod {} on {} nodes, expected 1",
                        pod.name,
                        admission.placements.len()
                    )),
                }
            }
            Decision::Pending { reason } => Ok(Err(reason.to_string())),
        }
    }
}

/// A plain-text table of results.
pub fn table(results: &[FragResult]) -> String {
    let mut s = format!(
        "{:<10} {:>11} {:>7} {:>22} {:>10} {:>12} {:>10} {:>15} {:>9} {:>7} {:>7}\n",
        "policy",
        "pods placed",
        "skipped",
        "first unplaceable pod",
        "GPUs alloc",
        "GPUs alloc %",
        "GPUs free",
        "free unalloc.",
        "rounded",
        "CPU %",
        "mem %"
    );
    for r in results {
        s.push_str(&format!(
            "{:<10} {:>11} {:>7} {:>22} {:>10} {:>11.2}% {:>10} {:>15} {:>9} {:>6.1}% {:>6.1}%\n",
            r.policy,
            format!("{}/{}", r.pods_placed, r.pods_total),
            r.pods_skipped_never_fit,
            r.first_unplaceable_pod.as_deref().unwrap_or("(none)"),
            format!("{}/{}", r.gpus_allocated, r.gpus_total),
            r.gpus_allocated_pct,
            r.gpus_free,
            r.gpus_free_unallocatable,
            r.fractional_pods_rounded_up,
            r.cpu_allocated_pct,
            r.memory_allocated_pct
        ));
    }
    s
}
