//! A replica as the executor names it and as the control plane sees it: its process name,
//! its incarnation labels, the replica slots of a job, and the observation (phase, start
//! failure) a stored replica in a process state makes. Shared by the control loop
//! (`engine`), opening (`recovery`), applying a step (`act`) and `views`; it depends on none
//! of them, so that they depend on it one way.

use corral_api::TrainingJob;
use corral_api::training_job::Role;
use corral_core::control::StartFailure;
use corral_core::lifecycle::{
    FailureReason, Incarnation, ObservedReplica, ReplicaId, ReplicaPhase,
};

use crate::executor::ProcessState;
use crate::store::StoredReplica;

/// The executor's name of a replica: unique across namespaces (namespaces have no dots).
pub(super) fn process_name(namespace: &str, job: &str, id: ReplicaId) -> String {
    format!("{namespace}.{}", id.name(job))
}

/// The executor's incarnation label: unique across re-creations of a job of one name.
pub(super) fn incarnation_label(uid: &str, inc: Incarnation) -> String {
    format!("{}{inc}", incarnation_prefix(uid))
}

/// What every incarnation label of one job starts with.
pub(super) fn incarnation_prefix(uid: &str) -> String {
    let short: String = uid.chars().take(8).collect();
    format!("{short}-")
}

/// Replica slots of each role (elastic PyTorch: up to its maximum), as `Addresses::local`
/// numbers them: one port each.
pub(super) fn replica_slots(job: &TrainingJob) -> Vec<ReplicaId> {
    let mut out = Vec::new();
    for (role, spec) in &job.spec.replicas {
        for i in 0..corral_core::launch::replica_slots(job, *role, spec.count) {
            out.push(ReplicaId::new(*role, i));
        }
    }
    out
}

/// What the lifecycle sees of a process state.
pub(crate) fn phase_of(state: ProcessState) -> ReplicaPhase {
    match state {
        ProcessState::Running => ReplicaPhase::Running,
        ProcessState::Exited { code: 0 } => ReplicaPhase::Succeeded,
        ProcessState::Exited { code } => ReplicaPhase::Failed {
            exit_code: code,
            reason: FailureReason::Error,
        },
        ProcessState::Signaled { signal } => ReplicaPhase::Failed {
            exit_code: 128i32.saturating_add(signal),
            reason: FailureReason::Error,
        },
        ProcessState::OomKilled => ReplicaPhase::Failed {
            exit_code: 137,
            reason: FailureReason::OomKilled,
        },
        ProcessState::SetupFailed => ReplicaPhase::Failed {
            exit_code: 125,
            reason: FailureReason::SetupFailed,
        },
        ProcessState::StartFailed { code } => ReplicaPhase::Failed {
            exit_code: code,
            reason: FailureReason::StartFailed,
        },
        ProcessState::Gone => ReplicaPhase::Gone,
    }
}

/// What the control plane sees of a stored replica in a process state.
pub(super) fn observed(r: &StoredReplica, state: ProcessState) -> Option<ObservedReplica> {
    let role: Role = r.role.parse().ok()?;
    Some(ObservedReplica::new(
        ReplicaId::new(role, r.index),
        Incarnation {
            attempt: r.attempt,
            retry: r.retry,
        },
        phase_of(state),
    ))
}

/// A replica whose command never ran (the shim or the container runtime could not start
/// it), as the plane is told it: with the words the shim or the runtime left.
pub(super) fn start_failure(r: &StoredReplica, state: ProcessState) -> Option<StartFailure> {
    let ProcessState::StartFailed { code } = state else {
        return None;
    };
    let role: Role = r.role.parse().ok()?;
    Some(StartFailure {
        replica: ReplicaId::new(role, r.index),
        incarnation: Incarnation {
            attempt: r.attempt,
            retry: r.retry,
        },
        exit_code: code,
        message: r
            .record
            .exit_error()
            .unwrap_or_else(|| format!("its command could not be started (exit code {code})")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_states_map_to_replica_phases() {
        assert_eq!(
            phase_of(ProcessState::Exited { code: 0 }),
            ReplicaPhase::Succeeded
        );
        assert_eq!(
            phase_of(ProcessState::Exited { code: 3 }),
            ReplicaPhase::Failed {
                exit_code: 3,
                reason: FailureReason::Error
            }
        );
        assert_eq!(
            phase_of(ProcessState::Signaled { signal: 9 }),
            ReplicaPhase::Failed {
                exit_code: 137,
                reason: FailureReason::Error
            }
        );
        assert_eq!(
            phase_of(ProcessState::OomKilled),
            ReplicaPhase::Failed {
                exit_code: 137,
                reason: FailureReason::OomKilled
            }
        );
        assert_eq!(
            phase_of(ProcessState::StartFailed { code: 127 }),
            ReplicaPhase::Failed {
                exit_code: 127,
                reason: FailureReason::StartFailed
            }
        );
        assert_eq!(phase_of(ProcessState::Gone), ReplicaPhase::Gone);
        assert_eq!(phase_of(ProcessState::Running), ReplicaPhase::Running);
    }

    #[test]
    fn names_are_unique_across_namespaces_and_recreations() {
        let id = ReplicaId::new(Role::Worker, 1);
        assert_ne!(process_name("a", "j", id), process_name("b", "j", id));
        let inc = Incarnation {
            attempt: 0,
            retry: 0,
        };
        assert_ne!(
            incarnation_label("aaaaaaaa11", inc),
            incarnation_label("bbbbbbbb22", inc)
        );
    }
}
