//! NodePool: nodes of one GPU type (Kueue's ResourceFlavor).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::meta::{Kind, Object};

pub type NodePool = Object<NodePoolSpec>;

/// The node label that carries the GPU type (set by NVIDIA GPU feature discovery).
pub const GPU_PRODUCT_LABEL: &str = "nvidia.com/gpu.product";

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolSpec {
    /// GPU product name of the pool's nodes (e.g. `NVIDIA-A100-SXM4-80GB`); unset for CPU pools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_type: Option<String>,
    /// Labels that select the pool's nodes (on Kubernetes).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// GPUs on each node of the pool; replicas that need more are rejected at submission.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus_per_node: Option<u32>,
}

impl Kind for NodePoolSpec {
    const KIND: &'static str = "NodePool";
    const PLURAL: &'static str = "nodepools";
    const NAMESPACED: bool = false;
}
