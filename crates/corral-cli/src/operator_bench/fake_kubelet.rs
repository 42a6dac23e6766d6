//! The bench's kubelet, in-process: it watches Corral's pods, notes when it first sees each
//! one with a node (bound, by a Binding or at create), reports it Running at once and
//! Succeeded (exit 0) `run_for` later, and removes pods being deleted.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use corral_kube::consts::JOB_NAME_LABEL;
use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use tokio::sync::Semaphore;

/// The kubelet's status writes in flight at once (a node's kubelet has its own client; this
/// one stands in for all of them and must not flood the API server beside the operator).
const WRITES_IN_FLIGHT: usize = 32;

#[derive(Default)]
struct Seen {
    /// Pods seen bound, by uid: a pod created again under the same name is another pod.
    bound: BTreeSet<String>,
    /// When each job's pods were first seen bound, by `namespace/job`.
    by_job: BTreeMap<String, Vec<Instant>>,
    deleting: BTreeSet<String>,
    errors: Vec<String>,
}

/// What the kubelet saw; shared with the task that watches.
#[derive(Clone, Default)]
pub struct FakeKubelet {
    seen: Arc<Mutex<Seen>>,
}

impl FakeKubelet {
    /// Starts watching every pod that carries Corral's job label.
    pub fn start(client: Client, run_for: Duration) -> FakeKubelet {
        let kubelet = FakeKubelet::default();
        let seen = kubelet.seen.clone();
        let writes = Arc::new(Semaphore::new(WRITES_IN_FLIGHT));
        let pods: Api<Pod> = Api::all(client.clone());
        let cfg = watcher::Config::default().labels(JOB_NAME_LABEL);
        tokio::spawn(async move {
            let mut stream = watcher(pods, cfg)
                .default_backoff()
                .applied_objects()
                .boxed();
            while let Some(event) = stream.next().await {
                let pod = match event {
                    Ok(pod) => pod,
                    Err(e) => {
                        lock(&seen).errors.push(format!("watch: {e}"));
                        continue;
                    }
                };
                let now = Instant::now();
                let meta = &pod.metadata;
                let (Some(ns), Some(name), Some(uid)) = (&meta.namespace, &meta.name, &meta.uid)
                else {
                    continue;
                };
                if meta.deletion_timestamp.is_some() {
                    if lock(&seen).deleting.insert(uid.clone()) {
                        tokio::spawn(delete(client.clone(), ns.clone(), name.clone()));
                    }
                    continue;
                }
                if pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_ref())
                    .is_none()
                {
                    continue;
                }
                let job = meta
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(JOB_NAME_LABEL))
                    .cloned()
                    .unwrap_or_default();
                let first = {
                    let mut s = lock(&seen);
                    let first = s.bound.insert(uid.clone());
                    if first {
                        s.by_job.entry(format!("{ns}/{job}")).or_default().push(now);
                    }
                    first
                };
                if first {
                    let container = pod
                        .spec
                        .as_ref()
                        .and_then(|s| s.containers.first())
                        .map(|c| c.name.clone())
                        .unwrap_or_default();
                    tokio::spawn(run(
                        client.clone(),
                        writes.clone(),
                        seen.clone(),
                        (ns.clone(), name.clone(), container),
                        run_for,
                    ));
                }
            }
        });
        kubelet
    }

    /// The pods of these jobs (`namespace/job`) seen bound so far: (job, when).
    pub fn bound_for<'a>(
        &self,
        jobs: impl IntoIterator<Item = &'a String>,
    ) -> Vec<(String, Instant)> {
        let seen = lock(&self.seen);
        jobs.into_iter()
            .flat_map(|job| {
                let at = seen.by_job.get(job).map(Vec::as_slice).unwrap_or_default();
                at.iter().map(move |at| (job.clone(), *at))
            })
            .collect()
    }

    /// Status writes the API server refused, and watch errors.
    pub fn errors(&self) -> Vec<String> {
        lock(&self.seen).errors.clone()
    }
}

fn lock(seen: &Mutex<Seen>) -> std::sync::MutexGuard<'_, Seen> {
    seen.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The pod's life on its node: Running now, Succeeded `run_for` later.
async fn run(
    client: Client,
    writes: Arc<Semaphore>,
    seen: Arc<Mutex<Seen>>,
    (ns, name, container): (String, String, String),
    run_for: Duration,
) {
    let pods: Api<Pod> = Api::namespaced(client, &ns);
    let running = json!({"running": {"startedAt": Timestamp::now().to_string()}});
    let phases = [
        ("Running", running, Duration::ZERO),
        (
            "Succeeded",
            json!({"terminated": {"exitCode": 0, "reason": "Completed"}}),
            run_for,
        ),
    ];
    for (phase, state, after) in phases {
        tokio::time::sleep(after).await;
        let status = json!({"status": {"phase": phase, "containerStatuses": [{
            "name": container, "ready": phase == "Running", "restartCount": 0,
            "image": "x", "imageID": "", "state": state}]}});
        let Ok(_permit) = writes.acquire().await else {
            return;
        };
        if let Err(e) = pods
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(status))
            .await
        {
            // A pod deleted meanwhile (preempted, its job deleted) has no status to report.
            if !matches!(&e, kube::Error::Api(s) if s.code == 404) {
                lock(&seen)
                    .errors
                    .push(format!("status {phase} of {ns}/{name}: {e}"));
            }
            return;
        }
    }
}

/// A pod being deleted is gone once its containers stopped (at once here).
async fn delete(client: Client, ns: String, name: String) {
    let pods: Api<Pod> = Api::namespaced(client, &ns);
    let _ = pods
        .delete(&name, &DeleteParams::default().grace_period(0))
        .await;
}
