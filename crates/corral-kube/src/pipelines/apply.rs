//! Carries out the pipelines' plan: the steps' jobs and the artifact pods first, then each
//! run's status (over the version it was decided from: a status decided from a stale view
//! is refused and decided again next pass), then events. A crash between any two writes
//! leaves what the next pass finds and finishes: a job made again is already there (409),
//! a status not written is decided again from the jobs that exist.

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::Error;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;

use super::RunAction;
use crate::apply::{Applier, ApplyReport};
use crate::dynamic_objects;

fn code(e: &Error) -> Option<u16> {
    match e {
        Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// What a pass of the pipelines wrote, and the step jobs it made (`namespace/name`, those
/// already there included), which the next passes count as running until the watch shows
/// them.
#[derive(Debug, Default)]
pub struct Applied {
    pub report: ApplyReport,
    pub jobs: Vec<String>,
}

/// Creates a TrainingJob the operator makes for another object (a run's step, a model's
/// replica; `whose` says which in an error): true once it exists (made now, or already
/// there), its version recorded for the next pass to wait for.
pub(crate) async fn create_job(
    applier: &Applier,
    namespace: &str,
    name: &str,
    job: &serde_json::Value,
    whose: &str,
    report: &mut ApplyReport,
) -> bool {
    let api: Api<DynamicObject> = Api::namespaced_with(
        applier.client.clone(),
        namespace,
        &dynamic_objects::training_jobs(),
    );
    let obj: DynamicObject = match serde_json::from_value(job.clone()) {
        Ok(o) => o,
        Err(e) => {
            report
                .errors
                .push(format!("{namespace}/{name}: {whose} job: {e}"));
            return false;
        }
    };
    match api.create(&PostParams::default(), &obj).await {
        Ok(made) => {
            report.status_updates += 1;
            if let Some(rv) = made.metadata.resource_version {
                report
                    .written
                    .jobs
                    .push((namespace.to_string(), name.to_string(), rv));
            }
            true
        }
        Err(e) if code(&e) == Some(409) => true,
        Err(e) => {
            report
                .errors
                .push(format!("{namespace}/{name}: creating {whose} job: {e}"));
            false
        }
    }
}

pub async fn apply(applier: &Applier, actions: &[RunAction]) -> Applied {
    let mut out = Applied::default();
    let client = &applier.client;
    for a in actions {
        match a {
            RunAction::CreateJob {
                namespace,
                name,
                job,
            } => {
                applier.limiter.acquire().await;
                if create_job(applier, namespace, name, job, "the step's", &mut out.report).await {
                    out.jobs.push(format!("{namespace}/{name}"));
                }
            }
            RunAction::CreatePod { namespace, pod } => {
                let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
                let name = pod.metadata.name.clone().unwrap_or_default();
                applier.limiter.acquire().await;
                match api.create(&PostParams::default(), pod).await {
                    Ok(_) => {
                        out.report.pods_created += 1;
                        out.report.written.pods.push((namespace.clone(), name));
                    }
                    Err(e) if code(&e) == Some(409) => {}
                    Err(e) => out.report.errors.push(format!(
                        "{namespace}/{name}: creating the artifact pod: {e}"
                    )),
                }
            }
            RunAction::DeletePod { namespace, name } => {
                let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
                applier.limiter.acquire().await;
                match api.delete(name, &DeleteParams::default()).await {
                    Ok(_) => out.report.pods_deleted += 1,
                    Err(e) if code(&e) == Some(404) => {}
                    Err(e) => out.report.errors.push(format!(
                        "{namespace}/{name}: deleting the artifact pod: {e}"
                    )),
                }
            }
            RunAction::Resolve {
                namespace,
                name,
                resource_version,
                spec,
            } => {
                let api: Api<DynamicObject> = Api::namespaced_with(
                    client.clone(),
                    namespace,
                    &dynamic_objects::pipeline_runs(),
                );
                // Over the version it was read at: a run changed meanwhile is read again.
                let patch = json!({
                    "metadata": {"resourceVersion": resource_version},
                    "spec": {"pipelineSpec": spec.pipeline_spec,
                             "pipelineRef": spec.pipeline_ref},
                });
                applier.limiter.acquire().await;
                match api
                    .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(_) => out.report.status_updates += 1,
                    Err(e) if code(&e) == Some(409) => {}
                    Err(e) => out.report.errors.push(format!(
                        "{namespace}/{name}: writing the stored Pipeline's copy into the run: {e}"
                    )),
                }
            }
            RunAction::KeepVersion {
                namespace,
                revision,
            } => {
                let api: Api<k8s_openapi::api::apps::v1::ControllerRevision> =
                    Api::namespaced(client.clone(), namespace);
                match api.create(&PostParams::default(), revision).await {
                    Ok(_) => out.report.status_updates += 1,
                    Err(e) if code(&e) == Some(409) => {}
                    Err(e) => out.report.errors.push(format!(
                        "{namespace}/{}: keeping the Pipeline's version: {e}",
                        revision.metadata.name.as_deref().unwrap_or_default()
                    )),
                }
            }
            RunAction::Status { .. } | RunAction::Event { .. } => {}
        }
    }
    // A run's events say what its status says: none where that status was not written.
    let mut unwritten = std::collections::BTreeSet::new();
    for a in actions {
        if let RunAction::Status {
            namespace,
            name,
            resource_version,
            status,
        } = a
        {
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), namespace, &dynamic_objects::pipeline_runs());
            let body = json!({
                "apiVersion": corral_api::API_VERSION,
                "kind": "PipelineRun",
                "metadata": {"name": name, "namespace": namespace,
                             "resourceVersion": resource_version},
                "status": status,
            });
            let obj: DynamicObject = match serde_json::from_value(body) {
                Ok(o) => o,
                Err(e) => {
                    out.report
                        .errors
                        .push(format!("{namespace}/{name}: the run's status: {e}"));
                    unwritten.insert((namespace.clone(), name.clone()));
                    continue;
                }
            };
            applier.limiter.acquire().await;
            match api.replace_status(name, &PostParams::default(), &obj).await {
                Ok(_) => out.report.status_updates += 1,
                // Decided from a view older than the run: decided again next pass.
                Err(e) if code(&e) == Some(409) => {
                    tracing::debug!("{namespace}/{name}: run status from a stale view: {e}");
                    unwritten.insert((namespace.clone(), name.clone()));
                }
                Err(e) => {
                    out.report
                        .errors
                        .push(format!("{namespace}/{name}: writing the run's status: {e}"));
                    unwritten.insert((namespace.clone(), name.clone()));
                }
            }
        }
    }
    for a in actions {
        if let RunAction::Event {
            namespace,
            run,
            uid,
            warning,
            reason,
            note,
        } = a
        {
            if unwritten.contains(&(namespace.clone(), run.clone())) {
                continue;
            }
            if *warning {
                tracing::warn!(namespace = %namespace, run = %run, event = %reason, "{note}");
            } else {
                tracing::info!(namespace = %namespace, run = %run, event = %reason, "{note}");
            }
            let Some(recorder) = &applier.recorder else {
                continue;
            };
            let reference = ObjectReference {
                api_version: Some(corral_api::API_VERSION.to_string()),
                kind: Some("PipelineRun".into()),
                name: Some(run.clone()),
                namespace: Some(namespace.clone()),
                uid: uid.clone(),
                ..ObjectReference::default()
            };
            let ev = crate::apply::event(*warning, reason, note);
            applier.limiter.acquire().await;
            match recorder.publish(&ev, &reference).await {
                Ok(()) => out.report.events += 1,
                Err(e) => out
                    .report
                    .errors
                    .push(format!("{namespace}/{run}: event {reason}: {e}")),
            }
        }
    }
    out
}

/// Lists the runs and everything else the plan reads, plans and applies once (what a test
/// or a one-shot run does).
pub async fn reconcile_once(
    applier: &Applier,
    cfg: &super::PipelineConfig,
    now: jiff::Timestamp,
) -> Result<(Vec<RunAction>, ApplyReport), Error> {
    let world = crate::operator::observe_api(&applier.client).await?;
    let api: Api<DynamicObject> =
        Api::all_with(applier.client.clone(), &dynamic_objects::pipeline_runs());
    let mut runs = Vec::new();
    for o in api.list(&kube::api::ListParams::default()).await?.items {
        match dynamic_objects::decode::<corral_api::PipelineRun>(&o) {
            Ok(r) => runs.push(std::sync::Arc::new(r)),
            Err(e) => tracing::warn!("PipelineRun {e}"),
        }
    }
    let api: Api<DynamicObject> =
        Api::all_with(applier.client.clone(), &dynamic_objects::pipelines());
    let mut pipelines = Vec::new();
    for o in api.list(&kube::api::ListParams::default()).await?.items {
        match dynamic_objects::decode::<corral_api::pipeline::Pipeline>(&o) {
            Ok(p) => pipelines.push(std::sync::Arc::new(p)),
            Err(e) => tracing::warn!("Pipeline {e}"),
        }
    }
    let kept: Api<k8s_openapi::api::apps::v1::ControllerRevision> =
        Api::all(applier.client.clone());
    let kept: Vec<_> = kept
        .list(&kube::api::ListParams::default().labels(super::versions::PIPELINE_LABEL))
        .await?
        .items
        .into_iter()
        .map(std::sync::Arc::new)
        .collect();
    let actions = super::plan(
        &runs,
        &pipelines,
        &kept,
        &world,
        &Default::default(),
        cfg,
        now,
    );
    let applied = apply(applier, &actions).await;
    Ok((actions, applied.report))
}
