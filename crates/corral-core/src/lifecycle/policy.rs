//! The rules, each a small pure function: restart policy, restart scope, success policy,
//! back-off, and the set of replicas a job should run.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use corral_api::training_job::{Framework, RestartPolicy, Role, SuccessPolicy, TrainingJobSpec};

use super::observe::{FailureReason, ReplicaId, ReplicaPhase, placement_of};
use crate::sched::{Admission, ReplicaPlacement};

/// Grace period of stops that name none (Kubernetes' default terminationGracePeriodSeconds).
pub const DEFAULT_GRACE_PERIOD: Duration = Duration::from_secs(30);
/// First restart back-off; doubles with every restart of the job.
pub const BACKOFF_BASE: Duration = Duration::from_secs(10);
/// Longest restart back-off (as the Kubernetes Job controller caps it).
pub const BACKOFF_CAP: Duration = Duration::from_secs(360);

/// How long to wait before the `restart_count`-th restart (1-based): 10s, 20s, 40s, ... 6 min.
pub fn backoff(restart_count: u32) -> Duration {
    let doublings = restart_count.saturating_sub(1).min(16);
    BACKOFF_BASE
        .saturating_mul(1u32 << doublings)
        .min(BACKOFF_CAP)
}

/// First back-off after a start the platform could not make; doubles with every one in a
/// row (as kubelet's image pull back-off).
pub const START_BACKOFF_BASE: Duration = Duration::from_secs(10);
/// Longest back-off after a start the platform could not make (kubelet's image pull cap).
pub const START_BACKOFF_CAP: Duration = Duration::from_secs(300);
/// How long a job must have been Running before its start counts as made and the count of
/// start failures resets: a shell may report a replica Running as soon as it spawned it,
/// before its command or image is known to work (a replica that ended any other way than
/// a start failure has shown it at once).
pub const START_PROVEN_AFTER: Duration = Duration::from_secs(60);

/// How long a job waits out of its queue after its `failures`-th start failure in a row
/// (1-based): 10s, 20s, 40s, ... 5 min.
pub fn start_backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    START_BACKOFF_BASE
        .saturating_mul(1u32 << doublings)
        .min(START_BACKOFF_CAP)
}

/// What a replica's exit means for the job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// Nothing to do (a success that the policy does not restart).
    Done,
    /// Restart (counts against backoffLimit).
    Retry,
    /// The job fails.
    Permanent,
    /// The platform could not start it: the job gives its admission back and re-enters its
    /// queue after a back-off (never counted against backoffLimit), under every policy.
    BackOff,
}

/// Decides what one replica's terminal phase means under its role's restart policy.
/// ExitCode follows Kubeflow: 1-127 are the program's own errors (permanent), 128 and up are
/// signals (retryable); machine failures (eviction, lost node) are retryable whatever the
/// code. A deadline or a setup that cannot be made (no retry would differ) is permanent
/// under every policy. A replica that vanished is restarted under any policy: it did not exit.
/// A start the platform could not make backs off under every policy: the program never ran.
pub fn classify_exit(policy: RestartPolicy, phase: ReplicaPhase) -> Exit {
    match phase {
        ReplicaPhase::Pending | ReplicaPhase::Starting | ReplicaPhase::Running => Exit::Done,
        ReplicaPhase::Gone => Exit::Retry,
        ReplicaPhase::Succeeded => {
            if policy == RestartPolicy::Always {
                Exit::Retry
            } else {
                Exit::Done
            }
        }
        ReplicaPhase::Failed {
            reason: FailureReason::StartFailed,
            ..
        } => Exit::BackOff,
        ReplicaPhase::Failed { exit_code, reason } => {
            if matches!(
                reason,
                FailureReason::DeadlineExceeded | FailureReason::SetupFailed
            ) {
                return Exit::Permanent;
            }
            match policy {
                RestartPolicy::Never => Exit::Permanent,
                RestartPolicy::OnFailure | RestartPolicy::Always => Exit::Retry,
                RestartPolicy::ExitCode => {
                    if reason.is_infrastructure() || !(1..=127).contains(&exit_code) {
                        Exit::Retry
                    } else {
                        Exit::Permanent
                    }
                }
            }
        }
    }
}

/// Whether a failed replica restarts alone or with its whole gang.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestartScope {
    /// Allreduce (PyTorch DDP, MPI, JAX, XGBoost, TF MultiWorkerMirrored, generic): one lost
    /// rank breaks every collective, so the whole gang restarts.
    Gang,
    /// TF parameter-server jobs and elastic PyTorch: the others carry on; the replica rejoins.
    Replica,
}

pub fn restart_scope(spec: &TrainingJobSpec) -> RestartScope {
    let has = |role: Role| spec.replicas.get(&role).is_some_and(|r| r.count > 0);
    match spec.framework {
        Framework::TensorFlow if has(Role::Ps) => RestartScope::Replica,
        Framework::PyTorch if spec.elastic.is_some() => RestartScope::Replica,
        _ => RestartScope::Gang,
    }
}

/// The role whose worker count moves with the admission (elastic PyTorch), if any.
pub fn elastic_role(spec: &TrainingJobSpec) -> Option<Role> {
    (spec.framework == Framework::PyTorch && spec.elastic.is_some()).then_some(Role::Worker)
}

/// Elastic bounds of the worker count (after defaults).
pub fn elastic_bounds(spec: &TrainingJobSpec) -> (u32, u32) {
    let count = spec.replicas.get(&Role::Worker).map_or(0, |r| r.count);
    let e = spec.elastic.as_ref();
    let min = e.and_then(|e| e.min_replicas).unwrap_or(count);
    let max = e.and_then(|e| e.max_replicas).unwrap_or(count).max(min);
    (min, max)
}

/// The replicas the job should run under this admission, each with its placement.
/// `Err` names what the admission lacks: a gang starts only with a placement for every
/// replica (quota says "may", placement says "can").
pub fn desired(
    spec: &TrainingJobSpec,
    admission: &Admission,
) -> Result<BTreeMap<ReplicaId, ReplicaPlacement>, String> {
    let elastic = elastic_role(spec);
    let mut out = BTreeMap::new();
    for (&role, replica) in &spec.replicas {
        let count = if Some(role) == elastic {
            // Distinct indices: a replica placed twice is still one replica.
            let placed = admission
                .placements
                .iter()
                .filter(|p| p.role == role.as_str())
                .map(|p| p.index)
                .collect::<BTreeSet<_>>()
                .len();
            let placed = u32::try_from(placed).unwrap_or(u32::MAX);
            let (min, max) = elastic_bounds(spec);
            if placed < min || placed > max {
                return Err(format!(
                    "admission places {placed} {role} replicas; elastic bounds are {min}..={max}"
                ));
            }
            placed
        } else {
            replica.count
        };
        for index in 0..count {
            let id = ReplicaId::new(role, index);
            match placement_of(admission, id) {
                Some(p) => {
                    out.insert(id, p.clone());
                }
                None => return Err(format!("admission has no placement for replica {id}")),
            }
        }
    }
    Ok(out)
}

/// Whether the job has succeeded, judged on the current incarnations of the replicas it
/// runs. Kubeflow's rules: TF chief (or worker 0 without a chief; every worker under
/// `AllWorkers`); PyTorch and XGBoost master (elastic PyTorch without one: worker 0, the
/// rendezvous host); MPI launcher; JAX and generic: every replica. Without the deciding
/// role, every replica must succeed.
pub fn succeeded(
    spec: &TrainingJobSpec,
    desired: &BTreeMap<ReplicaId, ReplicaPlacement>,
    current: &BTreeMap<ReplicaId, ReplicaPhase>,
) -> bool {
    if desired.is_empty() {
        return false;
    }
    let done = |id: &ReplicaId| current.get(id) == Some(&ReplicaPhase::Succeeded);
    let has = |role: Role| desired.keys().any(|id| id.role == role);
    let all_of = |role: Role| desired.keys().filter(|id| id.role == role).all(done);
    let all = || desired.keys().all(done);
    let first = |role: Role| done(&ReplicaId::new(role, 0));
    match spec.framework {
        Framework::TensorFlow => {
            if has(Role::Chief) {
                first(Role::Chief)
            } else if !has(Role::Worker) {
                all()
            } else if spec.success_policy == Some(SuccessPolicy::AllWorkers) {
                all_of(Role::Worker)
            } else {
                first(Role::Worker)
            }
        }
        Framework::PyTorch | Framework::XGBoost if has(Role::Master) => first(Role::Master),
        // Elastic torchrun: worker 0 hosts the rendezvous; once its agent has finished, the
        // group is done and a worker that joined later could never meet anyone.
        Framework::PyTorch if spec.elastic.is_some() => first(Role::Worker),
        Framework::Mpi if has(Role::Launcher) => first(Role::Launcher),
        _ => all(),
    }
}

/// An MPI job whose launcher starts only once every worker runs
/// (`launcherCreationPolicy: WaitForWorkersReady`).
pub fn launcher_waits_for_workers(spec: &TrainingJobSpec) -> bool {
    spec.framework == corral_api::training_job::Framework::Mpi
        && spec.mpi.as_ref().and_then(|m| m.launcher_creation_policy)
            == Some(corral_api::training_job::LauncherCreationPolicy::WaitForWorkersReady)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps() {
        assert_eq!(backoff(1), Duration::from_secs(10));
        assert_eq!(backoff(2), Duration::from_secs(20));
        assert_eq!(backoff(3), Duration::from_secs(40));
        assert_eq!(backoff(6), Duration::from_secs(320));
        assert_eq!(backoff(7), BACKOFF_CAP);
        assert_eq!(backoff(u32::MAX), BACKOFF_CAP);
        assert_eq!(backoff(0), BACKOFF_BASE);
    }

    #[test]
    fn start_backoff_doubles_and_caps_at_five_minutes() {
        assert_eq!(start_backoff(1), Duration::from_secs(10));
        assert_eq!(start_backoff(2), Duration::from_secs(20));
        assert_eq!(start_backoff(5), Duration::from_secs(160));
        assert_eq!(start_backoff(6), START_BACKOFF_CAP);
        assert_eq!(start_backoff(u32::MAX), START_BACKOFF_CAP);
    }

    #[test]
    fn a_start_that_failed_backs_off_under_every_policy() {
        let failed = ReplicaPhase::Failed {
            exit_code: 125,
            reason: FailureReason::StartFailed,
        };
        for p in [
            RestartPolicy::Never,
            RestartPolicy::OnFailure,
            RestartPolicy::Always,
            RestartPolicy::ExitCode,
        ] {
            assert_eq!(classify_exit(p, failed), Exit::BackOff, "{p:?}");
        }
    }

    #[test]
    fn a_setup_that_failed_is_never_retried() {
        let setup = ReplicaPhase::Failed {
            exit_code: 125,
            reason: FailureReason::SetupFailed,
        };
        for p in [
            RestartPolicy::Never,
            RestartPolicy::OnFailure,
            RestartPolicy::Always,
            RestartPolicy::ExitCode,
        ] {
            assert_eq!(classify_exit(p, setup), Exit::Permanent, "{p:?}");
        }
    }

    #[test]
    fn exit_code_policy_splits_at_128() {
        let failed = |exit_code| ReplicaPhase::Failed {
            exit_code,
            reason: FailureReason::Error,
        };
        let p = RestartPolicy::ExitCode;
        assert_eq!(classify_exit(p, failed(1)), Exit::Permanent);
        assert_eq!(classify_exit(p, failed(127)), Exit::Permanent);
        assert_eq!(classify_exit(p, failed(128)), Exit::Retry);
        assert_eq!(classify_exit(p, failed(137)), Exit::Retry);
        assert_eq!(classify_exit(p, failed(255)), Exit::Retry);
        let evicted = ReplicaPhase::Failed {
            exit_code: 1,
            reason: FailureReason::Evicted,
        };
        assert_eq!(classify_exit(p, evicted), Exit::Retry);
        assert_eq!(
            classify_exit(RestartPolicy::Never, evicted),
            Exit::Permanent
        );
        assert_eq!(
            classify_exit(RestartPolicy::Never, ReplicaPhase::Gone),
            Exit::Retry
        );
        assert_eq!(
            classify_exit(RestartPolicy::Always, ReplicaPhase::Succeeded),
            Exit::Retry
        );
        assert_eq!(
            classify_exit(RestartPolicy::OnFailure, ReplicaPhase::Succeeded),
            Exit::Done
        );
    }
}
