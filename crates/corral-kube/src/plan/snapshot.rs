//! Stage 2: the cluster as the scheduler sees it, and the control plane's settings.
//!
//! Every node, with what is not Corral's to place already allocated: the requests of every
//! non-terminal pod bound there, except the replicas of jobs that hold an admission (the
//! plane places those from the admission) and of jobs being preempted (their room is the
//! preemptor's). GPU indices: Kubernetes' device plugin picks them, so pods of other
//! schedulers get the lowest indices Corral's admissions do not hold.

use std::collections::{BTreeMap, BTreeSet};

use corral_core::control::{ControlConfig, Platform};
use corral_core::lifecycle;
use corral_core::sched::{ClusterSnapshot, NodePoolConfig, QueueConfig};

use super::PlanConfig;
use super::observe_jobs::ObservedJob;
use crate::consts::GPU_PRODUCT_LABEL;
use crate::observe::{self, Amounts, World};

pub(super) struct ObservedCluster {
    pub snapshot: ClusterSnapshot,
    /// Queues that could not be read, in words.
    pub warnings: Vec<String>,
}

/// Whether the plane places this job's pods itself (they are not foreign usage): it holds
/// an admission, or it is being preempted (Admitted and back in the queue at once).
fn placed_by_corral(o: &ObservedJob<'_>) -> bool {
    let preempting = o.job.status.as_ref().is_some_and(lifecycle::is_preempting);
    preempting || (o.stored.is_some() && o.hints.is_ok())
}

/// Nodes, pools and queues (the plane adds the implicit `default` queue itself; running
/// jobs come with their admissions in `ControlPlane::restore`).
pub(super) fn cluster(
    world: &World,
    jobs: &[ObservedJob<'_>],
    topology_label: Option<&str>,
) -> ObservedCluster {
    let corral: Vec<&ObservedJob<'_>> = jobs.iter().filter(|o| placed_by_corral(o)).collect();
    let mut owned: BTreeSet<(&str, &str)> = corral
        .iter()
        .flat_map(|o| {
            o.pods.iter().filter_map(|p| {
                Some((
                    p.metadata.namespace.as_deref()?,
                    p.metadata.name.as_deref()?,
                ))
            })
        })
        .collect();
    owned.extend(crate::kubeflow::alongside::runner_pods(
        world,
        corral.iter().map(|o| o.job),
    ));
    let foreign: Vec<_> = world
        .pods
        .iter()
        .filter(|p| {
            let id = (
                p.metadata.namespace.as_deref().unwrap_or(""),
                p.metadata.name.as_deref().unwrap_or(""),
            );
            !observe::is_terminal(p) && !owned.contains(&id) && observe::pod_node(p).is_some()
        })
        .cloned()
        .collect();
    let usage = observe::node_usage(foreign.iter().map(|p| &**p));
    let mut reserved: BTreeMap<&str, BTreeSet<u32>> = BTreeMap::new();
    for a in corral.iter().filter_map(|o| o.stored.as_ref()) {
        for p in &a.admission.placements {
            reserved
                .entry(p.node.as_str())
                .or_default()
                .extend(p.gpu_indices.iter().copied());
        }
    }
    let empty_set = BTreeSet::new();
    let empty = Amounts::default();
    let mut seen = BTreeSet::new();
    let nodes = world
        .nodes
        .iter()
        .filter(|n| {
            n.metadata
                .name
                .as_ref()
                .is_some_and(|name| seen.insert(name.clone()))
        })
        .map(|n| {
            let name = n.metadata.name.as_deref().unwrap_or("");
            observe::sched_node(
                n,
                usage.get(name).unwrap_or(&empty),
                reserved.get(name).unwrap_or(&empty_set),
                topology_label,
            )
        })
        .collect();
    let mut warnings = Vec::new();
    let mut queues = Vec::new();
    for q in &world.queues {
        match QueueConfig::from_queue(q) {
            Ok(c) => queues.push(c),
            Err(e) => warnings.push(format!("queue {}: {e}", q.metadata.name)),
        }
    }
    ObservedCluster {
        snapshot: ClusterSnapshot {
            nodes,
            pools: world
                .pools
                .iter()
                .map(NodePoolConfig::from_node_pool)
                .collect(),
            queues,
            running: Vec::new(),
        },
        warnings,
    }
}

/// The plane's settings: the scheduler's (GPU type speeds from the nodes' GPU products
/// unless configured), the cluster's grace period, preemption protection and resize dwell,
/// the priority classes.
pub(super) fn control_config(world: &World, cfg: &PlanConfig) -> ControlConfig {
    ControlConfig::builder(Platform::Pods)
        .scheduler(cfg.scheduler.clone())
        .gpu_types(
            world
                .nodes
                .iter()
                .filter_map(|n| n.metadata.labels.as_ref()?.get(GPU_PRODUCT_LABEL))
                .map(String::as_str),
        )
        .grace_period(cfg.grace_period)
        .preemption_protection_seconds(cfg.preemption_protection_seconds)
        .resize_dwell_seconds(cfg.resize_dwell_seconds)
        .priority_classes(world.classes.clone())
        .queues(&world.queues)
        .build()
}
