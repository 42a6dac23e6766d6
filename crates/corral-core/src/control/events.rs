//! Events: what happened to a job, in words, one set for every shell (the embedded
//! cluster's `corral describe`, Kubernetes Events, the simulator's log).

use corral_api::training_job::{ConditionType, TrainingJobStatus};
use serde::{Deserialize, Serialize};

use crate::lifecycle::conditions;

/// Normal or Warning, as Kubernetes events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// Something that happened to a job (`namespace/name`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobEvent {
    pub job: String,
    #[serde(rename = "type")]
    pub type_: EventType,
    /// One of [`event_reason`].
    pub reason: &'static str,
    pub message: String,
}

/// The reasons of the events the control plane emits. Shells add their own for what only
/// they see (`Started` with a pid).
pub mod event_reason {
    pub const ADMITTED: &str = "Admitted";
    pub const ADMISSION_LOST: &str = "AdmissionLost";
    pub const PENDING: &str = "Pending";
    pub const UNSCHEDULABLE: &str = "Unschedulable";
    pub const PREEMPTED: &str = "Preempted";
    pub const MOVED: &str = "Moved";
    /// An elastic job grew or shrank (old and new size, why: `sched::Resize`).
    pub const RESIZED: &str = "Resized";
    pub const REQUEUED: &str = "Requeued";
    pub const RUNNING: &str = "Running";
    pub const RESTARTING: &str = "Restarting";
    pub const SUSPENDED: &str = "Suspended";
    pub const RESUMED: &str = "Resumed";
    pub const SUCCEEDED: &str = "Succeeded";
    pub const FAILED: &str = "Failed";
    pub const INVALID: &str = "Invalid";
    /// The platform could not start a replica: the job backs off out of its queue
    /// (`lifecycle::back_off_failed_start`), a Warning once per failed start.
    pub const START_BACK_OFF: &str = "StartBackOff";
    /// The gang's starts wait for room still held on a node (see `control::room`). Not in
    /// [`ALL`]: whether a start waits depends on how fast the platform stops a victim, not on
    /// a decision, so the conformance trace leaves it out.
    pub const WAITING_FOR_ROOM: &str = "WaitingForRoom";

    /// Every reason above.
    pub const ALL: [&str; 16] = [
        ADMITTED,
        ADMISSION_LOST,
        PENDING,
        UNSCHEDULABLE,
        PREEMPTED,
        MOVED,
        RESIZED,
        REQUEUED,
        RUNNING,
        RESTARTING,
        SUSPENDED,
        RESUMED,
        SUCCEEDED,
        FAILED,
        INVALID,
        START_BACK_OFF,
    ];
}

/// The condition an event announces becoming true, when it announces one (Admitted,
/// Running, Suspended, Succeeded): the status of the same step keeps that condition with its
/// time and words (and, on Kubernetes, the admission's placements in `status.admission`),
/// so a shell whose job object carries its conditions may leave the announcement to them.
/// Warnings and what no condition keeps (preemptions, moves, resizes, restarts, back-offs,
/// why a job waits) always stay events.
pub fn announced_condition(reason: &str) -> Option<ConditionType> {
    match reason {
        event_reason::ADMITTED => Some(ConditionType::Admitted),
        event_reason::RUNNING => Some(ConditionType::Running),
        event_reason::SUSPENDED => Some(ConditionType::Suspended),
        event_reason::SUCCEEDED => Some(ConditionType::Succeeded),
        _ => None,
    }
}

/// Whether `status` keeps what the event of `reason` announces: the condition it announces
/// is true in it (see [`announced_condition`]).
pub fn kept_in_status(reason: &str, status: &TrainingJobStatus) -> bool {
    announced_condition(reason).is_some_and(|c| conditions::is_true(status, c))
}

/// Events for what the lifecycle changed in a job's status: conditions that became true
/// (Running, Suspended, Succeeded, Failed), a restart or a start failure counted, a resume.
/// Admission and preemption have events of their own, emitted where the scheduler decides
/// them.
pub(crate) fn status_events(
    job: &str,
    old: &TrainingJobStatus,
    new: &TrainingJobStatus,
    out: &mut Vec<JobEvent>,
) {
    let became = |t: ConditionType| conditions::is_true(new, t) && !conditions::is_true(old, t);
    let message = |t: ConditionType| {
        conditions::get(new, t)
            .map(|c| c.message.clone())
            .unwrap_or_default()
    };
    let mut push = |type_: EventType, reason: &'static str, message: String| {
        out.push(JobEvent {
            job: job.to_string(),
            type_,
            reason,
            message,
        })
    };
    if new.restart_count > old.restart_count {
        push(
            EventType::Warning,
            event_reason::RESTARTING,
            message(ConditionType::Restarting),
        );
    }
    if became(ConditionType::Running) {
        push(
            EventType::Normal,
            event_reason::RUNNING,
            message(ConditionType::Running),
        );
    }
    if became(ConditionType::Suspended) {
        push(
            EventType::Normal,
            event_reason::SUSPENDED,
            message(ConditionType::Suspended),
        );
    }
    if conditions::is_true(old, ConditionType::Suspended)
        && !conditions::is_true(new, ConditionType::Suspended)
    {
        push(
            EventType::Normal,
            event_reason::RESUMED,
            message(ConditionType::Queued),
        );
    }
    if new.start_failures > old.start_failures {
        push(
            EventType::Warning,
            event_reason::START_BACK_OFF,
            message(ConditionType::Queued),
        );
    }
    if became(ConditionType::Failed) {
        push(
            EventType::Warning,
            event_reason::FAILED,
            message(ConditionType::Failed),
        );
    }
    if became(ConditionType::Succeeded) {
        push(
            EventType::Normal,
            event_reason::SUCCEEDED,
            message(ConditionType::Succeeded),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use corral_api::training_job::ConditionStatus;
    use jiff::Timestamp;

    /// What a shell may leave to the status is exactly what the status keeps: each
    /// announcing event comes with its condition true in the same step's status; Failed,
    /// restarts, back-offs and everything about waiting or moving stay events.
    #[test]
    fn only_conditions_that_became_true_are_left_to_the_status() {
        let announced: Vec<&str> = event_reason::ALL
            .iter()
            .copied()
            .filter(|r| announced_condition(r).is_some())
            .collect();
        assert_eq!(announced, ["Admitted", "Running", "Suspended", "Succeeded"]);
        let old = TrainingJobStatus::default();
        for (ty, reason) in [
            (ConditionType::Running, event_reason::RUNNING),
            (ConditionType::Suspended, event_reason::SUSPENDED),
            (ConditionType::Succeeded, event_reason::SUCCEEDED),
        ] {
            let mut new = TrainingJobStatus::default();
            conditions::set(
                &mut new,
                ty,
                ConditionStatus::True,
                "Why",
                "words".into(),
                Timestamp::UNIX_EPOCH,
            );
            let mut out = Vec::new();
            status_events("ml/a", &old, &new, &mut out);
            assert_eq!(out.len(), 1, "{ty:?}: {out:?}");
            assert_eq!(out[0].reason, reason);
            assert_eq!(announced_condition(out[0].reason), Some(ty));
            assert!(kept_in_status(out[0].reason, &new));
            assert!(!kept_in_status(out[0].reason, &old));
        }
        let mut failed = TrainingJobStatus::default();
        conditions::set(
            &mut failed,
            ConditionType::Failed,
            ConditionStatus::True,
            "Why",
            "words".into(),
            Timestamp::UNIX_EPOCH,
        );
        let mut out = Vec::new();
        status_events("ml/a", &old, &failed, &mut out);
        assert_eq!(out[0].reason, event_reason::FAILED);
        assert_eq!(
            announced_condition(out[0].reason),
            None,
            "a failure stays a Warning"
        );
    }
}
