//! The running operator's side of KServe: a watch of InferenceServices (where their CRD
//! is served and `--kserve` is on) and the pass run after the serving pass, from the
//! models as that pass decided them.

use std::sync::Arc;

use jiff::Timestamp;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Client, Error};
use tokio::sync::Notify;

use corral_api::ServedModel;

use super::{FIELD_MANAGER, InferenceService, KserveAction, api_resource, api_version, plan};
use crate::apply::{Applier, ApplyReport};

/// The watched InferenceServices (none when `--kserve` is off or the CRD is missing).
pub struct Watch {
    store: Option<Store<DynamicObject>>,
}

/// Starts the watch when `enabled` and the API server serves InferenceServices; a missing
/// CRD is named in a warning (install deploy/kserve-crds.yaml, or KServe).
pub async fn start(
    enabled: bool,
    client: &Client,
    notify: Arc<Notify>,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) -> Watch {
    if !enabled {
        return Watch { store: None };
    }
    let ar = api_resource();
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    match api.list(&ListParams::default().limit(1)).await {
        Ok(_) => {}
        Err(Error::Api(s)) if s.code == 404 => {
            tracing::warn!(
                "--kserve: {}/inferenceservices is not served (apply deploy/kserve-crds.yaml): none is watched",
                api_version()
            );
            return Watch { store: None };
        }
        Err(e) => tracing::warn!("listing inferenceservices: {e}"),
    }
    let store =
        crate::operator::reflect(api, watcher::Config::default(), ar, |_| {}, notify, tasks);
    Watch { store: Some(store) }
}

impl Watch {
    /// Whether the cache is filled (at once where nothing is watched).
    pub async fn ready(&self) -> bool {
        match &self.store {
            Some(s) => s.wait_until_ready().await.is_ok(),
            None => true,
        }
    }

    fn services(&self) -> Vec<InferenceService> {
        let Some(store) = &self.store else {
            return Vec::new();
        };
        store
            .state()
            .iter()
            .filter_map(|o| {
                let mut o = (**o).clone();
                o.types = Some(kube::api::TypeMeta {
                    api_version: api_version(),
                    kind: super::KIND.to_string(),
                });
                serde_json::to_value(&o).ok()
            })
            .map(|raw| InferenceService { raw })
            .collect()
    }

    /// Plans from the watched InferenceServices and the models as this pass decided them,
    /// and applies.
    pub async fn pass(
        &self,
        models: &[Arc<ServedModel>],
        applier: &Applier,
        now: Timestamp,
    ) -> ApplyReport {
        let mut report = ApplyReport::default();
        if self.store.is_none() {
            return report;
        }
        let ssa = PatchParams::apply(FIELD_MANAGER).force();
        for a in plan(&self.services(), models, now) {
            applier.limiter.acquire().await;
            let r = match &a {
                KserveAction::ApplyModel {
                    namespace,
                    name,
                    body,
                } => {
                    let api: Api<DynamicObject> = Api::namespaced_with(
                        applier.client.clone(),
                        namespace,
                        &crate::dynamic_objects::served_models(),
                    );
                    api.patch(name, &ssa, &Patch::Apply(body))
                        .await
                        .map(|_| ())
                        .map_err(|e| format!("{namespace}/{name}: apply ServedModel: {e}"))
                }
                KserveAction::WriteStatus {
                    namespace,
                    name,
                    status,
                } => {
                    let api: Api<DynamicObject> =
                        Api::namespaced_with(applier.client.clone(), namespace, &api_resource());
                    let body = serde_json::json!({ "status": status });
                    match api
                        .patch_status(name, &PatchParams::default(), &Patch::Merge(&body))
                        .await
                    {
                        Ok(_) => {
                            report.status_updates += 1;
                            Ok(())
                        }
                        // Deleted meanwhile: nothing to say.
                        Err(Error::Api(s)) if s.code == 404 => Ok(()),
                        Err(e) => Err(format!("{namespace}/{name}: InferenceService status: {e}")),
                    }
                }
            };
            if let Err(e) = r {
                report.errors.push(e);
            }
        }
        report
    }
}
