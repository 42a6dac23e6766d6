//! What the lifecycle asks the shell to do. Every action is idempotent: the shell may see the
//! same action again on the next reconcile (until the observation catches up) and must treat
//! a repeat as a no-op.

use std::fmt;
use std::time::Duration;

use super::observe::{Incarnation, ReplicaId};
use crate::sched::ReplicaPlacement;

/// Why a replica is stopped; for logs, events and the UI.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StopReason {
    /// This replica restarts on its own (TF parameter-server job, elastic worker).
    Restart,
    /// The whole gang restarts because one replica failed (allreduce frameworks).
    GangRestart,
    /// The scheduler took the admission back; the job returns to its queue.
    Preempted,
    /// `runPolicy.suspend` was set.
    Suspended,
    /// An elastic job shrinks.
    ScaleDown,
    /// An incarnation that is no longer current (left over from before a restart, or running
    /// without an admission).
    Stale,
    /// The job succeeded; the remaining replicas (e.g. parameter servers) stop.
    JobSucceeded,
    /// The job failed; the remaining replicas stop.
    JobFailed,
    /// The job finished; `cleanPodPolicy: All` removes the records of finished replicas.
    Cleanup,
    /// The platform could not start a replica of the job: every replica stops, and the job
    /// waits out a back-off before it re-enters its queue.
    StartBackOff,
}

impl StopReason {
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Restart => "Restart",
            StopReason::GangRestart => "GangRestart",
            StopReason::Preempted => "Preempted",
            StopReason::Suspended => "Suspended",
            StopReason::ScaleDown => "ScaleDown",
            StopReason::Stale => "Stale",
            StopReason::JobSucceeded => "JobSucceeded",
            StopReason::JobFailed => "JobFailed",
            StopReason::Cleanup => "Cleanup",
            StopReason::StartBackOff => "StartBackOff",
        }
    }
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Start this incarnation of the replica where the scheduler placed it. Issued only when
    /// no other incarnation of the replica exists (the name is free), so the shell never has
    /// two processes or pods of one name.
    Start {
        replica: ReplicaId,
        incarnation: Incarnation,
        placement: ReplicaPlacement,
    },
    /// Stop this incarnation: SIGTERM, then SIGKILL after `grace_period`. With `delete`, also
    /// remove its record (pod, process entry) so that the name is free again; without it the
    /// record stays for inspection (`cleanPodPolicy: None`).
    Stop {
        replica: ReplicaId,
        incarnation: Incarnation,
        grace_period: Duration,
        delete: bool,
        reason: StopReason,
    },
    /// Every replica has stopped after a preemption (or a resume): give the admission back
    /// if the scheduler still holds one, and put the job back in its queue, restart history
    /// kept.
    Requeue,
    /// The job finished or was suspended and every replica has stopped: the scheduler can
    /// forget it (free its admission, drop it from its queue).
    Release,
    /// `ttlSecondsAfterFinished` has passed: delete the TrainingJob itself.
    DeleteJob,
}
