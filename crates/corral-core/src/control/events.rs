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
