//! Carries out the serving plan: revisions, then replica jobs, then statuses. A crash
//! between two writes leaves what the next pass finds and finishes: a revision or a job
//! made again is already there (409), one deleted again is gone (404), a status not
//! written is decided again.

use k8s_openapi::api::apps::v1::ControllerRevision;
use kube::Error;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;

use super::ServingAction;
use crate::apply::{Applier, ApplyReport};
use crate::dynamic_objects;

fn code(e: &Error) -> Option<u16> {
    match e {
        Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// Every field of ServedModelStatus, so that a merge patch clears what the status no longer
/// says (a field left out of a merge patch keeps its old value).
const STATUS_FIELDS: [&str; 11] = [
    "desiredReplicas",
    "replicas",
    "readyReplicas",
    "panic",
    "url",
    "lastRequestTime",
    "latestRevision",
    "stableRevision",
    "revisions",
    "model",
    "message",
];

fn whole(status: &corral_api::ServedModelStatus) -> serde_json::Value {
    let mut v = serde_json::to_value(status).unwrap_or_else(|_| json!({}));
    if let Some(o) = v.as_object_mut() {
        for f in STATUS_FIELDS {
            o.entry(f).or_insert(serde_json::Value::Null);
        }
    }
    v
}

pub async fn apply(applier: &Applier, actions: &[ServingAction]) -> ApplyReport {
    let mut out = ApplyReport::default();
    let client = &applier.client;
    for a in actions {
        applier.limiter.acquire().await;
        match a {
            ServingAction::CreateRevision {
                namespace,
                revision,
            } => {
                let api: Api<ControllerRevision> = Api::namespaced(client.clone(), namespace);
                match api.create(&PostParams::default(), revision).await {
                    Ok(_) => out.status_updates += 1,
                    Err(e) if code(&e) == Some(409) => {}
                    Err(e) => out.errors.push(format!(
                        "{namespace}/{}: creating the revision: {e}",
                        revision.metadata.name.as_deref().unwrap_or_default()
                    )),
                }
            }
            ServingAction::DeleteRevision { namespace, name } => {
                let api: Api<ControllerRevision> = Api::namespaced(client.clone(), namespace);
                match api.delete(name, &DeleteParams::default()).await {
                    Ok(_) => out.status_updates += 1,
                    Err(e) if code(&e) == Some(404) => {}
                    Err(e) => out
                        .errors
                        .push(format!("{namespace}/{name}: deleting the revision: {e}")),
                }
            }
            ServingAction::CreateJob {
                namespace,
                name,
                job,
            } => {
                let _ = crate::pipelines::apply::create_job(
                    applier,
                    namespace,
                    name,
                    job,
                    "the replica's",
                    &mut out,
                )
                .await;
            }
            ServingAction::DeleteJob { namespace, name } => {
                let api: Api<DynamicObject> = Api::namespaced_with(
                    client.clone(),
                    namespace,
                    &dynamic_objects::training_jobs(),
                );
                match api.delete(name, &DeleteParams::default()).await {
                    Ok(_) => out.status_updates += 1,
                    Err(e) if code(&e) == Some(404) => {}
                    Err(e) => out.errors.push(format!(
                        "{namespace}/{name}: deleting the replica's job: {e}"
                    )),
                }
            }
            ServingAction::Status {
                namespace,
                name,
                status,
            } => {
                let api: Api<DynamicObject> = Api::namespaced_with(
                    client.clone(),
                    namespace,
                    &dynamic_objects::served_models(),
                );
                let patch = json!({"status": whole(status)});
                match api
                    .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(_) => out.status_updates += 1,
                    // Deleted meanwhile: nothing to say.
                    Err(e) if code(&e) == Some(404) => {}
                    Err(e) => out.errors.push(format!(
                        "{namespace}/{name}: writing the served model's status: {e}"
                    )),
                }
            }
        }
    }
    out
}

/// One serving pass from lists (the tests' and tools' way, without watches): the models,
/// their revisions, the runs and the world read now, decided with `serving`, applied.
pub async fn reconcile_once(
    applier: &Applier,
    serving: &mut corral_core::control::serving::Serving,
    router: &corral_router::Router,
    cfg: &super::ServingConfig,
    now: jiff::Timestamp,
) -> Result<(Vec<ServingAction>, ApplyReport), Error> {
    use std::sync::Arc;
    let world = crate::operator::observe_api(&applier.client).await?;
    let list = kube::api::ListParams::default();
    fn decode_all<T: serde::de::DeserializeOwned>(items: Vec<DynamicObject>) -> Vec<Arc<T>> {
        items
            .iter()
            .filter_map(|o| dynamic_objects::decode(o).ok().map(Arc::new))
            .collect()
    }
    let models: Vec<Arc<corral_api::ServedModel>> = decode_all(
        Api::<DynamicObject>::all_with(applier.client.clone(), &dynamic_objects::served_models())
            .list(&list)
            .await?
            .items,
    );
    let runs: Vec<Arc<corral_api::PipelineRun>> = decode_all(
        Api::<DynamicObject>::all_with(applier.client.clone(), &dynamic_objects::pipeline_runs())
            .list(&list)
            .await?
            .items,
    );
    let revisions: Vec<Arc<ControllerRevision>> =
        Api::<ControllerRevision>::all(applier.client.clone())
            .list(
                &kube::api::ListParams::default()
                    .labels(corral_api::served_model::SERVED_MODEL_LABEL),
            )
            .await?
            .items
            .into_iter()
            .map(Arc::new)
            .collect();
    let decided = super::plan(
        super::Seen {
            models: &models,
            revisions: &revisions,
            runs: &runs,
            world: &world,
            observed: &router.observations(),
        },
        serving,
        cfg,
        now,
    );
    router.serve_only(decided.targets);
    let report = apply(applier, &decided.actions).await;
    Ok((decided.actions, report))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_patch_names_every_field_of_the_status() {
        let every = corral_api::ServedModelStatus {
            panic: true,
            url: Some("/serve/a/b/".into()),
            last_request_time: Some(jiff::Timestamp::UNIX_EPOCH),
            latest_revision: Some("b-00002".into()),
            stable_revision: Some("b-00001".into()),
            revisions: vec![corral_api::served_model::RevisionStatus::default()],
            model: serde_json::from_value(json!({"uid": "u", "path": "/p", "sha256": "s"})).ok(),
            message: Some("m".into()),
            ..corral_api::ServedModelStatus::default()
        };
        let keys: Vec<String> = serde_json::to_value(&every)
            .expect("json")
            .as_object()
            .expect("object")
            .keys()
            .cloned()
            .collect();
        for k in &keys {
            assert!(STATUS_FIELDS.contains(&k.as_str()), "{k} is not cleared");
        }
        let cleared = whole(&corral_api::ServedModelStatus::default());
        assert_eq!(cleared["message"], serde_json::Value::Null);
        assert_eq!(cleared["desiredReplicas"], 0);
    }
}
