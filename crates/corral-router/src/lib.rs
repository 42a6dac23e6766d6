//! Corral's router for served models: one URL per model, new requests split between its
//! revisions by the control plane's percentages, least-outstanding-requests balancing over
//! a revision's replicas in rotation, retries on another replica, readiness checks,
//! requests held during a cold start, streaming responses passed through unbuffered, and
//! request counts and latencies per model and revision.
//!
//! Data path only: which replicas exist and how many there should be is the control plane's
//! (`corral_core::control::serving`). The shell tells the router the replicas it started
//! ([`Router::set_model`]) and hands the load the router saw ([`Router::take_load`]) to the
//! autoscaler as its observation.
//!
//! - `table`: models, replicas, rotation, the balancer's pick, the load.
//! - `proxy`: one request end to end (limit, hold, pick, forward, retry).
//! - `body`: the streamed response body and the counts it holds until its end.
//! - `probe`: readiness checks.
//! - `stats`: request counts and latency histogram (per model and revision).
//! - `metrics`: those counts as Prometheus series.

mod body;
mod metrics;
mod probe;
mod proxy;
mod stats;
mod table;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;
use corral_core::control::serving::ServingObservation;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;

pub use metrics::metrics_text;
pub use proxy::DEFAULT_COLD_START_TIMEOUT;
pub use stats::{LATENCY_BUCKETS, STATUS_CLASSES, StatsSnapshot};
pub use table::{Load, ModelTarget, ReplicaTarget};

use table::Model;

/// The router's own settings.
#[derive(Clone, Debug)]
pub struct RouterConfig {
    /// How long a request waits for a replica to become ready (a cold start, or every
    /// replica out of rotation) before it is answered 503.
    pub cold_start_timeout: Duration,
    /// How long a connection to a replica may take.
    pub connect_timeout: Duration,
    /// Replicas one request is sent to at most.
    pub max_attempts: usize,
}

impl Default for RouterConfig {
    fn default() -> Self {
        RouterConfig {
            cold_start_timeout: DEFAULT_COLD_START_TIMEOUT,
            connect_timeout: Duration::from_secs(2),
            max_attempts: 3,
        }
    }
}

/// The router; clones share one table.
#[derive(Clone)]
pub struct Router {
    inner: Arc<Inner>,
}

struct Inner {
    models: RwLock<BTreeMap<String, Arc<Model>>>,
    client: Client<HttpConnector, Full<Bytes>>,
    config: RouterConfig,
}

/// One replica as the router sees it now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicaState {
    pub name: String,
    pub revision: String,
    pub ready: bool,
    pub outstanding: u32,
}

impl Router {
    pub fn new(config: RouterConfig) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(config.connect_timeout));
        connector.set_nodelay(true);
        let client = Client::builder(hyper_util::rt::TokioExecutor::new()).build(connector);
        Router {
            inner: Arc::new(Inner {
                models: RwLock::new(BTreeMap::new()),
                client,
                config,
            }),
        }
    }

    fn model(&self, key: &str) -> Option<Arc<Model>> {
        let models = self.inner.models.read().unwrap_or_else(|e| e.into_inner());
        models.get(key).cloned()
    }

    fn models(&self) -> Vec<(String, Arc<Model>)> {
        let models = self.inner.models.read().unwrap_or_else(|e| e.into_inner());
        models.iter().map(|(k, m)| (k.clone(), m.clone())).collect()
    }

    /// Serves model `key` (`namespace/name`) with these replicas; replicas it already had
    /// keep their readiness and outstanding requests.
    pub fn set_model(&self, key: &str, target: ModelTarget) {
        if let Some(m) = self.model(key) {
            m.update(target);
            return;
        }
        let mut models = self.inner.models.write().unwrap_or_else(|e| e.into_inner());
        match models.get(key) {
            Some(m) => m.update(target),
            None => {
                models.insert(key.to_string(), Arc::new(Model::new(target)));
            }
        }
    }

    /// Stops serving model `key`: new requests get 404; those under way finish.
    pub fn remove_model(&self, key: &str) {
        let mut models = self.inner.models.write().unwrap_or_else(|e| e.into_inner());
        models.remove(key);
    }

    /// The models served, by key.
    pub fn keys(&self) -> Vec<String> {
        self.models().into_iter().map(|(k, _)| k).collect()
    }

    /// Model `key`'s load since the last call (the autoscaler's observation).
    pub fn take_load(&self, key: &str) -> Option<Load> {
        self.model(key).map(|m| m.take_load())
    }

    /// Model `key`'s replicas: which are in rotation and what each carries.
    pub fn replicas(&self, key: &str) -> Vec<ReplicaState> {
        self.model(key)
            .map(|m| {
                m.replicas()
                    .iter()
                    .map(|r| ReplicaState {
                        name: r.name.clone(),
                        revision: r.revision.to_string(),
                        // In rotation: ready and not draining.
                        ready: r.is_ready() && !r.is_draining(),
                        outstanding: r.outstanding(),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// What the router saw of each model since the last call (load, rotation, what is
    /// under way on each replica and revision): the control plane's observation.
    pub fn observations(&self) -> BTreeMap<String, ServingObservation> {
        let mut observed = BTreeMap::new();
        for key in self.keys() {
            let load = self.take_load(&key).unwrap_or_default();
            let replicas = self.replicas(&key);
            let mut in_flight_by_revision: BTreeMap<String, u32> = BTreeMap::new();
            let mut outstanding = BTreeMap::new();
            for r in &replicas {
                *in_flight_by_revision.entry(r.revision.clone()).or_default() += r.outstanding;
                outstanding.insert(r.name.clone(), r.outstanding);
            }
            let ready: BTreeSet<String> = replicas
                .into_iter()
                .filter(|r| r.ready)
                .map(|r| r.name)
                .collect();
            observed.insert(
                key,
                ServingObservation {
                    in_flight: load.in_flight,
                    arrived: load.arrived,
                    ready,
                    in_flight_by_revision,
                    outstanding,
                },
            );
        }
        observed
    }

    /// Serves exactly these models: each with its replicas now, every other one removed.
    pub fn serve_only(&self, models: Vec<(String, ModelTarget)>) {
        let served: BTreeSet<&str> = models.iter().map(|(k, _)| k.as_str()).collect();
        for key in self.keys() {
            if !served.contains(key.as_str()) {
                self.remove_model(&key);
            }
        }
        for (key, target) in models {
            self.set_model(&key, target);
        }
    }

    /// Every model's request counts and latencies by revision (`""`: requests no
    /// revision took), by key.
    pub fn stats(&self) -> Vec<ModelStats> {
        self.models()
            .into_iter()
            .map(|(key, m)| {
                let replicas = m.replicas();
                let stats: Vec<_> = m
                    .stats
                    .read()
                    .unwrap_or_else(|e| e.into_inner())
                    .iter()
                    .map(|(r, s)| (r.clone(), s.clone()))
                    .collect();
                let mut revisions: Vec<(String, StatsSnapshot)> = stats
                    .iter()
                    .map(|(r, s)| (r.to_string(), s.snapshot()))
                    .collect();
                for r in &replicas {
                    if !revisions.iter().any(|(name, _)| **name == *r.revision) {
                        revisions.push((r.revision.to_string(), StatsSnapshot::default()));
                    }
                }
                revisions.sort_by(|a, b| a.0.cmp(&b.0));
                for (name, s) in &mut revisions {
                    let of: Vec<_> = replicas.iter().filter(|r| *r.revision == **name).collect();
                    s.replicas = u32::try_from(of.len()).unwrap_or(u32::MAX);
                    s.ready_replicas = u32::try_from(of.iter().filter(|r| r.is_ready()).count())
                        .unwrap_or(u32::MAX);
                    s.in_flight = of.iter().map(|r| r.outstanding()).sum();
                }
                ModelStats {
                    key,
                    in_flight: m.in_flight.load(std::sync::atomic::Ordering::Relaxed),
                    revisions,
                }
            })
            .collect()
    }
}

/// One model's counts: requests in flight (held ones included) and each revision's stats.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelStats {
    pub key: String,
    pub in_flight: u32,
    pub revisions: Vec<(String, StatsSnapshot)>,
}
