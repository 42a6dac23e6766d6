//! The running operator: leader election, watches (reflectors) that trigger passes, the pass
//! itself (observe -> plan -> apply), the health/readiness/metrics endpoints and graceful
//! shutdown.
//!
//! The Lease is kept by its own thread ([`crate::leader::spawn_election`]); a replica leads
//! while its [`Leadership`] term holds, with a client whose every write is fenced to that
//! term ([`crate::fence`]), and a pass still running when the term ends is abandoned.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Service};
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::client::ClientBuilder;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Error};
use tokio::sync::{Notify, oneshot, watch};

use corral_api::{JobPriorityClass, NodePool, Queue, TrainingJob};

use crate::apply::{Applier, ApplyReport, RateLimiter};
use crate::build::BuildOptions;
use crate::consts::JOB_NAME_LABEL;
use crate::dynamic_objects::{self, Decoded};
use crate::fence::{Fence, FenceLayer, Leadership, Timings};
use crate::leader::{Election, spawn_election};
use crate::metrics::Metrics;
use crate::observe::World;
use crate::own_writes::{CATCH_UP_LIMIT, Written, version_at_least};
use crate::plan::{PassSlice, Plan, PlanConfig, Planner};

pub use crate::operator_args::{LogFormat, OperatorArgs};

pub use crate::logging::{init_logging, log_subscriber};

#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    #[error("kubernetes client: {0}")]
    Kube(#[from] Error),
    #[error("kubernetes config: {0}")]
    Config(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error(
        "cannot listen on {0} for /healthz, /readyz and /metrics (--listen): {1}; \
         choose a free address with --listen"
    )]
    Listen(SocketAddr, std::io::Error),
}

/// Runs the operator until SIGTERM or Ctrl-C. Blocking: it brings its own runtime.
pub fn run_operator(args: OperatorArgs) -> Result<(), OperatorError> {
    init_logging(args.log_format)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(run(args))
}

/// Lists everything the plan reads (the operator's start, and tests).
pub async fn observe_api(client: &Client) -> Result<World, Error> {
    observe_api_in(client, crate::ledger::DEFAULT_NAMESPACE).await
}

/// As [`observe_api`], with the usage ledger kept in `ledger_namespace`.
pub async fn observe_api_in(client: &Client, ledger_namespace: &str) -> Result<World, Error> {
    let lp = ListParams::default();
    let mut world = World::default();
    let dynamic = |ar: ApiResource| Api::<DynamicObject>::all_with(client.clone(), &ar);
    let jobs = dynamic(dynamic_objects::training_jobs()).list(&lp).await?;
    let queues = dynamic(dynamic_objects::queues()).list(&lp).await?;
    let pools = dynamic(dynamic_objects::node_pools()).list(&lp).await?;
    let classes = dynamic(dynamic_objects::job_priority_classes())
        .list(&lp)
        .await?;
    // The deprecated kind's CRD may be absent (installed without it): then there is nothing.
    let legacy = dynamic(dynamic_objects::legacy_priority_classes())
        .list(&lp)
        .await
        .map(|l| l.items.into_iter().map(Arc::new).collect::<Vec<_>>())
        .unwrap_or_default();
    let items = |l: kube::api::ObjectList<DynamicObject>| {
        l.items.into_iter().map(Arc::new).collect::<Vec<_>>()
    };
    decode_into(
        &mut world,
        None,
        &items(jobs),
        &items(queues),
        &items(pools),
        &items(classes),
        &legacy,
    );
    world.pods = shared_items(Api::<Pod>::all(client.clone()).list(&lp).await?.items);
    world.nodes = shared_items(Api::<Node>::all(client.clone()).list(&lp).await?.items);
    world.services = shared_items(
        Api::<Service>::all(client.clone())
            .list(&ListParams::default().labels(JOB_NAME_LABEL))
            .await?
            .items,
    );
    world.ledger = shared_items(
        Api::<ConfigMap>::namespaced(client.clone(), ledger_namespace)
            .list(&ListParams::default().labels(crate::ledger::LEDGER_LABEL))
            .await?
            .items,
    );
    Ok(world)
}

/// Listed objects as the watch caches hold them.
fn shared_items<T>(items: Vec<T>) -> Vec<Arc<T>> {
    items.into_iter().map(Arc::new).collect()
}

fn decode_all<T: serde::de::DeserializeOwned>(
    objs: &[Arc<DynamicObject>],
    warnings: &mut Vec<String>,
) -> Vec<T> {
    objs.iter()
        .filter_map(|o| match dynamic_objects::decode::<T>(o) {
            Ok(v) => Some(v),
            Err(e) => {
                warnings.push(e);
                None
            }
        })
        .collect()
}

fn decode_into(
    world: &mut World,
    cache: Option<&Decoded<TrainingJob>>,
    jobs: &[Arc<DynamicObject>],
    queues: &[Arc<DynamicObject>],
    pools: &[Arc<DynamicObject>],
    classes: &[Arc<DynamicObject>],
    legacy_classes: &[Arc<DynamicObject>],
) {
    let mut w = Vec::new();
    world.jobs = match cache {
        Some(c) => c.decode_all(jobs, &mut w),
        None => decode_all::<TrainingJob>(jobs, &mut w)
            .into_iter()
            .map(Arc::new)
            .collect(),
    };
    // corral-api's ObjectMeta has no deletionTimestamp: read it from the object as served.
    world.deleting_jobs = jobs
        .iter()
        .filter(|o| o.metadata.deletion_timestamp.is_some())
        .map(|o| {
            format!(
                "{}/{}",
                o.metadata.namespace.as_deref().unwrap_or("default"),
                o.metadata.name.as_deref().unwrap_or("")
            )
        })
        .collect();
    world.queues = decode_all::<Queue>(queues, &mut w);
    world.pools = decode_all::<NodePool>(pools, &mut w);
    world.classes = decode_all::<JobPriorityClass>(classes, &mut w);
    // Objects of the deprecated kind count unless a JobPriorityClass of that name exists.
    for c in decode_all::<JobPriorityClass>(legacy_classes, &mut w) {
        w.push(format!(
            "PriorityClass {}: {}",
            c.metadata.name,
            corral_api::job_priority_class::LEGACY_WARNING
        ));
        if !world
            .classes
            .iter()
            .any(|x| x.metadata.name == c.metadata.name)
        {
            world.classes.push(c);
        }
    }
    world.warnings = w;
}

/// One pass from a world: plan, then apply (with a plane rebuilt from the world).
pub async fn pass(
    world: &World,
    cfg: &PlanConfig,
    applier: &Applier,
    now: Timestamp,
) -> (Plan, ApplyReport) {
    pass_with(&mut Planner::rebuilding(), world, cfg, applier, now).await
}

/// One pass of `planner` from a world: plan, then apply, and tell the planner how the
/// apply went.
pub async fn pass_with(
    planner: &mut Planner,
    world: &World,
    cfg: &PlanConfig,
    applier: &Applier,
    now: Timestamp,
) -> (Plan, ApplyReport) {
    let started = Instant::now();
    let mut plan = planner.plan(world, cfg, now);
    plan.plan_seconds = started.elapsed().as_secs_f64();
    let applying = Instant::now();
    let report = applier.apply(&plan).await;
    planner.applied(&report, plan.plan_seconds, applying.elapsed().as_secs_f64());
    (plan, report)
}

/// Lists, plans and applies once (what a test or a one-shot run does).
pub async fn reconcile_once(
    applier: &Applier,
    cfg: &PlanConfig,
    now: Timestamp,
) -> Result<(Plan, ApplyReport), Error> {
    let world = observe_api_in(&applier.client, applier.ledger_namespace()).await?;
    Ok(pass(&world, cfg, applier, now).await)
}

struct Stores {
    jobs: Store<DynamicObject>,
    queues: Store<DynamicObject>,
    pools: Store<DynamicObject>,
    classes: Store<DynamicObject>,
    /// The deprecated kind's objects, when its CRD is installed.
    legacy_classes: Option<Store<DynamicObject>>,
    pods: Store<Pod>,
    nodes: Store<Node>,
    services: Store<Service>,
    /// The usage ledger's ConfigMaps, of the operator's namespace.
    ledger: Store<ConfigMap>,
    ledger_namespace: String,
    /// The jobs as the passes read them, decoded once per version.
    decoded_jobs: Decoded<TrainingJob>,
}

impl Stores {
    fn world(&self) -> World {
        let mut world = World::default();
        decode_into(
            &mut world,
            Some(&self.decoded_jobs),
            &self.jobs.state(),
            &self.queues.state(),
            &self.pools.state(),
            &self.classes.state(),
            &self
                .legacy_classes
                .as_ref()
                .map(|s| s.state())
                .unwrap_or_default(),
        );
        world.pods = self.pods.state();
        world.nodes = self.nodes.state();
        world.services = self.services.state();
        world.ledger = self.ledger.state();
        world
    }

    /// Whether the caches show what a pass wrote: each job at the version the write left it
    /// or later (or gone), each created pod.
    fn show(&self, written: &Written) -> bool {
        let jobs = crate::dynamic_objects::training_jobs();
        let job_seen = |(ns, name, rv): &(String, String, String)| {
            let at = ObjectRef::new_with(name, jobs.clone()).within(ns);
            self.jobs.get(&at).is_none_or(|o| {
                o.metadata
                    .resource_version
                    .as_deref()
                    .is_some_and(|have| version_at_least(have, rv))
            })
        };
        let pod_seen = |(ns, name): &(String, String)| {
            self.pods
                .get(&ObjectRef::<Pod>::new(name).within(ns))
                .is_some()
        };
        let ledger_seen = |(name, rv): &(String, String)| {
            self.ledger
                .get(&ObjectRef::<ConfigMap>::new(name).within(&self.ledger_namespace))
                .is_some_and(|cm| {
                    cm.metadata
                        .resource_version
                        .as_deref()
                        .is_some_and(|have| version_at_least(have, rv))
                })
        };
        written.jobs.iter().all(job_seen)
            && written.pods.iter().all(pod_seen)
            && written.ledger.iter().all(ledger_seen)
    }

    /// Waits until the caches show what the last pass wrote, at most `limit`: the next
    /// pass then never plans from a view older than its own writes (resourceVersion and
    /// UID preconditions keep a stale plan from doing harm, but it costs refused writes,
    /// and pods deleted as a stale plan's strays). `false` when the limit ran out.
    async fn catch_up(&self, written: &Written, notify: &Notify, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            if self.show(written) {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            // Any watch event may be the one awaited.
            let _ =
                tokio::time::timeout(left.min(Duration::from_millis(20)), notify.notified()).await;
        }
    }

    async fn ready(&self) -> bool {
        self.jobs.wait_until_ready().await.is_ok()
            && self.queues.wait_until_ready().await.is_ok()
            && self.pools.wait_until_ready().await.is_ok()
            && self.classes.wait_until_ready().await.is_ok()
            && self.pods.wait_until_ready().await.is_ok()
            && self.nodes.wait_until_ready().await.is_ok()
            && self.services.wait_until_ready().await.is_ok()
            && self.ledger.wait_until_ready().await.is_ok()
    }
}

/// Starts a reflector for one kind; every change wakes the pass loop.
pub(crate) fn reflect<K>(
    api: Api<K>,
    cfg: watcher::Config,
    dyntype: K::DynamicType,
    slim: fn(&mut K),
    notify: Arc<Notify>,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) -> Store<K>
where
    K: kube::Resource
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
{
    let writer = reflector::store::Writer::<K>::new(dyntype);
    let reader = writer.as_reader();
    let stream = watcher(api, cfg)
        .default_backoff()
        .modify(slim)
        .reflect(writer);
    tasks.push(tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(ev) = stream.next().await {
            if let Err(e) = ev {
                tracing::warn!("watch: {e}");
            }
            notify.notify_one();
        }
    }));
    reader
}

/// What `/readyz` answers. Ready means: the API server answered with the operator's
/// credentials and serves every Corral CRD (checked at start and every
/// [`API_CHECK_EVERY`]), and, while this replica leads, its watch caches have synced. A
/// standby is ready on the first two alone: it serves health and metrics and waits.
pub struct Health {
    /// Why the API server is not usable; `None` once the last check passed.
    api: std::sync::Mutex<Option<String>>,
    leading: AtomicBool,
    synced: AtomicBool,
}

/// How often readiness asks the API server again.
pub const API_CHECK_EVERY: Duration = Duration::from_secs(10);

impl Default for Health {
    fn default() -> Self {
        Health {
            api: std::sync::Mutex::new(Some("no contact with the API server yet".into())),
            leading: AtomicBool::new(false),
            synced: AtomicBool::new(false),
        }
    }
}

impl Health {
    /// The outcome of [`check_api`].
    pub fn set_api(&self, outcome: Result<(), String>) {
        if let Ok(mut a) = self.api.lock() {
            *a = outcome.err();
        }
    }

    /// This replica leads (`true`) or stands by; leading starts unsynced.
    pub fn set_leading(&self, leading: bool) {
        self.leading.store(leading, Ordering::Relaxed);
        self.synced.store(false, Ordering::Relaxed);
    }

    /// The leader's watch caches have their first full list.
    pub fn set_synced(&self) {
        self.synced.store(true, Ordering::Relaxed);
    }

    /// `Ok` when ready, else why not (the body of a 503).
    pub fn readiness(&self) -> Result<(), String> {
        match self.api.lock() {
            Ok(a) => {
                if let Some(why) = a.as_ref() {
                    return Err(why.clone());
                }
            }
            Err(_) => return Err("readiness state unavailable".into()),
        }
        if self.leading.load(Ordering::Relaxed) && !self.synced.load(Ordering::Relaxed) {
            return Err("leading; the watch caches have not synced yet".into());
        }
        Ok(())
    }
}

/// Whether the API server answers this client and serves Corral's CRDs: one list of at
/// most one object of each kind. The error says what is wrong in words an operator of the
/// cluster can act on.
pub async fn check_api(client: &Client) -> Result<(), String> {
    for ar in [
        dynamic_objects::training_jobs(),
        dynamic_objects::queues(),
        dynamic_objects::node_pools(),
        dynamic_objects::job_priority_classes(),
    ] {
        let crd = format!("{}.{}", ar.plural, ar.group);
        let listed = Api::<DynamicObject>::all_with(client.clone(), &ar)
            .list(&ListParams::default().limit(1))
            .await;
        if let Err(e) = listed {
            return Err(match &e {
                Error::Api(s) if s.code == 401 => format!(
                    "the API server refused the operator's credentials (401 Unauthorized): {}",
                    s.message
                ),
                Error::Api(s) if s.code == 403 => format!(
                    "not allowed to list {crd} (403 Forbidden; see deploy/rbac.yaml): {}",
                    s.message
                ),
                Error::Api(s) if s.code == 404 => {
                    format!("the CRD {crd} is not installed (404); apply deploy/crds.yaml")
                }
                other => format!("the API server did not answer a list of {crd}: {other}"),
            });
        }
    }
    Ok(())
}

async fn serve(
    listener: tokio::net::TcpListener,
    (metrics, router): (Arc<Metrics>, corral_router::Router),
    health: Arc<Health>,
    leadership: Arc<Leadership>,
    progress: axum::Router,
    mut stop: watch::Receiver<bool>,
) -> Result<(), std::io::Error> {
    let m = metrics.clone();
    let h = health.clone();
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(move || {
                let h = h.clone();
                async move {
                    match h.readiness() {
                        Ok(()) => (StatusCode::OK, "ready".to_string()),
                        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {why}")),
                    }
                }
            }),
        )
        .route(
            "/metrics",
            get(move || {
                let m = m.clone();
                // `corral_leader` is the fence's own answer at the time of the scrape.
                m.leader.set(i64::from(leadership.holds_now()));
                // The router's series follow the operator's (served models, by revision).
                let routed = corral_router::metrics_text(&router, |_| true, false);
                async move { m.encode() + &routed }
            }),
        )
        .merge(progress);
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            let _ = stop.wait_for(|s| *s).await;
        })
        .await
}

async fn shutdown_signal(tx: watch::Sender<bool>) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
    let _ = tx.send(true);
}

async fn run(args: OperatorArgs) -> Result<(), OperatorError> {
    let timings = Timings::new(
        Duration::from_secs(args.lease_duration_secs),
        Duration::from_secs(args.renew_deadline_secs),
        Duration::from_secs(args.renew_every_secs),
    )
    .map_err(OperatorError::Config)?;
    let config = kube::Config::infer()
        .await
        .map_err(|e| OperatorError::Config(e.to_string()))?;
    // Reads only (readiness); the passes get a fenced client per term.
    let client = Client::try_from(config.clone())?;
    let metrics = Arc::new(Metrics::new());
    let health = Arc::new(Health::default());
    let leadership = Leadership::new();
    let (stop_tx, stop_rx) = watch::channel(false);
    // Bound before anything runs: an operator without /healthz, /readyz and /metrics is
    // one its Deployment cannot probe, so a port it cannot have stops it, saying which.
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| OperatorError::Listen(args.listen, e))?;
    tokio::spawn(shutdown_signal(stop_tx));
    let served = Served {
        inbox: Arc::new(crate::progress::Inbox::default()),
        reads: Arc::new(crate::read_api::ReadApi::new(client.clone())),
    };
    // Readiness checks of the served models' replicas, whoever leads (a standby's table is
    // empty).
    tokio::spawn(served.reads.router().clone().probe_forever());
    let server = tokio::spawn(serve(
        listener,
        (metrics.clone(), served.reads.router().clone()),
        health.clone(),
        leadership.clone(),
        crate::progress::routes(client.clone(), served.inbox.clone())
            .merge(crate::read_api::routes(served.reads.clone())),
        stop_rx.clone(),
    ));
    let webhook = spawn_webhook(&args, stop_rx.clone()).await?;
    let mut stop = stop_rx.clone();
    // Readiness follows the API server: credentials accepted and CRDs served, checked now
    // and every API_CHECK_EVERY (a standby is ready on that alone).
    {
        let (client, health, mut stop) = (client.clone(), health.clone(), stop_rx.clone());
        tokio::spawn(async move {
            loop {
                let outcome = check_api(&client).await;
                if let Err(why) = &outcome {
                    tracing::warn!("not ready: {why}");
                }
                health.set_api(outcome);
                tokio::select! {
                    _ = tokio::time::sleep(API_CHECK_EVERY) => {}
                    _ = stop.wait_for(|s| *s) => break,
                }
            }
        });
    }
    let (quit, quit_rx) = oneshot::channel();
    let election = spawn_election(
        config.clone(),
        Election {
            namespace: args.lease_namespace.clone(),
            name: args.lease_name.clone(),
            identity: args.identity.clone(),
            timings,
        },
        leadership.clone(),
        quit_rx,
    )?;
    loop {
        let term = tokio::select! {
            t = leadership.acquired() => t,
            _ = stop.wait_for(|s| *s) => break,
        };
        let fence = leadership.fence(term.number);
        let fenced = ClientBuilder::try_from(config.clone())?
            .with_layer(&FenceLayer(fence.clone()))
            .build();
        health.set_leading(true);
        crate::leader::label_own_pod(&fenced, &args.lease_namespace, &args.identity, true).await;
        tokio::select! {
            _ = lead(&args, &fenced, &fence, &metrics, &health, &served, stop.clone()) => {}
            _ = fence.lost() => tracing::warn!(
                term = term.number,
                "leadership lost: the pass in progress is abandoned; following"
            ),
        }
        health.set_leading(false);
        served.inbox.follow();
        served.reads.follow();
        // A standby routes nothing: its table would go stale.
        served.reads.router().serve_only(Vec::new());
        if *stop.borrow() {
            // Within this term, through its fence (the Lease is given up below): the
            // router's Service goes to the next leader.
            crate::leader::label_own_pod(&fenced, &args.lease_namespace, &args.identity, false)
                .await;
            break;
        }
        if fence.permits_now() {
            // Still leading, yet the watches could not start: not in a tight loop.
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    // No write after this; then the election gives the lease up for a standby.
    leadership.close();
    let _ = quit.send(());
    let _ = tokio::task::spawn_blocking(move || election.join()).await;
    let _ = server.await;
    if let Some(w) = webhook {
        let _ = w.await;
    }
    Ok(())
}

/// The validating webhook (every replica serves it, leader or not), when a certificate
/// directory is given; a start without one says so.
async fn spawn_webhook(
    args: &OperatorArgs,
    stop: watch::Receiver<bool>,
) -> Result<Option<tokio::task::JoinHandle<()>>, OperatorError> {
    let Some(dir) = args.webhook_cert_dir.clone() else {
        tracing::info!(
            "no --webhook-cert-dir: the validating webhook is not served; invalid \
             TrainingJobs are stored and held Invalid"
        );
        return Ok(None);
    };
    // A missing certificate or a port in use fails the start, not the first review.
    crate::webhook::tls_config(&dir).await?;
    let listener = crate::webhook::bind(args.webhook_listen)?;
    tracing::info!(
        "validating webhook on https://{}{}",
        args.webhook_listen,
        crate::webhook::PATH
    );
    let opts = BuildOptions {
        cluster_domain: args.cluster_domain.clone(),
        progress_url: args.progress_url.clone(),
    };
    Ok(Some(tokio::spawn(async move {
        if let Err(e) = crate::webhook::serve(listener, dir, opts, stop).await {
            tracing::error!("validating webhook: {e}");
        }
    })))
}

/// How often the operator passes while models are served (the router's load is the
/// autoscaler's sample; `corral up` samples every 200 ms).
const SERVING_PASS_EVERY: Duration = Duration::from_millis(500);

/// Aborts the watch tasks of a leadership term when it ends, however it ends.
struct AbortOnDrop(Vec<tokio::task::JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

/// Returns to the system what the pass freed. A pass builds its world anew (and, when it
/// rebuilds it, the plane) and drops them; glibc keeps freed pages inside its heap
/// (`corral bench operator` with 2,000 finished jobs: 170 MB resident against 180 MB
/// without).
fn give_back_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory of the allocator's own heaps.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Acts while holding the lease, with `client` fenced to the term: returns on shutdown;
/// the caller drops it when the term ends.
/// What the operator's listener serves that the leader feeds: progress reports in, reads
/// out.
struct Served {
    inbox: Arc<crate::progress::Inbox>,
    reads: Arc<crate::read_api::ReadApi>,
}

async fn lead(
    args: &OperatorArgs,
    client: &Client,
    fence: &Fence,
    metrics: &Metrics,
    health: &Health,
    served: &Served,
    mut stop: watch::Receiver<bool>,
) {
    let notify = Arc::new(Notify::new());
    let mut tasks = AbortOnDrop(Vec::new());
    let ar = |r: ApiResource| Api::<DynamicObject>::all_with(client.clone(), &r);
    let wc = watcher::Config::default;
    // Watch the deprecated kind only where its CRD is served: a watch of a missing resource
    // would fail forever.
    let legacy_served = ar(dynamic_objects::legacy_priority_classes())
        .list(&ListParams::default().limit(1))
        .await
        .is_ok();
    let legacy_classes = legacy_served.then(|| {
        reflect(
            ar(dynamic_objects::legacy_priority_classes()),
            wc(),
            dynamic_objects::legacy_priority_classes(),
            crate::slim::object,
            notify.clone(),
            &mut tasks.0,
        )
    });
    let stores = Stores {
        jobs: reflect(
            ar(dynamic_objects::training_jobs()),
            wc(),
            dynamic_objects::training_jobs(),
            crate::slim::object,
            notify.clone(),
            &mut tasks.0,
        ),
        queues: reflect(
            ar(dynamic_objects::queues()),
            wc(),
            dynamic_objects::queues(),
            crate::slim::object,
            notify.clone(),
            &mut tasks.0,
        ),
        pools: reflect(
            ar(dynamic_objects::node_pools()),
            wc(),
            dynamic_objects::node_pools(),
            crate::slim::object,
            notify.clone(),
            &mut tasks.0,
        ),
        classes: reflect(
            ar(dynamic_objects::job_priority_classes()),
            wc(),
            dynamic_objects::job_priority_classes(),
            crate::slim::object,
            notify.clone(),
            &mut tasks.0,
        ),
        legacy_classes,
        pods: reflect(
            Api::all(client.clone()),
            wc(),
            (),
            crate::slim::pod,
            notify.clone(),
            &mut tasks.0,
        ),
        nodes: reflect(
            Api::all(client.clone()),
            wc(),
            (),
            crate::slim::node,
            notify.clone(),
            &mut tasks.0,
        ),
        services: reflect(
            Api::all(client.clone()),
            wc().labels(JOB_NAME_LABEL),
            (),
            crate::slim::object,
            notify.clone(),
            &mut tasks.0,
        ),
        ledger: reflect(
            Api::namespaced(client.clone(), &args.lease_namespace),
            wc().labels(crate::ledger::LEDGER_LABEL),
            (),
            |_| {},
            notify.clone(),
            &mut tasks.0,
        ),
        ledger_namespace: args.lease_namespace.clone(),
        decoded_jobs: Decoded::default(),
    };
    let reporter = Reporter {
        controller: "corral".into(),
        instance: Some(args.identity.clone()),
    };
    let applier = Applier::new(
        client.clone(),
        Some(Recorder::new(client.clone(), reporter)),
        RateLimiter::new(args.api_qps, args.api_burst),
    )
    .with_fence(fence.clone())
    .with_ledger_namespace(&args.lease_namespace)
    .with_window(args.apply_window)
    .with_condition_events(args.condition_events);
    let cfg = PlanConfig {
        build: BuildOptions {
            cluster_domain: args.cluster_domain.clone(),
            progress_url: args.progress_url.clone(),
        },
        scheduler: Default::default(),
        topology_label: args.topology_label.clone(),
        grace_period: args.grace_period_secs.map(Duration::from_secs),
        preemption_protection_seconds: args.preemption_protection_secs,
        resize_dwell_seconds: args.resize_dwell_secs,
        ledger_retention_days: Some(args.usage_retention_days),
        read_view: true,
    };
    let kubeflow =
        crate::kubeflow::watch::start(args.kubeflow, client, notify.clone(), &mut tasks.0).await;
    let kserve =
        crate::kserve::watch::start(args.kserve, client, notify.clone(), &mut tasks.0).await;
    let artifacts = crate::pipelines::ArtifactLocation::new(
        &args.artifacts_claim,
        args.artifact_store.as_deref(),
        &args.artifact_store_secret,
    );
    let runs = crate::pipelines::watch::start(
        client,
        crate::pipelines::PipelineConfig {
            artifacts: artifacts.clone(),
            tools_image: args.tools_image.clone(),
        },
        notify.clone(),
        &mut tasks.0,
    )
    .await;
    let models = crate::serving::watch::start(
        client,
        crate::serving::ServingConfig {
            port: args.serving_port,
            build: cfg.build.clone(),
            artifacts,
            tools_image: args.tools_image.clone(),
        },
        notify.clone(),
        &mut tasks.0,
    )
    .await;
    tokio::select! {
        ok = async { stores.ready().await && runs.ready().await && models.ready().await && kserve.ready().await } => if !ok { return; },
        _ = stop.wait_for(|s| *s) => return,
    }
    health.set_synced();
    served.inbox.lead(stores.pods.clone(), notify.clone());
    tracing::info!("watch caches synced");
    let mut written = Written::default();
    // The control plane of this term, kept from pass to pass.
    let mut planner = if args.rebuild_each_pass {
        Planner::rebuilding()
    } else {
        Planner::keeping()
    }
    .with_slice(PassSlice::new(Some(Duration::from_millis(
        args.pass_budget_ms,
    ))));
    loop {
        if !written.is_empty() && !stores.catch_up(&written, &notify, CATCH_UP_LIMIT).await {
            tracing::debug!("the watch caches did not show the last pass's writes in time");
        }
        let mut world = stores.world();
        world.progress = served.inbox.take();
        for w in &world.warnings {
            tracing::warn!("{w}");
        }
        let started = Instant::now();
        let (mut plan, report) =
            pass_with(&mut planner, &world, &cfg, &applier, Timestamp::now()).await;
        metrics.record(&plan, &report, started.elapsed().as_secs_f64());
        // Apply errors were logged with their job's span by the applier.
        tracing::debug!(
            jobs = plan.jobs.len(),
            rebuilt = plan.rebuilt.map(|r| r.as_str()),
            slice = plan.slice,
            admitted = plan.counters.admitted,
            deferred = plan.counters.deferred,
            writes = report.writes(),
            errors = report.errors.len(),
            seconds = started.elapsed().as_secs_f64(),
            "pass"
        );
        written = report.written.clone();
        let kf = kubeflow.pass(&world, &applier, Timestamp::now()).await;
        for e in &kf.errors {
            tracing::warn!("kubeflow: {e}");
        }
        let pipelines = runs.pass(&world, &applier, Timestamp::now()).await;
        for e in &pipelines.errors {
            tracing::warn!("pipelines: {e}");
        }
        written.jobs.extend(pipelines.written.jobs);
        written.pods.extend(pipelines.written.pods);
        let serving = models
            .pass(
                &world,
                &runs.current(),
                &applier,
                served.reads.router(),
                Timestamp::now(),
            )
            .await;
        for e in &serving.report.errors {
            tracing::warn!("serving: {e}");
        }
        written.jobs.extend(serving.report.written.jobs);
        let isvcs = kserve
            .pass(&serving.models, &applier, Timestamp::now())
            .await;
        for e in &isvcs.errors {
            tracing::warn!("kserve: {e}");
        }
        // The read API answers from this pass's world until the next one.
        match plan.view.take() {
            Some(v) => served.reads.publish(crate::read_api::Snapshot {
                world,
                cluster: v.cluster,
                plane: v.plane,
                runs: runs.current(),
                pipelines: runs.current_pipelines(),
                served_models: serving.models,
            }),
            None => drop(world),
        }
        give_back_freed_memory();
        let next_after = plan
            .requeue_after()
            .into_iter()
            .chain(report.retry_in)
            .min()
            .unwrap_or(Duration::from_secs(args.resync_secs.max(1)))
            .min(Duration::from_secs(args.resync_secs.max(1)))
            // Served models: the autoscaler samples the router's load each pass.
            .min(if models.any() {
                SERVING_PASS_EVERY
            } else {
                Duration::MAX
            })
            .max(Duration::from_millis(args.debounce_ms));
        tokio::select! {
            _ = notify.notified() => {
                tokio::time::sleep(Duration::from_millis(args.debounce_ms)).await;
            }
            _ = tokio::time::sleep(next_after) => {}
            _ = stop.wait_for(|s| *s) => break,
        }
    }
}
