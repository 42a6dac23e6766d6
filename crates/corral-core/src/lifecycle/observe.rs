//! What the shell tells the lifecycle: which replicas exist and in which state, and what the
//! scheduler decided ([`AdmissionState`]: the scheduler's own [`sched::Admission`] with its
//! placements, or a preemption with its grace period).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use corral_api::training_job::Role;

use crate::sched;

/// One replica of a job: a role and an index. Its name is `<job>-<role>-<index>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReplicaId {
    pub role: Role,
    pub index: u32,
}

impl ReplicaId {
    pub fn new(role: Role, index: u32) -> Self {
        ReplicaId { role, index }
    }

    /// `<role>-<index>`: the replica's key within its job (used in status).
    pub fn key(&self) -> String {
        self.to_string()
    }

    /// `<job>-<role>-<index>`: the replica's name (process or pod name).
    pub fn name(&self, job: &str) -> String {
        format!("{job}-{}-{}", self.role, self.index)
    }
}

impl fmt::Display for ReplicaId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.role, self.index)
    }
}

/// Which launch of a replica an observation is about. The lifecycle hands one out with every
/// start; the shell stamps it on the process or pod (a label) and reports it back verbatim.
/// Observations of any other incarnation than the current one are stale: late or duplicated
/// events from before a restart, which must never count again.
///
/// `attempt` is the gang's launch (status `attempt`); `retry` counts restarts of this replica
/// alone within that attempt (status `replicaRetries`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Incarnation {
    pub attempt: u32,
    pub retry: u32,
}

impl fmt::Display for Incarnation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.attempt, self.retry)
    }
}

impl FromStr for Incarnation {
    type Err = String;
    /// Parses the `attempt.retry` form that `Display` writes (label values).
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("invalid incarnation `{s}`: expected `<attempt>.<retry>`");
        let (a, r) = s.split_once('.').ok_or_else(bad)?;
        Ok(Incarnation {
            attempt: a.parse().map_err(|_| bad())?,
            retry: r.parse().map_err(|_| bad())?,
        })
    }
}

/// The incarnation a job's recorded status expects of a replica now: the gang's attempt and
/// the replica's own retries within it. Observations of any other incarnation are stale.
pub fn current_incarnation(status: &corral_api::TrainingJobStatus, id: ReplicaId) -> Incarnation {
    Incarnation {
        attempt: status.attempt,
        retry: status.replica_retries.get(&id.key()).copied().unwrap_or(0),
    }
}

/// Why a replica failed, as far as the shell can tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FailureReason {
    /// The program exited non-zero.
    Error,
    /// Killed for exceeding its memory limit.
    OomKilled,
    /// Evicted by the node (resource pressure, drain).
    Evicted,
    /// Stopped to make room for higher-priority work: not a failure of the job.
    Preempted,
    /// The node went away or stopped reporting.
    NodeLost,
    /// The replica ran past a deadline of its own (e.g. a pod's activeDeadlineSeconds).
    DeadlineExceeded,
    /// What the replica needs before its program runs could not be made (a Python
    /// environment whose requirements do not resolve): a restart would fail the same way.
    SetupFailed,
    /// The platform could not start the replica's program (an image it cannot pull, a
    /// command that does not exist, no port left for it): not a failure of the program.
    /// The job backs off out of its queue (see [`crate::lifecycle::back_off_failed_start`]),
    /// never counted against backoffLimit.
    StartFailed,
}

impl FailureReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureReason::Error => "Error",
            FailureReason::OomKilled => "OOMKilled",
            FailureReason::Evicted => "Evicted",
            FailureReason::Preempted => "Preempted",
            FailureReason::NodeLost => "NodeLost",
            FailureReason::DeadlineExceeded => "DeadlineExceeded",
            FailureReason::SetupFailed => "SetupFailed",
            FailureReason::StartFailed => "StartFailed",
        }
    }

    /// Failures of the machine rather than of the program: always worth retrying when the
    /// restart policy allows restarts at all, whatever the exit code says.
    pub fn is_infrastructure(self) -> bool {
        matches!(self, FailureReason::Evicted | FailureReason::NodeLost)
    }
}

impl fmt::Display for FailureReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The state of one replica incarnation as the shell observes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplicaPhase {
    /// Created, waiting to be scheduled or for its image.
    Pending,
    /// Process starting / containers creating.
    Starting,
    Running,
    /// Exited 0.
    Succeeded,
    Failed {
        exit_code: i32,
        reason: FailureReason,
    },
    /// Vanished: the shell knew it and can no longer find it (pod deleted by someone else,
    /// process record lost).
    Gone,
}

impl ReplicaPhase {
    /// Holds (or is about to hold) resources.
    pub fn is_active(self) -> bool {
        matches!(
            self,
            ReplicaPhase::Pending | ReplicaPhase::Starting | ReplicaPhase::Running
        )
    }

    /// Exited, one way or the other; its record still exists.
    pub fn is_finished(self) -> bool {
        matches!(self, ReplicaPhase::Succeeded | ReplicaPhase::Failed { .. })
    }

    /// Progress order, to merge duplicated observations of one incarnation: a replica only
    /// moves forward, so the most advanced observation is the true one.
    pub(crate) fn progress(self) -> u8 {
        match self {
            ReplicaPhase::Pending => 0,
            ReplicaPhase::Starting => 1,
            ReplicaPhase::Running => 2,
            ReplicaPhase::Succeeded => 3,
            ReplicaPhase::Failed { .. } => 4,
            ReplicaPhase::Gone => 5,
        }
    }
}

/// One replica incarnation as the shell sees it now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObservedReplica {
    pub id: ReplicaId,
    pub incarnation: Incarnation,
    pub phase: ReplicaPhase,
}

impl ObservedReplica {
    pub fn new(id: ReplicaId, incarnation: Incarnation, phase: ReplicaPhase) -> Self {
        ObservedReplica {
            id,
            incarnation,
            phase,
        }
    }
}

/// The placement the scheduler's admission gives one replica, if any. The admission names
/// replicas by role string and index; this matches them against a [`ReplicaId`].
pub(crate) fn placement_of(
    admission: &sched::Admission,
    id: ReplicaId,
) -> Option<&sched::ReplicaPlacement> {
    admission
        .placements
        .iter()
        .find(|p| p.role == id.role.as_str() && p.index == id.index)
}

/// What the scheduler says about the job right now.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum AdmissionState {
    /// Waiting in its queue (or not yet seen by the scheduler).
    #[default]
    Waiting,
    /// The scheduler admitted the whole job: a placement for every replica. For an elastic
    /// job the number of workers placed is the size the job runs at (between min and max);
    /// the scheduler resizes the job by handing over a new admission.
    Admitted(sched::Admission),
    /// The scheduler took the job's admission back to make room for other work (its
    /// [`sched::Preemption`] decision): the replicas stop and the job returns to its queue.
    Preempted {
        /// SIGTERM, then this long to checkpoint before SIGKILL.
        grace_period: Duration,
        /// Why, for the job's conditions.
        message: String,
    },
}
