//! Serve mode: every Kubeflow job becomes a TrainingJob of the same name that it owns, and
//! gets that TrainingJob's status back in Kubeflow's format.

use jiff::Timestamp;
use serde_json::{Value, json};
use std::sync::Arc;

use corral_api::training_job::{TrainingJob, TrainingJobSpec};

use super::status::{invalid_status, kubeflow_status, same_status};
use super::{
    KF_JOB_NAME_LABEL, KF_OPERATOR_LABEL, KF_REPLICA_TYPE_LABEL, KubeflowAction, KubeflowJob,
    QUEUE_LABEL, SOURCE_ANNOTATION, owned_training_job,
};

/// The TrainingJob a Kubeflow job converts into (its spec with Kubeflow's defaults, as the
/// operator would fill them), or the converter's errors in words.
pub fn convert(job: &KubeflowJob) -> Result<TrainingJob, String> {
    convert_manifest(job, &job.manifest())
}

/// [`convert`] of `manifest`, the job's own or one edited from it.
pub fn convert_manifest(job: &KubeflowJob, manifest: &Value) -> Result<TrainingJob, String> {
    let mut tj = corral_api::kubeflow::convert(manifest).map_err(|e| e.to_string())?;
    if tj.spec.queue.is_none()
        && let Some(q) = job.label(QUEUE_LABEL)
    {
        tj.spec.queue = Some(q.to_string());
    }
    tj.metadata.namespace = Some(job.namespace().to_string());
    // Replica pods carry Kubeflow's labels too: the SDK and dashboards find pods by them.
    for (role, r) in tj.spec.replicas.iter_mut() {
        let tpl = r.template.pod_template.get_or_insert_with(Default::default);
        let meta = tpl
            .entry("metadata")
            .or_insert_with(|| json!({}))
            .as_object_mut();
        if let Some(meta) = meta {
            let labels = meta.entry("labels").or_insert_with(|| json!({}));
            if let Some(l) = labels.as_object_mut() {
                l.insert(KF_JOB_NAME_LABEL.into(), json!(job.name()));
                l.insert(
                    KF_REPLICA_TYPE_LABEL.into(),
                    json!(job.replica_type_of(*role).to_ascii_lowercase()),
                );
                l.insert(KF_OPERATOR_LABEL.into(), json!("corral"));
            }
        }
    }
    Ok(tj)
}

/// The server-side apply body of the owned TrainingJob.
pub fn training_job_body(job: &KubeflowJob, tj: &TrainingJob) -> Value {
    let mut annotations = serde_json::to_value(&tj.metadata.annotations).unwrap_or(json!({}));
    annotations[SOURCE_ANNOTATION] = json!(job.source());
    json!({
        "apiVersion": corral_api::API_VERSION,
        "kind": "TrainingJob",
        "metadata": {
            "name": job.name(),
            "namespace": job.namespace(),
            "labels": tj.metadata.labels,
            "annotations": annotations,
            "ownerReferences": [job.owner_reference()],
        },
        "spec": tj.spec,
    })
}

/// Whether two specs mean the same (defaults the API server or a reader fills aside).
pub fn same_spec(a: &TrainingJobSpec, b: &TrainingJobSpec) -> bool {
    let defaulted = |s: &TrainingJobSpec| {
        let mut s = s.clone();
        s.apply_defaults();
        s
    };
    defaulted(a) == defaulted(b)
}

pub fn plan(
    jobs: &[KubeflowJob],
    training_jobs: &[Arc<TrainingJob>],
    now: Timestamp,
) -> Vec<KubeflowAction> {
    let mut out = Vec::new();
    for job in jobs {
        if job.deleting() {
            continue;
        }
        let owned = owned_training_job(job, training_jobs);
        // Finished and its TrainingJob gone (the control plane deleted it for its TTL, or
        // it never converted): never run again; deleted itself once its TTL passed.
        if job.finished() && matches!(owned, Ok(None)) {
            if job.ttl_expires().is_some_and(|t| t <= now) {
                out.push(KubeflowAction::DeleteJob {
                    kind: job.kind,
                    namespace: job.namespace().into(),
                    name: job.name().into(),
                    uid: job.uid().map(str::to_string),
                });
            }
            continue;
        }
        let want = match convert(job) {
            Ok(tj) => tj,
            Err(e) => {
                let status = invalid_status(job, &e, now);
                if !same_status(job.raw.get("status"), &status) {
                    out.push(KubeflowAction::event(job, true, "InvalidSpec", e));
                    out.push(KubeflowAction::PatchJobStatus {
                        kind: job.kind,
                        namespace: job.namespace().into(),
                        name: job.name().into(),
                        status,
                    });
                }
                continue;
            }
        };
        let have = match owned {
            Ok(h) => h,
            Err(e) => {
                let status = invalid_status(job, &e, now);
                if !same_status(job.raw.get("status"), &status) {
                    out.push(KubeflowAction::event(job, true, "NameTaken", e));
                    out.push(KubeflowAction::PatchJobStatus {
                        kind: job.kind,
                        namespace: job.namespace().into(),
                        name: job.name().into(),
                        status,
                    });
                }
                continue;
            }
        };
        match have {
            // A changed spec (suspend, resume, replicas) goes to the TrainingJob.
            Some(tj) if same_spec(&tj.spec, &want.spec) => {}
            _ => out.push(KubeflowAction::ApplyTrainingJob {
                namespace: job.namespace().into(),
                body: training_job_body(job, &want),
            }),
        }
        if let Some(tj) = have {
            let status = kubeflow_status(job, tj, now);
            if !same_status(job.raw.get("status"), &status) {
                out.push(KubeflowAction::PatchJobStatus {
                    kind: job.kind,
                    namespace: job.namespace().into(),
                    name: job.name().into(),
                    status,
                });
            }
        }
    }
    out
}
