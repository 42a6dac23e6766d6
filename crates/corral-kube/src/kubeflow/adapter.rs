//! The adapter of a job kind another operator runs, for alongside mode: what Corral needs
//! to know of such a job and how it writes to it, as Kueue's `jobframework.GenericJob`. The
//! kind adapts ([`GenericJob`]); the core decides ([`corral_core::lifecycle::Gate`]); one
//! generic reconcile (`alongside::reconcile`) applies the decision.
//!
//! The Kubeflow kinds share one layout (`spec.runPolicy.suspend`, `spec.<specsKey>` of
//! replica types with pod templates, `status.conditions`), so one implementation serves them
//! all; what differs per kind is data: its [`KubeflowKind`] descriptor (API resource, the
//! replica specs key) and its replica types' roles (`corral_api::kubeflow::replica_role`,
//! the converter's own table).

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::{Value, json};

use corral_api::training_job::{Role, RunPolicy, TrainingJob};

use super::serve::{convert_manifest, training_job_body};
use super::{KubeflowJob, KubeflowKind, QUEUE_LABEL, RUNNER_ANNOTATION};
use crate::consts::JOB_NAME_LABEL;
use corral_core::control::HeldAdmission;

/// The node label kube-scheduler matches a node's name by.
const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";
/// On a labelled job that does not convert: why (written once, with an event).
pub const INVALID_ANNOTATION: &str = "corral.dev/invalid";

/// One job of a kind another operator runs, as alongside mode reads and writes it.
pub trait GenericJob {
    /// Its kind (the API resource its patches and events go to).
    fn kind(&self) -> &'static KubeflowKind;
    fn namespace(&self) -> &str;
    fn name(&self) -> &str;
    fn uid(&self) -> Option<&str>;
    /// The Corral queue it is labelled for ([`QUEUE_LABEL`]); `None`: not Corral's to queue.
    fn queue(&self) -> Option<&str>;
    fn is_suspended(&self) -> bool;
    /// Whether its operator says it finished (succeeded or failed).
    fn is_finished(&self) -> bool;
    fn is_deleting(&self) -> bool;
    /// Its workload among `training_jobs`: `Err` when a TrainingJob of its name is not its.
    fn find_workload<'a>(
        &self,
        training_jobs: &'a [Arc<TrainingJob>],
    ) -> Result<Option<&'a TrainingJob>, String>;
    /// The workload it mirrors to: a TrainingJob the control plane admits and places, whose
    /// replicas Corral never creates; `Err`: why it cannot be queued, in words.
    fn workload(&self) -> Result<TrainingJob, String>;
    /// The server-side apply body of `workload`, owned by the job.
    fn workload_body(&self, workload: &TrainingJob) -> Value;
    /// The patch that keeps it from running (its operator then deletes its pods).
    fn suspend_patch(&self) -> Value;
    /// The patch that lets it run on `admission`'s placement.
    fn run_patch(&self, admission: &HeldAdmission) -> Value;
    /// Why it cannot be queued, as last told on it ([`INVALID_ANNOTATION`]).
    fn said_invalid(&self) -> Option<&str>;
    /// The patch that keeps it suspended and tells it why it cannot be queued.
    fn invalid_patch(&self, why: &str) -> Value;
}

impl GenericJob for KubeflowJob {
    fn kind(&self) -> &'static KubeflowKind {
        self.kind
    }
    fn namespace(&self) -> &str {
        KubeflowJob::namespace(self)
    }
    fn name(&self) -> &str {
        KubeflowJob::name(self)
    }
    fn uid(&self) -> Option<&str> {
        KubeflowJob::uid(self)
    }
    fn queue(&self) -> Option<&str> {
        self.label(QUEUE_LABEL)
    }
    fn is_suspended(&self) -> bool {
        self.suspended()
    }
    fn is_finished(&self) -> bool {
        self.finished()
    }
    fn is_deleting(&self) -> bool {
        self.deleting()
    }
    fn find_workload<'a>(
        &self,
        training_jobs: &'a [Arc<TrainingJob>],
    ) -> Result<Option<&'a TrainingJob>, String> {
        super::owned_training_job(self, training_jobs)
    }

    /// The job's conversion, in its queue, with Kubeflow's own run policy left to Kubeflow
    /// (deadline, TTL and back-off are its operator's).
    fn workload(&self) -> Result<TrainingJob, String> {
        let mut manifest = self.manifest();
        without_placement(&mut manifest, self.kind.specs_key);
        let mut tj = convert_manifest(self, &manifest)?;
        if let Some(q) = self.label(QUEUE_LABEL) {
            tj.spec.queue = Some(q.to_string());
        }
        tj.spec.run_policy = RunPolicy::default();
        tj.metadata
            .annotations
            .insert(RUNNER_ANNOTATION.into(), super::GROUP.into());
        Ok(tj)
    }

    fn workload_body(&self, workload: &TrainingJob) -> Value {
        training_job_body(self, workload)
    }

    fn suspend_patch(&self) -> Value {
        json!({
            "metadata": {"resourceVersion": self.resource_version()},
            "spec": {"runPolicy": {"suspend": true}},
        })
    }

    /// Each replica template gets a required node affinity to the nodes placed for its role
    /// and the label `corral.dev/job-name`; `suspend: false`; one patch, with a
    /// resourceVersion precondition.
    fn run_patch(&self, admission: &HeldAdmission) -> Value {
        let specs_key = self.kind.specs_key;
        let mut specs = serde_json::Map::new();
        let templates = self
            .raw
            .pointer(&format!("/spec/{specs_key}"))
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        for (rtype, rspec) in &templates {
            let Some(role) = role_of(self, rtype) else {
                continue;
            };
            let nodes: Vec<String> = admission
                .admission
                .placements
                .iter()
                .filter(|p| p.role == role.as_str())
                .map(|p| p.node.clone())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            let template = rspec.get("template").cloned().unwrap_or(json!({}));
            let mut t =
                json!({"template": {"metadata": {"labels": {JOB_NAME_LABEL: self.name()}}}});
            if !nodes.is_empty() {
                t["template"]["spec"] = json!({"affinity": {"nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": terms_with_nodes(&template, &nodes)}}}});
            }
            specs.insert(rtype.clone(), t);
        }
        json!({
            "metadata": {"resourceVersion": self.resource_version()},
            "spec": {"runPolicy": {"suspend": false}, specs_key: specs},
        })
    }

    fn said_invalid(&self) -> Option<&str> {
        self.raw
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(INVALID_ANNOTATION))
            .and_then(Value::as_str)
    }

    fn invalid_patch(&self, why: &str) -> Value {
        json!({
            "metadata": {"resourceVersion": self.resource_version(),
                         "annotations": {INVALID_ANNOTATION: why}},
            "spec": {"runPolicy": {"suspend": true}},
        })
    }
}

/// The Corral role of a replica type as the manifest spells it.
fn role_of(job: &KubeflowJob, replica_type: &str) -> Option<Role> {
    corral_api::kubeflow::replica_role(job.kind.kind, replica_type)
}

/// The manifest as the user wrote it, less what [`GenericJob::run_patch`] added (the
/// workload is the same job before and after its placement).
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
