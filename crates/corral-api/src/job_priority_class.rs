//! JobPriorityClass: a named integer priority. Named like Kueue's WorkloadPriorityClass so
//! that it never collides with Kubernetes' own `scheduling.k8s.io` PriorityClass (`kubectl get
//! priorityclass x` found the wrong one while Corral's kind was called PriorityClass).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::meta::{Kind, Object};

pub type JobPriorityClass = Object<JobPriorityClassSpec>;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobPriorityClassSpec {
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

impl Kind for JobPriorityClassSpec {
    const KIND: &'static str = "JobPriorityClass";
    const PLURAL: &'static str = "jobpriorityclasses";
    const NAMESPACED: bool = false;
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum PreemptionPolicy {
    #[default]
    PreemptLowerPriority,
    Never,
}

/// The kind's former name, still accepted with Corral's apiVersion for one release (0.2 drops
/// it): files are read as a JobPriorityClass with a deprecation warning, and on Kubernetes a
/// deprecated CRD of this name is served and read beside the new one.
pub const LEGACY_KIND: &str = "PriorityClass";
pub const LEGACY_PLURAL: &str = "priorityclasses";
/// The warning shown wherever an object of the former kind is read.
pub const LEGACY_WARNING: &str = "corral.dev/v1alpha1 PriorityClass is deprecated and will be removed in the next release; rename the kind to JobPriorityClass";
