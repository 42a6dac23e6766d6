//! Carries out the Kubeflow integration's plan, and lists what it reads.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, Preconditions};
use kube::runtime::events::Recorder;
use kube::{Client, Error};
use serde_json::json;

use corral_api::training_job::TrainingJob;

use super::{FIELD_MANAGER, KINDS, KubeflowAction, KubeflowJob, Mode};
use crate::apply::{ApplyReport, RateLimiter};

/// Every Kubeflow job of the kinds the API server serves (a kind whose CRD is not
/// installed is skipped, and named in the second list).
pub async fn list_jobs(client: &Client) -> Result<(Vec<KubeflowJob>, Vec<String>), Error> {
    let mut jobs = Vec::new();
    let mut missing = Vec::new();
    for k in &KINDS {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &k.api_resource());
        match api.list(&ListParams::default()).await {
            Ok(list) => {
                for mut o in list.items {
                    // Lists carry kind and apiVersion on the list, not on each item.
                    o.types = Some(kube::api::TypeMeta {
                        api_version: k.api_version(),
                        kind: k.kind.to_string(),
                    });
                    if let Some(j) = serde_json::to_value(&o).ok().and_then(KubeflowJob::new) {
                        jobs.push(j);
                    }
                }
            }
            Err(Error::Api(s)) if s.code == 404 => {
                missing.push(format!("{}/{}", k.api_version(), k.plural))
            }
            Err(e) => return Err(e),
        }
    }
    Ok((jobs, missing))
}

fn code(e: &Error) -> Option<u16> {
    match e {
        Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// Applies `actions`; a failed call is reported and the next pass tries again.
pub async fn apply(
    client: &Client,
    recorder: Option<&Recorder>,
    limiter: &RateLimiter,
    actions: &[KubeflowAction],
) -> ApplyReport {
    let mut report = ApplyReport::default();
    let ssa = PatchParams::apply(FIELD_MANAGER).force();
    for a in actions {
        limiter.acquire().await;
        let r: Result<(), (String, Error)> = match a {
            KubeflowAction::ApplyTrainingJob { namespace, body } => {
                let name = body["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                let api: Api<DynamicObject> = Api::namespaced_with(
                    client.clone(),
                    namespace,
                    &crate::dynamic_objects::training_jobs(),
                );
                api.patch(&name, &ssa, &Patch::Apply(body))
                    .await
                    .map(|_| ())
                    .map_err(|e| (format!("{namespace}/{name}: apply TrainingJob"), e))
            }
            KubeflowAction::DeleteTrainingJob {
                namespace,
                name,
                uid,
            } => {
                let api: Api<DynamicObject> = Api::namespaced_with(
                    client.clone(),
                    namespace,
                    &crate::dynamic_objects::training_jobs(),
                );
                let dp = DeleteParams {
                    preconditions: uid.clone().map(|uid| Preconditions {
                        uid: Some(uid),
                        resource_version: None,
                    }),
                    ..DeleteParams::background()
                };
                match api.delete(name, &dp).await {
                    Ok(_) => Ok(()),
                    Err(e) if matches!(code(&e), Some(404 | 409)) => Ok(()),
                    Err(e) => Err((format!("{namespace}/{name}: delete workload"), e)),
                }
            }
            KubeflowAction::DeleteJob {
                kind,
                namespace,
                name,
                uid,
            } => {
                let api: Api<DynamicObject> =
                    Api::namespaced_with(client.clone(), namespace, &kind.api_resource());
                let dp = DeleteParams {
                    preconditions: uid.clone().map(|uid| Preconditions {
                        uid: Some(uid),
                        resource_version: None,
                    }),
                    ..DeleteParams::background()
                };
                match api.delete(name, &dp).await {
                    Ok(_) => Ok(()),
                    Err(e) if matches!(code(&e), Some(404 | 409)) => Ok(()),
                    Err(e) => Err((format!("{namespace}/{name}: delete {}", kind.kind), e)),
                }
            }
            KubeflowAction::PatchJob {
                kind,
                namespace,
                name,
                patch,
            } => {
                let api: Api<DynamicObject> =
                    Api::namespaced_with(client.clone(), namespace, &kind.api_resource());
                match api
                    .patch(name, &PatchParams::default(), &Patch::Merge(patch))
                    .await
                {
                    Ok(_) => Ok(()),
                    // Changed since observed: the next pass decides on what is there now.
                    Err(e) if code(&e) == Some(409) => Ok(()),
                    Err(e) => Err((format!("{namespace}/{name}: patch {}", kind.kind), e)),
                }
            }
            KubeflowAction::PatchJobStatus {
                kind,
                namespace,
                name,
                status,
            } => {
                let api: Api<DynamicObject> =
                    Api::namespaced_with(client.clone(), namespace, &kind.api_resource());
                api.patch_status(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": status})),
                )
                .await
                .map(|_| report.status_updates += 1)
                .map_err(|e| (format!("{namespace}/{name}: {} status", kind.kind), e))
            }
            KubeflowAction::Event {
                kind,
                namespace,
                name,
                uid,
                warning,
                reason,
                note,
            } => {
                let Some(rec) = recorder else { continue };
                let reference = ObjectReference {
                    api_version: Some(kind.api_version()),
                    kind: Some(kind.kind.to_string()),
                    name: Some(name.clone()),
                    namespace: Some(namespace.clone()),
                    uid: uid.clone(),
                    ..Default::default()
                };
                let ev = crate::apply::event(*warning, reason, note);
                match rec.publish(&ev, &reference).await {
                    Ok(()) => {
                        report.events += 1;
                        Ok(())
                    }
                    Err(e) => Err((format!("{namespace}/{name}: event {reason}"), e)),
                }
            }
        };
        if let Err((what, e)) = r {
            report.errors.push(format!("{what}: {e}"));
        }
    }
    report
}

/// One pass of the integration (what the operator runs after its own pass, and tests):
/// lists the Kubeflow jobs and the TrainingJobs, plans and applies.
pub async fn reconcile_once(
    client: &Client,
    recorder: Option<&Recorder>,
    mode: Mode,
    now: Timestamp,
) -> Result<(Vec<KubeflowAction>, ApplyReport), Error> {
    if mode == Mode::Off {
        return Ok((Vec::new(), ApplyReport::default()));
    }
    let (jobs, _missing) = list_jobs(client).await?;
    let tjs: Api<DynamicObject> =
        Api::all_with(client.clone(), &crate::dynamic_objects::training_jobs());
    let training_jobs: Vec<std::sync::Arc<TrainingJob>> = tjs
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter_map(|o| crate::dynamic_objects::decode(o).ok())
        .map(std::sync::Arc::new)
        .collect();
    let actions = super::plan(mode, &jobs, &training_jobs, now);
    let report = apply(client, recorder, &RateLimiter::unlimited(), &actions).await;
    Ok((actions, report))
}
