//! A job's state in one word, derived from its conditions: what `corral list` shows and the
//! `state` label of `corral_jobs{queue,state}`. One definition for every shell.

use corral_api::training_job::{ConditionType, TrainingJobSpec, TrainingJobStatus};

use super::conditions;

pub use corral_api::training_job::JobState;

/// The state a job's spec and recorded status show (never `Deleting`: that is the shell's).
pub fn job_state(spec: &TrainingJobSpec, status: Option<&TrainingJobStatus>) -> JobState {
    let suspend = spec.run_policy.suspend;
    let Some(status) = status else {
        return if suspend {
            JobState::Suspended
        } else {
            JobState::Queued
        };
    };
    let is = |t| conditions::is_true(status, t);
    if is(ConditionType::Succeeded) {
        JobState::Succeeded
    } else if is(ConditionType::Failed) {
        JobState::Failed
    } else if is(ConditionType::Suspended) || suspend {
        JobState::Suspended
    } else if is_backing_off(status) {
        JobState::BackOff
    } else if is_preempting(status) {
        JobState::Preempting
    } else if is(ConditionType::Restarting) {
        JobState::Restarting
    } else if is(ConditionType::Running) {
        JobState::Running
    } else if is(ConditionType::Admitted) {
        JobState::Admitted
    } else {
        JobState::Queued
    }
}

/// Whether the job is being preempted: it still holds its admission (its replicas are
/// stopping) and is already back in its queue. The one definition every shell reads.
pub fn is_preempting(status: &TrainingJobStatus) -> bool {
    conditions::is_true(status, ConditionType::Admitted)
        && conditions::is_true(status, ConditionType::Queued)
        && !is_backing_off(status)
}

/// Whether the job waits out a start back-off (state `BackOff`): the platform could not
/// start one of its replicas; the job stops what runs, gives its admission back and stays
/// out of its queue until `status.backoffUntil`.
pub fn is_backing_off(status: &TrainingJobStatus) -> bool {
    conditions::get(status, ConditionType::Queued).is_some_and(|c| {
        c.status == corral_api::training_job::ConditionStatus::True
            && c.reason == conditions::reason::START_BACK_OFF
    })
}

/// Whether the job waits for an admission (state `Queued`): not admitted, not suspended,
/// not finished. What `pending` means in every count (`corral queues`, the operator's and
/// the server's metrics).
pub fn is_pending(spec: &TrainingJobSpec, status: Option<&TrainingJobStatus>) -> bool {
    job_state(spec, status) == JobState::Queued
}
