//! Apply: carries out a [`Plan`] against the API server, job by job, in an order that
//! survives a crash between any two calls:
//! 1. the status with the admission in it (the durable decision; server-side apply, field
//!    manager `corral`, resourceVersion precondition: a status computed from a stale view is
//!    rejected, and nothing else is done for the job until the next pass);
//! 2. the admission annotation earlier operators wrote, removed once the status has it;
//! 3. the launch ConfigMap and the headless Service (server-side apply);
//! 4. the pods (create: a name still held by another incarnation is never taken over; a pod
//!    whose gang fits now is created on its node);
//! 5. the Bindings of pods created in an earlier pass;
//! 6. deletions, each with its grace period and a UID precondition;
//! 7. the job itself after its TTL; then events.
//!
//! Up to `--apply-window` jobs are applied at once, and a job's pods and Bindings are
//! written at once: each call costs the API server 2-4 ms, and serial calls left it idle.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Binding, ConfigMap, ObjectReference, Pod, Secret, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Client, Error};
use serde_json::{Value, json};
use tokio::sync::Mutex;
use tracing::Instrument;

use crate::consts::*;
use crate::dynamic_objects;
use crate::fence::Fence;
use crate::own_writes::Written;
use crate::plan::{AdmissionChange, JobPlan, Plan, PodBinding};
use crate::record::LaunchRejectionAnnotation;

/// A token bucket bounding the operator's writes to the API server (`--api-qps`,
/// `--api-burst`), as client-go's rate limiter does.
#[derive(Clone)]
pub struct RateLimiter {
    inner: Arc<Mutex<(f64, Instant)>>,
    qps: f64,
    burst: f64,
}

impl RateLimiter {
    /// `qps <= 0` means unlimited.
    pub fn new(qps: f64, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        RateLimiter {
            inner: Arc::new(Mutex::new((burst, Instant::now()))),
            qps,
            burst,
        }
    }

    pub fn unlimited() -> Self {
        Self::new(0.0, 1)
    }

    pub async fn acquire(&self) {
        if self.qps <= 0.0 {
            return;
        }
        let wait = {
            let mut g = self.inner.lock().await;
            let now = Instant::now();
            let refill = now.duration_since(g.1).as_secs_f64() * self.qps;
            g.0 = (g.0 + refill).min(self.burst);
            g.1 = now;
            g.0 -= 1.0;
            if g.0 >= 0.0 {
                Duration::ZERO
            } else {
                Duration::from_secs_f64(-g.0 / self.qps)
            }
        };
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

/// What one apply did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApplyReport {
    pub pods_created: u64,
    pub pods_bound: u64,
    pub pods_deleted: u64,
    pub status_updates: u64,
    pub events: u64,
    /// Usage ledger ConfigMaps written.
    pub ledger_writes: u64,
    /// Replicas told why they stop (their pods' `DisruptionTarget` condition).
    pub stop_notices: u64,
    /// Calls that failed, in words (each counted in `corral_reconcile_errors_total`; a
    /// transient one is retried with back-off, a refusal for good is handed to the control
    /// plane through [`LAUNCH_REJECTED_ANNOTATION`]).
    pub errors: Vec<String>,
    /// Launches the API server refused for good, recorded on their jobs.
    pub rejected: Vec<LaunchRejectionAnnotation>,
    /// Jobs left alone this pass because a transient error backs them off.
    pub backed_off: u64,
    /// When the first backed-off job may be retried.
    pub retry_in: Option<Duration>,
    /// Jobs not applied because the leadership term ended during the pass.
    pub abandoned: u64,
    /// What this pass wrote, for the next pass to wait for in its watch caches.
    pub written: Written,
}

impl ApplyReport {
    /// The writes this report counts (pods created, bound and deleted, statuses, Events).
    pub fn writes(&self) -> u64 {
        self.pods_created
            + self.pods_bound
            + self.pods_deleted
            + self.status_updates
            + self.events
            + self.ledger_writes
            + self.stop_notices
    }

    /// Adds another job's report to this one.
    pub fn merge(&mut self, other: ApplyReport) {
        self.pods_created += other.pods_created;
        self.pods_bound += other.pods_bound;
        self.pods_deleted += other.pods_deleted;
        self.status_updates += other.status_updates;
        self.events += other.events;
        self.ledger_writes += other.ledger_writes;
        self.stop_notices += other.stop_notices;
        self.errors.extend(other.errors);
        self.rejected.extend(other.rejected);
        self.backed_off += other.backed_off;
        self.retry_in = match (self.retry_in, other.retry_in) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.abandoned += other.abandoned;
        self.written.jobs.extend(other.written.jobs);
        self.written.pods.extend(other.written.pods);
        self.written.ledger.extend(other.written.ledger);
    }
}

fn code(e: &Error) -> Option<u16> {
    match e {
        Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// A refusal the same request would get again (the pod template is invalid, the write is
/// forbidden, the request malformed): never retried while the job holds its GPUs.
fn refused_for_good(e: &Error) -> bool {
    matches!(code(e), Some(400 | 403 | 422))
}

/// An error worth retrying later: throttled, the server failing, or no answer at all.
fn transient(e: &Error) -> bool {
    match code(e) {
        Some(c) => c == 429 || c >= 500,
        None => !matches!(e, Error::SerdeError(_)),
    }
}

/// First back-off after a transient error; doubles per failure of the same job.
const BACKOFF_BASE: Duration = Duration::from_millis(500);
const BACKOFF_CAP: Duration = Duration::from_secs(60);

fn backoff(failures: u32) -> Duration {
    BACKOFF_BASE
        .saturating_mul(1u32 << failures.saturating_sub(1).min(10))
        .min(BACKOFF_CAP)
}

/// How a job's apply went wrong.
enum JobError {
    /// Refused for good: the control plane hears of it.
    Rejected(LaunchRejectionAnnotation),
    Failed(Error),
}

impl From<Error> for JobError {
    fn from(e: Error) -> Self {
        JobError::Failed(e)
    }
}

/// The Status reason and message of an API error, or the error in words.
fn words(e: &Error) -> (String, String) {
    match e {
        Error::Api(s) => (s.reason.clone(), s.message.clone()),
        other => (String::new(), other.to_string()),
    }
}

/// Applies with the client; events go through `recorder` when given.
pub struct Applier {
    pub client: Client,
    pub recorder: Option<Recorder>,
    pub limiter: RateLimiter,
    /// Jobs whose last apply failed transiently: (failures in a row, not before). Retry
    /// mechanics of this shell, like client-go's rate-limited work queue; nothing here
    /// decides about a job.
    backoff: std::sync::Mutex<HashMap<String, (u32, Instant)>>,
    /// Recurring events published lately, by (job uid or key, reason, note): a pass that
    /// finds the same problem again (a template it cannot build, an annotation it cannot
    /// read) says it once an hour, not every pass.
    published: std::sync::Mutex<HashMap<(String, String, String), Instant>>,
    /// The leadership term this applier writes for. Its client refuses every write once the
    /// term is over (`fence::FenceLayer`); the applier then stops the pass and says so.
    fence: Option<Fence>,
    /// Jobs applied at once (`--apply-window`).
    window: usize,
    /// Publish the events that the status written with them keeps as conditions
    /// (`--condition-events`).
    condition_events: bool,
    /// When each job's status was last written: a waiting job's status that changed in
    /// words only is refreshed at most every [`WAITING_WORDS_EVERY`].
    status_written: std::sync::Mutex<HashMap<String, Instant>>,
    /// Where the usage ledger is kept (the operator's namespace).
    ledger_namespace: String,
}

/// How often a waiting job's status is rewritten when only its words changed (which GPUs
/// are free now): a queue of 1,000 jobs would otherwise cost 1,000 writes a pass.
pub const WAITING_WORDS_EVERY: Duration = Duration::from_secs(10);

/// Jobs applied at once unless told otherwise: enough to keep the API server's
/// 2-4 ms writes overlapping, few enough that a pass does not flood it.
pub const DEFAULT_APPLY_WINDOW: usize = 16;

/// How long a published event keeps an identical one from being published again.
const EVENT_DEDUP: Duration = Duration::from_secs(3600);

impl Applier {
    pub fn new(client: Client, recorder: Option<Recorder>, limiter: RateLimiter) -> Self {
        Applier {
            client,
            recorder,
            limiter,
            backoff: Default::default(),
            published: Default::default(),
            fence: None,
            window: DEFAULT_APPLY_WINDOW,
            condition_events: false,
            status_written: Default::default(),
            ledger_namespace: crate::ledger::DEFAULT_NAMESPACE.to_string(),
        }
    }

    /// Keeps the usage ledger in `namespace` (the operator's own).
    pub fn with_ledger_namespace(mut self, namespace: &str) -> Self {
        self.ledger_namespace = namespace.to_string();
        self
    }

    /// Where the usage ledger is kept.
    pub fn ledger_namespace(&self) -> &str {
        &self.ledger_namespace
    }

    /// Also publishes the events that the status written with them keeps as conditions
    /// ([`crate::plan::PlannedEvent::kept_in_status`]).
    pub fn with_condition_events(mut self, publish: bool) -> Self {
        self.condition_events = publish;
        self
    }

    /// Applies up to `window` jobs at once (at least one).
    pub fn with_window(mut self, window: usize) -> Self {
        self.window = window.max(1);
        self
    }

    /// Writes for one leadership term only (the client should carry the same fence).
    pub fn with_fence(mut self, fence: Fence) -> Self {
        self.fence = Some(fence);
        self
    }

    /// Whether the applier may still write (always, without a fence).
    pub fn leading(&self) -> bool {
        self.fence.as_ref().is_none_or(Fence::permits_now)
    }

    /// Applies every job's plan, up to `window` jobs at once (each job's own calls stay in
    /// the order above). Jobs are independent here: a gang is bound only once it fits next
    /// to the pods still on its nodes (the plan's bindings), so a victim's deletion need not
    /// land before the preemptor's creations.
    pub async fn apply(&self, plan: &Plan) -> ApplyReport {
        let now = Instant::now();
        if let Ok(mut p) = self.published.lock() {
            p.retain(|_, at| now.duration_since(*at) < EVENT_DEDUP);
        }
        if let Ok(mut w) = self.status_written.lock() {
            w.retain(|_, at| now.duration_since(*at) < WAITING_WORDS_EVERY);
        }
        let work: Vec<&JobPlan> = plan.jobs.iter().filter(|jp| !jp.is_empty()).collect();
        let mut report = ApplyReport::default();
        // The usage the pass closed is stored before any job's release: if it cannot be,
        // nothing of the pass is written, and the next pass (rebuilt from the API server,
        // which still holds the admissions) closes it again.
        if !plan.ledger.is_empty() && self.leading() {
            for _ in &plan.ledger {
                self.limiter.acquire().await;
            }
            match crate::ledger::write(&self.client, &self.ledger_namespace, &plan.ledger).await {
                Ok(written) => {
                    report.ledger_writes = written.len() as u64;
                    report.written.ledger = written;
                }
                Err(e) => {
                    tracing::warn!("{e}");
                    report.errors.push(e);
                    report.retry_in = Some(BACKOFF_BASE);
                    return report;
                }
            }
        }
        for (_, r) in self.apply_jobs(work, now).await {
            report.merge(r);
        }
        if !plan.ledger_expired.is_empty() && self.leading() {
            // Not the pass's decision: a failure is said and tried again next pass.
            if let Err(e) = crate::ledger::delete_expired(
                &self.client,
                &self.ledger_namespace,
                &plan.ledger_expired,
            )
            .await
            {
                tracing::warn!("{e}");
            }
        }
        if report.abandoned > 0 {
            let term = self.fence.as_ref().map_or(0, |f| f.term);
            tracing::warn!(
                term,
                jobs_left = report.abandoned,
                "not leading: pass abandoned"
            );
            report.errors.push(format!(
                "not leading (term {term} is over): pass abandoned with {} jobs left",
                report.abandoned
            ));
        }
        report
    }

    /// Applies `jobs`, up to `window` at once; each with its report.
    async fn apply_jobs<'a>(
        &self,
        jobs: Vec<&'a JobPlan>,
        now: Instant,
    ) -> Vec<(&'a JobPlan, ApplyReport)> {
        futures::stream::iter(jobs)
            .map(|jp| async move {
                let mut report = ApplyReport::default();
                // The term is over: nothing more is written (the client refuses it
                // anyway); the next leader plans from what was written.
                if !self.leading() {
                    report.abandoned = 1;
                    return (jp, report);
                }
                // Every line about the job carries its namespace and name.
                let span = tracing::info_span!("job", namespace = %jp.namespace, job = %jp.name);
                self.apply_one(jp, now, &mut report).instrument(span).await;
                (jp, report)
            })
            .buffer_unordered(self.window.max(1))
            .collect()
            .await
    }

    async fn apply_one(&self, jp: &JobPlan, now: Instant, report: &mut ApplyReport) {
        let key = format!("{}/{}", jp.namespace, jp.name);
        let waiting = self
            .backoff
            .lock()
            .ok()
            .and_then(|b| b.get(&key).map(|&(_, until)| until))
            .filter(|&until| until > now);
        if let Some(until) = waiting {
            report.backed_off += 1;
            let left = until - now;
            report.retry_in = Some(report.retry_in.map_or(left, |r| r.min(left)));
            tracing::debug!(retry_in_ms = left.as_millis() as u64, "backed off");
            return;
        }
        // A launch the plan could not build is refused for good, as the API server's would be.
        let outcome = match &jp.reject {
            Some(r) => self
                .apply_job(jp, report)
                .await
                .and(Err(JobError::Rejected(r.clone()))),
            None => self.apply_job(jp, report).await,
        };
        match outcome {
            Ok(()) => self.clear_backoff(&key),
            Err(JobError::Rejected(r)) => {
                self.clear_backoff(&key);
                tracing::warn!(
                    replica = %format!("{}-{}", r.role, r.index),
                    code = r.code,
                    reason = %r.reason,
                    "the launch was refused for good: {}",
                    r.message
                );
                let who = if jp.reject.is_some() {
                    "the operator cannot build"
                } else {
                    "the API server refused to create"
                };
                report.errors.push(format!(
                    "{key}: {who} {}-{}-{} ({} {}): {}",
                    jp.name, r.role, r.index, r.code, r.reason, r.message
                ));
                if let Err(e) = self.record_rejection(jp, &r).await {
                    tracing::warn!("recording the refusal: {e}");
                    report
                        .errors
                        .push(format!("{key}: recording the refusal: {e}"));
                }
                report.rejected.push(r);
            }
            Err(JobError::Failed(e)) => {
                if transient(&e) && self.leading() {
                    let wait = self.bump_backoff(&key, now);
                    report.retry_in = Some(report.retry_in.map_or(wait, |r| r.min(wait)));
                    tracing::warn!(retry_in_ms = wait.as_millis() as u64, "apply failed: {e}");
                    report
                        .errors
                        .push(format!("{key}: {e} (retrying in {} ms)", wait.as_millis()));
                } else {
                    tracing::warn!("apply failed: {e}");
                    report.errors.push(format!("{key}: {e}"));
                }
            }
        }
        self.publish_events(jp, report).await;
    }

    fn clear_backoff(&self, key: &str) {
        if let Ok(mut b) = self.backoff.lock() {
            b.remove(key);
        }
    }

    fn bump_backoff(&self, key: &str, now: Instant) -> Duration {
        let Ok(mut b) = self.backoff.lock() else {
            return BACKOFF_BASE;
        };
        let e = b.entry(key.to_string()).or_insert((0, now));
        e.0 = e.0.saturating_add(1);
        let wait = backoff(e.0);
        e.1 = now + wait;
        wait
    }

    /// Creates an MPI job's ssh key Secret with a new ed25519 key pair; one that exists
    /// already is kept (it is immutable, made for an earlier launch of the job).
    async fn create_ssh_secret(&self, jp: &JobPlan, secret: &Secret) -> Result<(), JobError> {
        let (private, public) = ssh_key_pair().map_err(|e| {
            JobError::Failed(Error::Service(format!("ssh key generation: {e}").into()))
        })?;
        let secret = crate::build::with_ssh_keys(secret.clone(), &private, &public);
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &jp.namespace);
        self.limiter.acquire().await;
        match api
            .create(
                &PostParams {
                    dry_run: false,
                    field_manager: Some(FIELD_MANAGER.into()),
                },
                &secret,
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if code(&e) == Some(409) => Ok(()),
            Err(e) => Err(Self::launch_error(jp.create.first(), e)),
        }
    }

    /// Records a refusal on the job: the observation the next pass hands to the control
    /// plane (the write changes the job, so its watch starts that pass at once).
    async fn record_rejection(
        &self,
        jp: &JobPlan,
        r: &LaunchRejectionAnnotation,
    ) -> Result<(), Error> {
        let jobs: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            &jp.namespace,
            &dynamic_objects::training_jobs(),
        );
        let text = r.to_text().map_err(Error::SerdeError)?;
        self.limiter.acquire().await;
        jobs.patch(
            &jp.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {LAUNCH_REJECTED_ANNOTATION: text}}})),
        )
        .await?;
        Ok(())
    }

    /// The rejection of the launch of `pod` (one of the job's pods to create).
    fn rejection(
        pod: Option<&Pod>,
        code: u16,
        reason: String,
        message: String,
    ) -> Option<LaunchRejectionAnnotation> {
        let (id, incarnation) = pod.and_then(crate::observe::replica_of)?;
        Some(LaunchRejectionAnnotation {
            role: id.role.to_string(),
            index: id.index,
            incarnation: incarnation.to_string(),
            code,
            reason,
            message,
        })
    }

    /// A write of the job's launch (ConfigMap, Service, pod) failed: refused for good, it
    /// is the launch's rejection; else the error as it is.
    fn launch_error(pod: Option<&Pod>, e: Error) -> JobError {
        if refused_for_good(&e) {
            let (reason, message) = words(&e);
            if let Some(r) = Self::rejection(pod, code(&e).unwrap_or(0), reason, message) {
                return JobError::Rejected(r);
            }
        }
        JobError::Failed(e)
    }

    async fn apply_job(&self, jp: &JobPlan, report: &mut ApplyReport) -> Result<(), JobError> {
        let jobs: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            &jp.namespace,
            &dynamic_objects::training_jobs(),
        );
        let mut rv = jp.resource_version.clone();

        // 1. The status, on top of exactly what was observed, with the admission in it: the
        // decision is durable before anything acts on it. A waiting job's new words wait.
        let key = format!("{}/{}", jp.namespace, jp.name);
        let fresh = jp.status_words_only
            && self
                .status_written
                .lock()
                .is_ok_and(|w| w.contains_key(&key));
        if let Some(status) = jp.status.as_ref().filter(|_| !fresh) {
            let mut meta = json!({"name": jp.name, "namespace": jp.namespace});
            if let Some(rv) = &rv {
                meta["resourceVersion"] = json!(rv);
            }
            let body = json!({
                "apiVersion": corral_api::API_VERSION,
                "kind": "TrainingJob",
                "metadata": meta,
                "status": status,
            });
            self.limiter.acquire().await;
            let applied = jobs
                .patch_status(
                    &jp.name,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(body),
                )
                .await?;
            rv = applied.metadata.resource_version.clone();
            report.status_updates += 1;
            if let Ok(mut w) = self.status_written.lock() {
                w.insert(key.clone(), Instant::now());
            }
            if let Some(v) = &rv {
                report
                    .written
                    .jobs
                    .push((jp.namespace.clone(), jp.name.clone(), v.clone()));
            }
        }

        // 2. The annotation earlier operators kept the admission in, now that the status
        // records it.
        if jp.admission == AdmissionChange::Clear {
            let mut meta = json!({"annotations": {ADMISSION_ANNOTATION: Value::Null}});
            if let Some(rv) = &rv {
                meta["resourceVersion"] = json!(rv);
            }
            self.limiter.acquire().await;
            jobs.patch(
                &jp.name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": meta})),
            )
            .await?;
        }

        // 3. Launch files, the ssh keys of an MPI job and the headless Service.
        let ssa = PatchParams::apply(FIELD_MANAGER).force();
        if let Some(secret) = &jp.ssh_secret {
            self.create_ssh_secret(jp, secret).await?;
        }
        if let Some(cm) = &jp.config_map {
            let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &jp.namespace);
            let name = cm.metadata.name.clone().unwrap_or_default();
            self.limiter.acquire().await;
            api.patch(
                &name,
                &ssa,
                &Patch::Apply(with_type(cm, "v1", "ConfigMap")?),
            )
            .await
            .map_err(|e| Self::launch_error(jp.create.first(), e))?;
        }
        if let Some(svc) = &jp.service {
            let api: Api<Service> = Api::namespaced(self.client.clone(), &jp.namespace);
            let name = svc.metadata.name.clone().unwrap_or_default();
            self.limiter.acquire().await;
            api.patch(&name, &ssa, &Patch::Apply(with_type(svc, "v1", "Service")?))
                .await
                .map_err(|e| Self::launch_error(jp.create.first(), e))?;
        }

        // 4. Pods. A name that exists already belongs to some incarnation; never take it
        // over: the next pass sees which one it is.
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &jp.namespace);
        // Created at once: the gang's pods are independent writes.
        let created =
            futures::future::join_all(jp.create.iter().map(|pod| self.create_pod(&pods, jp, pod)))
                .await;
        let mut all_created = true;
        for (c, pod) in created.into_iter().zip(&jp.create) {
            if c? {
                report.pods_created += 1;
                report.written.pods.push((
                    jp.namespace.clone(),
                    pod.metadata.name.clone().unwrap_or_default(),
                ));
                // Made on its node (the plan's binding at creation).
                if pod.spec.as_ref().is_some_and(|s| s.node_name.is_some()) {
                    report.pods_bound += 1;
                }
            } else {
                all_created = false;
            }
        }

        // 5. Bindings of pods made in an earlier pass (those made now carry their node):
        // the gang is bound only if all of its pods exist.
        if all_created {
            let bound =
                futures::future::join_all(jp.bind.iter().map(|b| self.bind_pod(&pods, jp, b)))
                    .await;
            for b in bound {
                if b? {
                    report.pods_bound += 1;
                }
            }
        }

        // 6. Deletions with the grace period, only of the very pod observed; the replica is
        // told why first (a notice it may miss: its SIGTERM comes anyway).
        for d in &jp.delete {
            if let Some(reason) = &d.notice {
                self.limiter.acquire().await;
                match crate::stop_notice::tell(&pods, d, reason).await {
                    Ok(()) => report.stop_notices += 1,
                    Err(e) => tracing::debug!(pod = %d.name, "stop notice not written: {e}"),
                }
            }
            let dp = DeleteParams {
                grace_period_seconds: Some(u32::try_from(d.grace.as_secs()).unwrap_or(u32::MAX)),
                preconditions: d.uid.clone().map(|uid| Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
                ..Default::default()
            };
            self.limiter.acquire().await;
            match pods.delete(&d.name, &dp).await {
                Ok(_) => report.pods_deleted += 1,
                Err(e) if matches!(code(&e), Some(404 | 409)) => {}
                Err(e) => return Err(e.into()),
            }
        }

        // 7. The job after ttlSecondsAfterFinished (its pods and Service go with it).
        if jp.delete_job {
            self.limiter.acquire().await;
            match jobs.delete(&jp.name, &DeleteParams::background()).await {
                Ok(_) => {}
                Err(e) if code(&e) == Some(404) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Creates one pod of the job: `true` when created, `false` when its name is held by
    /// an incarnation of this job still terminating (the next pass sees it); a name held
    /// by anything else is refused for good.
    async fn create_pod(&self, pods: &Api<Pod>, jp: &JobPlan, pod: &Pod) -> Result<bool, JobError> {
        self.limiter.acquire().await;
        let params = PostParams {
            dry_run: false,
            field_manager: Some(FIELD_MANAGER.into()),
        };
        match pods.create(&params, pod).await {
            Ok(_) => Ok(true),
            Err(e) if code(&e) == Some(409) => {
                let name = pod.metadata.name.clone().unwrap_or_default();
                self.limiter.acquire().await;
                let holder = pods.get_opt(&name).await?;
                let owned = holder.as_ref().is_none_or(|p| {
                    p.metadata
                        .owner_references
                        .iter()
                        .flatten()
                        .any(|o| Some(&o.uid) == jp.uid.as_ref())
                });
                if !owned {
                    let (reason, message) = words(&e);
                    let message = format!(
                        "{message}: pod {name} exists and is not owned by TrainingJob {}/{}; \
                         delete it or rename the job",
                        jp.namespace, jp.name
                    );
                    if let Some(r) = Self::rejection(Some(pod), 409, reason, message) {
                        return Err(JobError::Rejected(r));
                    }
                }
                Ok(false)
            }
            Err(e) => Err(Self::launch_error(Some(pod), e)),
        }
    }

    /// Binds one pod to its node: `true` when bound now, `false` when it was already (a
    /// pass before a restart did it).
    async fn bind_pod(&self, pods: &Api<Pod>, jp: &JobPlan, b: &PodBinding) -> Result<bool, Error> {
        let binding = Binding {
            metadata: ObjectMeta {
                name: Some(b.pod.clone()),
                namespace: Some(jp.namespace.clone()),
                ..Default::default()
            },
            target: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some(b.node.clone()),
                ..Default::default()
            },
        };
        self.limiter.acquire().await;
        let r: Result<Value, Error> = pods
            .create_subresource("binding", &b.pod, &PostParams::default(), &binding)
            .await;
        match r {
            Ok(_) => Ok(true),
            Err(e) if code(&e) == Some(409) => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn publish_events(&self, jp: &JobPlan, report: &mut ApplyReport) {
        let reference = ObjectReference {
            api_version: Some(corral_api::API_VERSION.to_string()),
            kind: Some("TrainingJob".into()),
            name: Some(jp.name.clone()),
            namespace: Some(jp.namespace.clone()),
            uid: jp.uid.clone(),
            resource_version: None,
            field_path: None,
        };
        let who = jp
            .uid
            .clone()
            .unwrap_or_else(|| format!("{}/{}", jp.namespace, jp.name));
        for e in &jp.events {
            if e.recurring {
                let seen = (who.clone(), e.reason.clone(), e.note.clone());
                let repeat = self
                    .published
                    .lock()
                    .map(|mut p| match p.entry(seen) {
                        std::collections::hash_map::Entry::Occupied(_) => true,
                        std::collections::hash_map::Entry::Vacant(v) => {
                            v.insert(Instant::now());
                            false
                        }
                    })
                    .unwrap_or(false);
                if repeat {
                    continue;
                }
            }
            if e.warning {
                tracing::warn!(event = %e.reason, "{}", e.note);
            } else {
                tracing::info!(event = %e.reason, "{}", e.note);
            }
            // Kept by the status this job's apply wrote: its condition says the same.
            if e.kept_in_status && !self.condition_events {
                continue;
            }
            let Some(recorder) = &self.recorder else {
                continue;
            };
            let ev = event(e.warning, &e.reason, &e.note);
            self.limiter.acquire().await;
            match recorder.publish(&ev, &reference).await {
                Ok(()) => report.events += 1,
                Err(err) => {
                    tracing::warn!("publishing event {}: {err}", e.reason);
                    report.errors.push(format!(
                        "{}/{}: event {}: {err}",
                        jp.namespace, jp.name, e.reason
                    ))
                }
            }
        }
    }
}

/// An Event of Corral's as it is published (about any object): its note cut to 1,000 bytes.
pub(crate) fn event(warning: bool, reason: &str, note: &str) -> Event {
    Event {
        type_: if warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: reason.to_string(),
        note: Some(truncate(note, 1000)),
        action: reason.to_string(),
        secondary: None,
    }
}

/// A new ed25519 key pair in OpenSSH formats: (private key file, `ssh-ed25519 AAAA...`).
fn ssh_key_pair() -> Result<(String, String), ssh_key::Error> {
    let key =
        ssh_key::PrivateKey::random(&mut ssh_key::rand_core::OsRng, ssh_key::Algorithm::Ed25519)?;
    let private = key.to_openssh(ssh_key::LineEnding::LF)?.to_string();
    let public = key.public_key().to_openssh()?;
    Ok((private, public))
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// A typed object as an apply body (apiVersion and kind are required there).
fn with_type<T: serde::Serialize>(obj: &T, api_version: &str, kind: &str) -> Result<Value, Error> {
    let mut v = serde_json::to_value(obj).map_err(Error::SerdeError)?;
    v["apiVersion"] = json!(api_version);
    v["kind"] = json!(kind);
    Ok(v)
}
