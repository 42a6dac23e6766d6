//! The running operator's side of serving: watches of ServedModels and their revisions,
//! the autoscalers' state of this leadership term, and the pass run after the operator's
//! own, which also tells the router where each model's replicas are.

use std::sync::{Arc, Mutex};

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::ControllerRevision;
use kube::api::{Api, DynamicObject, ListParams};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Client, Error};
use tokio::sync::Notify;

use corral_api::ServedModel;
use corral_api::served_model::SERVED_MODEL_LABEL;
use corral_core::control::serving::Serving;

use super::{ServingConfig, plan};
use crate::apply::{Applier, ApplyReport};
use crate::dynamic_objects::{self, Decoded};
use crate::observe::World;

/// The watched models (none where the ServedModel CRD is not installed).
pub struct Models {
    store: Option<Store<DynamicObject>>,
    decoded: Decoded<ServedModel>,
    revisions: Option<Store<ControllerRevision>>,
    cfg: ServingConfig,
    /// The autoscalers' windows and drains: this term's (a new leader starts them anew,
    /// as a restarted `corral up` does).
    serving: Mutex<Serving>,
}

/// What one serving pass wrote and decided.
#[derive(Debug, Default)]
pub struct Served {
    pub report: ApplyReport,
    /// The models with their status as decided now (the read API's answer).
    pub models: Vec<Arc<ServedModel>>,
}

/// Starts the watches when the API server serves ServedModels; where the CRD is missing
/// (an install from before serving) it says so and serves none.
pub async fn start(
    client: &Client,
    cfg: ServingConfig,
    notify: Arc<Notify>,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) -> Models {
    let ar = dynamic_objects::served_models();
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let mut models = Models {
        store: None,
        decoded: Decoded::default(),
        revisions: None,
        cfg,
        serving: Mutex::new(Serving::new()),
    };
    match api.list(&ListParams::default().limit(1)).await {
        Ok(_) => {}
        Err(Error::Api(s)) if s.code == 404 => {
            tracing::warn!(
                "servedmodels.corral.dev is not served (apply deploy/crds.yaml): no model is served"
            );
            return models;
        }
        Err(e) => tracing::warn!("listing servedmodels: {e}"),
    }
    models.store = Some(crate::operator::reflect(
        api,
        watcher::Config::default(),
        ar,
        crate::slim::object,
        notify.clone(),
        tasks,
    ));
    models.revisions = Some(crate::operator::reflect(
        Api::all(client.clone()),
        watcher::Config::default().labels(SERVED_MODEL_LABEL),
        (),
        crate::slim::object,
        notify,
        tasks,
    ));
    models
}

impl Models {
    /// Whether the caches are filled (at once where none are watched).
    pub async fn ready(&self) -> bool {
        if let Some(s) = &self.store
            && s.wait_until_ready().await.is_err()
        {
            return false;
        }
        if let Some(s) = &self.revisions
            && s.wait_until_ready().await.is_err()
        {
            return false;
        }
        true
    }

    /// Whether any model is served: the operator then passes often enough for the
    /// autoscaler's windows.
    pub fn any(&self) -> bool {
        self.store.as_ref().is_some_and(|s| !s.is_empty())
    }

    /// Scales every model from what the router saw, writes what that takes, and tells the
    /// router where each model's replicas are now.
    pub async fn pass(
        &self,
        world: &World,
        runs: &[Arc<corral_api::PipelineRun>],
        applier: &Applier,
        router: &corral_router::Router,
        now: Timestamp,
    ) -> Served {
        let Some(store) = &self.store else {
            return Served::default();
        };
        let mut warnings = Vec::new();
        let models = self.decoded.decode_all(&store.state(), &mut warnings);
        for w in warnings {
            tracing::warn!("ServedModel {w}");
        }
        let revisions = self
            .revisions
            .as_ref()
            .map(Store::state)
            .unwrap_or_default();
        let observed = router.observations();
        let decided = {
            let mut serving = self.serving.lock().unwrap_or_else(|e| e.into_inner());
            plan(
                super::Seen {
                    models: &models,
                    revisions: &revisions,
                    runs,
                    world,
                    observed: &observed,
                },
                &mut serving,
                &self.cfg,
                now,
            )
        };
        router.serve_only(decided.targets);
        let report = if decided.actions.is_empty() {
            ApplyReport::default()
        } else {
            super::apply::apply(applier, &decided.actions).await
        };
        Served {
            report,
            models: decided.models.into_iter().map(Arc::new).collect(),
        }
    }
}
