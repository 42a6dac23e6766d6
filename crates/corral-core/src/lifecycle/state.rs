//! A job's state in one word, derived from its conditions: what `corral list` shows and the
//! `state` label of `corral_jobs{queue,state}`. One definition for every shell.

use corral_api::training_job::{ConditionType, TrainingJobSpec, TrainingJobStatus};
use serde::{Deserialize, Serialize};

use super::conditions;

/// Where a job is in its life (the values of `corral_api::metric_names::JOB_STATES`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum JobState {
    /// Waiting in its queue for admission.
    Queued,
    /// Admitted; replicas are starting.
    Admitted,
    Running,
    /// A replica failed and the job restarts (after its back-off).
    Restarting,
    /// Preempted; replicas stop and the job goes back to its queue.
    Preempting,
    Suspended,
    Succeeded,
    Failed,
    /// Deleted; replicas are stopping and then the job is removed. Only shells that keep a
    /// deleted job while it stops report this (Kubernetes removes a deleted job itself).
    Deleting,
}

impl JobState {
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "Queued",
            JobState::Admitted => "Admitted",
            JobState::Running => "Running",
            JobState::Restarting => "Restarting",
            JobState::Preempting => "Preempting",
            JobState::Suspended => "Suspended",
            JobState::Succeeded => "Succeeded",
            JobState::Failed => "Failed",
            JobState::Deleting => "Deleting",
        }
    }

    /// Succeeded or Failed.
    pub fn is_finished(self) -> bool {
        matches!(self, JobState::Succeeded | JobState::Failed)
    }
}

impl std::fmt::Display for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

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
    } else if is(ConditionType::Admitted) && is(ConditionType::Queued) {
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
