//! Plan: the whole decision of one operator pass, pure. The world goes in; one scheduler
//! cycle runs over the cluster snapshot; the lifecycle runs for every job; what comes out is
//! a [`JobPlan`] per job: the admission to record, the status, the objects to create, the
//! pods to bind and to delete, and the events. [`crate::apply`] carries it out.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use serde::{Deserialize, Serialize};

use corral_api::training_job::{
    ConditionStatus, ConditionType, Framework, LauncherCreationPolicy, Role, TrainingJob,
    TrainingJobStatus,
};
use corral_core::lifecycle::{
    self, Action, AdmissionState, DEFAULT_GRACE_PERIOD, Incarnation, ReplicaId, conditions,
};
use corral_core::sched::{
    self, Admission, ClusterSnapshot, CycleCounters, JobRequest, NodePoolConfig, QueueConfig,
    RunningJob, SchedError, Scheduler, SchedulerConfig,
};

use crate::build::{self, BuildOptions};
use crate::consts::*;
use crate::observe::{self, Amounts, World};

/// Settings of the plan.
#[derive(Clone, Debug, Default)]
pub struct PlanConfig {
    pub build: BuildOptions,
    pub scheduler: SchedulerConfig,
    /// Node label whose value is a node's topology domain (rack, NVLink/IB island).
    pub topology_label: Option<String>,
}

/// What Corral records in the job's `corral.dev/admission` annotation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredAdmission {
    /// When the job was admitted (ms since the epoch): recently admitted jobs are protected
    /// from preemption.
    pub admitted_at: u64,
    #[serde(flatten)]
    pub admission: Admission,
}

#[derive(Clone, Debug, PartialEq)]
pub enum AdmissionChange {
    Keep,
    Set(StoredAdmission),
    Clear,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodDeletion {
    pub name: String,
    /// Precondition: only this pod, never a newer one of the same name.
    pub uid: Option<String>,
    pub grace: Duration,
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
    /// The new status, when it changed.
    pub status: Option<TrainingJobStatus>,
    pub config_map: Option<ConfigMap>,
    pub service: Option<Service>,
    pub create: Vec<Pod>,
    /// Bindings of one gang: all of them, or none.
    pub bind: Vec<PodBinding>,
    pub delete: Vec<PodDeletion>,
    pub delete_job: bool,
    pub events: Vec<PlannedEvent>,
    pub requeue_after: Option<Duration>,
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
            config_map: None,
            service: None,
            create: Vec::new(),
            bind: Vec::new(),
            delete: Vec::new(),
            delete_job: false,
            events: Vec::new(),
            requeue_after: None,
        }
    }

    fn event(&mut self, warning: bool, reason: &str, note: String) {
        self.events.push(PlannedEvent {
            warning,
            reason: reason.to_string(),
            note,
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
    pub warnings: Vec<String>,
}

impl Plan {
    /// The soonest a job asked to be looked at again.
    pub fn requeue_after(&self) -> Option<Duration> {
        self.jobs.iter().filter_map(|j| j.requeue_after).min()
    }
}

fn millis(t: Timestamp) -> u64 {
    u64::try_from(t.as_millisecond()).unwrap_or(0)
}

/// The grace period of a job's replicas: the longest `terminationGracePeriodSeconds` of its
/// pod templates, or the lifecycle's default.
fn grace_period(job: &TrainingJob) -> Duration {
    job.spec
        .replicas
        .values()
        .filter_map(|r| r.template.pod_template.as_ref())
        .filter_map(|t| {
            t.get("spec")?
                .get("terminationGracePeriodSeconds")?
                .as_u64()
        })
        .max()
        .map_or(DEFAULT_GRACE_PERIOD, Duration::from_secs)
}

/// Whether a pod belongs to this job (its controller is this job, by uid).
fn owned_by(pod: &Pod, job: &TrainingJob) -> bool {
    let Some(uid) = job.metadata.uid.as_deref() else {
        return true;
    };
    match pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
    {
        Some(o) => o.uid == uid,
        None => true,
    }
}

fn stored_admission(job: &TrainingJob) -> Result<Option<StoredAdmission>, String> {
    match job.metadata.annotations.get(ADMISSION_ANNOTATION) {
        None => Ok(None),
        Some(text) => serde_json::from_str(text)
            .map(Some)
            .map_err(|e| format!("annotation {ADMISSION_ANNOTATION}: {e}")),
    }
}

struct JobInfo<'a> {
    job: &'a TrainingJob,
    key: String,
    status: TrainingJobStatus,
    stored: Option<StoredAdmission>,
    pods: Vec<&'a Pod>,
    request: Result<JobRequest, String>,
    preempting: bool,
}

fn job_request(job: &TrainingJob, world: &World, now_ms: u64) -> Result<JobRequest, String> {
    let priority = sched::priority_of(job, &world.classes);
    let submit = job.metadata.creation_timestamp.map_or(now_ms, millis);
    let mut req =
        JobRequest::from_training_job(job, priority, submit).map_err(|e| e.to_string())?;
    let (selector, tolerations) = observe::job_constraints(job, &world.nodes)?;
    req.node_selector = selector;
    req.tolerations = tolerations;
    Ok(req)
}

/// The job a scheduler error is about, when it is about one.
fn error_job(e: &SchedError) -> Option<&str> {
    match e {
        SchedError::DuplicateJob(j) | SchedError::EmptyJob(j) => Some(j),
        SchedError::UnknownNode { job, .. }
        | SchedError::Overcommitted { job, .. }
        | SchedError::InvalidQuantity { job, .. } => Some(job),
        SchedError::DuplicateNode(_) | SchedError::TooManyGpus { .. } => None,
    }
}

/// The scheduler's snapshot for the given running jobs: every node with the requests of
/// pods that are not replicas of those jobs (nor of jobs being preempted, whose room the
/// preemptor already holds) allocated.
fn snapshot(
    world: &World,
    infos: &[JobInfo<'_>],
    running: &[RunningJob],
    excluded: &BTreeSet<String>,
    pools: &[NodePoolConfig],
    queues: &[QueueConfig],
    topology_label: Option<&str>,
) -> ClusterSnapshot {
    let owned: BTreeSet<(&str, &str)> = infos
        .iter()
        .filter(|i| excluded.contains(&i.key))
        .flat_map(|i| {
            i.pods.iter().filter_map(|p| {
                Some((
                    p.metadata.namespace.as_deref()?,
                    p.metadata.name.as_deref()?,
                ))
            })
        })
        .collect();
    let mut foreign_pods = Vec::new();
    for p in &world.pods {
        let id = (
            p.metadata.namespace.as_deref().unwrap_or(""),
            p.metadata.name.as_deref().unwrap_or(""),
        );
        if observe::is_terminal(p) || owned.contains(&id) {
            continue;
        }
        if observe::pod_node(p).is_some() {
            foreign_pods.push(p.clone());
        }
    }
    let usage = observe::node_usage(&foreign_pods);
    let mut reserved: BTreeMap<&str, BTreeSet<u32>> = BTreeMap::new();
    for r in running {
        for p in &r.placements {
            reserved
                .entry(p.node.as_str())
                .or_default()
                .extend(p.gpu_indices.iter().copied());
        }
    }
    let empty_set = BTreeSet::new();
    let empty = Amounts::default();
    let mut seen = BTreeSet::new();
    let nodes = world
        .nodes
        .iter()
        .filter(|n| {
            n.metadata
                .name
                .as_ref()
                .is_some_and(|name| seen.insert(name.clone()))
        })
        .map(|n| {
            let name = n.metadata.name.as_deref().unwrap_or("");
            observe::sched_node(
                n,
                usage.get(name).unwrap_or(&empty),
                reserved.get(name).unwrap_or(&empty_set),
                topology_label,
            )
        })
        .collect();
    ClusterSnapshot {
        nodes,
        pools: pools.to_vec(),
        queues: queues.to_vec(),
        running: running.to_vec(),
    }
}

/// One pass: schedule, run every job's lifecycle, and say what to do.
pub fn plan(world: &World, cfg: &PlanConfig, now: Timestamp) -> Plan {
    let now_ms = millis(now);
    let mut out = Plan {
        warnings: world.warnings.clone(),
        ..Plan::default()
    };

    let mut pods_by_job: BTreeMap<String, Vec<&Pod>> = BTreeMap::new();
    for p in &world.pods {
        if let Some(k) = observe::pod_job_key(p) {
            pods_by_job.entry(k).or_default().push(p);
        }
    }
    let mut jobs: Vec<&TrainingJob> = world.jobs.iter().collect();
    jobs.sort_by_key(|j| observe::job_key(j));
    let mut plans: BTreeMap<String, JobPlan> = BTreeMap::new();
    let mut infos = Vec::new();
    for job in jobs {
        let key = observe::job_key(job);
        let mut jp = JobPlan::new(job);
        let status = job.status.clone().unwrap_or_default();
        let stored = match stored_admission(job) {
            Ok(s) => s,
            Err(e) => {
                jp.event(true, "InvalidAdmission", e);
                None
            }
        };
        let pods = pods_by_job
            .get(&key)
            .map(|ps| ps.iter().copied().filter(|p| owned_by(p, job)).collect())
            .unwrap_or_default();
        let request = job_request(job, world, now_ms);
        let preempting = conditions::is_true(&status, ConditionType::Admitted)
            && conditions::is_true(&status, ConditionType::Queued);
        plans.insert(key.clone(), jp);
        infos.push(JobInfo {
            job,
            key,
            status,
            stored,
            pods,
            request,
            preempting,
        });
    }

    let pools: Vec<NodePoolConfig> = world
        .pools
        .iter()
        .map(NodePoolConfig::from_node_pool)
        .collect();
    let mut queues = Vec::new();
    for q in &world.queues {
        match QueueConfig::from_queue(q) {
            Ok(c) => queues.push(c),
            Err(e) => out.warnings.push(format!("queue {}: {e}", q.metadata.name)),
        }
    }
    let mut sched_cfg = cfg.scheduler.clone();
    if sched_cfg.gpu_type_speed.is_empty() {
        sched_cfg.gpu_type_speed = sched::known_gpu_speeds(
            world
                .nodes
                .iter()
                .filter_map(|n| n.metadata.labels.as_ref()?.get(GPU_PRODUCT_LABEL))
                .map(String::as_str),
        );
    }

    // Jobs holding an admission, oldest first; those whose admission no longer fits (a node
    // went away, something else took the room) lose it and are requeued by the lifecycle.
    let mut running: Vec<RunningJob> = Vec::new();
    for i in &infos {
        if i.preempting {
            continue;
        }
        if let (Some(s), Ok(req)) = (&i.stored, &i.request) {
            running.push(RunningJob {
                request: req.clone(),
                placements: s.admission.placements.clone(),
                admitted_at: s.admitted_at,
            });
        }
    }
    running.sort_by(|a, b| (a.admitted_at, &a.request.key).cmp(&(b.admitted_at, &b.request.key)));
    let mut invalid: BTreeSet<String> = BTreeSet::new();
    let preempting: BTreeSet<String> = infos
        .iter()
        .filter(|i| i.preempting)
        .map(|i| i.key.clone())
        .collect();
    let scheduler = loop {
        let mut excluded: BTreeSet<String> =
            running.iter().map(|r| r.request.key.clone()).collect();
        excluded.extend(preempting.iter().cloned());
        let snap = snapshot(
            world,
            &infos,
            &running,
            &excluded,
            &pools,
            &queues,
            cfg.topology_label.as_deref(),
        );
        match Scheduler::new(&snap, sched_cfg.clone()) {
            Ok(s) => break Some(s),
            Err(e) => {
                let job = error_job(&e).map(str::to_string);
                match job.filter(|j| running.iter().any(|r| &r.request.key == j)) {
                    Some(j) => {
                        running.retain(|r| r.request.key != j);
                        if let Some(p) = plans.get_mut(&j) {
                            p.event(
                                true,
                                "AdmissionLost",
                                format!("the admission no longer holds: {e}"),
                            );
                        }
                        invalid.insert(j);
                    }
                    None => {
                        out.warnings.push(format!("cluster snapshot: {e}"));
                        break None;
                    }
                }
            }
        }
    };
    let Some(mut scheduler) = scheduler else {
        out.jobs = plans.into_values().collect();
        return out;
    };
    let running_keys: BTreeSet<String> = running.iter().map(|r| r.request.key.clone()).collect();

    for i in &infos {
        let terminal = conditions::is_terminal(&i.status);
        if terminal || i.job.spec.run_policy.suspend || i.preempting || i.stored.is_some() {
            continue;
        }
        match &i.request {
            Ok(req) => {
                if let Err(e) = scheduler.submit(req.clone())
                    && let Some(p) = plans.get_mut(&i.key)
                {
                    p.event(true, "Invalid", e.to_string());
                }
            }
            Err(e) => {
                if let Some(p) = plans.get_mut(&i.key) {
                    p.event(true, "Invalid", e.clone());
                }
            }
        }
    }
    let outcome = scheduler.cycle(now_ms);
    out.counters = outcome.counters;
    let admitted: BTreeMap<&str, &Admission> = outcome
        .admitted
        .iter()
        .map(|a| (a.job.as_str(), a))
        .collect();
    let preempted: BTreeMap<&str, String> = outcome
        .preempted
        .iter()
        .map(|p| (p.job.as_str(), p.reason.to_string()))
        .collect();
    let pending: BTreeMap<&str, String> = outcome
        .pending
        .iter()
        .map(|p| (p.job.as_str(), p.reason.to_string()))
        .collect();

    let mut free = observe::free_now(world);
    for i in &infos {
        let Some(jp) = plans.get_mut(&i.key) else {
            continue;
        };
        let job = i.job;
        let (state, current) = if let Some(a) = admitted.get(i.key.as_str()) {
            jp.admission = AdmissionChange::Set(StoredAdmission {
                admitted_at: now_ms,
                admission: (*a).clone(),
            });
            (AdmissionState::Admitted((*a).clone()), Some((*a).clone()))
        } else if let Some(msg) = preempted.get(i.key.as_str()) {
            (
                AdmissionState::Preempted {
                    grace_period: grace_period(job),
                    message: msg.clone(),
                },
                None,
            )
        } else if let (true, Some(s)) = (running_keys.contains(&i.key), &i.stored) {
            (
                AdmissionState::Admitted(s.admission.clone()),
                Some(s.admission.clone()),
            )
        } else {
            (AdmissionState::Waiting, None)
        };
        let observed: Vec<_> = i
            .pods
            .iter()
            .filter_map(|p| observe::observe_pod(p))
            .collect();
        let r = lifecycle::reconcile(job, &observed, &state, now);
        let mut status = r.status;
        jp.requeue_after = r.requeue_after;
        let old = &i.status;

        if let Some(reason) = pending.get(i.key.as_str())
            && conditions::is_true(&status, ConditionType::Queued)
        {
            let old_msg = conditions::get(old, ConditionType::Queued).map(|c| c.message.as_str());
            if old_msg != Some(reason.as_str()) {
                jp.event(false, "Pending", reason.clone());
            }
            let c_reason = conditions::get(&status, ConditionType::Queued)
                .map(|c| c.reason.clone())
                .unwrap_or_else(|| conditions::reason::QUEUED.to_string());
            conditions::set(
                &mut status,
                ConditionType::Queued,
                ConditionStatus::True,
                &c_reason,
                reason.clone(),
                now,
            );
        }

        let mut creating: BTreeSet<ReplicaId> = BTreeSet::new();
        let mut created_requests: BTreeMap<ReplicaId, Amounts> = BTreeMap::new();
        for action in &r.actions {
            match action {
                Action::Start {
                    replica,
                    incarnation,
                    placement,
                } => match build::build_pod(job, *replica, *incarnation, placement, &cfg.build) {
                    Ok(pod) => {
                        creating.insert(*replica);
                        created_requests.insert(*replica, observe::pod_requests(&pod));
                        jp.create.push(pod);
                    }
                    Err(e) => jp.event(true, "InvalidPodTemplate", e.to_string()),
                },
                Action::Stop {
                    replica,
                    incarnation,
                    grace_period,
                    delete,
                    ..
                } => {
                    let name = replica.name(&job.metadata.name);
                    for p in &i.pods {
                        let same = p.metadata.name.as_deref() == Some(name.as_str())
                            && observe::replica_of(p).map(|(_, inc)| inc) == Some(*incarnation);
                        if !same || p.metadata.deletion_timestamp.is_some() {
                            continue;
                        }
                        // On Kubernetes a pod stops only by being deleted; a finished pod's
                        // record stays unless the lifecycle asks to delete it.
                        if !delete && observe::is_terminal(p) {
                            continue;
                        }
                        jp.delete.push(PodDeletion {
                            name: name.clone(),
                            uid: p.metadata.uid.clone(),
                            grace: *grace_period,
                        });
                    }
                }
                Action::Requeue | Action::Release => {
                    if i.stored.is_some() && !matches!(jp.admission, AdmissionChange::Set(_)) {
                        jp.admission = AdmissionChange::Clear;
                    }
                }
                Action::DeleteJob => jp.delete_job = true,
            }
        }
        let terminal = conditions::is_terminal(&status);
        if let (Some(adm), false) = (&current, terminal) {
            let has_service = world.services.iter().any(|s| {
                s.metadata.name.as_deref() == Some(job.metadata.name.as_str())
                    && s.metadata.namespace.as_deref() == Some(jp.namespace.as_str())
            });
            if !has_service || !jp.create.is_empty() {
                match build::build_service(job) {
                    Ok(s) => jp.service = Some(s),
                    Err(e) => jp.event(true, "InvalidName", e.to_string()),
                }
            }
            if !jp.create.is_empty() {
                match build::build_config_map(job, &cfg.build) {
                    Ok(c) => jp.config_map = c,
                    Err(e) => jp.event(true, "InvalidLaunch", e.to_string()),
                }
            }
            plan_bindings(jp, i, adm, &status, &creating, &created_requests, &mut free);
        }

        // Events for what changed.
        let became =
            |t: ConditionType| conditions::is_true(&status, t) && !conditions::is_true(old, t);
        if became(ConditionType::Admitted)
            && let Some(adm) = &current
        {
            let nodes: BTreeSet<&str> = adm.placements.iter().map(|p| p.node.as_str()).collect();
            let ty = adm
                .gpu_type
                .as_deref()
                .map(|t| format!(", GPU type {t}"))
                .unwrap_or_default();
            jp.event(
                false,
                "Admitted",
                format!(
                    "admitted to pool {}{ty}: {} replicas on {}",
                    adm.pool,
                    adm.placements.len(),
                    nodes.into_iter().collect::<Vec<_>>().join(", ")
                ),
            );
        }
        if status.preemption_count > old.preemption_count {
            let msg = conditions::get(&status, ConditionType::Queued)
                .map(|c| c.message.clone())
                .unwrap_or_default();
            jp.event(true, "Preempted", msg);
        }
        if status.restart_count > old.restart_count {
            let msg = conditions::get(&status, ConditionType::Restarting)
                .map(|c| c.message.clone())
                .unwrap_or_default();
            jp.event(true, "Restarting", msg);
        }
        if became(ConditionType::Failed) {
            let msg = conditions::get(&status, ConditionType::Failed)
                .map(|c| c.message.clone())
                .unwrap_or_default();
            jp.event(true, "Failed", msg);
        }
        if became(ConditionType::Succeeded) {
            jp.event(
                false,
                "Succeeded",
                format!("job {} succeeded", job.metadata.name),
            );
        }
        if status != *old {
            jp.status = Some(status.clone());
        }
        if conditions::is_true(&status, ConditionType::Admitted) || current.is_some() {
            out.running += 1;
        } else if !conditions::is_terminal(&status) && !job.spec.run_policy.suspend {
            out.pending += 1;
        }
        let queue = job.spec.queue_name().to_string();
        *out.jobs_by_state
            .entry(queue.clone())
            .or_default()
            .entry(lifecycle::job_state(&job.spec, Some(&status)).as_str())
            .or_default() += 1;
        let gpus = match (&current, &i.request) {
            (Some(_), Ok(req)) if !terminal => req.total_gpus(),
            _ => 0,
        };
        *out.queue_gpus_in_use.entry(queue).or_default() += gpus;
    }
    out.jobs = plans.into_values().collect();
    out
}

/// The incarnation the status expects of a replica now.
fn current_incarnation(status: &TrainingJobStatus, id: ReplicaId) -> Incarnation {
    Incarnation {
        attempt: status.attempt,
        retry: status.replica_retries.get(&id.key()).copied().unwrap_or(0),
    }
}

/// Binds the job's unbound current pods to the nodes of its admission: only once every
/// replica of the gang exists (or is being created now), and only if all of them fit on
/// their nodes now next to every pod already bound there (whoever's). All or none.
fn plan_bindings(
    jp: &mut JobPlan,
    info: &JobInfo<'_>,
    adm: &Admission,
    status: &TrainingJobStatus,
    creating: &BTreeSet<ReplicaId>,
    created_requests: &BTreeMap<ReplicaId, Amounts>,
    free: &mut BTreeMap<String, Amounts>,
) {
    let job = info.job;
    let wait_for_workers = job.spec.framework == Framework::Mpi
        && job
            .spec
            .mpi
            .as_ref()
            .and_then(|m| m.launcher_creation_policy)
            == Some(LauncherCreationPolicy::WaitForWorkersReady);
    let mut unbound: Vec<(ReplicaId, String, Amounts)> = Vec::new();
    for p in &adm.placements {
        let Ok(role) = p.role.parse::<Role>() else {
            return;
        };
        let id = ReplicaId::new(role, p.index);
        let cur = current_incarnation(status, id);
        let pod = info.pods.iter().find(|pod| {
            observe::replica_of(pod) == Some((id, cur)) && pod.metadata.deletion_timestamp.is_none()
        });
        match pod {
            Some(pod) if observe::is_terminal(pod) || observe::pod_node(pod).is_some() => {}
            Some(pod) => unbound.push((id, p.node.clone(), observe::pod_requests(pod))),
            None if creating.contains(&id) => unbound.push((
                id,
                p.node.clone(),
                created_requests.get(&id).cloned().unwrap_or_default(),
            )),
            None if wait_for_workers && role == Role::Launcher => {}
            // A replica of the gang does not exist yet: bind nothing.
            None => return,
        }
    }
    if unbound.is_empty() {
        return;
    }
    let mut trial = free.clone();
    for (_, node, need) in &unbound {
        match trial.get_mut(node) {
            Some(f) if f.holds(need) => f.take(need),
            _ => {
                let msg = format!(
                    "waiting for room on node {node} (pods there are still terminating or another scheduler placed work there)"
                );
                if !jp.events.iter().any(|e| e.reason == "WaitingForRoom") {
                    jp.event(false, "WaitingForRoom", msg);
                }
                return;
            }
        }
    }
    *free = trial;
    for (id, node, _) in unbound {
        jp.bind.push(PodBinding {
            pod: id.name(&job.metadata.name),
            node,
        });
    }
}
