//! [`ControlPlane`]: jobs, the scheduler, the lifecycle and the ledger behind one set of
//! commands, observations and steps. See the module docs of [`crate::control`].

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use corral_api::progress::ProgressReport;
use corral_api::training_job::{ConditionStatus, ConditionType};
use corral_api::{TrainingJob, TrainingJobStatus};
use jiff::Timestamp;

use super::accounting::{Budgets, Charges, UsageInterval};
use super::config::ControlConfig;
use super::events::{EventType, JobEvent, event_reason, status_events};
use super::ledger::{Ledger, ServiceByType};
use super::room::{self, Need, Room};

// The plane's parts that read more than they decide: rebuilding it from what a shell
// stored, why a job waits, and what it shows.
mod charging;
mod cycle_outcome;
mod letting_go;
mod progress;
mod restore;
mod vanished;
mod views;
mod waiting;
use super::rules;
use crate::lifecycle::{
    self, Action, AdmissionState, Incarnation, ObservedReplica, ReplicaId, ReplicaPhase, conditions,
};
use crate::packed::PackedNames;
use crate::sched::{
    Admission, ClusterSnapshot, CycleCounters, CycleOutcome, JobRequest, Millis, PendingReason,
    ResourceAmount, RunningJob, SchedError, Scheduler, priority_of,
};

/// `blockedBy` (and the `Queued` reason) of a job the scheduler cannot take as written.
const INVALID_BLOCKER: &str = "Invalid";

/// `blockedBy` of a job waiting out a start back-off (the `Queued` reason too).
const START_BACK_OFF_BLOCKER: &str = conditions::reason::START_BACK_OFF;

/// How often at most a waiting job's reason is rewritten when only its numbers change.
const REASON_REFRESH_MS: Millis = 30_000;

/// What the scheduler should know of a job beyond its spec: constraints the shell reads
/// from where the job runs (Kubernetes node selectors and tolerations of its pod templates)
/// and measured speeds per GPU type (the simulator's profiles).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SchedulingHints {
    pub node_selector: BTreeMap<String, String>,
    /// Tolerations of the pod templates by role, as the platform states them; the scheduler
    /// matches them to node taints (`crate::sched::taint`).
    pub tolerations: crate::sched::JobTolerations,
    pub throughput: BTreeMap<String, f64>,
}

/// A job as a shell records it: the TrainingJob (spec and status), its uid and submit time.
#[derive(Clone, Debug, PartialEq)]
pub struct JobRecord {
    pub job: TrainingJob,
    pub uid: String,
    pub submitted: Millis,
    pub hints: SchedulingHints,
}

impl JobRecord {
    /// `namespace/name`: the job's key everywhere in the control plane.
    pub fn key(&self) -> String {
        key_of(&self.job)
    }
}

fn key_of(job: &TrainingJob) -> String {
    format!(
        "{}/{}",
        job.metadata.namespace_or_default(),
        job.metadata.name
    )
}

/// An admission a job holds, and since when (recently admitted jobs are not preempted).
#[derive(Clone, Debug, PartialEq)]
pub struct HeldAdmission {
    pub admission: Admission,
    pub admitted_at: Millis,
}

impl HeldAdmission {
    fn gpus(&self) -> u64 {
        self.admission
            .placements
            .iter()
            .map(|p| p.gpu_indices.len() as u64)
            .sum()
    }
}

/// A job as a shell finds it when it (re)builds the plane: its record, the admission it
/// stored, the replicas it observes, and whether the user deleted it.
#[derive(Clone, Debug)]
pub struct RestoredJob {
    pub record: JobRecord,
    pub admission: Option<HeldAdmission>,
    pub replicas: Vec<ObservedReplica>,
    pub deleting: bool,
    /// Service the job attained before (from the shell's record), if it keeps one.
    pub service: Option<ServiceByType>,
}

/// What a user's delete, suspend or resume did: changed the job, or found it so already (a
/// second delete of a job being deleted, a suspend of a suspended job).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    Made,
    AlreadySo,
}

/// What the shell must persist, in order, before applying the actions of the same step.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// The job's new status.
    Status {
        job: String,
        status: TrainingJobStatus,
    },
    /// The job now holds this admission (`Some`), or holds none any more (`None`).
    Admission {
        job: String,
        admission: Option<HeldAdmission>,
    },
    /// The job is being deleted (its TTL after finishing passed): its replicas stop, then it
    /// is removed.
    Deleting { job: String },
    /// The job is gone: every replica has stopped; remove it and everything it held.
    Removed { job: String },
    /// The job has finished for good and nothing of it runs: the plane keeps only its name
    /// (so that it is still found by `delete` and its name stays taken). Its status was
    /// persisted by an earlier change; a shell may keep a summary of it instead of the
    /// whole job, so that finished jobs cost little.
    Retired { job: String },
}

/// A replica to start or stop, for one job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobAction {
    pub job: String,
    /// [`Action::Start`] or [`Action::Stop`]; the plane handles the other lifecycle actions.
    pub action: Action,
}

/// The outcome of one [`ControlPlane::step`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Step {
    pub changes: Vec<Change>,
    pub actions: Vec<JobAction>,
    pub events: Vec<JobEvent>,
    /// Counters of the step's scheduler cycle.
    pub counters: CycleCounters,
    /// Step again within this long even if nothing is observed (back-off, deadlines, TTL).
    pub wake_in: Option<Duration>,
    /// What the step's admission changes closed, to record with the changes, in the same
    /// transaction (see [`super::accounting`]).
    pub usage: Vec<UsageInterval>,
}

impl Step {
    fn event(&mut self, job: &str, type_: EventType, reason: &'static str, message: String) {
        self.events.push(JobEvent {
            job: job.to_string(),
            type_,
            reason,
            message,
        });
    }

    fn wake(&mut self, after: Duration) {
        self.wake_in = Some(self.wake_in.map_or(after, |w| w.min(after)));
    }

    /// Whether the step asks nothing of the shell.
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty() && self.actions.is_empty() && self.events.is_empty()
    }
}

/// Why a command was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ControlError {
    AlreadyExists(String),
    NotFound(String),
    /// Valid, but not now (resuming a finished job).
    Conflict(String),
    /// The job cannot be scheduled as written (e.g. a quantity out of range).
    Invalid {
        job: String,
        message: String,
    },
}

impl fmt::Display for ControlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ControlError::AlreadyExists(j) => write!(f, "TrainingJob {j} already exists"),
            ControlError::NotFound(j) => write!(f, "TrainingJob {j} not found"),
            ControlError::Conflict(m) => f.write_str(m),
            ControlError::Invalid { job, message } => write!(f, "TrainingJob {job}: {message}"),
        }
    }
}

impl std::error::Error for ControlError {}

/// Where a job stands with the scheduler.
#[derive(Clone, Debug, PartialEq)]
enum Standing {
    /// Not in the scheduler: suspended, finished, deleting without an admission, or a
    /// request the scheduler refused.
    Out,
    /// Waiting in its queue.
    Queued,
    /// Holding an admission.
    Admitted(HeldAdmission),
    /// Its admission was taken back; replicas stop with this grace period, then it
    /// re-enters its queue ([`Action::Requeue`]).
    Preempting { grace: Duration, message: String },
    /// Moved to a faster pool: replicas stop, then start at `to`, which it already holds.
    Moving {
        grace: Duration,
        message: String,
        to: HeldAdmission,
    },
}

struct Entry {
    job: TrainingJob,
    request: Result<JobRequest, String>,
    grace: Duration,
    replicas: BTreeMap<(ReplicaId, Incarnation), ReplicaPhase>,
    standing: Standing,
    /// The scheduler's last reason, while the job waits.
    pending: Option<PendingReason>,
    /// When the reason was last written into the status (in memory only).
    reason_written: Option<Millis>,
    deleting: bool,
    /// A launch the platform refused for good, not yet reconciled.
    rejected: Option<LaunchRejection>,
    /// Starts the platform could not make, with its words, not yet reconciled.
    start_failed: Vec<StartFailure>,
    /// Progress its replicas reported, by replica, not yet reconciled.
    progress: Vec<(String, ProgressReport)>,
}

/// The platform refused to create a replica incarnation, for good (see
/// [`ControlPlane::launch_rejected`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchRejection {
    pub replica: ReplicaId,
    pub incarnation: Incarnation,
    /// The platform's own words (the API server's Status message).
    pub message: String,
}

/// The platform could not start a replica incarnation's program (see
/// [`ControlPlane::start_failed`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartFailure {
    pub replica: ReplicaId,
    pub incarnation: Incarnation,
    /// The runtime's exit code where it has one (podman's 125, 127 for a command that does
    /// not exist), else 0.
    pub exit_code: i32,
    /// The platform's own words (the container status's reason and message, the runtime's
    /// last lines, the executor's error).
    pub message: String,
}

impl Entry {
    fn any_active(&self) -> bool {
        self.replicas.values().any(|p| p.is_active())
    }

    fn status(&self) -> TrainingJobStatus {
        self.job.status.clone().unwrap_or_default()
    }

    /// Whether the job waits for an admission, by its spec and status (not yet in the
    /// scheduler). Jobs the lifecycle still considers admitted or suspended enter through
    /// `Requeue`, once their replicas have stopped.
    fn wants_admission(&self) -> bool {
        if self.deleting || self.job.spec.run_policy.suspend {
            return false;
        }
        let Some(status) = &self.job.status else {
            return true;
        };
        !(conditions::is_terminal(status)
            || conditions::is_true(status, ConditionType::Admitted)
            || conditions::is_true(status, ConditionType::Suspended)
            || lifecycle::is_backing_off(status))
    }
}

/// The control plane. See the module docs of [`crate::control`].
pub struct ControlPlane {
    config: ControlConfig,
    scheduler: Scheduler,
    /// Boxed: an entry is large (its job alone is ~750 bytes), and a map node holds room
    /// for 11 values whatever it holds.
    jobs: BTreeMap<String, Box<Entry>>,
    /// Jobs to reconcile in the next step. A job leaves the set when its reconcile is a
    /// fixed point; every input that changes (a command, an observation, a decision of the
    /// scheduler) puts it back, so a step costs what changed, not how many jobs exist.
    unsettled: BTreeSet<String>,
    /// Jobs holding an admission (admitted or moving), for the ledger.
    holding: BTreeSet<String>,
    ledger: Ledger,
    /// Finished jobs of which the plane keeps only the name ([`Change::Retired`]): the
    /// cost of a step, a command and the plane's memory do not grow with history.
    retired: PackedNames,
    /// Retired jobs the user deleted: [`Change::Removed`] in the next step.
    retired_removed: Vec<String>,
    /// The room on each node as the shell last observed it ([`ControlPlane::observe_room`]),
    /// less what starts have taken since; `None`: the shell does not observe room (its
    /// replicas free what they held as soon as they are told to stop).
    room: Option<BTreeMap<String, Room>>,
    /// Jobs whose starts wait for room, with the reason announced.
    waiting_for_room: BTreeMap<String, String>,
    /// The admissions being charged (see [`super::accounting`]).
    charges: Charges,
    /// Queue budgets and what their queues held of them.
    budgets: Budgets,
}

fn millis(t: Timestamp) -> Millis {
    u64::try_from(t.as_millisecond()).unwrap_or(0)
}

impl ControlPlane {
    /// An empty plane over a cluster (`cluster.running` must be empty: admitted jobs come
    /// with [`ControlPlane::restore`]).
    pub fn new(cluster: ClusterSnapshot, config: ControlConfig) -> Result<Self, SchedError> {
        let (plane, _) = Self::restore(cluster, config, Vec::new(), Timestamp::UNIX_EPOCH)?;
        Ok(plane)
    }

    fn entry(config: &ControlConfig, record: JobRecord) -> Entry {
        let JobRecord {
            job,
            uid: _,
            submitted,
            hints,
        } = record;
        let mut defaulted = job.clone();
        defaulted.spec.apply_defaults();
        let priority = priority_of(&defaulted, &config.priority_classes);
        let missing = if config.requires_image {
            corral_api::validate::missing_images(&defaulted.spec)
        } else {
            Vec::new()
        };
        // A class the cluster does not have: refused as written, naming what exists (the
        // embedded shell refuses it at submit; here, for a plane fed by another platform).
        // A job already admitted keeps running if its class goes away (as a pod does).
        let admitted = job
            .status
            .as_ref()
            .is_some_and(|s| conditions::is_true(s, ConditionType::Admitted));
        let unknown_class = defaulted.spec.priority_class.as_deref().filter(|n| {
            !admitted
                && !config
                    .priority_classes
                    .iter()
                    .any(|c| c.metadata.name == *n)
        });
        let request = if let Some(name) = unknown_class {
            let names: Vec<&str> = config
                .priority_classes
                .iter()
                .map(|c| c.metadata.name.as_str())
                .collect();
            Err(format!(
                "spec.priorityClass: `{name}` is not a JobPriorityClass of this cluster; it has {}",
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            ))
        } else if missing.is_empty() {
            Ok(())
        } else {
            Err(missing
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; "))
        };
        let request = request
            .and_then(|()| {
                JobRequest::from_training_job(&defaulted, priority, submitted)
                    .map_err(|e| e.to_string())
            })
            .map(|mut r| {
                r.node_selector = hints.node_selector;
                r.tolerations = hints.tolerations;
                r.throughput = hints.throughput;
                r
            });
        let grace = rules::grace_period(&job, config.grace_period);
        Entry {
            job,
            request,
            grace,
            replicas: BTreeMap::new(),
            standing: Standing::Out,
            pending: None,
            reason_written: None,
            deleting: false,
            rejected: None,
            start_failed: Vec::new(),
            progress: Vec::new(),
        }
    }

    /// Puts a job that waits for an admission into the scheduler (with the service it
    /// attained before, so a requeued job keeps its place in least-attained-service order).
    fn enqueue_if_waiting(&mut self, key: &str, step: &mut Step) {
        let Some(e) = self.jobs.get_mut(key) else {
            return;
        };
        if e.standing != Standing::Out || !e.wants_admission() {
            return;
        }
        // A job the scheduler cannot take waits out of it; its reason goes into its status,
        // announced once (see `explain_wait`).
        let Ok(mut request) = e.request.clone() else {
            return;
        };
        // Where it ran before, its own measured speeds rank the GPU types.
        if let Some(measured) = e.job.status.as_ref().map(|s| &s.measured_throughput)
            && !measured.is_empty()
        {
            request.throughput = rules::measured_speeds(
                &request.throughput,
                measured,
                &self.config.scheduler.gpu_type_speed,
                &self.scheduler.gpu_types(),
            );
        }
        let throughput = request.throughput.clone();
        match self.scheduler.submit(request) {
            Ok(()) => {
                e.standing = Standing::Queued;
                let service = self.ledger.weighted(key, &throughput);
                self.scheduler.set_attained_service(key, service);
            }
            Err(err) => step.event(
                key,
                EventType::Warning,
                event_reason::INVALID,
                err.to_string(),
            ),
        }
    }

    // ---- commands -------------------------------------------------------------------

    /// A new job. Refused when a job of that key exists, the scheduler cannot read its
    /// resources, or (where nodes are fixed, [`ControlConfig::fixed_nodes`]) no node of the
    /// cluster could ever hold it; nothing changes then.
    pub fn submit(&mut self, record: JobRecord) -> Result<(), ControlError> {
        let key = record.key();
        if self.jobs.contains_key(&key) || self.retired.contains(&key) {
            return Err(ControlError::AlreadyExists(key));
        }
        let entry = Self::entry(&self.config, record);
        let refused = match &entry.request {
            Err(message) => Some(message.clone()),
            // Where nodes are fixed, what none can ever hold is refused, not left waiting.
            Ok(request) if self.config.fixed_nodes => {
                super::submit::check_request(&self.scheduler, &entry.job, request)
                    .err()
                    .map(|r| r.to_string())
            }
            Ok(_) => None,
        };
        if let Some(message) = refused {
            return Err(ControlError::Invalid { job: key, message });
        }
        self.jobs.insert(key.clone(), Box::new(entry));
        let mut ignored = Step::default();
        self.enqueue_if_waiting(&key, &mut ignored);
        self.unsettled.insert(key);
        Ok(())
    }

    /// The user deleted the job: its replicas stop with its grace period, then
    /// [`Change::Removed`] says it is gone. A job waiting in its queue leaves it at once.
    pub fn delete(&mut self, key: &str) -> Result<Effect, ControlError> {
        if self.retired.remove(key) {
            self.retired_removed.push(key.to_string());
            return Ok(Effect::Made);
        }
        let e = self
            .jobs
            .get_mut(key)
            .ok_or_else(|| ControlError::NotFound(key.to_string()))?;
        if e.deleting {
            return Ok(Effect::AlreadySo);
        }
        e.deleting = true;
        if e.standing == Standing::Queued {
            self.scheduler.finish(key);
            e.standing = Standing::Out;
        }
        self.unsettled.insert(key.to_string());
        Ok(Effect::Made)
    }

    /// Sets or clears `runPolicy.suspend`. Returns the job as it must be stored, and whether
    /// that changed it. A finished job cannot be resumed or suspended; a job being deleted
    /// neither.
    pub fn set_suspend(
        &mut self,
        key: &str,
        suspend: bool,
    ) -> Result<(TrainingJob, Effect), ControlError> {
        if self.retired.contains(key) {
            let what = if suspend { "suspended" } else { "resumed" };
            return Err(ControlError::Conflict(format!(
                "TrainingJob {key} has finished and cannot be {what}"
            )));
        }
        let e = self
            .jobs
            .get_mut(key)
            .ok_or_else(|| ControlError::NotFound(key.to_string()))?;
        if e.deleting {
            return Err(ControlError::Conflict(format!(
                "TrainingJob {key} is being deleted"
            )));
        }
        if e.job.status.as_ref().is_some_and(conditions::is_terminal) {
            let what = if suspend { "suspended" } else { "resumed" };
            return Err(ControlError::Conflict(format!(
                "TrainingJob {key} has finished and cannot be {what}"
            )));
        }
        if e.job.spec.run_policy.suspend == suspend {
            return Ok((e.job.clone(), Effect::AlreadySo));
        }
        e.job.spec.run_policy.suspend = suspend;
        if suspend && e.standing == Standing::Queued {
            self.scheduler.finish(key);
            e.standing = Standing::Out;
            e.pending = None;
        }
        let job = e.job.clone();
        self.unsettled.insert(key.to_string());
        Ok((job, Effect::Made))
    }

    // ---- observations ---------------------------------------------------------------

    /// A replica incarnation is in this phase now (started, exited, vanished). Late and
    /// duplicated observations are harmless: a replica only moves forward, and the
    /// lifecycle ignores incarnations that are not current.
    pub fn observe(&mut self, key: &str, replica: ObservedReplica) {
        if let Some(e) = self.jobs.get_mut(key)
            && merge_phase(&mut e.replicas, replica)
        {
            self.unsettled.insert(key.to_string());
        }
    }

    /// The platform refused to create this replica incarnation and would refuse it again
    /// (Kubernetes: 400, 403, 422, or 409 for a name held by an object Corral does not own;
    /// never a transient error such as 429, 5xx or a timeout, which the shell retries with
    /// back-off). The job fails with the platform's message, a `Failed` event says it, and
    /// its admission is released once nothing of it runs: a write the platform refuses is
    /// never retried while holding GPUs. Ignored for any incarnation but the current one
    /// and for a finished job.
    pub fn launch_rejected(&mut self, key: &str, rejection: LaunchRejection) {
        if let Some(e) = self.jobs.get_mut(key) {
            e.rejected = Some(rejection);
            self.unsettled.insert(key.to_string());
        }
    }

    /// The GPUs of `node` that are unhealthy now (the shell reads GPU health while the
    /// cluster runs): the scheduler offers them to no new replica until they heal; a job
    /// running on one keeps it. The jobs that wait are looked at in the next step.
    pub fn observe_unhealthy_gpus(&mut self, node: &str, gpus: &[u32]) {
        self.scheduler.set_unhealthy_gpus(node, gpus);
    }

    /// The room on every node now (see [`super::room`]): what is free there, whoever holds
    /// the rest. Replaces the last observation. Starts wait until their gang fits in it; the
    /// jobs waiting for room are looked at again.
    pub fn observe_room(&mut self, room: BTreeMap<String, Room>) {
        self.room = Some(room);
        self.unsettled.extend(self.waiting_for_room.keys().cloned());
    }

    /// The platform could not start this replica incarnation's program, and says why: an
    /// image it cannot pull (Kubernetes ErrImagePull, ImagePullBackOff; podman's exit 125
    /// before the container ran), a command that does not exist, no port left for it. The
    /// observation `Failed` with [`FailureReason::StartFailed`](lifecycle::FailureReason),
    /// with the platform's words for the job's status and event. The lifecycle decides what
    /// it means ([`lifecycle::back_off_failed_start`]): the job's other replicas stop, its
    /// admission is released, and it re-enters its queue after a back-off, never counted
    /// against backoffLimit. Ignored for any incarnation but the current one and for a
    /// finished job. (`observe` with that phase alone decides the same, in general words.)
    pub fn start_failed(&mut self, key: &str, failure: StartFailure) {
        self.observe(
            key,
            ObservedReplica::new(
                failure.replica,
                failure.incarnation,
                ReplicaPhase::Failed {
                    exit_code: failure.exit_code,
                    reason: lifecycle::FailureReason::StartFailed,
                },
            ),
        );
        if let Some(e) = self.jobs.get_mut(key) {
            e.start_failed.push(failure);
            self.unsettled.insert(key.to_string());
        }
    }

    /// The record of a replica incarnation is gone (the shell removed it after a stop with
    /// `delete`): its name is free again.
    pub fn forget_replica(&mut self, key: &str, replica: ReplicaId, incarnation: Incarnation) {
        if let Some(e) = self.jobs.get_mut(key)
            && e.replicas.remove(&(replica, incarnation)).is_some()
        {
            self.unsettled.insert(key.to_string());
        }
    }

    // ---- the step -------------------------------------------------------------------

    /// One pass: ledger, reconcile, schedule, reconcile. See the module docs.
    pub fn step(&mut self, now: Timestamp) -> Step {
        self.step_sliced(now, None)
    }

    /// A step whose scheduler cycle admits jobs until it has placed `slice` replicas
    /// ([`Scheduler::cycle_sliced`]); the jobs it did not reach wait, with their last
    /// reason, for the next step, which the shell should take at once (`wake_in` is zero).
    /// For a shell that must end a pass within a time budget (the operator).
    pub fn step_sliced(&mut self, now: Timestamp, slice: Option<u32>) -> Step {
        let mut step = Step::default();
        self.accrue(millis(now));
        self.reconcile_unsettled(now, &mut step);
        self.judge_budgets(millis(now), &mut step);
        let outcome = self.scheduler.cycle_sliced(millis(now), slice);
        if outcome.counters.deferred > 0 {
            step.wake(Duration::ZERO);
        }
        self.apply_outcome(outcome, now, &mut step);
        self.reconcile_unsettled(now, &mut step);
        dedup_actions(&mut step.actions);
        self.charge(millis(now), &mut step);
        step
    }

    /// Reconciles only the jobs whose inputs changed, without a scheduler cycle: for a
    /// shell that has just applied actions and observed their result.
    pub fn settle(&mut self, now: Timestamp) -> Step {
        let mut step = Step::default();
        self.reconcile_unsettled(now, &mut step);
        dedup_actions(&mut step.actions);
        self.charge(millis(now), &mut step);
        step
    }

    fn reconcile_unsettled(&mut self, now: Timestamp, step: &mut Step) {
        // A job may become unsettled again while others are visited (a release admits
        // nothing before the next cycle, but a requeue re-enters the scheduler): visit
        // what is unsettled now, in key order.
        for job in std::mem::take(&mut self.retired_removed) {
            step.changes.push(Change::Removed { job });
        }
        let keys: Vec<String> = std::mem::take(&mut self.unsettled).into_iter().collect();
        for key in keys {
            let settled = if self.jobs.get(&key).is_some_and(|e| e.deleting) {
                self.advance_deletion(&key, step)
            } else {
                self.reconcile_job(&key, now, step)
            };
            if !settled {
                self.unsettled.insert(key);
            } else {
                self.retire_if_done(&key, step);
            }
        }
    }

    /// A settled job that finished for good (terminal, out of the scheduler, nothing of
    /// it active, not being deleted) leaves the plane but for its name. A job with a TTL
    /// after finishing is not settled until it is deleted, so it stays until then.
    fn retire_if_done(&mut self, key: &str, step: &mut Step) {
        let Some(e) = self.jobs.get(key) else {
            return;
        };
        let done = !e.deleting
            && e.standing == Standing::Out
            && !e.any_active()
            && rules::finished_for_good(&e.job);
        if !done {
            return;
        }
        self.jobs.remove(key);
        self.holding.remove(key);
        self.ledger.forget_job(key);
        self.retired.insert(key);
        step.changes.push(Change::Retired {
            job: key.to_string(),
        });
    }

    /// One job through the lifecycle. Returns whether it is settled: nothing changed,
    /// nothing to do, no timer.
    fn reconcile_job(&mut self, key: &str, now: Timestamp, step: &mut Step) -> bool {
        let Some(e) = self.jobs.get_mut(key) else {
            return true;
        };
        let old = e.status();
        let had_status = e.job.status.is_some();
        if let Some(r) = e.rejected.take() {
            let job = e.job.name().to_string();
            let status = e.job.status.get_or_insert_with(Default::default);
            if !conditions::is_terminal(status)
                && lifecycle::current_incarnation(status, r.replica) == r.incarnation
            {
                lifecycle::fail_rejected_launch(status, &r.replica.name(&job), &r.message, now);
            }
        }
        // A start the platform could not make, in its words: the lifecycle's back-off,
        // recorded before the reconcile (which would otherwise say it in general words).
        for f in std::mem::take(&mut e.start_failed) {
            let job = e.job.name().to_string();
            let status = e.job.status.get_or_insert_with(Default::default);
            let current = lifecycle::current_incarnation(status, f.replica) == f.incarnation;
            let observed = matches!(
                e.replicas.get(&(f.replica, f.incarnation)),
                Some(ReplicaPhase::Failed {
                    reason: lifecycle::FailureReason::StartFailed,
                    ..
                })
            );
            if current
                && observed
                && conditions::is_true(status, ConditionType::Admitted)
                && !conditions::is_terminal(status)
                && !lifecycle::is_backing_off(status)
            {
                lifecycle::back_off_failed_start(status, &f.replica.name(&job), &f.message, now);
            }
        }
        for (replica, report) in std::mem::take(&mut e.progress) {
            let status = e.job.status.get_or_insert_with(Default::default);
            lifecycle::record_progress(status, &replica, &report, now);
        }
        // The rate its reporter measured, as recorded now, orders elastic growth and
        // shrinking (recorded with the GPUs the job holds as it is measured).
        let measured = e.job.status.as_ref().and_then(|s| s.progress.as_ref());
        if let (Standing::Admitted(held), Some(p)) = (&e.standing, measured)
            && p.updated == now
            && let Some(rate) = p.samples_per_second
        {
            self.scheduler.set_measured_throughput(key, rate);
            // Per GPU, on the type it runs on: what type choice compares when it waits again.
            if let (Some(ty), gpus @ 1..) = (&held.admission.gpu_type, held.gpus())
                && rate.is_finite()
                && rate > 0.0
            {
                let per_gpu = (rate / gpus as f64 * 1000.0).round() / 1000.0;
                if let Some(status) = e.job.status.as_mut() {
                    status.measured_throughput.insert(ty.clone(), per_gpu);
                }
            }
        }
        let e = &*e;
        let admission = match &e.standing {
            Standing::Admitted(a) => AdmissionState::Admitted(a.admission.clone()),
            Standing::Preempting { grace, message } | Standing::Moving { grace, message, .. } => {
                AdmissionState::Preempted {
                    grace_period: *grace,
                    message: message.clone(),
                }
            }
            Standing::Queued | Standing::Out => AdmissionState::Waiting,
        };
        let observed: Vec<ObservedReplica> = e
            .replicas
            .iter()
            .map(|((id, inc), phase)| ObservedReplica::new(*id, *inc, *phase))
            .collect();
        let out = lifecycle::reconcile_with(&e.job, &observed, &admission, e.grace, now);
        let mut status = out.status;
        self.explain_wait(key, &old, &mut status, now, step);
        status_events(key, &old, &status, &mut step.events);
        let unchanged = old == status && had_status;
        if let Some(after) = out.requeue_after {
            step.wake(after);
        }
        if !unchanged {
            step.changes.push(Change::Status {
                job: key.to_string(),
                status: status.clone(),
            });
        }
        if let Some(e) = self.jobs.get_mut(key) {
            e.job.status = Some(status);
        }
        let mut actions = out.actions;
        let held_back = self.hold_starts_without_room(key, &mut actions, step);
        let settled = unchanged && actions.is_empty() && out.requeue_after.is_none() && !held_back;
        for action in actions {
            match action {
                Action::Start { .. } | Action::Stop { .. } => step.actions.push(JobAction {
                    job: key.to_string(),
                    action,
                }),
                Action::Requeue => self.requeue(key, step),
                Action::Release => self.release(key, step),
                Action::DeleteJob => {
                    if let Some(e) = self.jobs.get_mut(key)
                        && !e.deleting
                    {
                        e.deleting = true;
                        step.changes.push(Change::Deleting {
                            job: key.to_string(),
                        });
                    }
                    return false;
                }
            }
        }
        // A job preempted before the lifecycle ever recorded its admission has nothing to
        // hand back: once nothing of it runs, it re-enters its queue.
        if let Some(e) = self.jobs.get(key)
            && matches!(
                e.standing,
                Standing::Preempting { .. } | Standing::Moving { .. }
            )
            && !e.any_active()
            && !e
                .job
                .status
                .as_ref()
                .is_some_and(|s| conditions::is_true(s, ConditionType::Admitted))
        {
            self.requeue(key, step);
        }
        // A finished job never holds GPUs once nothing of it runs, whatever its conditions
        // say (a status restored from an older record).
        if let Some(e) = self.jobs.get(key)
            && e.job.status.as_ref().is_some_and(conditions::is_terminal)
            && !e.any_active()
            && matches!(e.standing, Standing::Admitted(_) | Standing::Queued)
        {
            self.release(key, step);
        }
        settled
    }
}

/// Records a phase for an incarnation, the most advanced phase winning. Returns whether
/// anything changed.
fn merge_phase(
    replicas: &mut BTreeMap<(ReplicaId, Incarnation), ReplicaPhase>,
    o: ObservedReplica,
) -> bool {
    let slot = replicas.entry((o.id, o.incarnation));
    match slot {
        std::collections::btree_map::Entry::Vacant(v) => {
            v.insert(o.phase);
            true
        }
        std::collections::btree_map::Entry::Occupied(mut v) => {
            if o.phase != *v.get() && o.phase.progress() >= v.get().progress() {
                v.insert(o.phase);
                true
            } else {
                false
            }
        }
    }
}

/// A job reconciled before and after the scheduler's cycle in one step may ask for the
/// same start or stop twice (the shell has not applied the first yet); each goes out once.
fn dedup_actions(actions: &mut Vec<JobAction>) {
    let mut seen: BTreeSet<(String, ReplicaId, Incarnation, bool)> = BTreeSet::new();
    actions.retain(|a| match &a.action {
        Action::Start {
            replica,
            incarnation,
            ..
        } => seen.insert((a.job.clone(), *replica, *incarnation, true)),
        Action::Stop {
            replica,
            incarnation,
            ..
        } => seen.insert((a.job.clone(), *replica, *incarnation, false)),
        _ => true,
    });
}
