//! `exec` into a running replica: the facts for `corral_core::control::decide_exec`, and
//! the context the command runs in (see [`crate::exec`]).

use corral_core::control::{ExecCaller, ExecRefusal, ExecTarget, decide_exec, parse_replica};

use super::engine::{Cluster, state_of};
use super::replicas::{incarnation_prefix, phase_of, process_name};
use crate::exec::{ExecContext, JobToken};

/// Who asks, as the API authenticated them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExecAuth {
    /// An open API, or a token of every namespace.
    Anyone,
    /// A token of one namespace.
    Namespace(String),
    /// A replica's own token (verified here, against the job it names).
    Job(JobToken),
}

/// Why an exec cannot run.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The rule refused it (see [`ExecRefusal::is_forbidden`] and `is_not_found`).
    #[error("{0}")]
    Refused(ExecRefusal),
    /// A replica's token that this server did not make for that job.
    #[error(
        "the replica token is not valid for job {0}: it names a job that was deleted or \
         re-created, or was not made by this server"
    )]
    BadToken(String),
    /// The replica runs, but not in a way exec can enter.
    #[error("{0}")]
    Unsupported(String),
}

impl Cluster {
    /// The context to run a command in replica `replica` (`<job>-<role>-<index>` or
    /// `<role>-<index>`) of job `namespace/job`, if the caller may.
    pub fn exec_context(
        &self,
        auth: &ExecAuth,
        namespace: &str,
        job: &str,
        replica: &str,
    ) -> Result<ExecContext, ExecError> {
        let stored = self
            .store
            .job(namespace, job)
            .map_err(|e| ExecError::Unsupported(format!("reading the job: {e}")))?;
        let caller_uid;
        let caller = match auth {
            ExecAuth::Anyone => ExecCaller::Anyone,
            ExecAuth::Namespace(ns) => ExecCaller::Namespace(ns),
            ExecAuth::Job(token) => {
                // The token is checked against the job it names, which may be another.
                let own = self
                    .store
                    .job(&token.namespace, &token.job)
                    .ok()
                    .flatten()
                    .filter(|j| self.exec_key.verify(token, &j.uid));
                let Some(own) = own else {
                    return Err(ExecError::BadToken(format!(
                        "{}/{}",
                        token.namespace, token.job
                    )));
                };
                caller_uid = own.uid;
                ExecCaller::Job {
                    namespace: &token.namespace,
                    name: &token.job,
                    uid: &caller_uid,
                }
            }
        };
        let Some(stored) = stored else {
            return Err(ExecError::Refused(
                corral_core::control::refuse_missing_job(caller, namespace, job),
            ));
        };
        let id = parse_replica(job, &stored.job.spec, replica);
        let name = id.map(|id| process_name(namespace, job, id));
        // The executor's process of this name, if it is of this job (not of an earlier
        // job of the same name).
        let record = name
            .as_deref()
            .and_then(|n| self.executor.record(n))
            .filter(|r| r.incarnation.starts_with(&incarnation_prefix(&stored.uid)));
        let phase = record
            .and_then(|r| self.executor.state(&r.name))
            .map(phase_of);
        let target = ExecTarget {
            namespace,
            job,
            uid: &stored.uid,
            state: state_of(&stored),
            asked: replica,
            replica: id,
            phase,
        };
        decide_exec(caller, &target).map_err(ExecError::Refused)?;
        let Some(record) = record else {
            return Err(ExecError::Unsupported(format!(
                "replica {replica} has no process record"
            )));
        };
        crate::exec::context_of(record).ok_or_else(|| {
            ExecError::Unsupported(format!(
                "replica {replica} is still preparing its command (its Python environment) \
                 or has just ended; try again"
            ))
        })
    }

    /// The credentials an MPI launcher's agent execs with: its job's token.
    pub(super) fn job_token(&self, namespace: &str, job: &str, uid: &str) -> String {
        self.exec_key.job_token(namespace, job, uid)
    }
}
