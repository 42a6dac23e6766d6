//! PriorityClass: a named integer priority.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::meta::{Kind, Object};

pub type PriorityClass = Object<PriorityClassSpec>;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PriorityClassSpec {
    /// Higher runs first and may preempt lower.
    pub value: i32,
    /// Whether jobs of this class may preempt lower-priority jobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption_policy: Option<PreemptionPolicy>,
    /// The class of jobs that name none (at most one class may set this).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub global_default: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

impl Kind for PriorityClassSpec {
    const KIND: &'static str = "PriorityClass";
    const PLURAL: &'static str = "priorityclasses";
    const NAMESPACED: bool = false;
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum PreemptionPolicy {
    #[default]
    PreemptLowerPriority,
    Never,
}
