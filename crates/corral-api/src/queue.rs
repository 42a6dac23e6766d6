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
    /// GPU-hours the queue's jobs may hold per period (unset: no budget). Once its jobs
    /// have held that many in the current period, the queue admits no new job until the
    /// next period begins; jobs already admitted run on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<QueueBudget>,
}

/// A queue's budget: GPU-hours per calendar period (UTC).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueBudget {
    /// GPU-hours the queue's jobs may hold per period, of every GPU type together, as a
    /// quantity: `100`, `"2.5"`, `"500m"` (half a GPU-hour).
    pub gpu_hours: Quantity,
    /// The period the budget renews: a UTC day, an ISO week (from Monday) or a month.
    pub period: BudgetPeriod,
}

/// The calendar period of a [`QueueBudget`], in UTC.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum BudgetPeriod {
    Day,
    Week,
    Month,
}

impl BudgetPeriod {
    pub fn as_str(self) -> &'static str {
        match self {
            BudgetPeriod::Day => "day",
            BudgetPeriod::Week => "week",
            BudgetPeriod::Month => "month",
        }
    }
}

/// The most GPU-hours a budget may name (about 114 years of 1,000 GPUs).
pub const MAX_BUDGET_GPU_HOURS: u64 = 1_000_000_000;

impl QueueBudget {
    /// The budget in GPU-seconds; `None` when `gpuHours` is not a valid quantity.
    pub fn gpu_seconds(&self) -> Option<f64> {
        self.gpu_hours.milli().ok().map(|m| m as f64 * 3.6)
    }
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
