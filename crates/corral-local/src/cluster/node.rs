//! This machine as the scheduler's node, with the pools and queues of `corral.yaml`.

use std::collections::BTreeMap;

use corral_api::node_pool::GPU_PRODUCT_LABEL;
use corral_api::validate::{NodeFacts, ValidationContext};
use std::time::Duration;

use corral_core::control::{ControlConfig, Platform, with_default_queue};
use corral_core::sched::{Node, NodePoolConfig, QueueConfig};

use super::ClusterError;
use crate::config::{ClusterFileConfig, NodeOverrides};
use crate::inventory::NodeInventory;

/// The node's name label, as Kubernetes sets it.
const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// The node, pools and queues of this machine and its configuration: what `corral up` and
/// `corral plan --config` schedule on.
pub fn build_cluster(
    file: &ClusterFileConfig,
    inv: &NodeInventory,
) -> Result<(Node, Vec<NodePoolConfig>, Vec<QueueConfig>), ClusterError> {
    let node = local_node(&file.settings.node, inv)?;
    let pools: Vec<NodePoolConfig> = file
        .node_pools
        .iter()
        .map(NodePoolConfig::from_node_pool)
        .collect();
    let queues: Vec<QueueConfig> = file
        .queues
        .iter()
        .map(QueueConfig::from_queue)
        .collect::<Result<_, _>>()
        .map_err(|e| ClusterError::Config(e.to_string()))?;
    // The control plane's rule, so that views list the queue jobs land in.
    let queues = with_default_queue(queues, &pools, std::slice::from_ref(&node));
    Ok((node, pools, queues))
}

/// The control plane's settings for this machine and its configuration (the core's
/// builder; replicas without an image run as processes here).
pub fn control_config(file: &ClusterFileConfig, node: &Node) -> ControlConfig {
    let settings = &file.settings;
    ControlConfig::builder(Platform::Processes)
        .gpu_types(node.gpu_type.iter().map(String::as_str))
        .preemption_protection_seconds(settings.preemption_protection_seconds)
        .resize_dwell_seconds(settings.resize_dwell_seconds)
        .grace_period(settings.grace_period_seconds.map(Duration::from_secs))
        .priority_classes(file.priority_classes.clone())
        .queues(&file.queues)
        .build()
}

/// What a submission to this machine is validated against: the configuration's objects and
/// this node (`corral up`'s submit and `corral plan --config` alike).
pub fn validation_context(file: &ClusterFileConfig, node: &Node) -> ValidationContext {
    let mut validation = file.validation_context();
    validation.nodes = Some(vec![NodeFacts {
        gpu_type: node.gpu_type.clone(),
        gpus: node.gpus,
    }]);
    validation
}

/// The GPUs NVML reports unhealthy among the node's `gpus`: what `corral up` (at open and
/// while it runs) and `corral plan` tell the control plane (`observe_unhealthy_gpus`).
pub fn unhealthy_gpus(inv: &NodeInventory, gpus: u32) -> Vec<u32> {
    inv.unhealthy_gpus
        .iter()
        .map(|(i, _)| *i)
        .filter(|i| *i < gpus)
        .collect()
}

/// This machine as the scheduler's node: its inventory (`crate::inventory`, NVML included)
/// with the overrides of `corral.yaml`. `corral up` and `corral plan` both use it.
pub fn local_node(o: &NodeOverrides, inv: &NodeInventory) -> Result<Node, ClusterError> {
    let gpus = o
        .gpus
        .unwrap_or_else(|| u32::try_from(inv.gpus.len()).unwrap_or(64).min(64));
    let gpu_type = if gpus == 0 {
        None
    } else {
        // Canonical, whatever spelling corral.yaml uses (corral_api::gpu_type).
        o.gpu_type
            .as_deref()
            .map(corral_api::gpu_type::canonical)
            .or_else(|| inv.gpus.first().map(|g| g.gpu_type.clone()))
            .or_else(|| Some("FAKE-GPU".to_string()))
    };
    let cpu_milli = match &o.cpu {
        Some(q) => q
            .milli()
            .ok()
            .and_then(|v| u64::try_from(v).ok())
            .ok_or_else(|| ClusterError::Config("node.cpu: not a valid quantity".into()))?,
        None => u64::from(inv.cpus).saturating_mul(1000),
    };
    let memory_bytes = match &o.memory {
        Some(q) => q
            .units()
            .ok()
            .and_then(|v| u64::try_from(v).ok())
            .ok_or_else(|| ClusterError::Config("node.memory: not a valid quantity".into()))?,
        None => inv.memory_bytes,
    };
    let name = o.name.clone().unwrap_or_else(|| inv.hostname.clone());
    // The labels Kubernetes and NVIDIA's GPU feature discovery would give this node, so a
    // NodePool's `nodeSelector` written for a cluster selects it here too.
    let mut labels = BTreeMap::from([(HOSTNAME_LABEL.to_string(), name.clone())]);
    if let Some(t) = &gpu_type {
        labels.insert(GPU_PRODUCT_LABEL.to_string(), t.clone());
    }
    Ok(Node {
        labels,
        extended: o.extended.clone(),
        ..Node::new(name, gpu_type, gpus, cpu_milli, memory_bytes)
    })
}
