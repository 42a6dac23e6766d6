//! What a scheduling cycle decides.

use serde::{Deserialize, Serialize};

use super::explain::{PendingReason, PreemptionReason};

/// Where one replica runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReplicaPlacement {
    pub role: String,
    /// Index of the replica within its role (`<job>-<role>-<index>`).
    pub index: u32,
    pub node: String,
    /// GPU indices on the node, ascending.
    #[serde(default)]
    pub gpu_indices: Vec<u32>,
}

/// A whole job may start now, with every replica placed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Admission {
    pub job: String,
    pub pool: String,
    pub gpu_type: Option<String>,
    pub placements: Vec<ReplicaPlacement>,
}

/// An admitted job must stop (SIGTERM with grace) and go back to its queue.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Preemption {
    pub job: String,
    pub reason: PreemptionReason,
}

/// A job that stays pending, and why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingJob {
    pub job: String,
    pub reason: PendingReason,
}

/// Per-cycle counters. The core has no clock: the shell measures the cycle's latency around
/// the call and reports it next to these.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CycleCounters {
    /// Jobs the cycle tried to admit.
    pub attempts: u64,
    pub admitted: u64,
    pub preempted: u64,
    pub pending: u64,
    /// Replicas placed.
    pub pods_placed: u64,
    /// Jobs for which a victim search ran.
    pub preemption_searches: u64,
    /// Node reservations made for blocked gangs.
    pub reservations: u64,
    /// Pending jobs the cycle did not reach because its slice was spent
    /// ([`super::Scheduler::cycle_sliced`]): the next cycle takes them up.
    #[serde(default)]
    pub deferred: u64,
}

/// Everything one cycle decided.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CycleOutcome {
    pub admitted: Vec<Admission>,
    pub preempted: Vec<Preemption>,
    pub pending: Vec<PendingJob>,
    pub counters: CycleCounters,
    /// Jobs moved in place (only with `SchedulerConfig::move_in_place`): each is also in
    /// `preempted` with reason `Rebalance`, and stays admitted at this new placement. The
    /// shell stops its replicas and starts them here. A shell that cannot do that handles
    /// the preemption as usual and forgets the job (`finish`), which frees this placement.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub moved: Vec<Admission>,
    /// Running elastic jobs whose size changed (see [`super::elastic`]): each stays
    /// admitted at its new placement, whose replicas of the elastic group are `0..to`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resized: Vec<Resize>,
}

/// A running elastic job changes size: the replicas of its elastic group are now `0..to`
/// (the others keep their placements; replica 0 never moves).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Resize {
    /// The job's whole admission at its new size.
    pub admission: Admission,
    pub role: String,
    pub from: u32,
    pub to: u32,
    pub reason: ResizeReason,
}

/// Why an elastic job changed size.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum ResizeReason {
    /// Free capacity no pending job could use.
    Grew,
    /// A pending job of equal or higher priority needed the room (`job`, its key).
    ShrankFor { job: String, priority: i32 },
}

impl Resize {
    /// The resize as its own job may read it: a job of another namespace it shrank for is
    /// not named (see [`super::explain::job_as_seen_by`]).
    pub fn as_seen_by_its_job(&self) -> Resize {
        let mut seen = self.clone();
        if let ResizeReason::ShrankFor { job, .. } = &mut seen.reason {
            *job = super::explain::job_as_seen_by(&self.admission.job, job);
        }
        seen
    }
}

impl std::fmt::Display for Resize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Resize { role, from, to, .. } = self;
        match &self.reason {
            ResizeReason::Grew => {
                write!(f, "grew from {from} to {to} {role} replicas into free GPUs")
            }
            ResizeReason::ShrankFor { job, priority } => write!(
                f,
                "shrank from {from} to {to} {role} replicas to make room for {job} (priority {priority})"
            ),
        }
    }
}

/// The decision for one job on the single-job fast path.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "decision")]
pub enum Decision {
    Admitted {
        admission: Admission,
        preempted: Vec<Preemption>,
    },
    Pending {
        reason: PendingReason,
    },
}
