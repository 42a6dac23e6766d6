//! What validation knows of the cluster it checks for, and the questions the checks ask
//! of it (which queues exist, the largest node of a GPU type).

use std::collections::BTreeSet;

use crate::gpu_type;
use crate::job_priority_class::JobPriorityClass;
use crate::node_pool::NodePool;
use crate::pipeline::Pipeline;
use crate::queue::Queue;

/// What validation knows of the cluster: node pools, priority classes and queues, when the
/// caller has them. With none, only built-in bounds apply.
#[derive(Clone, Debug, Default)]
pub struct ValidationContext {
    pub node_pools: Vec<NodePool>,
    pub priority_classes: Vec<JobPriorityClass>,
    pub queues: Vec<Queue>,
    /// The nodes of the cluster the job goes to, when validation runs against one (a submit,
    /// `corral validate` with a reachable server). With them, what the cluster does not
    /// declare does not exist: a job that names a missing priority class or queue, or asks
    /// for GPUs that no node has, is refused instead of waiting forever (as Kubernetes
    /// refuses a pod naming a missing priority class at admission). Without them (files
    /// alone), those checks only apply to what the files declare.
    pub nodes: Option<Vec<NodeFacts>>,
    /// The cluster runs replicas from container images only (Kubernetes): every role with
    /// replicas needs `template.image`.
    pub requires_image: bool,
    /// The stored Pipelines of the namespace a submission goes to, every kept version,
    /// which its runs may name (`spec.pipelineRef`); those of the submission itself are
    /// added to them.
    pub pipelines: Vec<Pipeline>,
}

/// One node of a cluster, as validation sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeFacts {
    /// Product name of its GPUs; `None` without GPUs.
    pub gpu_type: Option<String>,
    pub gpus: u32,
}

impl ValidationContext {
    /// The checks that need the cluster, named for a user told they did not run offline.
    pub const CLUSTER_CHECKS: &'static str = "that the priority class and queue exist, and that the cluster has the GPUs (type and count per node) each replica asks for";

    /// The queues a job may name: the declared ones, and `default` unless one is declared
    /// (the control plane's implicit unlimited queue).
    pub(super) fn queue_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self
            .queues
            .iter()
            .map(|q| q.metadata.name.as_str())
            .collect();
        if !names.contains(&crate::DEFAULT_QUEUE) {
            names.push(crate::DEFAULT_QUEUE);
        }
        names.sort_unstable();
        names
    }

    /// The most GPUs any node of an allowed type holds, and the pool that holds them.
    pub(super) fn largest_gpu_node(&self, allowed: &[String]) -> Option<(u32, String)> {
        self.node_pools
            .iter()
            .filter(|p| {
                allowed.is_empty()
                    || p.spec
                        .gpu_type
                        .as_ref()
                        .is_some_and(|t| self.selects_any(allowed, t))
            })
            .filter_map(|p| p.spec.gpus_per_node.map(|n| (n, p.metadata.name.clone())))
            .max_by(|a, b| a.0.cmp(&b.0).then_with(|| b.1.cmp(&a.1)))
    }

    /// What this cluster's nodes hold, in words: "this cluster has GPU types
    /// NVIDIA-H100-80GB-HBM3 (1 per node)", "this cluster has no GPUs". `None` without nodes.
    pub fn gpus_in_words(&self) -> Option<String> {
        let nodes = self.nodes.as_ref()?;
        let mut per_type: std::collections::BTreeMap<&str, (u32, u32)> = Default::default();
        for n in nodes.iter().filter(|n| n.gpus > 0) {
            let t = n.gpu_type.as_deref().unwrap_or("(no type)");
            let e = per_type.entry(t).or_insert((n.gpus, n.gpus));
            e.0 = e.0.min(n.gpus);
            e.1 = e.1.max(n.gpus);
        }
        if per_type.is_empty() {
            return Some("this cluster has no GPUs".into());
        }
        let list: Vec<String> = per_type
            .iter()
            .map(|(t, (lo, hi))| {
                if lo == hi {
                    format!("{t} ({lo} per node)")
                } else {
                    format!("{t} ({lo} to {hi} per node)")
                }
            })
            .collect();
        let noun = if list.len() == 1 { "type" } else { "types" };
        Some(format!("this cluster has GPU {noun} {}", list.join(", ")))
    }

    /// Whether any of the names `allowed` selects type `t` among the types that exist here
    /// (`corral_api::gpu_type::resolve`).
    pub(super) fn selects_any(&self, allowed: &[String], t: &str) -> bool {
        let known = self.gpu_types();
        allowed
            .iter()
            .any(|a| gpu_type::selects(a, t, known.iter().copied()))
    }

    pub(super) fn gpu_types(&self) -> BTreeSet<&str> {
        self.node_pools
            .iter()
            .filter_map(|p| p.spec.gpu_type.as_deref())
            .chain(
                self.nodes
                    .iter()
                    .flatten()
                    .filter(|n| n.gpus > 0)
                    .filter_map(|n| n.gpu_type.as_deref()),
            )
            .collect()
    }
}
