//! Alongside mode: Kubeflow's operator runs the jobs; Corral queues, admits and places those
//! labelled [`QUEUE_LABEL`] through a *workload*, a TrainingJob converted from the job, owned
//! by it and marked [`RUNNER_ANNOTATION`] (Kueue's Workload, in Corral's own kind). The
//! workload is admitted by the same control plane as every TrainingJob; Corral creates none
//! of its pods (the operator's plan leaves them out: `plan::strip_runner_work`) and counts
//! the Kubeflow job's pods as the workload's, not as foreign usage ([`runner_pods`]).
//!
//! One generic reconcile ([`reconcile`]) over any kind's adapter ([`GenericJob`]), per
//! labelled job, each pass:
//! - a TrainingJob of its name that is not its workload, or a job that does not convert:
//!   it is kept suspended and told why once;
//! - no workload yet, or a changed one: it is applied (server-side apply);
//! - then the core's [`Gate`] of the job, carried out: `Release` (its operator says it
//!   finished) deletes the workload, so its admission and quota are free; `Run` (the
//!   workload holds an admission and is not being preempted) unsuspends a suspended job on
//!   the placement ([`GenericJob::run_patch`]); `Hold` suspends a running one (its operator
//!   then deletes its pods). Submit jobs suspended to keep Kubeflow from starting pods
//!   before Corral first sees them.

use std::collections::BTreeSet;
use std::sync::Arc;

use corral_api::training_job::TrainingJob;
use corral_core::lifecycle::Gate;

pub use super::adapter::{GenericJob, INVALID_ANNOTATION};
use super::{KF_JOB_NAME_LABEL, KubeflowAction, KubeflowJob, RUNNER_ANNOTATION};
use crate::consts::JOB_NAME_LABEL;
use crate::observe::World;
use crate::record;
use corral_core::control::HeldAdmission;

/// Whether a TrainingJob's replicas are run by another operator (a workload).
pub fn runs_elsewhere(tj: &TrainingJob) -> bool {
    tj.metadata.annotations.contains_key(RUNNER_ANNOTATION)
}

/// The pods (namespace, name) of Kubeflow jobs whose workloads are among `placed` (jobs
/// whose room the plane reserves from their admissions): not foreign usage.
pub fn runner_pods<'a>(
    world: &'a World,
    placed: impl Iterator<Item = &'a TrainingJob>,
) -> BTreeSet<(&'a str, &'a str)> {
    let workloads: BTreeSet<(&str, &str)> = placed
        .filter(|t| runs_elsewhere(t))
        .map(|t| (t.metadata.namespace_or_default(), t.metadata.name.as_str()))
        .collect();
    world
        .pods
        .iter()
        .filter_map(|p| {
            let labels = p.metadata.labels.as_ref()?;
            let ns = p.metadata.namespace.as_deref()?;
            let job = labels.get(JOB_NAME_LABEL)?;
            labels.get(KF_JOB_NAME_LABEL)?;
            workloads
                .contains(&(ns, job.as_str()))
                .then_some((ns, p.metadata.name.as_deref()?))
        })
        .collect()
}

/// The plan of one pass: [`reconcile`] of every Kubeflow job.
pub fn plan(jobs: &[KubeflowJob], training_jobs: &[Arc<TrainingJob>]) -> Vec<KubeflowAction> {
    let mut out = Vec::new();
    for job in jobs {
        reconcile(job, training_jobs, &mut out);
    }
    out
}

/// The writes of one pass for one job of any kind: its workload kept as the job is, and
/// the core's [`Gate`] carried out. Jobs not labelled for a queue, and jobs being deleted,
/// are their operator's alone.
pub fn reconcile<J: GenericJob>(
    job: &J,
    training_jobs: &[Arc<TrainingJob>],
    out: &mut Vec<KubeflowAction>,
) {
    if job.queue().is_none() || job.is_deleting() {
        return;
    }
    let have = match job.find_workload(training_jobs) {
        Ok(h) => h,
        Err(e) => return invalid(job, &e, out),
    };
    let admission = have.and_then(admission_of);
    let gate = Gate::decide(
        job.is_finished(),
        have.and_then(|tj| tj.status.as_ref()),
        admission.is_some(),
    );
    if gate == Gate::Release {
        if let Some(tj) = have {
            out.push(KubeflowAction::DeleteTrainingJob {
                namespace: job.namespace().into(),
                name: job.name().into(),
                uid: tj.metadata.uid.clone(),
            });
        }
        return;
    }
    let want = match job.workload() {
        Ok(w) => w,
        Err(e) => return invalid(job, &e, out),
    };
    match have {
        Some(tj) if super::serve::same_spec(&tj.spec, &want.spec) => {}
        _ => out.push(KubeflowAction::ApplyTrainingJob {
            namespace: job.namespace().into(),
            body: job.workload_body(&want),
        }),
    }
    match (gate, &admission, job.is_suspended()) {
        (Gate::Run, Some(a), true) => {
            out.push(patch(job, job.run_patch(a)));
            out.push(KubeflowAction::event(
                job,
                false,
                "Admitted",
                format!(
                    "admitted by Corral (queue {}); placed on {}",
                    want.spec.queue_name(),
                    placed_nodes(a)
                ),
            ));
        }
        (Gate::Hold, _, false) => {
            out.push(patch(job, job.suspend_patch()));
            out.push(KubeflowAction::event(
                job,
                false,
                "Suspended",
                format!(
                    "suspended until Corral admits it (queue {}; see TrainingJob {} for why it waits)",
                    want.spec.queue_name(),
                    job.name()
                ),
            ));
        }
        _ => {}
    }
}

/// The admission the workload holds, as the operator recorded it on the workload.
fn admission_of(tj: &TrainingJob) -> Option<HeldAdmission> {
    record::recorded_admission(tj, &crate::observe::job_key(tj))
        .ok()
        .flatten()
}

fn placed_nodes(a: &HeldAdmission) -> String {
    let nodes: BTreeSet<&str> = a
        .admission
        .placements
        .iter()
        .map(|p| p.node.as_str())
        .collect();
    nodes.into_iter().collect::<Vec<_>>().join(", ")
}

/// A labelled job Corral cannot queue: kept suspended, and told why once (annotation).
fn invalid<J: GenericJob>(job: &J, why: &str, out: &mut Vec<KubeflowAction>) {
    if job.said_invalid() == Some(why) && job.is_suspended() {
        return;
    }
    out.push(patch(job, job.invalid_patch(why)));
    out.push(KubeflowAction::event(
        job,
        true,
        "InvalidSpec",
        why.to_string(),
    ));
}

fn patch<J: GenericJob>(job: &J, patch: serde_json::Value) -> KubeflowAction {
    KubeflowAction::PatchJob {
        kind: job.kind(),
        namespace: job.namespace().into(),
        name: job.name().into(),
        patch,
    }
}
