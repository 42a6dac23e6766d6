//! Job conditions: set, clear and query, Kubernetes style (the transition time moves only
//! when the status changes).

use corral_api::training_job::{Condition, ConditionStatus, ConditionType, TrainingJobStatus};
use jiff::Timestamp;

/// Condition reasons the lifecycle writes (CamelCase, as Kubernetes reasons are).
pub mod reason {
    pub const QUEUED: &str = "Queued";
    pub const ADMITTED: &str = "Admitted";
    pub const PLACEMENT_INCOMPLETE: &str = "PlacementIncomplete";
    pub const RUNNING: &str = "Running";
    pub const RESTARTING: &str = "Restarting";
    pub const PREEMPTED: &str = "Preempted";
    pub const SUSPENDED: &str = "Suspended";
    pub const RESUMED: &str = "Resumed";
    pub const SUCCEEDED: &str = "JobSucceeded";
    pub const REPLICA_FAILED: &str = "ReplicaFailed";
    pub const BACKOFF_LIMIT_EXCEEDED: &str = "BackoffLimitExceeded";
    pub const DEADLINE_EXCEEDED: &str = "DeadlineExceeded";
    pub const FINISHED: &str = "JobFinished";
    /// The platform refused to create a replica for good (see
    /// [`crate::lifecycle::fail_rejected_launch`]).
    pub const LAUNCH_REJECTED: &str = "LaunchRejected";
    /// The platform could not start a replica: the job waits out a back-off before it
    /// re-enters its queue (the `Queued` condition's reason, and `blockedBy`; see
    /// [`crate::lifecycle::back_off_failed_start`]).
    pub const START_BACK_OFF: &str = "StartBackOff";
}

pub fn get(status: &TrainingJobStatus, type_: ConditionType) -> Option<&Condition> {
    status.conditions.iter().find(|c| c.type_ == type_)
}

pub fn is_true(status: &TrainingJobStatus, type_: ConditionType) -> bool {
    get(status, type_).is_some_and(|c| c.status == ConditionStatus::True)
}

/// A finished job: Succeeded or Failed. Final, whatever arrives later.
pub fn is_terminal(status: &TrainingJobStatus) -> bool {
    is_true(status, ConditionType::Succeeded) || is_true(status, ConditionType::Failed)
}

/// Sets a condition. The transition time moves only when the status flips (or the condition
/// is new); reason and message always take the new values.
pub fn set(
    status: &mut TrainingJobStatus,
    type_: ConditionType,
    value: ConditionStatus,
    reason: &str,
    message: String,
    now: Timestamp,
) {
    match status.conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status != value {
                c.status = value;
                c.last_transition_time = now;
            }
            c.reason = reason.to_string();
            c.message = message;
        }
        None => status.conditions.push(Condition {
            type_,
            status: value,
            reason: reason.to_string(),
            message,
            last_transition_time: now,
        }),
    }
}

/// Sets a condition to False only where it is True: a condition the job never had stays
/// absent (as Kubeflow does), so that status stays short.
pub fn clear(
    status: &mut TrainingJobStatus,
    type_: ConditionType,
    reason: &str,
    message: String,
    now: Timestamp,
) {
    if is_true(status, type_) {
        set(status, type_, ConditionStatus::False, reason, message, now);
    }
}
