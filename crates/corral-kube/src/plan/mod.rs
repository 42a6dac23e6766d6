//! Plan: the whole decision of one operator pass. The control plane is kept while this
//! replica leads and fed what changed in the world since the last pass ([`kept`]), or
//! restored from what the API server holds when the feed cannot say; it is stepped once,
//! and the step is turned into Kubernetes work. Nothing here decides about a job: who is
//! offered to the scheduler, why a job waits, which events it gets and how long its replicas
//! get to stop are the control plane's (`corral_core::control`), the same as embedded.
//!
//! ```text
//!   World ─▶ observe_jobs ─▶ snapshot ─▶ control step ─────────────▶ translate ─▶ bindings ─▶ metrics
//!            jobs, their     nodes with   the kept plane fed what     Step ->      bind a       counts for
//!            pods and the    foreign      changed (kept), or one      JobPlans:    whole gang   /metrics
//!            stored          pods' usage, restored; then step         status,      where it     (by state,
//!            admission       pools,       (corral-core: scheduler,    pods,        was placed,  by queue)
//!                            queues       lifecycle, reasons, events) events       if it fits
//! ```
//!
//! - [`kept`]: what a pass hands the kept plane, and when it restores one instead.
//! - [`observe_jobs`]: every TrainingJob with the pods it owns, its stored admission
//!   ([`crate::record`]) and its node selector and tolerations, as a `RestoredJob`.
//! - [`snapshot`]: the cluster for the scheduler (every node, with the requests of pods that
//!   are not replicas of jobs holding an admission allocated) and the plane's settings.
//! - [`translate`]: the plane's `Step` as one [`JobPlan`] per job: the status, the admission
//!   annotation, the Service, launch ConfigMap and pods to create, the pods to delete (with
//!   the plane's grace period), the job to delete after its TTL, the events.
//! - [`bindings`]: the Bindings of a gang: all of them once every replica exists and fits on
//!   its node now, or none.
//! - [`metrics`]: jobs by queue and state, GPUs in use per queue, pending and running jobs.
//!
//! [`crate::apply`] carries the plan out.

mod bindings;
mod kept;
mod metrics;
mod observe_jobs;
mod slice;
mod snapshot;
mod translate;

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};

use corral_api::TrainingJobStatus;
use corral_api::training_job::TrainingJob;
use corral_core::control::accounting::UsageInterval;
use corral_core::control::{ControlConfig, ControlPlane, RestoredJob, Step};
use corral_core::lifecycle::{Incarnation, ReplicaId};
use corral_core::sched::{ClusterSnapshot, CycleCounters, SchedError, SchedulerConfig};

use crate::build::BuildOptions;
use crate::kubeflow::alongside::runs_elsewhere;
use crate::observe::{self, World};
use crate::record::LaunchRejectionAnnotation;
pub use kept::Rebuild;
use observe_jobs::ObservedJob;
pub use slice::{PassCost, PassSlice};

/// Settings of the plan.
#[derive(Clone, Debug, Default)]
pub struct PlanConfig {
    pub build: BuildOptions,
    pub scheduler: SchedulerConfig,
    /// Node label whose value is a node's topology domain (rack, NVLink/IB island).
    pub topology_label: Option<String>,
    /// The grace period of jobs whose pod templates set no `terminationGracePeriodSeconds`
    /// (`None`: the control plane's default, 30 s).
    pub grace_period: Option<Duration>,
    /// How long a newly admitted job is safe from preemption (`None`: the scheduler's
    /// default, 300 s), as `preemptionProtectionSeconds` embedded.
    pub preemption_protection_seconds: Option<u64>,
    /// How long at least between two resizes of one elastic job (`None`: the scheduler's
    /// default, 60 s), as `resizeDwellSeconds` embedded.
    pub resize_dwell_seconds: Option<u64>,
    /// Days the usage ledger keeps (`None`: [`crate::ledger::DEFAULT_RETENTION_DAYS`]).
    pub ledger_retention_days: Option<u64>,
    /// Take what the read API shows of the plane after each pass ([`Plan::view`]).
    pub read_view: bool,
}

/// What the read API shows of a pass: the cluster it saw and the plane after it.
#[derive(Clone, Debug)]
pub struct ReadView {
    pub cluster: ClusterSnapshot,
    pub plane: corral_core::views::PlaneView,
}

/// The `corral.dev/admission` annotation that earlier operators wrote: kept, or removed
/// once the status records the admission.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdmissionChange {
    Keep,
    Clear,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodDeletion {
    pub name: String,
    /// Precondition: only this pod, never a newer one of the same name.
    pub uid: Option<String>,
    pub grace: Duration,
    /// Why the plane stops it, told to the replica with its grace period (the pod's
    /// `DisruptionTarget` condition, which `GET /progress` answers): a first stop with a
    /// grace period only.
    pub notice: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodBinding {
    pub pod: String,
    pub node: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedEvent {
    pub warning: bool,
    pub reason: String,
    pub note: String,
    /// Found by the operator itself each pass while the problem lasts (a template it cannot
    /// build, an annotation it cannot read): published once, not every pass. The control
    /// plane's events are announced once by the plane.
    pub recurring: bool,
    /// It announces a condition that the status written with it keeps true, with its time
    /// and words (`corral_core::control::announced_condition`): published only with
    /// `--condition-events`.
    pub kept_in_status: bool,
}

/// Everything to do for one job, in the order [`crate::apply`] does it.
#[derive(Clone, Debug, PartialEq)]
pub struct JobPlan {
    pub namespace: String,
    pub name: String,
    pub uid: Option<String>,
    /// The job's resourceVersion as observed: the status is applied only on top of it.
    pub resource_version: Option<String>,
    pub admission: AdmissionChange,
    /// The new status, when it or the admission changed, with the admission the plane
    /// holds in `admission`.
    pub status: Option<TrainingJobStatus>,
    /// The status says what the stored one says of a job still waiting, in other words only
    /// (`corral_core::lifecycle::conditions::only_waiting_words_differ`): written at most
    /// every few seconds, not every pass.
    pub status_words_only: bool,
    pub config_map: Option<ConfigMap>,
    pub service: Option<Service>,
    /// An MPI job's ssh key Secret to create before its pods, without its keys: the key
    /// pair is generated by [`crate::apply`] (randomness is I/O), once (it is immutable).
    pub ssh_secret: Option<Secret>,
    pub create: Vec<Pod>,
    /// Bindings of one gang: all of them, or none.
    pub bind: Vec<PodBinding>,
    pub delete: Vec<PodDeletion>,
    pub delete_job: bool,
    pub events: Vec<PlannedEvent>,
    /// A launch the operator itself cannot build (a pod template, name or launch file that
    /// can never be made): recorded on the job like the API server's refusal for good, so
    /// the next pass hands it to the plane (`launch_rejected`: the job fails and frees its
    /// GPUs) instead of retrying it while holding them. Nothing of the gang is created.
    pub reject: Option<LaunchRejectionAnnotation>,
}

impl JobPlan {
    fn new(job: &TrainingJob) -> Self {
        JobPlan {
            namespace: job.metadata.namespace_or_default().to_string(),
            name: job.metadata.name.clone(),
            uid: job.metadata.uid.clone(),
            resource_version: job.metadata.resource_version.clone(),
            admission: AdmissionChange::Keep,
            status: None,
            status_words_only: false,
            config_map: None,
            service: None,
            ssh_secret: None,
            create: Vec::new(),
            bind: Vec::new(),
            delete: Vec::new(),
            delete_job: false,
            events: Vec::new(),
            reject: None,
        }
    }

    /// An event only the operator can see (a pod template it cannot build, no room on a
    /// node yet); the control plane's events come through [`translate`].
    /// The operator cannot build this replica incarnation's launch: a refusal for good.
    fn reject_launch(
        &mut self,
        replica: ReplicaId,
        incarnation: Incarnation,
        reason: &str,
        message: String,
    ) {
        if self.reject.is_none() {
            self.reject = Some(LaunchRejectionAnnotation {
                role: replica.role.as_str().to_string(),
                index: replica.index,
                incarnation: incarnation.to_string(),
                // What the API server answers for an object it cannot accept.
                code: 422,
                reason: reason.to_string(),
                message,
            });
        }
    }

    /// As [`JobPlan::reject_launch`], for the first pod of the gang to create (a Service or
    /// launch file serves the whole gang).
    fn reject_first_launch(&mut self, reason: &str, message: String) {
        let first = self.create.first().and_then(crate::observe::replica_of);
        if let Some((replica, incarnation)) = first {
            self.reject_launch(replica, incarnation, reason, message);
        }
    }

    fn event(&mut self, warning: bool, reason: &str, note: String) {
        self.events.push(PlannedEvent {
            warning,
            reason: reason.to_string(),
            note,
            recurring: true,
            kept_in_status: false,
        });
    }

    /// Whether anything is to be done.
    pub fn is_empty(&self) -> bool {
        self.admission == AdmissionChange::Keep
            && self.status.is_none()
            && self.create.is_empty()
            && self.bind.is_empty()
            && self.delete.is_empty()
            && !self.delete_job
            && self.events.is_empty()
            && self.service.is_none()
    }
}

/// The outcome of one pass.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    pub jobs: Vec<JobPlan>,
    pub counters: CycleCounters,
    /// Jobs waiting for admission and jobs holding one, after this pass.
    pub pending: u64,
    pub running: u64,
    /// Jobs by queue and state (the values of `corral_api::metric_names::JOB_STATES`),
    /// after this pass.
    pub jobs_by_state: BTreeMap<String, BTreeMap<&'static str, u64>>,
    /// GPUs held by the admitted jobs of each queue, after this pass.
    pub queue_gpus_in_use: BTreeMap<String, u64>,
    /// Pass again within this long even if nothing changes (back-off, deadlines, TTL).
    pub wake_in: Option<Duration>,
    pub warnings: Vec<String>,
    /// Why this pass rebuilt the control plane from the world (`None`: the plane kept from
    /// the last pass was fed what changed).
    pub rebuilt: Option<Rebuild>,
    /// How long the plan took (set by the operator's loop, which reads the clock).
    pub plan_seconds: f64,
    /// Replicas this pass could admit at most (`None`: no pass budget); the jobs it did not
    /// reach are in `counters.deferred`, and the next pass comes at once.
    pub slice: Option<u32>,
    /// What admissions held, closed by this pass (the plane's, and those of jobs removed
    /// while they held one).
    pub usage: Vec<UsageInterval>,
    /// Where they go in the usage ledger: written before anything else of the pass.
    pub ledger: Vec<crate::ledger::LedgerWrite>,
    /// Ledger ConfigMaps past their retention, to delete.
    pub ledger_expired: Vec<String>,
    /// With [`PlanConfig::read_view`]: what the read API answers until the next pass.
    pub view: Option<ReadView>,
}

impl Plan {
    /// The soonest the control plane asked to be stepped again.
    pub fn requeue_after(&self) -> Option<Duration> {
        self.wake_in
    }
}

/// The progress replicas reported since the last pass: the plane records what it means.
fn observe_progress(plane: &mut ControlPlane, world: &World) {
    for r in &world.progress {
        plane.observe_progress(&r.job, r.replica.clone(), r.report.clone());
    }
}

/// Restores the plane from what the API server holds and steps it once: the restore's
/// step (admissions that no longer fit) and the pass's step, as one.
fn control_step(
    cluster: ClusterSnapshot,
    config: ControlConfig,
    observed: &[ObservedJob<'_>],
    world: &World,
    now: Timestamp,
    slice: Option<u32>,
) -> Result<(ControlPlane, Step), SchedError> {
    // A job finished for good with nothing of it left is handed over by name
    // (`restorable_by_name`); one whose templates do not read is left out and reported.
    let jobs: Vec<RestoredJob> = observed
        .iter()
        .filter(|o| !o.retired)
        .filter_map(|o| o.restored(now))
        .collect();
    let budgets = !config.budgets.is_empty();
    let (mut plane, mut step) = ControlPlane::restore(cluster, config, jobs, now)?;
    plane.restore_retired(observed.iter().filter(|o| o.retired).map(|o| o.key.clone()));
    // What budgeted queues held before, from the ledger (open admissions came back with
    // their jobs).
    if budgets {
        plane.restore_usage(crate::ledger::recent(&world.ledger, now));
    }
    // Launches the API server refused for good (recorded by an earlier pass): the plane
    // decides what they mean (it ignores one of an older incarnation or a finished job).
    for o in observed {
        if let Some(r) = o.rejection.clone() {
            plane.launch_rejected(&o.key, r);
        }
    }
    // Pods the kubelet cannot start (an image it cannot pull, ...), with its words: the
    // plane backs the job off (once: the failed incarnation is stale after that).
    for o in observed {
        for f in o.pods.iter().filter_map(|p| observe::pod_start_failure(p)) {
            plane.start_failed(&o.key, f);
        }
    }
    observe_progress(&mut plane, world);
    let main = plane.step_sliced(now, slice);
    step.changes.extend(main.changes);
    step.actions.extend(main.actions);
    step.events.extend(main.events);
    step.usage.extend(main.usage);
    step.counters = main.counters;
    step.wake_in = match (step.wake_in, main.wake_in) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    Ok((plane, step))
}

/// One pass with a plane rebuilt from the world: step it once and say what to do (a test,
/// a one-shot run).
pub fn plan(world: &World, cfg: &PlanConfig, now: Timestamp) -> Plan {
    Planner::rebuilding().plan(world, cfg, now)
}

/// Plans passes. The operator keeps one for a leadership term ([`Planner::keeping`]): its
/// control plane lives from pass to pass, fed what changed ([`kept`]).
pub struct Planner {
    keep: bool,
    kept: Option<kept::Kept>,
    /// Why the next pass must rebuild the plane, whatever it sees.
    rebuild: Option<Rebuild>,
    /// How much a pass may admit, to end within its budget.
    slice: PassSlice,
}

impl Planner {
    /// A planner whose plane lives for as long as it does.
    pub fn keeping() -> Self {
        Planner {
            keep: true,
            kept: None,
            rebuild: None,
            slice: PassSlice::new(None),
        }
    }

    /// A planner that rebuilds the plane from the world on every pass.
    pub fn rebuilding() -> Self {
        Planner {
            keep: false,
            kept: None,
            rebuild: None,
            slice: PassSlice::new(None),
        }
    }

    /// Passes admit no more than `slice` says (`PassSlice::new(budget)`: what their writes
    /// can do in `budget`).
    pub fn with_slice(mut self, slice: PassSlice) -> Self {
        self.slice = slice;
        self
    }

    /// How much the next pass may admit.
    pub fn slice(&self) -> &PassSlice {
        &self.slice
    }

    /// What the apply of the last plan did, and how long its plan and writes took: a write
    /// that did not land as planned makes the next pass rebuild the plane from the API
    /// server.
    pub fn applied(&mut self, report: &crate::apply::ApplyReport, plan_secs: f64, apply_secs: f64) {
        if !kept::applied_as_planned(report) {
            self.rebuild = Some(Rebuild::Unapplied);
        }
        self.slice.measured(PassCost {
            plan_secs,
            apply_secs,
            writes: report.writes(),
            replicas: report.pods_created,
        });
    }

    /// One pass: the plane decides (rebuilt from the world, or fed what changed since the
    /// last pass), and says what to do.
    pub fn plan(&mut self, world: &World, cfg: &PlanConfig, now: Timestamp) -> Plan {
        let slice = self.slice.replicas();
        let mut out = Plan {
            warnings: world.warnings.clone(),
            slice,
            ..Plan::default()
        };

        // 1. Jobs as observed (and a plan for each, in key order).
        let observed = observe_jobs::observe_jobs(world);
        let mut plans: BTreeMap<String, JobPlan> = BTreeMap::new();
        for o in &observed {
            // A retired job gets no plan unless something of it does not read.
            if o.retired && o.problems.is_empty() {
                continue;
            }
            let mut jp = JobPlan::new(o.job);
            for (reason, note) in &o.problems {
                jp.event(true, reason, note.clone());
            }
            plans.insert(o.key.clone(), jp);
        }

        // 2. The cluster and the plane's settings.
        let cluster = snapshot::cluster(world, &observed, cfg.topology_label.as_deref());
        out.warnings.extend(cluster.warnings);

        // 3. The control plane decides: the kept one fed what changed, or one rebuilt.
        let fed = match (self.kept.take(), self.rebuild.take()) {
            (Some(mut k), None) if k.cluster.unchanged(&cluster.snapshot, world) => {
                match k.feed(&observed, now) {
                    Ok(()) => {
                        observe_progress(&mut k.plane, world);
                        let step = k.plane.step_sliced(now, slice);
                        Ok((k, step))
                    }
                    Err(why) => Err((why, Some(k))),
                }
            }
            (Some(k), None) => Err((Rebuild::Cluster, Some(k))),
            (k, Some(why)) => Err((why, k)),
            (None, None) if !self.keep => Err((Rebuild::EachPass, None)),
            (None, None) => Err((Rebuild::Start, None)),
        };
        let (kept, mut step) = match fed {
            Ok(decided) => decided,
            Err((why, old)) => {
                out.rebuilt = Some(why);
                // Jobs removed from the API server while they held an admission: what
                // they held until now is known to the plane that goes, not to the one
                // rebuilt without them.
                if let Some(old) = old {
                    out.usage.extend(gone_charges(&old.plane, &observed, now));
                }
                let config = snapshot::control_config(world, cfg);
                let inputs = kept::ClusterInputs::of(&cluster.snapshot, world);
                match control_step(cluster.snapshot, config, &observed, world, now, slice) {
                    Ok((plane, step)) => (kept::Kept::new(plane, inputs, &observed), step),
                    Err(e) => {
                        out.warnings.push(format!("cluster snapshot: {e}"));
                        out.jobs = plans.into_values().collect();
                        return out;
                    }
                }
            }
        };
        out.counters = step.counters;
        out.wake_in = step.wake_in;
        out.usage.append(&mut step.usage);
        out.ledger = crate::ledger::writes(&out.usage, &world.ledger);
        out.ledger_expired = crate::ledger::expired(
            &world.ledger,
            crate::ledger::millis(now),
            cfg.ledger_retention_days
                .unwrap_or(crate::ledger::DEFAULT_RETENTION_DAYS),
        );
        let plane = &kept.plane;

        // 4. The step as Kubernetes work.
        let created = translate::translate(&step, plane, &observed, world, &mut plans, &cfg.build);

        // 5. Bindings of the gangs that hold an admission.
        bindings::bind_admitted(&mut plans, &observed, plane, &created, world);
        // Workloads of Kubeflow jobs (alongside mode): Kubeflow's operator makes their pods.
        strip_runner_work(&mut plans, world);

        // 6. Numbers for /metrics.
        metrics::tally(&mut out, &observed, plane);
        if cfg.read_view {
            out.view = Some(ReadView {
                plane: plane.read_view(&kept.cluster.snapshot, now),
                cluster: kept.cluster.snapshot.clone(),
            });
        }
        out.jobs = plans.into_values().collect();
        if self.keep {
            self.kept = Some(kept);
        }
        out
    }
}

/// The open charges of jobs no longer stored, closed at `now`.
fn gone_charges(
    plane: &ControlPlane,
    observed: &[ObservedJob<'_>],
    now: Timestamp,
) -> Vec<UsageInterval> {
    let stored: std::collections::HashSet<&str> = observed.iter().map(|o| o.key.as_str()).collect();
    plane
        .open_usage(now)
        .into_iter()
        .filter(|c| !stored.contains(c.job.as_str()))
        .collect()
}

/// The operator's plan makes no pods, Service, ConfigMap or Bindings for workloads: the
/// control plane's admission is applied to the Kubeflow job by
/// [`crate::kubeflow::alongside::plan`] instead.
fn strip_runner_work(plans: &mut BTreeMap<String, JobPlan>, world: &World) {
    for tj in world.jobs.iter().filter(|t| runs_elsewhere(t)) {
        if let Some(jp) = plans.get_mut(&observe::job_key(tj)) {
            jp.create.clear();
            jp.bind.clear();
            jp.delete.clear();
            jp.config_map = None;
            jp.service = None;
        }
    }
}
