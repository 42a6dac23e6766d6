//! Alongside mode: Kubeflow's operator runs the jobs; Corral queues, admits and places those
//! labelled [`QUEUE_LABEL`] through a *workload*, a TrainingJob converted from the job, owned
//! by it and marked [`RUNNER_ANNOTATION`] (Kueue's Workload, in Corral's own kind). The
//! workload is admitted by the same control plane as every TrainingJob; Corral creates none
//! of its pods (the operator's plan leaves them out: `plan::strip_runner_work`) and counts
//! the Kubeflow job's pods as the workload's, not as foreign usage ([`runner_pods`]).
//!
//! Per labelled Kubeflow job, each pass:
//! - finished (Kubeflow's Succeeded or Failed condition): its workload is deleted, so its
//!   admission and quota are free;
//! - no workload yet: it is created (server-side apply);
//! - the workload holds an admission and the job is suspended: its replica templates get a
//!   required node affinity to the nodes placed for their role (and the label
//!   `corral.dev/job-name`), and `runPolicy.suspend` becomes false, in one patch with a
//!   resourceVersion precondition;
//! - the workload holds no admission (waiting, or preempted) and the job is not suspended:
//!   `runPolicy.suspend: true` (Kubeflow's operator then deletes its pods). Submit jobs
//!   suspended to keep Kubeflow from starting pods before Corral first sees them.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use corral_api::training_job::{Role, RunPolicy, TrainingJob};
use corral_core::lifecycle;

use super::serve::{convert_manifest, training_job_body};
use super::{KF_JOB_NAME_LABEL, KubeflowAction, KubeflowJob, QUEUE_LABEL, RUNNER_ANNOTATION};
use crate::consts::{ADMISSION_ANNOTATION, JOB_NAME_LABEL};
use crate::observe::World;
use crate::record::AdmissionRecord;

/// The node label kube-scheduler matches a node's name by.
const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";
/// On a labelled Kubeflow job that does not convert: why (written once, with an event).
pub const INVALID_ANNOTATION: &str = "corral.dev/invalid";

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

/// The workload of a Kubeflow job: its conversion, in its queue, with Kubeflow's own run
/// policy left to Kubeflow (deadline, TTL and back-off are its operator's).
pub fn workload(job: &KubeflowJob) -> Result<TrainingJob, String> {
    let mut manifest = job.manifest();
    without_placement(&mut manifest, job.kind.specs_key);
    let mut tj = convert_manifest(job, &manifest)?;
    if let Some(q) = job.label(QUEUE_LABEL) {
        tj.spec.queue = Some(q.to_string());
    }
    tj.spec.run_policy = RunPolicy::default();
    tj.metadata
        .annotations
        .insert(RUNNER_ANNOTATION.into(), super::GROUP.into());
    Ok(tj)
}

/// The manifest as the user wrote it, less what [`unsuspend_patch`] added (the workload is
/// the same job before and after its placement).
fn without_placement(manifest: &mut Value, specs_key: &str) {
    let Some(specs) = manifest
        .pointer_mut(&format!("/spec/{specs_key}"))
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    for rspec in specs.values_mut() {
        let Some(t) = rspec.get_mut("template") else {
            continue;
        };
        if let Some(labels) = t
            .pointer_mut("/metadata/labels")
            .and_then(Value::as_object_mut)
        {
            labels.remove(JOB_NAME_LABEL);
            if labels.is_empty()
                && let Some(m) = t.get_mut("metadata").and_then(Value::as_object_mut)
            {
                m.remove("labels");
            }
        }
        if t.get("metadata")
            .is_some_and(|m| m.as_object().is_some_and(|o| o.is_empty()))
            && let Some(o) = t.as_object_mut()
        {
            o.remove("metadata");
        }
        let Some(spec) = t.get_mut("spec").and_then(Value::as_object_mut) else {
            continue;
        };
        let Some(terms) = spec
            .get_mut("affinity")
            .and_then(|a| a.pointer_mut("/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms"))
            .and_then(Value::as_array_mut)
        else {
            continue;
        };
        for term in terms.iter_mut() {
            if let Some(exprs) = term
                .get_mut("matchExpressions")
                .and_then(Value::as_array_mut)
            {
                exprs.retain(|e| e.get("key").and_then(Value::as_str) != Some(HOSTNAME_LABEL));
                if exprs.is_empty()
                    && let Some(o) = term.as_object_mut()
                {
                    o.remove("matchExpressions");
                }
            }
        }
        terms.retain(|t| t.as_object().is_some_and(|o| !o.is_empty()));
        if terms.is_empty() {
            // Only Corral's constraint was there: the affinity goes with it.
            let node_affinity = spec
                .get_mut("affinity")
                .and_then(|a| a.get_mut("nodeAffinity"))
                .and_then(Value::as_object_mut);
            if let Some(na) = node_affinity {
                na.remove("requiredDuringSchedulingIgnoredDuringExecution");
            }
            prune_empty(spec, "affinity");
        }
    }
}

/// Removes `key` from `obj` when it holds only empty objects.
fn prune_empty(obj: &mut serde_json::Map<String, Value>, key: &str) {
    fn empty(v: &Value) -> bool {
        v.as_object().is_some_and(|o| o.values().all(empty))
    }
    if obj.get(key).is_some_and(empty) {
        obj.remove(key);
    }
}

/// The Corral role of a replica type as the manifest spells it.
fn role_of(job: &KubeflowJob, replica_type: &str) -> Option<Role> {
    let lower = replica_type.to_ascii_lowercase();
    job.kind_roles()
        .iter()
        .find(|r| r.as_str() == lower)
        .copied()
        .or_else(|| (job.kind.kind == "TFJob" && lower == "master").then_some(Role::Chief))
}

impl KubeflowJob {
    fn kind_roles(&self) -> &'static [Role] {
        match self.kind.kind {
            "TFJob" => &[Role::Chief, Role::Ps, Role::Worker, Role::Evaluator],
            "MPIJob" => &[Role::Launcher, Role::Worker],
            "JAXJob" => &[Role::Worker],
            _ => &[Role::Master, Role::Worker],
        }
    }
}

/// The node selector terms of a replica template with `nodes` required: every term of the
/// template's own (an OR of terms) gets the host constraint, replacing an earlier one.
fn terms_with_nodes(template: &Value, nodes: &[String]) -> Value {
    let ours = json!({"key": HOSTNAME_LABEL, "operator": "In", "values": nodes});
    let existing = template
        .pointer("/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if existing.is_empty() {
        return json!([{"matchExpressions": [ours]}]);
    }
    let terms: Vec<Value> = existing
        .into_iter()
        .map(|mut t| {
            let mut exprs: Vec<Value> = t
                .get("matchExpressions")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter(|e| e.get("key").and_then(Value::as_str) != Some(HOSTNAME_LABEL))
                .collect();
            exprs.push(ours.clone());
            t["matchExpressions"] = json!(exprs);
            t
        })
        .collect();
    json!(terms)
}

/// The patch that starts an admitted job: affinity to the placed nodes, the workload's
/// label, `suspend: false`.
pub fn unsuspend_patch(job: &KubeflowJob, admission: &AdmissionRecord) -> Value {
    let mut specs = serde_json::Map::new();
    let templates = job
        .raw
        .pointer(&format!("/spec/{}", job.kind.specs_key))
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    for (rtype, rspec) in &templates {
        let Some(role) = role_of(job, rtype) else {
            continue;
        };
        let nodes: Vec<String> = admission
            .placements
            .iter()
            .filter(|p| p.role == role.as_str())
            .map(|p| p.node.clone())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let template = rspec.get("template").cloned().unwrap_or(json!({}));
        let mut t = json!({"template": {"metadata": {"labels": {JOB_NAME_LABEL: job.name()}}}});
        if !nodes.is_empty() {
            t["template"]["spec"] = json!({"affinity": {"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": terms_with_nodes(&template, &nodes)}}}});
        }
        specs.insert(rtype.clone(), t);
    }
    json!({
        "metadata": {"resourceVersion": job.resource_version()},
        "spec": {"runPolicy": {"suspend": false}, job.kind.specs_key: specs},
    })
}

fn suspend_patch(job: &KubeflowJob) -> Value {
    json!({
        "metadata": {"resourceVersion": job.resource_version()},
        "spec": {"runPolicy": {"suspend": true}},
    })
}

/// Whether the control plane lets the workload's replicas run: it holds an admission and
/// is not being preempted (Admitted and Queued at once).
fn admission_of(tj: &TrainingJob) -> Option<AdmissionRecord> {
    if tj.status.as_ref().is_some_and(lifecycle::is_preempting) {
        return None;
    }
    AdmissionRecord::parse(tj.metadata.annotations.get(ADMISSION_ANNOTATION)?).ok()
}

pub fn plan(jobs: &[KubeflowJob], training_jobs: &[TrainingJob]) -> Vec<KubeflowAction> {
    let mut out = Vec::new();
    for job in jobs.iter().filter(|j| j.label(QUEUE_LABEL).is_some()) {
        if job.deleting() {
            continue;
        }
        let have = match super::owned_training_job(job, training_jobs) {
            Ok(h) => h,
            Err(e) => {
                invalid(job, &e, &mut out);
                continue;
            }
        };
        if job.finished() {
            if let Some(tj) = have {
                out.push(KubeflowAction::DeleteTrainingJob {
                    namespace: job.namespace().into(),
                    name: job.name().into(),
                    uid: tj.metadata.uid.clone(),
                });
            }
            continue;
        }
        let want = match workload(job) {
            Ok(w) => w,
            Err(e) => {
                invalid(job, &e, &mut out);
                continue;
            }
        };
        let admission = have.and_then(admission_of);
        match have {
            Some(tj) if super::serve::same_spec(&tj.spec, &want.spec) => {}
            _ => out.push(KubeflowAction::ApplyTrainingJob {
                namespace: job.namespace().into(),
                body: training_job_body(job, &want),
            }),
        }
        match (&admission, job.suspended()) {
            (Some(a), true) => {
                out.push(KubeflowAction::PatchJob {
                    kind: job.kind,
                    namespace: job.namespace().into(),
                    name: job.name().into(),
                    patch: unsuspend_patch(job, a),
                });
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
            (None, false) => {
                out.push(KubeflowAction::PatchJob {
                    kind: job.kind,
                    namespace: job.namespace().into(),
                    name: job.name().into(),
                    patch: suspend_patch(job),
                });
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
    out
}

fn placed_nodes(a: &AdmissionRecord) -> String {
    let nodes: BTreeSet<&str> = a.placements.iter().map(|p| p.node.as_str()).collect();
    nodes.into_iter().collect::<Vec<_>>().join(", ")
}

/// A labelled job Corral cannot queue: kept suspended, and told why once (annotation).
fn invalid(job: &KubeflowJob, why: &str, out: &mut Vec<KubeflowAction>) {
    let said = job
        .raw
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(INVALID_ANNOTATION))
        .and_then(Value::as_str);
    if said == Some(why) && job.suspended() {
        return;
    }
    out.push(KubeflowAction::PatchJob {
        kind: job.kind,
        namespace: job.namespace().into(),
        name: job.name().into(),
        patch: json!({
            "metadata": {"resourceVersion": job.resource_version(),
                         "annotations": {INVALID_ANNOTATION: why}},
            "spec": {"runPolicy": {"suspend": true}},
        }),
    });
    out.push(KubeflowAction::event(
        job,
        true,
        "InvalidSpec",
        why.to_string(),
    ));
}
