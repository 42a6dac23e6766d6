//! This machine as the scheduler's node, with the pools and queues of `corral.yaml`.

use corral_core::control::with_default_queue;
use corral_core::sched::{Node, NodePoolConfig, QueueConfig};

use super::{ClusterConfig, ClusterError};
use crate::config::NodeOverrides;
use crate::inventory::NodeInventory;

/// The node, pools and queues of this machine and its configuration.
pub(super) fn build_cluster(
    config: &ClusterConfig,
    inv: &NodeInventory,
) -> Result<(Node, Vec<NodePoolConfig>, Vec<QueueConfig>), ClusterError> {
    let node = local_node(&config.file.settings.node, inv)?;
    let pools: Vec<NodePoolConfig> = config
        .file
        .node_pools
        .iter()
        .map(NodePoolConfig::from_node_pool)
        .collect();
    let queues: Vec<QueueConfig> = config
        .file
        .queues
        .iter()
        .map(QueueConfig::from_queue)
        .collect::<Result<_, _>>()
        .map_err(|e| ClusterError::Config(e.to_string()))?;
    // The control plane's rule, so that views list the queue jobs land in.
    let queues = with_default_queue(queues, &pools, std::slice::from_ref(&node));
    Ok((node, pools, queues))
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
    // An unhealthy GPU is held as if by work the scheduler does not manage, so the core
    // never places a replica on it.
    let unhealthy: Vec<u32> = inv
        .unhealthy_gpus
        .iter()
        .map(|(i, _)| *i)
        .filter(|i| *i < gpus)
        .collect();
    Ok(Node {
        extended: o.extended.clone(),
        allocated: corral_core::sched::NodeAllocation {
            gpu_indices: unhealthy,
            ..Default::default()
        },
        ..Node::new(
            o.name.clone().unwrap_or_else(|| inv.hostname.clone()),
            gpu_type,
            gpus,
            cpu_milli,
            memory_bytes,
        )
    })
}
