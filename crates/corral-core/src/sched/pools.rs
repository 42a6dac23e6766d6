//! Which NodePool takes which node (its GPU type and node selector), and the pools that
//! take none: the rule the scheduler's index and the shells' start-up warnings share.

use super::model::{Node, NodePoolConfig};

/// Whether a pool takes a node: its GPU type and node selector match. `explicit`: the
/// cluster declares its pools (otherwise there is one implicit pool per GPU type).
pub(crate) fn pool_selects(p: &NodePoolConfig, n: &Node, explicit: bool) -> bool {
    let node_type = n.gpu_type.as_ref().filter(|_| n.gpus > 0);
    let type_ok = match (&p.gpu_type, explicit) {
        // Implicit pools: exactly one per type, CPU-only nodes in `cpu`.
        (t, false) => t.as_ref() == node_type,
        // A pool's `gpuType` names one type, in either spelling (NVML's or the product
        // label's).
        (Some(t), true) => node_type.is_some_and(|n| corral_api::gpu_type::same_type(n, t)),
        // An explicit pool without a GPU type takes any node it selects.
        (None, true) => true,
    };
    type_ok
        && p.node_selector
            .iter()
            .all(|(k, v)| n.labels.get(k) == Some(v))
}

/// The pool a node is in: the first declared pool that takes it, or without declared pools
/// its GPU type's (`cpu` for a node without GPUs), as the scheduler's index groups nodes.
pub fn pool_of(pools: &[NodePoolConfig], n: &Node) -> Option<String> {
    if pools.is_empty() {
        return Some(match &n.gpu_type {
            Some(t) if n.gpus > 0 => t.clone(),
            _ => crate::control::CPU_POOL.to_string(),
        });
    }
    pools
        .iter()
        .find(|p| pool_selects(p, n, true))
        .map(|p| p.name.clone())
}

/// A warning for each declared pool that takes no node of the cluster (its jobs could
/// never be admitted there): what `corral up`, the operator and `corral doctor` say.
pub fn pools_without_nodes(pools: &[NodePoolConfig], nodes: &[Node]) -> Vec<String> {
    pools
        .iter()
        .filter(|p| !nodes.iter().any(|n| pool_selects(p, n, true)))
        .map(|p| {
            let mut want = Vec::new();
            if let Some(t) = &p.gpu_type {
                want.push(format!("GPU type {t}"));
            }
            for (k, v) in &p.node_selector {
                want.push(format!("label {k}={v}"));
            }
            let have: Vec<String> = nodes
                .iter()
                .map(|n| {
                    let gpus = match &n.gpu_type {
                        Some(t) if n.gpus > 0 => format!("{} x {t}", n.gpus),
                        _ => "no GPU".to_string(),
                    };
                    format!("{} ({gpus})", n.name)
                })
                .collect();
            format!(
                "NodePool {} selects no node ({}); nodes: {}",
                p.name,
                if want.is_empty() {
                    "it asks for nothing, yet matches none".to_string()
                } else {
                    format!("it wants {}", want.join(", "))
                },
                if have.is_empty() {
                    "none".to_string()
                } else {
                    have.join(", ")
                }
            )
        })
        .collect()
}
