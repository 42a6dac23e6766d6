//! The running operator's side of the integration: a watch (reflector) per Kubeflow kind the
//! API server serves, and the pass run after the operator's own.

use std::sync::Arc;

use futures::StreamExt;
use jiff::Timestamp;
use kube::api::{Api, DynamicObject, ListParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Error};
use tokio::sync::Notify;

use super::{KINDS, KubeflowJob, KubeflowKind, Mode};
use crate::apply::{Applier, ApplyReport};
use crate::observe::World;

/// The watched Kubeflow jobs (none when the mode is `off`).
pub struct Watches {
    mode: Mode,
    stores: Vec<(&'static KubeflowKind, Store<DynamicObject>)>,
}

/// Starts a reflector for each Kubeflow kind that is served; a kind whose CRD is missing is
/// named in a warning (install deploy/kubeflow-crds.yaml, or Kubeflow's operator).
pub async fn start(
    mode: Mode,
    client: &Client,
    notify: Arc<Notify>,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) -> Watches {
    let mut stores = Vec::new();
    if mode == Mode::Off {
        return Watches { mode, stores };
    }
    for k in &KINDS {
        let ar = k.api_resource();
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        match api.list(&ListParams::default().limit(1)).await {
            Ok(_) => {}
            Err(Error::Api(s)) if s.code == 404 => {
                tracing::warn!(
                    "kubeflow {mode:?}: {}/{} is not served (CRD missing); its jobs are not watched",
                    k.api_version(),
                    k.plural
                );
                continue;
            }
            Err(e) => tracing::warn!("kubeflow: listing {}: {e}", k.plural),
        }
        let writer = reflector::store::Writer::<DynamicObject>::new(ar.clone());
        stores.push((k, writer.as_reader()));
        let stream = watcher(api, watcher::Config::default())
            .default_backoff()
            .reflect(writer);
        let notify = notify.clone();
        tasks.push(tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(ev) = stream.next().await {
                if let Err(e) = ev {
                    tracing::warn!("watch kubeflow: {e}");
                }
                notify.notify_one();
            }
        }));
    }
    Watches { mode, stores }
}

impl Watches {
    fn jobs(&self) -> Vec<KubeflowJob> {
        let mut out = Vec::new();
        for (k, store) in &self.stores {
            for o in store.state() {
                let mut o = (*o).clone();
                o.types = Some(kube::api::TypeMeta {
                    api_version: k.api_version(),
                    kind: k.kind.to_string(),
                });
                if let Some(j) = serde_json::to_value(&o).ok().and_then(KubeflowJob::new) {
                    out.push(j);
                }
            }
        }
        out
    }

    /// Plans from the watched jobs and the operator's world, and applies.
    pub async fn pass(&self, world: &World, applier: &Applier, now: Timestamp) -> ApplyReport {
        if self.mode == Mode::Off {
            return ApplyReport::default();
        }
        let actions = super::plan(self.mode, &self.jobs(), &world.jobs, now);
        super::apply::apply(
            &applier.client,
            applier.recorder.as_ref(),
            &applier.limiter,
            &actions,
        )
        .await
    }
}
