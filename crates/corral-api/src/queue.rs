//! Queue: where one team's jobs wait, with its quota per node pool.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::meta::{Kind, Object};
use crate::quantity::Quantity;

pub type Queue = Object<QueueSpec>;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueSpec {
    /// Queues in one cohort lend each other unused quota.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cohort: Option<String>,
    /// Fair-share weight: a queue with weight 2 is entitled to twice the dominant share of a
    /// queue with weight 1 (default 1).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub weight: u32,
    /// Namespaces whose jobs may use this queue (empty: every namespace). A job of another
    /// namespace is not admitted; its status names the queue and these namespaces.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// Quota per node pool. A resource a quota does not name is not limited by it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub quotas: Vec<PoolQuota>,
}

fn one() -> u32 {
    1
}
fn is_one(v: &u32) -> bool {
    *v == 1
}

impl Kind for QueueSpec {
    const KIND: &'static str = "Queue";
    const PLURAL: &'static str = "queues";
    const NAMESPACED: bool = false;
}

/// The quota of one queue in one node pool.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolQuota {
    /// Name of a NodePool.
    pub node_pool: String,
    /// Guaranteed (nominal) GPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<Quantity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Quantity>,
    /// The most this queue may borrow from its cohort above its quota (unset: no limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrowing_limit: Option<ResourceAmounts>,
    /// The most of its unused quota this queue lends to its cohort (unset: all of it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lending_limit: Option<ResourceAmounts>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceAmounts {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<Quantity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Quantity>,
}
