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

/// Whether `new` says the same as `old` of a job that waits in its queue, in other words
/// only: the same state, counts, blocking kinds and conditions, the Queued condition's
/// message aside (which GPUs are free right now, how many jobs are ahead). A shell that
/// pays a write per status (Kubernetes) may refresh such words less often than it passes.
pub fn only_waiting_words_differ(old: &TrainingJobStatus, new: &TrainingJobStatus) -> bool {
    let waiting = |s: &TrainingJobStatus| {
        s.phase == Some(corral_api::training_job::JobState::Queued)
            && is_true(s, ConditionType::Queued)
    };
    if !waiting(old) || !waiting(new) || old == new {
        return false;
    }
    let without_words = |s: &TrainingJobStatus| {
        let mut s = s.clone();
        for c in &mut s.conditions {
            if c.type_ == ConditionType::Queued {
                c.message.clear();
            }
        }
        s
    };
    without_words(old) == without_words(new)
}

#[cfg(test)]
mod tests {
    use super::*;
    use corral_api::training_job::JobState;

    fn queued(message: &str, blocked_by: &[&str]) -> TrainingJobStatus {
        let mut s = TrainingJobStatus {
            phase: Some(JobState::Queued),
            blocked_by: blocked_by.iter().map(|b| b.to_string()).collect(),
            ..Default::default()
        };
        set(
            &mut s,
            ConditionType::Queued,
            ConditionStatus::True,
            "Capacity",
            message.into(),
            Timestamp::UNIX_EPOCH,
        );
        s
    }

    #[test]
    fn only_the_waiting_message_is_words() {
        let a = queued("needs 8 GPUs; 6 are free", &["Capacity"]);
        let b = queued("needs 8 GPUs; no GPUs are free", &["Capacity"]);
        assert!(only_waiting_words_differ(&a, &b));
        assert!(!only_waiting_words_differ(&a, &a), "no difference at all");
        let quota = queued("needs 8 GPUs; the queue's quota is spent", &["Quota"]);
        assert!(
            !only_waiting_words_differ(&a, &quota),
            "another blocking kind"
        );
        let mut admitted = b.clone();
        admitted.phase = Some(JobState::Admitted);
        assert!(
            !only_waiting_words_differ(&a, &admitted),
            "no longer waiting"
        );
        let mut reason = b.clone();
        set(
            &mut reason,
            ConditionType::Queued,
            ConditionStatus::True,
            "Quota",
            "x".into(),
            Timestamp::UNIX_EPOCH,
        );
        assert!(!only_waiting_words_differ(&a, &reason), "another reason");
    }
}
