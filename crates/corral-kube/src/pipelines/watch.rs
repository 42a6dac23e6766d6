//! The running operator's side of pipelines: a watch (reflector) of PipelineRuns, and the
//! pass run after the operator's own.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::ControllerRevision;
use kube::api::{Api, DynamicObject, ListParams};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Client, Error};
use tokio::sync::Notify;

use corral_api::PipelineRun;
use corral_api::pipeline::Pipeline;

use super::{PipelineConfig, plan};
use crate::apply::{Applier, ApplyReport};
use crate::dynamic_objects::{self, Decoded};
use crate::observe::World;

/// How long a step job this operator made counts as running while the watch does not show
/// it yet (the watch shows a write within milliseconds, seconds under load).
const SHOWN_WITHIN: Duration = Duration::from_secs(60);

/// The watched runs (none where the PipelineRun CRD is not installed).
pub struct Runs {
    store: Option<Store<DynamicObject>>,
    decoded: Decoded<PipelineRun>,
    /// The stored Pipelines runs name (none where their CRD is not installed).
    pipelines: Option<Store<DynamicObject>>,
    decoded_pipelines: Decoded<Pipeline>,
    /// The Pipelines' kept versions (`super::versions`).
    kept: Option<Store<ControllerRevision>>,
    cfg: PipelineConfig,
    /// Step jobs made, and when: see [`SHOWN_WITHIN`].
    made: Mutex<BTreeMap<String, Instant>>,
}

/// Starts the reflector of PipelineRuns when the API server serves them; where the CRD is
/// missing (an install from before pipelines) it says so and runs none.
pub async fn start(
    client: &Client,
    cfg: PipelineConfig,
    notify: Arc<Notify>,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) -> Runs {
    let ar = dynamic_objects::pipeline_runs();
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let mut runs = Runs {
        store: None,
        decoded: Decoded::default(),
        pipelines: None,
        decoded_pipelines: Decoded::default(),
        kept: None,
        cfg,
        made: Mutex::default(),
    };
    match api.list(&ListParams::default().limit(1)).await {
        Ok(_) => {}
        Err(Error::Api(s)) if s.code == 404 => {
            tracing::warn!(
                "pipelineruns.corral.dev is not served (apply deploy/crds.yaml): no pipelines run"
            );
            return runs;
        }
        Err(e) => tracing::warn!("listing pipelineruns: {e}"),
    }
    runs.store = Some(crate::operator::reflect(
        api,
        watcher::Config::default(),
        ar,
        crate::slim::object,
        notify.clone(),
        tasks,
    ));
    let ar = dynamic_objects::pipelines();
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    match api.list(&ListParams::default().limit(1)).await {
        Ok(_) => {
            runs.pipelines = Some(crate::operator::reflect(
                api,
                watcher::Config::default(),
                ar,
                crate::slim::object,
                notify.clone(),
                tasks,
            ));
            runs.kept = Some(crate::operator::reflect(
                Api::all(client.clone()),
                watcher::Config::default().labels(super::versions::PIPELINE_LABEL),
                (),
                crate::slim::object,
                notify,
                tasks,
            ));
        }
        Err(Error::Api(s)) if s.code == 404 => tracing::warn!(
            "pipelines.corral.dev is not served (apply deploy/crds.yaml): runs of stored \
             Pipelines fail"
        ),
        Err(e) => tracing::warn!("listing pipelines: {e}"),
    }
    runs
}

impl Runs {
    /// Whether the runs' cache is filled (at once where none are watched).
    pub async fn ready(&self) -> bool {
        for store in [&self.store, &self.pipelines].into_iter().flatten() {
            if store.wait_until_ready().await.is_err() {
                return false;
            }
        }
        if let Some(kept) = &self.kept
            && kept.wait_until_ready().await.is_err()
        {
            return false;
        }
        true
    }

    /// The runs as the watch holds them now (each decoded once per version).
    pub fn current(&self) -> Vec<Arc<PipelineRun>> {
        let Some(store) = &self.store else {
            return Vec::new();
        };
        let mut warnings = Vec::new();
        self.decoded.decode_all(&store.state(), &mut warnings)
    }

    /// The stored Pipelines as the watch holds them now.
    pub fn current_pipelines(&self) -> Vec<Arc<Pipeline>> {
        let Some(store) = &self.pipelines else {
            return Vec::new();
        };
        let mut warnings = Vec::new();
        self.decoded_pipelines
            .decode_all(&store.state(), &mut warnings)
    }

    /// Moves every run on as far as it goes now, from the runs watched and the operator's
    /// world.
    pub async fn pass(&self, world: &World, applier: &Applier, now: Timestamp) -> ApplyReport {
        let Some(store) = &self.store else {
            return ApplyReport::default();
        };
        let mut warnings = Vec::new();
        let runs = self.decoded.decode_all(&store.state(), &mut warnings);
        for w in warnings {
            tracing::warn!("PipelineRun {w}");
        }
        let recent: BTreeSet<String> = match self.made.lock() {
            Ok(mut made) => {
                made.retain(|_, at| at.elapsed() < SHOWN_WITHIN);
                made.keys().cloned().collect()
            }
            Err(_) => BTreeSet::new(),
        };
        let mut warnings = Vec::new();
        let pipelines = match &self.pipelines {
            Some(store) => self
                .decoded_pipelines
                .decode_all(&store.state(), &mut warnings),
            None => Vec::new(),
        };
        for w in warnings {
            tracing::warn!("Pipeline {w}");
        }
        let kept = self.kept.as_ref().map(|s| s.state()).unwrap_or_default();
        let actions = plan(&runs, &pipelines, &kept, world, &recent, &self.cfg, now);
        if actions.is_empty() {
            return ApplyReport::default();
        }
        let applied = super::apply::apply(applier, &actions).await;
        if let Ok(mut made) = self.made.lock() {
            for j in applied.jobs {
                made.insert(j, Instant::now());
            }
        }
        applied.report
    }
}
