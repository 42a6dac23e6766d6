//! HTTP API (JSON, OpenAPI), Prometheus /metrics and the `corral up` server over the embedded
//! cluster of corral-local.
//!
//! One process: the [`Cluster`] (store, scheduler, executor) is single-owner, held in a
//! mutex; one task drives its control loop ([`Cluster::tick`] every
//! [`ServerOptions::tick_interval`], sooner when a request changed something), and request
//! handlers call its other methods on the blocking pool so that the async workers never wait
//! on SQLite. Only this shell reads the clock.
//!
//! - [`routes`]: the routes under `/api/v1/` (`/api/v1/watch`: changes pushed as
//!   server-sent events), `/metrics`, `/healthz`, `/openapi.json`.
//! - [`dashboard`]: the web dashboard at `/`, its assets built into the binary.
//! - [`auth`]: API tokens per namespace (from the cluster's `CorralConfig`).
//! - [`error`]: the error body every route answers with.
//! - [`openapi`]: the OpenAPI 3 document of the routes.
//! - [`metrics`]: Prometheus exposition, text 0.0.4 or OpenMetrics by `Accept`.
//! - [`history`]: the bounded time series behind the charts (a week of minutes, capped),
//!   sampled once a minute by a task of its own.
//! - [`api_client`]: a small blocking HTTP client of the API (what the CLI and [`api_bench`]
//!   call).

pub mod api_bench;
pub mod api_client;
pub mod audit;
pub mod auth;
pub mod error;
#[cfg(test)]
mod grafana_check;
pub mod history;
pub mod metrics;
pub mod openapi;
pub mod routes;
mod serving;
pub mod tls;
mod tls_client;

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use corral_local::cluster::{CheckedSubmission, SubmitContext, SubmitResult};
use corral_local::{Cluster, ClusterConfig, ClusterError, ClusterFileConfig};
use jiff::Timestamp;
use tokio::sync::{Notify, oneshot};

use crate::error::ApiError;

/// The port `corral up` listens on by default, and the CLI's default server.
pub const DEFAULT_PORT: u16 = 7443;
/// `http://127.0.0.1:7443`.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:7443";
/// Largest request body accepted (a job spec is a few KiB; the parser refuses more anyway).
pub const DEFAULT_BODY_LIMIT: usize = corral_api::document::MAX_INPUT_BYTES;

/// How to run the server.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// Where to listen; port 0 picks a free one. Loopback unless told otherwise.
    pub listen: SocketAddr,
    pub cluster: ClusterConfig,
    /// How often the control loop runs when nothing asks for it sooner.
    pub tick_interval: Duration,
    /// Largest request body, in bytes.
    pub body_limit: usize,
    /// When the server stops (Ctrl-C, SIGTERM), stop the replicas that still run instead of
    /// leaving them to the next start (see [`run_until_signal`]).
    pub stop_replicas_on_exit: bool,
    /// Serve HTTPS with this certificate and key (`corral up` beyond loopback); plain HTTP
    /// without.
    pub tls: Option<tls::TlsFiles>,
}

impl ServerOptions {
    pub fn new(cluster: ClusterConfig) -> Self {
        ServerOptions {
            listen: SocketAddr::from(([127, 0, 0, 1], DEFAULT_PORT)),
            cluster,
            tick_interval: Duration::from_millis(200),
            body_limit: DEFAULT_BODY_LIMIT,
            stop_replicas_on_exit: false,
            tls: None,
        }
    }
}

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    cluster: Arc<Mutex<Cluster>>,
    /// The configuration as opened (tokens), readable without the cluster's lock.
    file: Arc<ClusterFileConfig>,
    /// What submissions are checked against (`Cluster::submit_context`), readable
    /// without the cluster's lock.
    submit_context: Arc<SubmitContext>,
    /// Wakes the control loop after a change.
    wake: Arc<Notify>,
    /// Counts changes (a command, a tick that did something), so that watchers
    /// (`/api/v1/watch`) look again.
    changes: Arc<tokio::sync::watch::Sender<u64>>,
    /// Set when the server is stopping, so that streams that would never end (a watch, a
    /// followed log) end and let the graceful shutdown finish.
    closing: Arc<tokio::sync::watch::Sender<bool>>,
    body_limit: usize,
    /// Where uploaded code snapshots are staged and kept, and their largest size.
    code: Arc<corral_local::code::CodeStore>,
    code_max_bytes: u64,
    /// Checked submissions waiting for the cluster: whoever takes the lock stores all
    /// that wait, in one transaction.
    submissions: Arc<SubmitQueue>,
    /// The audit trail's writer and reader (see [`audit`]).
    audit: Arc<audit::AuditTrail>,
    /// The history store (`None`: it could not be opened; the server runs without it).
    history: Option<Arc<history::History>>,
    /// The served models' router (see [`serving`]).
    router: corral_router::Router,
}

/// A checked submission and where its result goes.
type PendingSubmission = (
    CheckedSubmission,
    oneshot::Sender<Result<Vec<SubmitResult>, ClusterError>>,
);

/// Concurrent submissions, gathered so that a burst costs one lock and one commit.
#[derive(Default)]
struct SubmitQueue {
    pending: Mutex<Vec<PendingSubmission>>,
    /// A task that will store what waits is on its way.
    scheduled: AtomicBool,
}

impl AppState {
    fn new(
        cluster: Cluster,
        body_limit: usize,
        audit: audit::AuditTrail,
        history: Option<history::History>,
    ) -> Self {
        let file = Arc::new(cluster.config().file.clone());
        let submit_context = Arc::new(cluster.submit_context());
        let code = Arc::new(cluster.code_store());
        let code_max_bytes = cluster.config().file.settings.code_snapshots.max_bytes;
        AppState {
            submit_context,
            code,
            code_max_bytes,
            cluster: Arc::new(Mutex::new(cluster)),
            file,
            wake: Arc::new(Notify::new()),
            changes: Arc::new(tokio::sync::watch::Sender::new(0)),
            closing: Arc::new(tokio::sync::watch::Sender::new(false)),
            body_limit,
            submissions: Arc::new(SubmitQueue::default()),
            audit: Arc::new(audit),
            history: history.map(Arc::new),
            router: corral_router::Router::new(corral_router::RouterConfig::default()),
        }
    }

    /// Stores a checked submission, together with any that arrive meanwhile (one lock,
    /// one transaction for all of them; each is all or nothing on its own).
    pub async fn submit(
        &self,
        checked: CheckedSubmission,
    ) -> Result<Result<Vec<SubmitResult>, ClusterError>, ApiError> {
        let (tx, rx) = oneshot::channel();
        self.submissions
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((checked, tx));
        if !self.submissions.scheduled.swap(true, Ordering::SeqCst) {
            let queue = Arc::clone(&self.submissions);
            let cluster = Arc::clone(&self.cluster);
            // Not awaited: the result comes through the channel, whoever stores it.
            tokio::task::spawn_blocking(move || {
                let mut c = cluster.lock().unwrap_or_else(|p| p.into_inner());
                loop {
                    // Cleared before taking, so that a submission queued after the take
                    // schedules a task of its own.
                    queue.scheduled.store(false, Ordering::SeqCst);
                    let batch = std::mem::take(
                        &mut *queue.pending.lock().unwrap_or_else(|p| p.into_inner()),
                    );
                    if batch.is_empty() {
                        break;
                    }
                    let (checked, senders): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
                    let results = c.submit_checked_all(checked, Timestamp::now());
                    for (sender, result) in senders.into_iter().zip(results) {
                        let _ = sender.send(result);
                    }
                }
            });
        }
        rx.await
            .map_err(|_| ApiError::internal("the submission was dropped before it was stored"))
    }

    /// Runs `f` with the cluster on the blocking pool.
    pub async fn with_cluster<T, F>(&self, f: F) -> Result<T, ApiError>
    where
        F: FnOnce(&mut Cluster) -> T + Send + 'static,
        T: Send + 'static,
    {
        let cluster = Arc::clone(&self.cluster);
        tokio::task::spawn_blocking(move || {
            // A panic in an earlier call poisons the lock; the cluster's state lives in the
            // store, so carrying on is as safe as it gets.
            let mut guard = cluster.lock().unwrap_or_else(|p| p.into_inner());
            f(&mut guard)
        })
        .await
        .map_err(|e| ApiError::internal(format!("the request handler failed: {e}")))
    }

    /// What submissions are checked against, without the lock.
    pub fn submit_context(&self) -> Arc<SubmitContext> {
        Arc::clone(&self.submit_context)
    }

    /// What a submission to `namespace` is checked against: [`AppState::submit_context`],
    /// with the namespace's stored Pipelines when `text` names one (`pipelineRef`), read
    /// under the lock briefly.
    pub async fn submit_context_for(
        &self,
        namespace: &str,
        text: &str,
    ) -> Result<Arc<SubmitContext>, ApiError> {
        let ctx = self.submit_context();
        if !corral_local::cluster::names_stored_pipelines(text) {
            return Ok(ctx);
        }
        let ns = namespace.to_string();
        let pipelines = self
            .with_cluster(move |c| c.pipeline_versions(&ns, None))
            .await??;
        Ok(Arc::new((*ctx).clone().with_pipelines(pipelines)))
    }

    /// The history store, if it is open.
    pub fn history(&self) -> Option<Arc<history::History>> {
        self.history.clone()
    }

    /// Asks the control loop to run now.
    pub fn wake(&self) {
        self.wake.notify_one();
        self.changed();
    }

    /// Tells watchers that something changed.
    fn changed(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Whether the server is stopping.
    pub fn is_closing(&self) -> bool {
        *self.closing.borrow()
    }

    /// Changes to true when the server starts stopping.
    pub fn subscribe_closing(&self) -> tokio::sync::watch::Receiver<bool> {
        self.closing.subscribe()
    }

    /// What a watcher waits on: it changes with every change.
    pub fn subscribe_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }
}

/// Opens the cluster in `options.cluster.data_dir` and binds the listener. Returns the
/// pieces [`serve`] runs, and the cluster's warnings.
pub fn prepare(options: &ServerOptions) -> Result<(AppState, TcpListener, Vec<String>), String> {
    let (mut cluster, mut warnings) = Cluster::open(options.cluster.clone(), Timestamp::now())
        .map_err(|e| {
            format!(
                "cannot open the cluster in {}: {e}",
                options.cluster.data_dir.display()
            )
        })?;
    let listener = TcpListener::bind(options.listen)
        .map_err(|e| format!("cannot listen on {}: {e}", options.listen))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("cannot listen on {}: {e}", options.listen))?;
    // The data directory's lock names this server's address to a second `corral up`.
    if let Err(e) = listener
        .local_addr()
        .map_err(|e| e.to_string())
        .and_then(|addr| {
            cluster
                .announce_address(&addr.to_string())
                .map_err(|e| e.to_string())
        })
    {
        warnings.push(format!(
            "cannot record the API address in the data directory: {e}"
        ));
    }
    if let Some(files) = &options.tls {
        cluster.announce_https(&tls::fingerprint_of_file(&files.cert)?);
    }
    let open_audit = || {
        corral_local::store::AuditLog::open(&options.cluster.data_dir).map_err(|e| {
            format!(
                "cannot open the audit trail in {}: {e}",
                options.cluster.data_dir.display()
            )
        })
    };
    let audit = audit::AuditTrail::start(open_audit()?, open_audit()?)?;
    let history = match history::History::open(&options.cluster.data_dir) {
        Ok(h) => Some(h),
        Err(e) => {
            warnings.push(format!("{e}; the charts' history is off"));
            None
        }
    };
    Ok((
        AppState::new(cluster, options.body_limit, audit, history),
        listener,
        warnings,
    ))
}

/// Serves the API and runs the control loop until `shutdown` resolves.
/// With `tls`, HTTPS.
pub async fn serve(
    state: AppState,
    listener: TcpListener,
    tick_interval: Duration,
    tls: Option<&tls::TlsFiles>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), String> {
    // A bad certificate or key fails the start, before the control loop runs.
    let tls = match tls {
        Some(files) => Some(tls::rustls_config(files).await?),
        None => None,
    };
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let ticker = tokio::spawn(control_loop(state.clone(), tick_interval, stop_rx.clone()));
    let sampler = tokio::spawn(history_loop(state.clone(), stop_rx));
    let prober = tokio::spawn(state.router.clone().probe_forever());
    let closing = Arc::clone(&state.closing);
    let app = routes::router(state);
    let shutdown = async move {
        shutdown.await;
        closing.send_replace(true);
    };
    let result = match tls {
        None => {
            let listener =
                tokio::net::TcpListener::from_std(listener).map_err(|e| e.to_string())?;
            axum::serve(listener, app)
                .with_graceful_shutdown(shutdown)
                .await
                .map_err(|e| format!("server: {e}"))
        }
        Some(config) => {
            let handle = axum_server::Handle::new();
            let stopper = handle.clone();
            tokio::spawn(async move {
                shutdown.await;
                stopper.graceful_shutdown(Some(Duration::from_secs(5)));
            });
            match axum_server::from_tcp_rustls(listener, config) {
                Ok(server) => server
                    .handle(handle)
                    .serve(app.into_make_service())
                    .await
                    .map_err(|e| format!("server: {e}")),
                Err(e) => Err(format!("server: {e}")),
            }
        }
    };
    let _ = stop_tx.send(true);
    let _ = ticker.await;
    let _ = sampler.await;
    prober.abort();
    result
}

/// Samples the cluster into the history store once a minute, at the start of each minute
/// (and once at start-up, so that a restart leaves no gap longer than it took).
async fn history_loop(state: AppState, mut stop: tokio::sync::watch::Receiver<bool>) {
    let Some(history) = state.history.clone() else {
        return;
    };
    loop {
        let now = Timestamp::now();
        let minute = now.as_second().div_euclid(60);
        if let Ok((nodes, top)) = state.with_cluster(|c| (c.nodes(), c.top())).await {
            let h = Arc::clone(&history);
            let recorded = tokio::task::spawn_blocking(move || {
                let samples = h.samples(minute, &nodes, &top);
                h.record(minute, &samples)
            })
            .await;
            if let Ok(Err(e)) = recorded {
                eprintln!("corral: history: {e}");
            }
        }
        let into_minute = Timestamp::now().as_second().rem_euclid(60);
        let wait = Duration::from_secs(u64::try_from(60 - into_minute).unwrap_or(60));
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.changed() => return,
        }
        if *stop.borrow() {
            return;
        }
    }
}

/// The control loop: one tick, then wait for the interval, the tick's own deadline or a
/// wake-up, whichever comes first.
async fn control_loop(
    state: AppState,
    interval: Duration,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    // Wake-ups (a submission, a deletion) run the loop sooner, but passes start at least
    // twice the last pass's duration apart (1 to 10 ms), so that a burst of requests costs
    // a few passes, not one each, and requests always get at least half of the time.
    let max_gap = interval.clamp(Duration::from_millis(1), Duration::from_millis(10));
    let follow_up = interval.min(Duration::from_millis(5));
    // A replica's shim is this process's child: its exit (SIGCHLD) wakes the loop at once,
    // so that the next job gets the GPUs in the same wake-up rather than at the next tick.
    // (Shims adopted after a restart are not children; the interval covers them.)
    let mut child_exits =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child()).ok();
    loop {
        let started = tokio::time::Instant::now();
        let report = state.with_cluster(|c| c.tick(Timestamp::now())).await;
        serving::serving_pass(&state).await;
        let min_gap = (started.elapsed() * 2).clamp(Duration::from_millis(1), max_gap);
        let mut wait = interval;
        match report {
            Ok(Ok(report)) => {
                for e in &report.errors {
                    eprintln!("corral: {e}");
                }
                if !report.artifacts_removed.is_empty() {
                    eprintln!(
                        "corral: removed {} artifact directories of deleted pipeline runs \
                         that nothing reuses (artifacts.retentionSeconds): {}",
                        report.artifacts_removed.len(),
                        report.artifacts_removed.join(", ")
                    );
                }
                if [
                    &report.admitted,
                    &report.preempted,
                    &report.started,
                    &report.stopped,
                    &report.finished,
                    &report.deleted,
                ]
                .iter()
                .any(|v| !v.is_empty())
                {
                    state.changed();
                }
                if let Some(d) = report.next_tick_in {
                    wait = wait.min(d);
                }
                // Something changed: look again soon (replicas that just started, jobs
                // that were just admitted).
                if !report.admitted.is_empty() || !report.finished.is_empty() {
                    wait = wait.min(min_gap);
                }
                // Replicas just started (the job is already recorded Running in this pass):
                // look again soon, so that one that fails at once (a missing program, a bad
                // working directory) is restarted or reported without waiting a full interval.
                if !report.started.is_empty() {
                    wait = wait.min(follow_up);
                }
            }
            Ok(Err(e)) => eprintln!("corral: control loop: {e}"),
            Err(e) => eprintln!("corral: control loop: {}", e.body.message),
        }
        let child_exit = async {
            match child_exits.as_mut() {
                Some(s) => s.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = child_exit => {
                tokio::select! {
                    _ = tokio::time::sleep_until(started + min_gap) => {}
                    _ = stop.changed() => return,
                }
            }
            _ = state.wake.notified() => {
                tokio::select! {
                    _ = tokio::time::sleep_until(started + min_gap) => {}
                    _ = stop.changed() => return,
                }
            }
            _ = stop.changed() => return,
        }
        if *stop.borrow() {
            return;
        }
    }
}

/// A server running on a thread of its own (tests, `corral quickstart`).
pub struct Server {
    scheme: &'static str,
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<Result<(), String>>>,
    warnings: Vec<String>,
}

impl Server {
    /// Opens the cluster, binds, and serves on a new thread (a 2-worker runtime).
    pub fn start(options: ServerOptions) -> Result<Server, String> {
        let (state, listener, warnings) = prepare(&options)?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let runtime = runtime()?;
        let (stop, stop_rx) = oneshot::channel::<()>();
        let interval = options.tick_interval;
        let tls = options.tls.clone();
        let thread = std::thread::Builder::new()
            .name("corral-server".into())
            .spawn(move || {
                runtime.block_on(serve(state, listener, interval, tls.as_ref(), async {
                    let _ = stop_rx.await;
                }))
            })
            .map_err(|e| format!("cannot start the server thread: {e}"))?;
        Ok(Server {
            scheme: if options.tls.is_some() {
                "https"
            } else {
                "http"
            },
            addr,
            stop: Some(stop),
            thread: Some(thread),
            warnings,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT` (`https://` with TLS).
    pub fn url(&self) -> String {
        format!("{}://{}", self.scheme, self.addr)
    }

    /// What the cluster warned about when it opened (no NVML, no cgroups, ...).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Stops serving and waits for the server thread.
    pub fn stop(mut self) -> Result<(), String> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<(), String> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        match self.thread.take() {
            Some(t) => t
                .join()
                .map_err(|_| "the server thread panicked".to_string())?,
            None => Ok(()),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

/// The runtime the server runs on: two workers are plenty (handlers hand the cluster's
/// work to the blocking pool).
pub fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name("corral-http")
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))
}

/// `corral up`: serves in the foreground until Ctrl-C or SIGTERM. `on_ready` is called
/// once the server listens, with its address and the cluster's warnings.
pub fn run_until_signal(
    options: ServerOptions,
    on_ready: impl FnOnce(SocketAddr, &[String]),
) -> Result<(), String> {
    let (state, listener, warnings) = prepare(&options)?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let runtime = runtime()?;
    on_ready(addr, &warnings);
    let cluster = Arc::clone(&state.cluster);
    let served = runtime.block_on(serve(
        state,
        listener,
        options.tick_interval,
        options.tls.as_ref(),
        shutdown_signal(),
    ));
    let mut c = cluster.lock().unwrap_or_else(|p| p.into_inner());
    for line in at_exit(&mut c, options.stop_replicas_on_exit) {
        eprintln!("{line}");
    }
    served
}

/// What becomes of the replicas that still run when the server stops, in words: stopped
/// (`stop`), or left running unwatched until the next start re-adopts them. Never silent
/// about GPUs left held.
pub fn at_exit(c: &mut Cluster, stop: bool) -> Vec<String> {
    let running = c.running_replicas();
    if running.is_empty() {
        return vec!["Corral stopped; no replica was running.".into()];
    }
    let describe = |rs: &[corral_local::cluster::RunningReplica]| {
        rs.iter()
            .map(|r| match r.gpu_indices.as_slice() {
                [] => r.name.clone(),
                gpus => format!(
                    "{} (GPU {})",
                    r.name,
                    gpus.iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                ),
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    if stop {
        let grace = c.default_grace();
        let mut lines = vec![format!(
            "Corral is stopping {} replica(s) (--stop-replicas-on-exit; SIGTERM, SIGKILL after \
             {} s): {}",
            running.len(),
            grace.as_secs(),
            describe(&running)
        )];
        let left = c.stop_all_replicas(grace);
        lines.push(if left.is_empty() {
            "Corral stopped; every replica has ended. The next `corral up` here sees how they \
             ended, and their jobs' restart policies decide."
                .into()
        } else {
            format!(
                "Corral stopped; still running after the grace period: {}",
                describe(&left)
            )
        });
        return lines;
    }
    let gpus: usize = running.iter().map(|r| r.gpu_indices.len()).sum();
    vec![format!(
        "Corral stopped. {} replica(s) keep running, unwatched, holding {gpus} GPU(s): {}. \
         The next `corral up` on this data directory re-adopts them; nobody restarts, stops \
         or times them out until then. To stop them with the server, run `corral up \
         --stop-replicas-on-exit`.",
        running.len(),
        describe(&running)
    )]
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}
