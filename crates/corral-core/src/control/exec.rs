//! Whether a command may run inside a replica: `corral exec` for people, and the MPI
//! launcher's rsh agent, which starts `orted` in each worker (mpi-operator v1's `kubectl
//! exec` role). The shell gathers the facts (who asks, the job's state, the replica's
//! phase) and carries out the answer; the rule is here, the same for every shell.
//!
//! Order matters: who asks is checked first, so that a caller outside a job's scope learns
//! nothing about it (not even whether it runs).

use std::fmt;

use corral_api::training_job::JobState;

use crate::lifecycle::{ReplicaId, ReplicaPhase};

/// Who asks to exec.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExecCaller<'a> {
    /// Every namespace: an open API, or a token without a namespace.
    Anyone,
    /// A token of one namespace: any replica of that namespace's jobs.
    Namespace(&'a str),
    /// A replica's own credentials (the MPI launcher's agent): the replicas of its own job
    /// only, and only of this incarnation of it (`uid`), never a job re-created under the
    /// same name.
    Job {
        namespace: &'a str,
        name: &'a str,
        uid: &'a str,
    },
}

/// The replica asked for, as the shell found it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ExecTarget<'a> {
    pub namespace: &'a str,
    pub job: &'a str,
    pub uid: &'a str,
    pub state: JobState,
    /// The replica as the caller named it.
    pub asked: &'a str,
    /// `None`: the job's spec has no such replica.
    pub replica: Option<ReplicaId>,
    /// The replica's observed phase (`None`: never started, or not started now).
    pub phase: Option<ReplicaPhase>,
}

/// Why an exec is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExecRefusal {
    /// The caller's token acts in another namespace.
    OtherNamespace { allowed: String },
    /// A replica's credentials name another job (or an earlier job of the same name).
    OtherJob { caller: String },
    /// The job has finished or is being deleted: nothing runs any more.
    NotRunning { state: JobState },
    /// No job of that name.
    NoSuchJob { job: String },
    /// The job's spec has no such replica.
    NoSuchReplica { replica: String },
    /// The replica exists in the spec but no process of it runs now.
    ReplicaNotRunning { replica: String, phase: String },
}

impl ExecRefusal {
    /// A refusal of the caller (HTTP 403), not of the job's state (409) or a name (404).
    pub fn is_forbidden(&self) -> bool {
        matches!(
            self,
            ExecRefusal::OtherNamespace { .. } | ExecRefusal::OtherJob { .. }
        )
    }

    /// The replica or job does not exist (HTTP 404).
    pub fn is_not_found(&self) -> bool {
        matches!(
            self,
            ExecRefusal::NoSuchJob { .. } | ExecRefusal::NoSuchReplica { .. }
        )
    }
}

impl fmt::Display for ExecRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExecRefusal::OtherNamespace { allowed } => write!(
                f,
                "this token acts in namespace {allowed} only and may not exec into replicas \
                 of another namespace; use a token for that namespace"
            ),
            ExecRefusal::OtherJob { caller } => write!(
                f,
                "a replica's credentials may exec only into replicas of its own job \
                 ({caller}); this replica belongs to another job"
            ),
            ExecRefusal::NotRunning { state } => write!(
                f,
                "the job is {state}: exec needs a running replica (see `corral describe`)"
            ),
            ExecRefusal::NoSuchJob { job } => write!(f, "TrainingJob {job} not found"),
            ExecRefusal::NoSuchReplica { replica } => write!(
                f,
                "the job has no replica {replica}; replicas are named <job>-<role>-<index> \
                 or <role>-<index> (see `corral describe`)"
            ),
            ExecRefusal::ReplicaNotRunning { replica, phase } => write!(
                f,
                "replica {replica} is not running (it is {phase}); exec needs a running \
                 replica"
            ),
        }
    }
}

/// The rule: the caller's scope, then the job's state, then the replica.
pub fn decide_exec(caller: ExecCaller<'_>, target: &ExecTarget<'_>) -> Result<(), ExecRefusal> {
    check_scope(caller, target.namespace, target.job, Some(target.uid))?;
    if target.state.is_finished() || target.state == JobState::Deleting {
        return Err(ExecRefusal::NotRunning {
            state: target.state,
        });
    }
    let Some(replica) = target.replica else {
        return Err(ExecRefusal::NoSuchReplica {
            replica: target.asked.to_string(),
        });
    };
    match target.phase {
        Some(ReplicaPhase::Running) => Ok(()),
        phase => Err(ExecRefusal::ReplicaNotRunning {
            replica: replica.name(target.job),
            phase: match phase {
                None => "not started".to_string(),
                Some(p) => phase_word(p).to_string(),
            },
        }),
    }
}

/// The refusal for a job that does not exist: out of the caller's scope it is refused as
/// any other job would be, so that its absence is not told either.
pub fn refuse_missing_job(caller: ExecCaller<'_>, namespace: &str, job: &str) -> ExecRefusal {
    match check_scope(caller, namespace, job, None) {
        Err(refusal) => refusal,
        Ok(()) => ExecRefusal::NoSuchJob {
            job: format!("{namespace}/{job}"),
        },
    }
}

fn check_scope(
    caller: ExecCaller<'_>,
    namespace: &str,
    job: &str,
    job_uid: Option<&str>,
) -> Result<(), ExecRefusal> {
    match caller {
        ExecCaller::Anyone => Ok(()),
        ExecCaller::Namespace(ns) if ns == namespace => Ok(()),
        ExecCaller::Namespace(ns) => Err(ExecRefusal::OtherNamespace {
            allowed: ns.to_string(),
        }),
        ExecCaller::Job {
            namespace: own_ns,
            name,
            uid,
        } => {
            if (own_ns, name, Some(uid)) == (namespace, job, job_uid) {
                Ok(())
            } else {
                Err(ExecRefusal::OtherJob {
                    caller: format!("{own_ns}/{name}"),
                })
            }
        }
    }
}

fn phase_word(p: ReplicaPhase) -> &'static str {
    match p {
        ReplicaPhase::Pending => "pending",
        ReplicaPhase::Starting => "starting",
        ReplicaPhase::Running => "running",
        ReplicaPhase::Succeeded => "succeeded",
        ReplicaPhase::Failed { .. } => "failed",
        ReplicaPhase::Gone => "gone",
    }
}

/// Parses a replica named `<job>-<role>-<index>` or `<role>-<index>` for a job's spec;
/// `None` when the role or index is not one of the job's.
pub fn parse_replica(
    job: &str,
    spec: &corral_api::training_job::TrainingJobSpec,
    name: &str,
) -> Option<ReplicaId> {
    let short = name
        .strip_prefix(job)
        .and_then(|r| r.strip_prefix('-'))
        .unwrap_or(name);
    let (role, index) = short.rsplit_once('-')?;
    let role: corral_api::training_job::Role = role.parse().ok()?;
    let index: u32 = index.parse().ok()?;
    let count = spec.replicas.get(&role)?.count;
    (index < count).then(|| ReplicaId::new(role, index))
}

#[cfg(test)]
mod tests {
    use super::*;
    use corral_api::training_job::Role;

    fn target(state: JobState, phase: Option<ReplicaPhase>) -> ExecTarget<'static> {
        ExecTarget {
            namespace: "team-a",
            job: "hvd",
            uid: "u1",
            state,
            asked: "worker-0",
            replica: Some(ReplicaId::new(Role::Worker, 0)),
            phase,
        }
    }

    const OWN: ExecCaller<'static> = ExecCaller::Job {
        namespace: "team-a",
        name: "hvd",
        uid: "u1",
    };

    #[test]
    fn own_job_running_replica_is_allowed() {
        let t = target(JobState::Running, Some(ReplicaPhase::Running));
        assert_eq!(decide_exec(OWN, &t), Ok(()));
        assert_eq!(decide_exec(ExecCaller::Anyone, &t), Ok(()));
        assert_eq!(decide_exec(ExecCaller::Namespace("team-a"), &t), Ok(()));
    }

    #[test]
    fn another_job_is_forbidden_before_anything_about_it_is_told() {
        // Finished and not running: the caller still learns only that it is not its job.
        let t = target(JobState::Failed, None);
        for caller in [
            ExecCaller::Job {
                namespace: "team-a",
                name: "other",
                uid: "u1",
            },
            // Same name, re-created job: another uid.
            ExecCaller::Job {
                namespace: "team-a",
                name: "hvd",
                uid: "u0",
            },
            ExecCaller::Job {
                namespace: "team-b",
                name: "hvd",
                uid: "u1",
            },
        ] {
            let refusal = decide_exec(caller, &t).expect_err("refused");
            assert!(refusal.is_forbidden(), "{refusal}");
            assert!(refusal.to_string().contains("its own job"), "{refusal}");
        }
        let refusal = decide_exec(ExecCaller::Namespace("team-b"), &t).expect_err("refused");
        assert_eq!(
            refusal,
            ExecRefusal::OtherNamespace {
                allowed: "team-b".into()
            }
        );
    }

    #[test]
    fn finished_jobs_and_replicas_not_running_are_refused_with_their_state() {
        let t = target(JobState::Succeeded, Some(ReplicaPhase::Running));
        let r = decide_exec(OWN, &t).expect_err("refused");
        assert!(!r.is_forbidden());
        assert!(r.to_string().contains("Succeeded"), "{r}");
        let t = target(
            JobState::Running,
            Some(ReplicaPhase::Failed {
                exit_code: 1,
                reason: crate::lifecycle::FailureReason::Error,
            }),
        );
        let r = decide_exec(OWN, &t).expect_err("refused");
        assert!(
            r.to_string()
                .contains("hvd-worker-0 is not running (it is failed)"),
            "{r}"
        );
        let t = target(JobState::Queued, None);
        let r = decide_exec(OWN, &t).expect_err("refused");
        assert!(r.to_string().contains("not started"), "{r}");
        let mut t = target(JobState::Running, None);
        t.replica = None;
        t.asked = "worker-9";
        let r = decide_exec(OWN, &t).expect_err("refused");
        assert!(r.is_not_found());
        assert!(r.to_string().contains("no replica worker-9;"), "{r}");
    }

    #[test]
    fn a_missing_job_is_not_found_only_within_the_callers_scope() {
        assert!(refuse_missing_job(ExecCaller::Anyone, "team-a", "gone").is_not_found());
        assert!(
            refuse_missing_job(ExecCaller::Namespace("team-a"), "team-a", "gone").is_not_found()
        );
        assert!(
            refuse_missing_job(ExecCaller::Namespace("team-b"), "team-a", "gone").is_forbidden()
        );
        // A replica's credentials never learn whether another job exists.
        assert!(refuse_missing_job(OWN, "team-a", "gone").is_forbidden());
        assert!(refuse_missing_job(OWN, "team-a", "hvd").is_forbidden());
    }

    #[test]
    fn replica_names_parse_in_both_forms_and_only_within_the_spec() {
        use corral_api::document::{Document, parse_documents};
        let text = "apiVersion: corral.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: hvd}\n\
             spec:\n  framework: mpi\n  replicas:\n    launcher: {template: {command: [a]}}\n    \
             worker: {count: 2, template: {command: [a]}}\n";
        let docs = parse_documents(text, &corral_api::validate::ValidationContext::default());
        let Some(Ok(parsed)) = docs.into_iter().next() else {
            panic!("the test job parses");
        };
        let Document::TrainingJob(job) = parsed.document else {
            panic!("a TrainingJob");
        };
        let w1 = Some(ReplicaId::new(Role::Worker, 1));
        assert_eq!(parse_replica("hvd", &job.spec, "hvd-worker-1"), w1);
        assert_eq!(parse_replica("hvd", &job.spec, "worker-1"), w1);
        assert_eq!(parse_replica("hvd", &job.spec, "hvd-worker-2"), None);
        assert_eq!(parse_replica("hvd", &job.spec, "hvd-master-0"), None);
        assert_eq!(parse_replica("hvd", &job.spec, "nonsense"), None);
    }
}
