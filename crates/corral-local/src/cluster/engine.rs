//! [`Cluster`]: the owner of the store, the scheduler and the executor.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::hash::{BuildHasher, Hasher};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use corral_api::document::{Document, parse_documents};
use corral_api::training_job::{ConditionStatus, ConditionType, Role};
use corral_api::{PriorityClass, TrainingJob};
use corral_core::lifecycle::{
    self, Action, AdmissionState, DEFAULT_GRACE_PERIOD, FailureReason, Incarnation,
    ObservedReplica, ReplicaId, ReplicaPhase, conditions,
};
use corral_core::sched::{
    Admission, ClusterSnapshot, JobRequest, Millis, Node, NodePoolConfig, PoolQuota, QueueConfig,
    ResourceAmount, RunningJob, Scheduler, SchedulerConfig, known_gpu_speeds, priority_of,
};
use jiff::Timestamp;

use super::{
    AdmissionInfo, ClusterConfig, ClusterError, DocumentProblem, Event, EventType, FieldProblem,
    GpuDevice, JobDetails, JobState, JobSummary, MetricsSnapshot, NodeInfo, QueueInfo,
    QueuePoolUsage, ReplicaInfo, ReplicaUsageRow, SubmitResult, TickReport,
};
use crate::executor::{
    ExecutorConfig, ExecutorError, LocalExecutor, ProcessRecord, ProcessState, ReplicaProcessSpec,
    ShimCommand, discover, procfs,
};
use crate::inventory::{NodeInventory, inventory};
use crate::store::{
    NewJob, Store, StoreError, StoredAdmission, StoredEvent, StoredJob, StoredReplica,
};

impl From<StoreError> for ClusterError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::AlreadyExists { namespace, name } => {
                ClusterError::AlreadyExists { namespace, name }
            }
            other => ClusterError::Store(other.to_string()),
        }
    }
}

fn millis(t: Timestamp) -> Millis {
    u64::try_from(t.as_millisecond()).unwrap_or(0)
}

fn timestamp(ms: u64) -> Timestamp {
    Timestamp::from_millisecond(i64::try_from(ms).unwrap_or(i64::MAX))
        .unwrap_or(Timestamp::UNIX_EPOCH)
}

/// The executor's name of a replica: unique across namespaces (namespaces have no dots).
fn process_name(namespace: &str, job: &str, id: ReplicaId) -> String {
    format!("{namespace}.{}", id.name(job))
}

/// The executor's incarnation label: unique across re-creations of a job of one name.
fn incarnation_label(uid: &str, inc: Incarnation) -> String {
    let short: String = uid.chars().take(8).collect();
    format!("{short}-{inc}")
}

/// What the lifecycle sees of a process state.
pub(crate) fn phase_of(state: ProcessState) -> ReplicaPhase {
    match state {
        ProcessState::Running => ReplicaPhase::Running,
        ProcessState::Exited { code: 0 } => ReplicaPhase::Succeeded,
        ProcessState::Exited { code } => ReplicaPhase::Failed {
            exit_code: code,
            reason: FailureReason::Error,
        },
        ProcessState::Signaled { signal } => ReplicaPhase::Failed {
            exit_code: 128i32.saturating_add(signal),
            reason: FailureReason::Error,
        },
        ProcessState::OomKilled => ReplicaPhase::Failed {
            exit_code: 137,
            reason: FailureReason::OomKilled,
        },
        ProcessState::Gone => ReplicaPhase::Gone,
    }
}

fn new_uid(namespace: &str, name: &str, now: Timestamp, n: u64) -> String {
    let mut a = std::collections::hash_map::RandomState::new().build_hasher();
    a.write(namespace.as_bytes());
    a.write(name.as_bytes());
    a.write_i128(now.as_nanosecond());
    a.write_u64(n);
    let mut b = std::collections::hash_map::RandomState::new().build_hasher();
    b.write_u64(a.finish());
    b.write_u64(std::process::id().into());
    format!("{:016x}{:016x}", a.finish(), b.finish())
}

/// Replica slots of each role (elastic PyTorch: up to its maximum), as `Addresses::local`.
fn replica_slots(job: &TrainingJob) -> Vec<ReplicaId> {
    let elastic = lifecycle::policy::elastic_role(&job.spec);
    let mut out = Vec::new();
    for (role, spec) in &job.spec.replicas {
        let n = if elastic == Some(*role) {
            job.spec
                .elastic
                .as_ref()
                .and_then(|e| e.max_replicas)
                .unwrap_or(spec.count)
                .max(spec.count)
        } else {
            spec.count
        };
        for i in 0..n {
            out.push(ReplicaId::new(*role, i));
        }
    }
    out
}

fn state_of(stored: &StoredJob) -> JobState {
    if stored.deleting {
        return JobState::Deleting;
    }
    lifecycle::job_state(&stored.job.spec, stored.job.status.as_ref())
}

fn is_terminal(job: &TrainingJob) -> bool {
    job.status.as_ref().is_some_and(conditions::is_terminal)
}

/// Counters kept in memory (reset when the process restarts, as Prometheus expects).
#[derive(Default)]
struct Counters {
    jobs_submitted: u64,
    admissions: u64,
    preemptions: u64,
    replica_starts: u64,
    restarts: u64,
    succeeded: u64,
    failed: u64,
    ticks: u64,
    last_cycle_seconds: f64,
    last_tick_seconds: f64,
}

/// A replica ready to start: what the executor runs and what the store records.
struct PendingStart {
    id: ReplicaId,
    inc: Incarnation,
    port: Option<u16>,
    process: ReplicaProcessSpec,
}

/// The embedded cluster. See the module docs.
pub struct Cluster {
    config: ClusterConfig,
    store: Store,
    executor: LocalExecutor,
    scheduler: Scheduler,
    inventory: NodeInventory,
    node: Node,
    pools: Vec<NodePoolConfig>,
    queues: Vec<QueueConfig>,
    classes: Vec<PriorityClass>,
    /// Admissions the scheduler holds, by job uid.
    admitted: BTreeMap<String, Admission>,
    /// Jobs preempted whose replicas are stopping: (grace period, message), by uid.
    preempted: HashMap<String, (Duration, String)>,
    /// Jobs the scheduler knows (pending or admitted), by uid -> key.
    known: HashMap<String, String>,
    /// Why pending jobs wait, by key.
    pending_reasons: BTreeMap<String, String>,
    /// Stops already sent, by (process name, incarnation label).
    stopping: BTreeSet<(String, String)>,
    /// Every stored job, by seq (submission order): the store's rows, decoded once and
    /// re-read after each write to a job's row, so that a tick does not decode them all.
    jobs: BTreeMap<i64, StoredJob>,
    /// uid -> seq, for `jobs`.
    seq_of: HashMap<String, i64>,
    /// Jobs to reconcile in the next tick, by uid. A job leaves the set when its reconcile
    /// is a fixed point (status unchanged, no actions, no timer): reconciling it again gives
    /// the same result until one of its inputs changes (the job's row, its replicas, the
    /// scheduler's decision), and each such change puts it back. A tick visits only these,
    /// so its cost follows what changed, not how many jobs the store holds.
    unsettled: HashSet<String>,
    counters: Counters,
    uid_counter: u64,
}

impl Cluster {
    /// Opens (or creates) the cluster in `config.data_dir`: the store, the executor and the
    /// scheduler. Recovers from a previous run: every recorded replica is re-adopted (same
    /// pid and start time) or observed as ended or gone, the scheduler's running set is
    /// rebuilt from the stored admissions. Returns warnings (no NVML, no cgroups, ...).
    pub fn open(
        config: ClusterConfig,
        now: Timestamp,
    ) -> Result<(Cluster, Vec<String>), ClusterError> {
        let _ = now;
        let store = Store::open(&config.data_dir)?;
        let shim = match &config.shim {
            Some(shim) => shim.clone(),
            None => ShimCommand::current_exe()
                .map_err(|e| ClusterError::Executor(format!("finding the shim: {e}")))?,
        };
        let mut exec_config = ExecutorConfig::new(config.data_dir.join("replicas"), shim);
        exec_config.cgroup = config.cgroup;
        let range = config.file.settings.ports;
        exec_config.port_range = range.min..range.max.saturating_add(1).max(range.min);
        let (executor, mut warnings) =
            LocalExecutor::new(exec_config).map_err(|e| ClusterError::Executor(e.to_string()))?;
        let inventory = inventory();
        let (node, pools, queues) = build_cluster(&config, &inventory)?;
        let gpu_types: Vec<&str> = node.gpu_type.iter().map(String::as_str).collect();
        let sched_config = SchedulerConfig {
            gpu_type_speed: known_gpu_speeds(gpu_types),
            ..SchedulerConfig::default()
        };
        let classes = config.file.priority_classes.clone();
        let empty = ClusterSnapshot {
            nodes: vec![node.clone()],
            pools: pools.clone(),
            queues: queues.clone(),
            running: Vec::new(),
        };
        let scheduler = Scheduler::new(&empty, sched_config.clone())
            .map_err(|e| ClusterError::Scheduler(e.to_string()))?;
        let mut cluster = Cluster {
            config,
            store,
            executor,
            scheduler,
            inventory,
            node,
            pools,
            queues,
            classes,
            admitted: BTreeMap::new(),
            preempted: HashMap::new(),
            known: HashMap::new(),
            pending_reasons: BTreeMap::new(),
            stopping: BTreeSet::new(),
            jobs: BTreeMap::new(),
            seq_of: HashMap::new(),
            unsettled: HashSet::new(),
            counters: Counters::default(),
            uid_counter: 0,
        };
        cluster.recover(&empty, sched_config, &mut warnings)?;
        for j in cluster.store.jobs()? {
            cluster.unsettled.insert(j.uid.clone());
            cluster.seq_of.insert(j.uid.clone(), j.seq);
            cluster.jobs.insert(j.seq, j);
        }
        Ok((cluster, warnings))
    }

    /// Rebuilds the scheduler from stored admissions, re-adopts replicas, restores ports.
    fn recover(
        &mut self,
        base: &ClusterSnapshot,
        sched_config: SchedulerConfig,
        warnings: &mut Vec<String>,
    ) -> Result<(), ClusterError> {
        let jobs = self.store.jobs()?;
        let by_uid: BTreeMap<&str, &StoredJob> = jobs.iter().map(|j| (j.uid.as_str(), j)).collect();
        let mut admissions: Vec<(String, StoredAdmission)> = Vec::new();
        for (uid, a) in self.store.admissions()? {
            if by_uid.contains_key(uid.as_str()) {
                admissions.push((uid, a));
            } else {
                self.store.release(&uid)?;
            }
        }
        // The scheduler's running set; an admission that no longer fits (the machine
        // changed) is dropped: the lifecycle then stops the job and requeues it.
        loop {
            let snapshot = ClusterSnapshot {
                running: admissions.iter().map(|(_, a)| a.running.clone()).collect(),
                ..base.clone()
            };
            match Scheduler::new(&snapshot, sched_config.clone()) {
                Ok(s) => {
                    self.scheduler = s;
                    break;
                }
                Err(e) => {
                    let text = e.to_string();
                    let culprit = admissions
                        .iter()
                        .position(|(_, a)| text.contains(&a.running.request.key))
                        .unwrap_or(0);
                    if admissions.is_empty() {
                        return Err(ClusterError::Scheduler(text));
                    }
                    let (uid, a) = admissions.remove(culprit);
                    warnings.push(format!(
                        "the admission of {} no longer fits this machine ({text}); it is requeued",
                        a.running.request.key
                    ));
                    self.store.release(&uid)?;
                }
            }
        }
        for (uid, a) in &admissions {
            self.admitted.insert(
                uid.clone(),
                Admission {
                    job: a.running.request.key.clone(),
                    pool: a.pool.clone(),
                    gpu_type: a.gpu_type.clone(),
                    placements: a.running.placements.clone(),
                },
            );
            self.known
                .insert(uid.clone(), a.running.request.key.clone());
        }
        // Ports of admitted jobs.
        for (port, uid, _) in self.store.ports()? {
            let conflicts = self.executor.ports_mut().reserve(&uid, &[port]);
            if !conflicts.is_empty() {
                warnings.push(format!("port {port} is recorded twice"));
            }
        }
        // Replicas: re-adopt every recorded process, oldest incarnation first.
        let mut known_dirs = BTreeSet::new();
        for r in self.store.replicas()? {
            known_dirs.insert(r.record.dir.clone());
            let state = self.executor.adopt(r.record.clone());
            if state != r.state {
                self.store
                    .set_replica_state(&r.name, r.attempt, r.retry, state)?;
                self.unsettled.insert(r.job_uid.to_string());
            }
            if !by_uid.contains_key(r.job_uid.as_str()) {
                // A replica of a job that is gone: it must not run.
                let _ = self.executor.stop(&r.name, Duration::ZERO);
                self.store.remove_replica(&r.name, r.attempt, r.retry)?;
            }
        }
        // Processes started but never recorded (a crash between the start and the store
        // write): the current incarnation of a live job is recorded now; anything else is
        // killed, so that nothing runs twice.
        for rec in discover(&self.executor.config().run_dir) {
            if known_dirs.contains(&rec.dir) || !procfs::is_same_alive(rec.pid, rec.start_time) {
                continue;
            }
            match self.orphan_row(&rec, &jobs)? {
                Some(mut row) => {
                    warnings.push(format!("recorded replica {} found running", rec.name));
                    row.state = self.executor.adopt(rec);
                    self.store.put_replica(&row)?;
                }
                None => {
                    warnings.push(format!("killing unrecorded replica process {}", rec.name));
                    let _ = procfs::signal_group(rec.pid, rustix::process::Signal::KILL);
                    if let Some(cg) = &rec.cgroup {
                        cg.kill_all(None);
                    }
                }
            }
        }
        Ok(())
    }

    /// The store row of an unrecorded process, if it is the current incarnation of a replica
    /// of a live job (its name, incarnation label and job all match).
    fn orphan_row(
        &self,
        rec: &ProcessRecord,
        jobs: &[StoredJob],
    ) -> Result<Option<StoredReplica>, ClusterError> {
        let Some(stored) = jobs.iter().find(|j| j.key() == rec.job && !j.deleting) else {
            return Ok(None);
        };
        let Some((short, inc)) = rec.incarnation.split_once('-') else {
            return Ok(None);
        };
        let Ok(inc) = inc.parse::<Incarnation>() else {
            return Ok(None);
        };
        let prefix = format!("{}.{}-", stored.namespace, stored.name);
        let Some((role, index)) = rec
            .name
            .strip_prefix(&prefix)
            .and_then(|rest| rest.rsplit_once('-'))
        else {
            return Ok(None);
        };
        let (Ok(role), Ok(index)) = (role.parse::<Role>(), index.parse::<u32>()) else {
            return Ok(None);
        };
        let id = ReplicaId::new(role, index);
        let status = stored.job.status.clone().unwrap_or_default();
        let current = Incarnation {
            attempt: status.attempt,
            retry: status.replica_retries.get(&id.key()).copied().unwrap_or(0),
        };
        if !stored.uid.starts_with(short) || inc != current || is_terminal(&stored.job) {
            return Ok(None);
        }
        let port = self
            .store
            .ports()?
            .into_iter()
            .find(|(_, uid, replica)| *uid == stored.uid && *replica == id.key())
            .map(|(p, _, _)| p);
        Ok(Some(StoredReplica {
            name: rec.name.clone(),
            namespace: stored.namespace.clone(),
            job: stored.name.clone(),
            job_uid: stored.uid.clone(),
            role: role.as_str().to_string(),
            index,
            attempt: inc.attempt,
            retry: inc.retry,
            record: rec.clone(),
            port,
            started_ms: stored.submitted_ms,
            state: ProcessState::Running,
        }))
    }

    /// Submits TrainingJobs (or Kubeflow job kinds, converted) in YAML or JSON, several
    /// documents at once. All or nothing: if any document is invalid, or names a job that
    /// exists, nothing is stored. Documents without a namespace land in `namespace`; a
    /// document naming another namespace is refused (field `metadata.namespace`).
    pub fn submit(
        &mut self,
        text: &str,
        namespace: &str,
        now: Timestamp,
    ) -> Result<Vec<SubmitResult>, ClusterError> {
        let ctx = self.config.file.validation_context();
        let mut problems = Vec::new();
        let mut accepted = Vec::new();
        for r in parse_documents(text, &ctx) {
            match r {
                Err(e) => problems.push(DocumentProblem {
                    index: e.index,
                    what: e.what.clone(),
                    errors: e
                        .errors
                        .iter()
                        .map(|f| FieldProblem {
                            path: f.path.clone(),
                            message: f.message.clone(),
                        })
                        .collect(),
                }),
                Ok(p) => {
                    let what = Some(match &p.converted_from {
                        Some(k) => format!("{k} {} as TrainingJob", p.document.name()),
                        None => format!("{} {}", p.document.kind(), p.document.name()),
                    });
                    let mut errors = Vec::new();
                    match p.document {
                        Document::TrainingJob(job) => {
                            let mut job = *job;
                            check_local(&job, namespace, &mut errors);
                            job.metadata.namespace = Some(namespace.to_string());
                            if errors.is_empty() {
                                accepted.push((job, p.converted_from.clone()));
                            }
                        }
                        other => errors.push(FieldProblem {
                            path: "kind".into(),
                            message: format!(
                                "{} cannot be submitted; declare it in the cluster's \
                                 configuration file (corral.yaml)",
                                other.kind()
                            ),
                        }),
                    }
                    if !errors.is_empty() {
                        problems.push(DocumentProblem {
                            index: p.index,
                            what,
                            errors,
                        });
                    }
                }
            }
        }
        let mut names = BTreeSet::new();
        for (i, (job, _)) in accepted.iter().enumerate() {
            if !names.insert(job.metadata.name.clone()) {
                problems.push(DocumentProblem {
                    index: i + 1,
                    what: Some(format!("TrainingJob {}", job.metadata.name)),
                    errors: vec![FieldProblem {
                        path: "metadata.name".into(),
                        message: "appears twice in this submission".into(),
                    }],
                });
            }
        }
        if !problems.is_empty() {
            return Err(ClusterError::Invalid(problems));
        }
        let submitted_ms = millis(now);
        let mut new_jobs = Vec::with_capacity(accepted.len());
        for (mut job, converted_from) in accepted {
            self.uid_counter += 1;
            let uid = new_uid(namespace, &job.metadata.name, now, self.uid_counter);
            job.metadata.uid = Some(uid.clone());
            job.metadata.creation_timestamp = Some(now);
            job.metadata.generation = Some(1);
            job.status = None;
            new_jobs.push(NewJob {
                namespace: namespace.to_string(),
                name: job.metadata.name.clone(),
                uid,
                submitted_ms,
                converted_from,
                job,
            });
        }
        self.store.insert_jobs(&new_jobs)?;
        for j in &new_jobs {
            self.refresh_job(&j.namespace, &j.name)?;
        }
        let mut out = Vec::with_capacity(new_jobs.len());
        for j in new_jobs {
            self.counters.jobs_submitted += 1;
            self.event(
                &j.namespace,
                &j.name,
                now,
                EventType::Normal,
                "Submitted",
                format!("queued in {}", j.job.spec.queue_name()),
            );
            out.push(SubmitResult {
                namespace: j.namespace,
                name: j.name,
                uid: j.uid,
                converted_from: j.converted_from,
            });
        }
        Ok(out)
    }

    /// The job with its recorded status.
    pub fn get(&self, namespace: &str, name: &str) -> Result<Option<TrainingJob>, ClusterError> {
        Ok(self.store.job(namespace, name)?.map(|j| j.job))
    }

    /// Jobs of one namespace (or all), ordered by namespace then name.
    pub fn list(&self, namespace: Option<&str>) -> Result<Vec<JobSummary>, ClusterError> {
        let replicas = self.store.replicas()?;
        let listed = || {
            self.jobs
                .values()
                .filter(|j| namespace.is_none_or(|n| n == j.namespace))
        };
        let ready = ready_replicas(listed(), &replicas);
        let mut out: Vec<JobSummary> = listed()
            .map(|j| summary(j, ready.get(&j.uid).copied().unwrap_or(0)))
            .collect();
        out.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        Ok(out)
    }

    /// Job, conditions, events, replicas and why it waits.
    pub fn describe(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<JobDetails>, ClusterError> {
        let Some(stored) = self.store.job(namespace, name)? else {
            return Ok(None);
        };
        let replicas = self.store.replicas_of(&stored.uid)?;
        let retries = stored
            .job
            .status
            .as_ref()
            .map(|s| s.replica_retries.clone())
            .unwrap_or_default();
        let mut infos = Vec::new();
        for r in &replicas {
            let phase = phase_of(r.state);
            let (exit_code, reason) = match phase {
                ReplicaPhase::Failed { exit_code, reason } => {
                    (Some(exit_code), Some(reason.to_string()))
                }
                ReplicaPhase::Succeeded => (Some(0), None),
                _ => (None, None),
            };
            let message = if r.state.is_terminal() {
                r.record.exit_error()
            } else {
                None
            };
            infos.push(ReplicaInfo {
                name: format!("{}-{}-{}", stored.name, r.role, r.index),
                role: r.role.clone(),
                index: r.index,
                incarnation: format!("{}.{}", r.attempt, r.retry),
                phase: phase_name(phase).to_string(),
                exit_code,
                reason,
                message,
                pid: (r.state == ProcessState::Running).then_some(r.record.pid),
                gpus: r.record.gpu_indices.clone(),
                port: r.port,
                restarts: retries
                    .get(&format!("{}-{}", r.role, r.index))
                    .copied()
                    .unwrap_or(0),
                started: Some(timestamp(r.started_ms)),
                log_path: Some(r.record.log_path()),
            });
        }
        let admission = self
            .store
            .admissions()?
            .into_iter()
            .find(|(uid, _)| *uid == stored.uid)
            .map(|(_, a)| AdmissionInfo {
                pool: a.pool,
                gpu_type: a.gpu_type,
                admitted_at: timestamp(a.running.admitted_at),
                placements: a.running.placements,
            });
        let events = self
            .store
            .events(namespace, name)?
            .into_iter()
            .map(|e| Event {
                time: timestamp(e.time_ms),
                namespace: e.namespace,
                job: e.job,
                type_: if e.type_ == "Warning" {
                    EventType::Warning
                } else {
                    EventType::Normal
                },
                reason: e.reason,
                message: e.message,
            })
            .collect();
        Ok(Some(JobDetails {
            summary: summary(
                &stored,
                ready_replicas(std::iter::once(&stored), &replicas)
                    .get(&stored.uid)
                    .copied()
                    .unwrap_or(0),
            ),
            pending_reason: self.pending_reasons.get(&stored.key()).cloned(),
            job: stored.job,
            admission,
            replicas: infos,
            events,
        }))
    }

    fn require(&self, namespace: &str, name: &str) -> Result<StoredJob, ClusterError> {
        self.store
            .job(namespace, name)?
            .ok_or_else(|| ClusterError::NotFound {
                namespace: namespace.to_string(),
                name: name.to_string(),
            })
    }

    /// Deletes a job: its replicas stop (SIGTERM, then SIGKILL after the grace period) in
    /// the following ticks, then it is removed from the store. Logs are kept on disk.
    pub fn delete(
        &mut self,
        namespace: &str,
        name: &str,
        now: Timestamp,
    ) -> Result<(), ClusterError> {
        let stored = self.require(namespace, name)?;
        if !stored.deleting {
            self.store.mark_deleting(&stored.uid)?;
            self.refresh_job(namespace, name)?;
            self.event(
                namespace,
                name,
                now,
                EventType::Normal,
                "Deleting",
                "deleted; stopping its replicas".into(),
            );
        }
        let mut report = TickReport::default();
        self.advance_deletion(&stored, &mut report)?;
        Ok(())
    }

    /// Sets `runPolicy.suspend`: replicas stop, the admission is given back, the job keeps
    /// its history.
    pub fn suspend(
        &mut self,
        namespace: &str,
        name: &str,
        now: Timestamp,
    ) -> Result<(), ClusterError> {
        self.set_suspend(namespace, name, true, now)
    }

    /// Clears `runPolicy.suspend`: the job goes back to its queue.
    pub fn resume(
        &mut self,
        namespace: &str,
        name: &str,
        now: Timestamp,
    ) -> Result<(), ClusterError> {
        self.set_suspend(namespace, name, false, now)
    }

    fn set_suspend(
        &mut self,
        namespace: &str,
        name: &str,
        suspend: bool,
        now: Timestamp,
    ) -> Result<(), ClusterError> {
        let mut stored = self.require(namespace, name)?;
        if stored.deleting {
            return Err(ClusterError::Conflict(format!(
                "TrainingJob {namespace}/{name} is being deleted"
            )));
        }
        if is_terminal(&stored.job) {
            return Err(ClusterError::Conflict(format!(
                "TrainingJob {namespace}/{name} has finished; submit it again to rerun it"
            )));
        }
        if stored.job.spec.run_policy.suspend == suspend {
            return Ok(());
        }
        stored.job.spec.run_policy.suspend = suspend;
        stored.job.metadata.generation = Some(stored.job.metadata.generation.unwrap_or(1) + 1);
        self.store.update_spec(&stored.uid, &stored.job)?;
        self.refresh_job(namespace, name)?;
        let (reason, msg) = if suspend {
            ("Suspend", "runPolicy.suspend set by the user")
        } else {
            ("Resume", "runPolicy.suspend cleared by the user")
        };
        self.event(namespace, name, now, EventType::Normal, reason, msg.into());
        // A job still waiting in its queue leaves the scheduler now.
        if suspend && !self.admitted.contains_key(&stored.uid) {
            self.forget_in_scheduler(&stored.uid, &stored.key());
        }
        Ok(())
    }

    /// Queues with their usage per pool and job counts.
    pub fn queues(&self) -> Vec<QueueInfo> {
        let jobs = self.store.jobs().unwrap_or_default();
        let queue_of: BTreeMap<String, String> = jobs
            .iter()
            .map(|j| (j.key(), j.job.spec.queue_name().to_string()))
            .collect();
        let pending: Vec<&str> = self.scheduler.pending_jobs();
        self.queues
            .iter()
            .map(|q| {
                let count = |keys: &mut dyn Iterator<Item = &str>| {
                    keys.filter(|k| queue_of.get(*k).is_some_and(|n| *n == q.name))
                        .count() as u32
                };
                let admitted = count(&mut self.admitted.values().map(|a| a.job.as_str()));
                let pending = count(&mut pending.iter().copied());
                let usage = self
                    .scheduler
                    .pool_names()
                    .into_iter()
                    .map(|pool| QueuePoolUsage {
                        pool: pool.to_string(),
                        used: self
                            .scheduler
                            .queue_usage(&q.name, pool)
                            .unwrap_or(ResourceAmount::ZERO),
                        nominal: q.quotas.get(pool).map(|p| p.nominal),
                    })
                    .collect();
                QueueInfo {
                    name: q.name.clone(),
                    cohort: q.cohort.clone(),
                    weight: q.weight,
                    pending,
                    admitted,
                    usage,
                }
            })
            .collect()
    }

    /// This machine, as the scheduler sees it.
    pub fn nodes(&self) -> Vec<NodeInfo> {
        let mut used_by: BTreeMap<u32, String> = BTreeMap::new();
        let (mut cpu, mut mem) = (0u64, 0u64);
        for r in self.scheduler.running_jobs() {
            for p in &r.placements {
                for g in &p.gpu_indices {
                    used_by.insert(*g, r.request.key.clone());
                }
                if let Some(group) = r.request.groups.iter().find(|g| g.role == p.role) {
                    cpu = cpu.saturating_add(group.cpu_milli);
                    mem = mem.saturating_add(group.memory_bytes);
                }
            }
        }
        let gpus = (0..self.node.gpus)
            .map(|i| {
                let device = self.inventory.gpus.iter().find(|d| d.index == i);
                GpuDevice {
                    index: i,
                    name: device
                        .map(|d| d.gpu_type.clone())
                        .or_else(|| self.node.gpu_type.clone())
                        .unwrap_or_default(),
                    memory_bytes: device.map(|d| d.memory_bytes),
                    used_by: used_by.get(&i).cloned(),
                }
            })
            .collect();
        let pool = self
            .pools
            .iter()
            .find(|p| p.gpu_type.is_none() || p.gpu_type == self.node.gpu_type)
            .map(|p| p.name.clone())
            .or_else(|| {
                self.pools
                    .is_empty()
                    .then(|| self.node.gpu_type.clone().unwrap_or_else(|| "cpu".into()))
            });
        vec![NodeInfo {
            name: self.node.name.clone(),
            pool,
            gpu_type: self.node.gpu_type.clone(),
            gpus,
            cpu_milli: self.node.cpu_milli,
            memory_bytes: self.node.memory_bytes,
            cpu_milli_allocated: cpu,
            memory_bytes_allocated: mem,
            extended: self.node.extended.clone(),
        }]
    }

    /// Resource use of every running replica.
    pub fn top(&self) -> Vec<ReplicaUsageRow> {
        let replicas = self.store.running_replicas().unwrap_or_default();
        replicas
            .iter()
            .map(|r| {
                let usage = self.executor.usage(&r.name);
                ReplicaUsageRow {
                    namespace: r.namespace.clone(),
                    job: r.job.clone(),
                    replica: format!("{}-{}-{}", r.job, r.role, r.index),
                    pid: Some(r.record.pid),
                    cpu_seconds: usage.as_ref().map(|u| u.cpu_seconds),
                    memory_bytes: usage.as_ref().map(|u| u.memory_bytes),
                    gpus: r.record.gpu_indices.clone(),
                }
            })
            .collect()
    }

    /// The log file of a replica (`<job>-<role>-<index>`, or `<role>-<index>`), of its
    /// latest incarnation; kept after the job finishes or is deleted.
    pub fn log_path(&self, namespace: &str, job: &str, replica: &str) -> Option<PathBuf> {
        let short = replica
            .strip_prefix(job)
            .and_then(|r| r.strip_prefix('-'))
            .unwrap_or(replica);
        let name = format!("{namespace}.{job}-{short}");
        let replicas = self.store.replicas_named(&name).ok()?;
        if let Some(r) = replicas
            .iter()
            .max_by_key(|r| (r.started_ms, r.attempt, r.retry))
        {
            return Some(r.record.log_path());
        }
        // Records are dropped on restarts and deletion; the files stay.
        let dir = self.executor.replica_dir(&name, "x");
        let parent = dir.parent()?;
        std::fs::read_dir(parent)
            .ok()?
            .filter_map(Result::ok)
            .filter_map(|e| {
                let log = e.path().join("output.log");
                let modified = std::fs::metadata(&log).and_then(|m| m.modified()).ok()?;
                Some((modified, log))
            })
            .max()
            .map(|(_, p)| p)
    }

    /// Gauges and counters for `/metrics`.
    pub fn metrics(&self) -> MetricsSnapshot {
        let mut m = MetricsSnapshot {
            jobs_submitted_total: self.counters.jobs_submitted,
            admissions_total: self.counters.admissions,
            preemptions_total: self.counters.preemptions,
            replica_starts_total: self.counters.replica_starts,
            restarts_total: self.counters.restarts,
            jobs_succeeded_total: self.counters.succeeded,
            jobs_failed_total: self.counters.failed,
            ticks_total: self.counters.ticks,
            last_cycle_seconds: self.counters.last_cycle_seconds,
            last_tick_seconds: self.counters.last_tick_seconds,
            gpus_total: u64::from(self.node.gpus),
            ..MetricsSnapshot::default()
        };
        for j in self.jobs.values() {
            *m.jobs
                .entry(j.job.spec.queue_name().to_string())
                .or_default()
                .entry(state_of(j).as_str().to_string())
                .or_default() += 1;
        }
        for r in self.scheduler.running_jobs() {
            let gpus = r.request.total_gpus();
            m.gpus_allocated += gpus;
            *m.queue_gpus_used
                .entry(r.request.queue.clone())
                .or_default() += gpus;
        }
        m.running_replicas = self
            .store
            .replicas()
            .unwrap_or_default()
            .iter()
            .filter(|r| r.state == ProcessState::Running)
            .count() as u64;
        m
    }

    /// The configuration the cluster was opened with (tokens, ports, declared objects).
    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }

    /// Records the API address with the data directory's lock, for the message that a
    /// second `corral up` on the same directory gets.
    pub fn announce_address(&self, addr: &str) -> Result<(), ClusterError> {
        Ok(self.store.announce_address(addr)?)
    }

    /// Records an event; a failure to record it is not worth failing the operation for.
    fn event(
        &self,
        namespace: &str,
        job: &str,
        now: Timestamp,
        type_: EventType,
        reason: &str,
        message: String,
    ) {
        let _ = self.store.add_event(&StoredEvent {
            namespace: namespace.to_string(),
            job: job.to_string(),
            time_ms: millis(now),
            type_: type_.as_str().to_string(),
            reason: reason.to_string(),
            message,
        });
    }

    /// Re-reads a job's row into the cache after a write to it; the job is reconciled in
    /// the next tick.
    fn refresh_job(&mut self, namespace: &str, name: &str) -> Result<(), ClusterError> {
        if let Some(j) = self.store.job(namespace, name)? {
            self.unsettled.insert(j.uid.to_string());
            if let Some(old) = self.seq_of.insert(j.uid.clone(), j.seq)
                && old != j.seq
            {
                self.jobs.remove(&old);
            }
            self.jobs.insert(j.seq, j);
        }
        Ok(())
    }

    /// Drops a job removed from the store from the cache.
    fn forget_job(&mut self, uid: &str) {
        if let Some(seq) = self.seq_of.remove(uid) {
            self.jobs.remove(&seq);
        }
        self.unsettled.remove(uid);
    }

    /// Drops a job from the scheduler (pending or admitted) and frees what it holds.
    fn forget_in_scheduler(&mut self, uid: &str, key: &str) {
        self.unsettled.insert(uid.to_string());
        self.scheduler.finish(key);
        self.known.remove(uid);
        self.admitted.remove(uid);
        self.pending_reasons.remove(key);
    }

    /// One pass of the control loop: observe, schedule, reconcile, act.
    pub fn tick(&mut self, now: Timestamp) -> Result<TickReport, ClusterError> {
        let started = Instant::now();
        let mut report = TickReport::default();
        self.observe()?;
        self.schedule(now, &mut report)?;
        // Only unsettled jobs: settled ones (terminal, suspended, waiting in their queue,
        // running with nothing to do) would reconcile to no change and no action. Jobs
        // deleted since they were marked have nothing left to reconcile.
        let seq_of = &self.seq_of;
        self.unsettled.retain(|uid| seq_of.contains_key(uid));
        let mut seqs: Vec<i64> = self
            .unsettled
            .iter()
            .filter_map(|uid| self.seq_of.get(uid).copied())
            .collect();
        seqs.sort_unstable();
        let jobs: Vec<StoredJob> = seqs
            .iter()
            .filter_map(|s| self.jobs.get(s).cloned())
            .collect();
        for stored in &jobs {
            if stored.deleting {
                self.advance_deletion(stored, &mut report)?;
            } else {
                let started_before = report.started.len();
                let mut settled = self.reconcile_job(stored, now, &mut report)?;
                // Replicas just started run already: reconciling again records the job
                // Running in this pass rather than the next.
                if report.started.len() > started_before
                    && let Some(updated) =
                        self.seq_of.get(&stored.uid).and_then(|s| self.jobs.get(s))
                {
                    let updated = updated.clone();
                    settled = self.reconcile_job(&updated, now, &mut report)?;
                }
                if settled {
                    self.unsettled.remove(&stored.uid);
                }
            }
        }
        self.counters.ticks += 1;
        self.counters.last_tick_seconds = started.elapsed().as_secs_f64();
        Ok(report)
    }

    /// Step 1: what the executor saw change since the last pass, into the store.
    fn observe(&mut self) -> Result<(), ClusterError> {
        let changes = self.executor.poll(Instant::now());
        if changes.is_empty() {
            return Ok(());
        }
        for (name, state) in changes {
            let Some(current) = self.executor.record(&name).map(|r| r.incarnation.clone()) else {
                continue;
            };
            if let Some(r) = self
                .store
                .replicas_named(&name)?
                .into_iter()
                .find(|r| r.record.incarnation == current)
            {
                self.store
                    .set_replica_state(&r.name, r.attempt, r.retry, state)?;
                self.unsettled.insert(r.job_uid.to_string());
            }
        }
        Ok(())
    }

    /// Step 2: queued jobs to the scheduler, one cycle, admissions and preemptions recorded.
    fn schedule(&mut self, now: Timestamp, report: &mut TickReport) -> Result<(), ClusterError> {
        let candidates: Vec<StoredJob> = self
            .jobs
            .values()
            .filter(|stored| !self.skip_scheduling(stored))
            .cloned()
            .collect();
        for stored in &candidates {
            self.submit_to_scheduler(stored, report);
        }
        let cycle_start = Instant::now();
        let outcome = self.scheduler.cycle(millis(now));
        self.counters.last_cycle_seconds = cycle_start.elapsed().as_secs_f64();
        let seq_of_key: BTreeMap<String, i64> =
            if outcome.preempted.is_empty() && outcome.admitted.is_empty() {
                BTreeMap::new()
            } else {
                self.jobs.values().map(|j| (j.key(), j.seq)).collect()
            };
        let lookup = |c: &Cluster, key: &str| -> Option<StoredJob> {
            seq_of_key.get(key).and_then(|s| c.jobs.get(s)).cloned()
        };
        self.pending_reasons = outcome
            .pending
            .iter()
            .map(|p| (p.job.clone(), p.reason.to_string()))
            .collect();
        for p in &outcome.preempted {
            let Some(stored) = lookup(self, &p.job) else {
                continue;
            };
            let stored = &stored;
            // The job leaves the scheduler now; it re-enters through Requeue once its
            // replicas have stopped (so it cannot be admitted while they still run).
            self.forget_in_scheduler(&stored.uid, &p.job);
            self.store.drop_admission(&stored.uid)?;
            let grace = self.grace_period();
            self.preempted
                .insert(stored.uid.clone(), (grace, p.reason.to_string()));
            self.counters.preemptions += 1;
            report.preempted.push(p.job.clone());
            self.event(
                &stored.namespace,
                &stored.name,
                now,
                EventType::Warning,
                "Preempted",
                p.reason.to_string(),
            );
        }
        for a in outcome.admitted {
            let Some(stored) = lookup(self, &a.job) else {
                self.scheduler.finish(&a.job);
                continue;
            };
            let stored = &stored;
            let slots = replica_slots(&stored.job);
            let ports = match self.executor.ports_mut().allocate(&stored.uid, slots.len()) {
                Ok(p) => p,
                Err(e) => {
                    // Give the admission back; the job waits for ports in its queue.
                    self.forget_in_scheduler(&stored.uid, &a.job);
                    report.errors.push(format!("{}: {e}", a.job));
                    self.event(
                        &stored.namespace,
                        &stored.name,
                        now,
                        EventType::Warning,
                        "NoPorts",
                        e.to_string(),
                    );
                    continue;
                }
            };
            let port_rows: Vec<(String, u16)> = slots
                .iter()
                .zip(&ports)
                .map(|(id, p)| (id.key(), *p))
                .collect();
            let running = self
                .scheduler
                .running_jobs()
                .into_iter()
                .find(|r| r.request.key == a.job)
                .unwrap_or_else(|| RunningJob {
                    request: request_placeholder(&a.job),
                    placements: a.placements.clone(),
                    admitted_at: millis(now),
                });
            let stored_admission = StoredAdmission {
                pool: a.pool.clone(),
                gpu_type: a.gpu_type.clone(),
                running,
            };
            self.store
                .admit(&stored.uid, &stored_admission, &port_rows)?;
            self.counters.admissions += 1;
            report.admitted.push(a.job.clone());
            let gpus: Vec<String> = a
                .placements
                .iter()
                .filter(|p| !p.gpu_indices.is_empty())
                .map(|p| format!("{}-{}: {:?}", p.role, p.index, p.gpu_indices))
                .collect();
            let mut msg = format!("admitted to pool {}", a.pool);
            if !gpus.is_empty() {
                msg.push_str(&format!(" (GPUs {})", gpus.join(", ")));
            }
            self.event(
                &stored.namespace,
                &stored.name,
                now,
                EventType::Normal,
                "Admitted",
                msg,
            );
            self.unsettled.insert(stored.uid.to_string());
            self.admitted.insert(stored.uid.clone(), a);
        }
        Ok(())
    }

    /// Whether step 2 leaves a job out: the scheduler knows it already, or it is not
    /// waiting for an admission.
    fn skip_scheduling(&self, stored: &StoredJob) -> bool {
        // Every tick asks this of every job: the checks on the row come first, since most
        // jobs are finished, suspended or admitted, and the map lookups after them.
        if stored.deleting || stored.job.spec.run_policy.suspend || is_terminal(&stored.job) {
            return true;
        }
        // A job the lifecycle still considers admitted (or suspended) enters the queue
        // through its Requeue action, once its replicas have stopped.
        let admitted_or_suspended = stored.job.status.as_ref().is_some_and(|status| {
            conditions::is_true(status, ConditionType::Admitted)
                || conditions::is_true(status, ConditionType::Suspended)
        });
        admitted_or_suspended
            || self.known.contains_key(&stored.uid)
            || self.preempted.contains_key(&stored.uid)
    }

    fn grace_period(&self) -> Duration {
        self.config
            .file
            .settings
            .grace_period_seconds
            .map_or(DEFAULT_GRACE_PERIOD, Duration::from_secs)
    }

    fn submit_to_scheduler(&mut self, stored: &StoredJob, report: &mut TickReport) {
        let mut job = stored.job.clone();
        job.spec.apply_defaults();
        let priority = priority_of(&job, &self.classes);
        let request = match JobRequest::from_training_job(&job, priority, stored.submitted_ms) {
            Ok(r) => r,
            Err(e) => {
                report.errors.push(format!("{}: {e}", stored.key()));
                return;
            }
        };
        match self.scheduler.submit(request) {
            Ok(()) => {
                self.known.insert(stored.uid.clone(), stored.key());
            }
            Err(e) => report.errors.push(format!("{}: {e}", stored.key())),
        }
    }

    /// The scheduler's current decision about a job, for the lifecycle.
    fn admission_state(&self, uid: &str) -> AdmissionState {
        if let Some((grace_period, message)) = self.preempted.get(uid) {
            return AdmissionState::Preempted {
                grace_period: *grace_period,
                message: message.clone(),
            };
        }
        match self.admitted.get(uid) {
            Some(a) => AdmissionState::Admitted(a.clone()),
            None => AdmissionState::Waiting,
        }
    }

    /// Steps 3 and 4 for one job: reconcile, persist the status, apply the actions.
    /// Returns whether the job is settled: nothing changed, nothing to do, no timer.
    fn reconcile_job(
        &mut self,
        stored: &StoredJob,
        now: Timestamp,
        report: &mut TickReport,
    ) -> Result<bool, ClusterError> {
        let replicas: Vec<StoredReplica> = self.store.replicas_of(&stored.uid)?;
        let observed: Vec<ObservedReplica> = replicas
            .iter()
            .filter_map(|r| {
                let role: Role = r.role.parse().ok()?;
                Some(ObservedReplica::new(
                    ReplicaId::new(role, r.index),
                    Incarnation {
                        attempt: r.attempt,
                        retry: r.retry,
                    },
                    phase_of(r.state),
                ))
            })
            .collect();
        let admission = self.admission_state(&stored.uid);
        let out = lifecycle::reconcile(&stored.job, &observed, &admission, now);
        if let Some(after) = out.requeue_after {
            report.next_tick_in = Some(report.next_tick_in.map_or(after, |n| n.min(after)));
        }
        let unchanged = stored.job.status.as_ref() == Some(&out.status);
        let settled = unchanged && out.actions.is_empty() && out.requeue_after.is_none();
        let old = stored.job.status.clone().unwrap_or_default();
        if !unchanged {
            // The lifecycle's contract: the status is durable before anything is done.
            self.store.save_status(&stored.uid, &out.status)?;
            self.refresh_job(&stored.namespace, &stored.name)?;
            self.status_events(stored, &old, &out.status, now, report);
        }
        let mut job = stored.job.clone();
        job.status = Some(out.status.clone());
        let starts = out
            .actions
            .iter()
            .any(|a| matches!(a, Action::Start { .. }));
        // Consecutive starts (a gang) go to the executor together, which launches them in
        // parallel; any other action first flushes the starts before it, keeping the order.
        let mut pending: Vec<PendingStart> = Vec::new();
        for action in &out.actions {
            if let Action::Start {
                replica,
                incarnation,
                placement,
            } = action
            {
                let start = (*replica, *incarnation, placement.gpu_indices.as_slice());
                if let Some(p) = self.prepare_start(stored, &job, start, &replicas, report)? {
                    pending.push(p);
                }
                continue;
            }
            self.start_replicas(stored, std::mem::take(&mut pending), now, report)?;
            match action {
                Action::Start { .. } => {}
                Action::Stop {
                    replica,
                    incarnation,
                    grace_period,
                    delete,
                    reason,
                } => {
                    let name = process_name(&stored.namespace, &stored.name, *replica);
                    let Some(r) = replicas.iter().find(|r| {
                        r.name == name
                            && r.attempt == incarnation.attempt
                            && r.retry == incarnation.retry
                    }) else {
                        continue;
                    };
                    self.stop_replica(r, *grace_period, *delete, reason.as_str(), report)?;
                }
                Action::Release => {
                    self.forget_in_scheduler(&stored.uid, &stored.key());
                    self.preempted.remove(&stored.uid);
                    self.store.release(&stored.uid)?;
                    self.executor.ports_mut().release(&stored.uid);
                }
                Action::Requeue => {
                    if starts {
                        // A resume that the scheduler admitted in the same pass: the
                        // admission is the one the replicas start with.
                        continue;
                    }
                    if self.admitted.contains_key(&stored.uid) {
                        self.forget_in_scheduler(&stored.uid, &stored.key());
                    }
                    let was_preempted = self.preempted.remove(&stored.uid).is_some();
                    self.store.release(&stored.uid)?;
                    self.executor.ports_mut().release(&stored.uid);
                    if !self.known.contains_key(&stored.uid) && !job.spec.run_policy.suspend {
                        let requeued = StoredJob {
                            job: job.clone(),
                            ..stored.clone()
                        };
                        self.submit_to_scheduler(&requeued, report);
                    }
                    if was_preempted {
                        self.event(
                            &stored.namespace,
                            &stored.name,
                            now,
                            EventType::Normal,
                            "Requeued",
                            "all replicas stopped; back in the queue".into(),
                        );
                    }
                }
                Action::DeleteJob => {
                    self.store.mark_deleting(&stored.uid)?;
                    self.refresh_job(&stored.namespace, &stored.name)?;
                    let deleting = StoredJob {
                        job: job.clone(),
                        deleting: true,
                        ..stored.clone()
                    };
                    self.advance_deletion(&deleting, report)?;
                }
            }
        }
        self.start_replicas(stored, pending, now, report)?;
        Ok(settled)
    }

    /// Events for the conditions that became true in this pass.
    fn status_events(
        &mut self,
        stored: &StoredJob,
        old: &corral_api::TrainingJobStatus,
        new: &corral_api::TrainingJobStatus,
        now: Timestamp,
        report: &mut TickReport,
    ) {
        for c in &new.conditions {
            if c.status != ConditionStatus::True {
                continue;
            }
            let before = old.conditions.iter().find(|o| o.type_ == c.type_);
            let same = before.is_some_and(|o| {
                o.status == c.status && o.reason == c.reason && o.message == c.message
            });
            if same {
                continue;
            }
            let (type_, reason) = match c.type_ {
                ConditionType::Restarting => {
                    self.counters.restarts += 1;
                    (EventType::Warning, "Restarting")
                }
                ConditionType::Failed => {
                    self.counters.failed += 1;
                    report.finished.push(stored.key());
                    (EventType::Warning, "Failed")
                }
                ConditionType::Succeeded => {
                    self.counters.succeeded += 1;
                    report.finished.push(stored.key());
                    (EventType::Normal, "Succeeded")
                }
                ConditionType::Running => (EventType::Normal, "Running"),
                ConditionType::Suspended => (EventType::Normal, "Suspended"),
                // Admission and preemption have events of their own (with placement and
                // reason); Queued is where every job starts.
                ConditionType::Admitted | ConditionType::Queued => continue,
            };
            self.event(
                &stored.namespace,
                &stored.name,
                now,
                type_,
                reason,
                c.message.clone(),
            );
        }
    }

    /// What starting a replica takes: its process spec, or nothing when it must not start
    /// now (already recorded or running, its GPUs still held, no launch env).
    fn prepare_start(
        &mut self,
        stored: &StoredJob,
        job: &TrainingJob,
        start: (ReplicaId, Incarnation, &[u32]),
        replicas: &[StoredReplica],
        report: &mut TickReport,
    ) -> Result<Option<PendingStart>, ClusterError> {
        let (id, inc, gpu_indices) = start;
        let name = process_name(&stored.namespace, &stored.name, id);
        if replicas
            .iter()
            .any(|r| r.name == name && r.attempt == inc.attempt && r.retry == inc.retry)
        {
            return Ok(None);
        }
        // No two processes of one name at once.
        if self
            .executor
            .state(&name)
            .is_some_and(|s| s == ProcessState::Running)
        {
            return Ok(None);
        }
        // A GPU is never shared: processes of a preempted job may still hold the GPUs
        // during their grace period; the start waits for them (the lifecycle asks again).
        if !gpu_indices.is_empty() {
            let busy = self.store.running_replicas()?.into_iter().any(|r| {
                r.job_uid != stored.uid
                    && r.record.gpu_indices.iter().any(|g| gpu_indices.contains(g))
            });
            if busy {
                return Ok(None);
            }
        }
        let ports: BTreeMap<String, u16> = self
            .store
            .ports()?
            .into_iter()
            .filter(|(_, uid, _)| *uid == stored.uid)
            .map(|(port, _, replica)| (replica, port))
            .collect();
        let label = incarnation_label(&stored.uid, inc);
        let dir = self.executor.replica_dir(&name, &label);
        let addresses =
            corral_core::launch::Addresses::local(job, &self.config.host_address, |rid| {
                ports.get(&rid.key()).copied()
            });
        let options = corral_core::launch::LaunchOptions {
            gpu_indices: Some(gpu_indices.to_vec()),
            mpi_config_dir: dir.display().to_string(),
        };
        let launch = match corral_core::launch::replica_env(job, id, &addresses, &options) {
            Ok(l) => l,
            Err(e) => {
                report.errors.push(format!("{name}: {e}"));
                return Ok(None);
            }
        };
        let mut env: Vec<(String, String)> = launch
            .env
            .iter()
            .filter_map(|v| v.value.clone().map(|val| (v.name.clone(), val)))
            .collect();
        env.push(("CORRAL_JOB".into(), stored.name.clone()));
        env.push(("CORRAL_NAMESPACE".into(), stored.namespace.clone()));
        env.push(("CORRAL_REPLICA".into(), id.name(&stored.name)));
        env.push(("CORRAL_INCARNATION".into(), inc.to_string()));
        let files = launch
            .files
            .iter()
            .map(|f| {
                let p = PathBuf::from(&f.path);
                let rel = p.strip_prefix(&dir).map(PathBuf::from).unwrap_or(p);
                (rel, f.contents.clone())
            })
            .collect();
        let mut spec = job.spec.clone();
        spec.apply_defaults();
        let Some(rspec) = spec.replicas.get(&id.role) else {
            return Ok(None);
        };
        let mut command = rspec.template.command.clone();
        command.extend(rspec.template.args.iter().cloned());
        let cpu_milli = rspec
            .resources
            .cpu
            .as_ref()
            .and_then(|q| q.milli().ok())
            .and_then(|v| u64::try_from(v).ok());
        let memory_bytes = rspec
            .resources
            .memory
            .as_ref()
            .and_then(|q| q.units().ok())
            .and_then(|v| u64::try_from(v).ok());
        let process = ReplicaProcessSpec {
            name: name.clone(),
            job: stored.key(),
            incarnation: label,
            command,
            env,
            working_dir: rspec.template.working_dir.as_ref().map(PathBuf::from),
            files,
            cpu_milli,
            memory_bytes,
            gpu_indices: gpu_indices.to_vec(),
        };
        let port = ports.get(&id.key()).copied();
        Ok(Some(PendingStart {
            id,
            inc,
            port,
            process,
        }))
    }

    /// Starts the prepared replicas together and records each one that runs.
    fn start_replicas(
        &mut self,
        stored: &StoredJob,
        pending: Vec<PendingStart>,
        now: Timestamp,
        report: &mut TickReport,
    ) -> Result<(), ClusterError> {
        if pending.is_empty() {
            return Ok(());
        }
        let specs: Vec<ReplicaProcessSpec> = pending.iter().map(|p| p.process.clone()).collect();
        let results = self.executor.start_all(&specs);
        let mut first_error = None;
        for (p, result) in pending.into_iter().zip(results) {
            if let Err(e) = self.record_start(stored, p, result, now, report)
                && first_error.is_none()
            {
                first_error = Some(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Records a replica the executor started (or the reason it did not).
    fn record_start(
        &mut self,
        stored: &StoredJob,
        pending: PendingStart,
        result: Result<ProcessRecord, ExecutorError>,
        now: Timestamp,
        report: &mut TickReport,
    ) -> Result<(), ClusterError> {
        let PendingStart {
            id,
            inc,
            port,
            process,
        } = pending;
        let name = process.name;
        let gpu_indices = process.gpu_indices;
        let record = match result {
            Ok(r) => r,
            Err(e) => {
                report.errors.push(format!("{name}: {e}"));
                self.event(
                    &stored.namespace,
                    &stored.name,
                    now,
                    EventType::Warning,
                    "FailedStart",
                    format!("replica {}: {e}", id.name(&stored.name)),
                );
                return Ok(());
            }
        };
        let row = StoredReplica {
            name: name.clone(),
            namespace: stored.namespace.clone(),
            job: stored.name.clone(),
            job_uid: stored.uid.clone(),
            role: id.role.as_str().to_string(),
            index: id.index,
            attempt: inc.attempt,
            retry: inc.retry,
            port,
            started_ms: millis(now),
            state: ProcessState::Running,
            record: record.clone(),
        };
        if let Err(e) = self.store.put_replica(&row) {
            // Unrecorded, a restart could not find it: it must not run.
            let _ = self.executor.stop(&name, Duration::ZERO);
            return Err(e.into());
        }
        self.counters.replica_starts += 1;
        report.started.push(id.name(&stored.name));
        let mut msg = format!(
            "started replica {} (incarnation {inc}, pid {}",
            id.name(&stored.name),
            record.pid
        );
        if let Some(p) = port {
            msg.push_str(&format!(", port {p}"));
        }
        if !gpu_indices.is_empty() {
            msg.push_str(&format!(", GPUs {gpu_indices:?}"));
        }
        msg.push(')');
        self.event(
            &stored.namespace,
            &stored.name,
            now,
            EventType::Normal,
            "Started",
            msg,
        );
        Ok(())
    }

    fn stop_replica(
        &mut self,
        r: &StoredReplica,
        grace: Duration,
        delete: bool,
        reason: &str,
        report: &mut TickReport,
    ) -> Result<(), ClusterError> {
        let current = self
            .executor
            .record(&r.name)
            .is_some_and(|rec| rec.incarnation == r.record.incarnation);
        if r.state == ProcessState::Running && current {
            let key = (r.name.clone(), r.record.incarnation.clone());
            if !self.stopping.contains(&key) {
                if let Err(e) = self.executor.stop(&r.name, grace) {
                    report.errors.push(format!("stopping {}: {e}", r.name));
                } else {
                    self.stopping.insert(key);
                    report
                        .stopped
                        .push(format!("{}-{}-{} ({reason})", r.job, r.role, r.index));
                }
            }
            return Ok(());
        }
        if r.state == ProcessState::Running {
            // Not the executor's current incarnation, yet recorded running: it was never
            // adopted (cannot happen after open); observe it as gone.
            self.store
                .set_replica_state(&r.name, r.attempt, r.retry, ProcessState::Gone)?;
            self.unsettled.insert(r.job_uid.to_string());
            return Ok(());
        }
        // Ended: with delete the record goes, so that the name is free.
        if delete {
            self.store.remove_replica(&r.name, r.attempt, r.retry)?;
            self.stopping
                .remove(&(r.name.clone(), r.record.incarnation.clone()));
            if current {
                self.executor.forget(&r.name);
            }
        }
        Ok(())
    }

    /// A deleted job: stop every replica, and once none runs, remove the job.
    fn advance_deletion(
        &mut self,
        stored: &StoredJob,
        report: &mut TickReport,
    ) -> Result<(), ClusterError> {
        let replicas: Vec<StoredReplica> = self.store.replicas_of(&stored.uid)?;
        let grace = self.grace_period();
        let mut running = false;
        for r in &replicas {
            if r.state == ProcessState::Running {
                running = true;
                self.stop_replica(r, grace, true, "Deleted", report)?;
            }
        }
        if running {
            return Ok(());
        }
        for r in &replicas {
            self.stopping
                .remove(&(r.name.clone(), r.record.incarnation.clone()));
            if self
                .executor
                .record(&r.name)
                .is_some_and(|rec| rec.incarnation == r.record.incarnation)
            {
                self.executor.forget(&r.name);
            }
        }
        self.forget_in_scheduler(&stored.uid, &stored.key());
        self.preempted.remove(&stored.uid);
        self.executor.ports_mut().release(&stored.uid);
        self.store.remove_job(&stored.uid)?;
        self.forget_job(&stored.uid);
        report.deleted.push(stored.key());
        Ok(())
    }
}

/// A request for an admission the scheduler no longer lists (cannot happen: it was just
/// admitted); keeps the store consistent if it does.
fn request_placeholder(key: &str) -> JobRequest {
    JobRequest {
        key: key.to_string(),
        queue: corral_api::DEFAULT_QUEUE.to_string(),
        priority: 0,
        submit_time: 0,
        groups: Vec::new(),
        throughput: BTreeMap::new(),
        preemptible: true,
        node_selector: BTreeMap::new(),
        tolerations: Vec::new(),
    }
}

fn phase_name(p: ReplicaPhase) -> &'static str {
    match p {
        ReplicaPhase::Pending => "Pending",
        ReplicaPhase::Starting => "Starting",
        ReplicaPhase::Running => "Running",
        ReplicaPhase::Succeeded => "Succeeded",
        ReplicaPhase::Failed { .. } => "Failed",
        ReplicaPhase::Gone => "Gone",
    }
}

fn summary(j: &StoredJob, ready: u32) -> JobSummary {
    // Defaults change none of the fields read here (counts, GPUs, queue, framework), so
    // the spec is read as stored rather than cloned and defaulted: `list` of 10,000 jobs.
    let spec = &j.job.spec;
    let status = j.job.status.as_ref();
    JobSummary {
        namespace: j.namespace.clone(),
        name: j.name.clone(),
        uid: j.uid.clone(),
        framework: spec.framework.as_str().to_string(),
        queue: spec.queue_name().to_string(),
        state: state_of(j),
        replicas_ready: ready,
        replicas_total: u32::try_from(spec.total_replicas()).unwrap_or(u32::MAX),
        gpus: spec.total_gpus(),
        created: timestamp(j.submitted_ms),
        restarts: status.map_or(0, |s| s.restart_count),
        preemptions: status.map_or(0, |s| s.preemption_count),
    }
}

/// Replicas of the job's current attempt that are running or exited cleanly, by job uid.
fn ready_replicas<'a>(
    jobs: impl Iterator<Item = &'a StoredJob>,
    replicas: &[StoredReplica],
) -> HashMap<String, u32> {
    let attempt: HashMap<&str, u32> = jobs
        .map(|j| {
            (
                j.uid.as_str(),
                j.job.status.as_ref().map_or(0, |s| s.attempt),
            )
        })
        .collect();
    let mut ready = HashMap::new();
    for r in replicas {
        if attempt.get(r.job_uid.as_str()) == Some(&r.attempt)
            && matches!(
                r.state,
                ProcessState::Running | ProcessState::Exited { code: 0 }
            )
        {
            *ready.entry(r.job_uid.clone()).or_insert(0) += 1;
        }
    }
    ready
}

/// What the embedded cluster needs beyond validation: a command to run, the namespace.
fn check_local(job: &TrainingJob, namespace: &str, errors: &mut Vec<FieldProblem>) {
    if let Some(ns) = &job.metadata.namespace
        && ns != namespace
    {
        errors.push(FieldProblem {
            path: "metadata.namespace".into(),
            message: format!(
                "`{ns}` differs from the namespace of the request (`{namespace}`); remove it \
                 or submit to `{ns}`"
            ),
        });
    }
    if let Err(e) = corral_api::validate::check_dns1123_label(namespace) {
        errors.push(FieldProblem {
            path: "metadata.namespace".into(),
            message: e,
        });
    }
    for (role, spec) in &job.spec.replicas {
        if spec.template.command.is_empty() {
            errors.push(FieldProblem {
                path: format!("spec.replicas.{role}.template.command"),
                message: "the embedded cluster runs commands, not images: set `command`".into(),
            });
        }
        for (i, v) in spec.template.env.iter().enumerate() {
            if v.value.is_none() && v.value_from.is_some() {
                errors.push(FieldProblem {
                    path: format!("spec.replicas.{role}.template.env[{i}].valueFrom"),
                    message: "valueFrom works on Kubernetes only; give a literal `value`".into(),
                });
            }
        }
    }
}

/// The node, pools and queues of this machine and its configuration.
fn build_cluster(
    config: &ClusterConfig,
    inv: &NodeInventory,
) -> Result<(Node, Vec<NodePoolConfig>, Vec<QueueConfig>), ClusterError> {
    let o = &config.file.settings.node;
    let gpus = o
        .gpus
        .unwrap_or_else(|| u32::try_from(inv.gpus.len()).unwrap_or(64).min(64));
    let gpu_type = if gpus == 0 {
        None
    } else {
        o.gpu_type
            .clone()
            .or_else(|| inv.gpus.first().map(|g| g.gpu_type.clone()))
            .or_else(|| Some("FAKE-GPU".to_string()))
    };
    let cpu_milli = match &o.cpu {
        Some(q) => q
            .milli()
            .ok()
            .and_then(|v| u64::try_from(v).ok())
            .ok_or_else(|| ClusterError::Config("node.cpu: not a valid quantity".into()))?,
        None => u64::from(inv.cpus).saturating_mul(1000),
    };
    let memory_bytes = match &o.memory {
        Some(q) => q
            .units()
            .ok()
            .and_then(|v| u64::try_from(v).ok())
            .ok_or_else(|| ClusterError::Config("node.memory: not a valid quantity".into()))?,
        None => inv.memory_bytes,
    };
    let node = Node {
        extended: o.extended.clone(),
        ..Node::new(
            o.name.clone().unwrap_or_else(|| inv.hostname.clone()),
            gpu_type.clone(),
            gpus,
            cpu_milli,
            memory_bytes,
        )
    };
    let pools: Vec<NodePoolConfig> = config
        .file
        .node_pools
        .iter()
        .map(NodePoolConfig::from_node_pool)
        .collect();
    let mut queues: Vec<QueueConfig> = config
        .file
        .queues
        .iter()
        .map(QueueConfig::from_queue)
        .collect::<Result<_, _>>()
        .map_err(|e| ClusterError::Config(e.to_string()))?;
    if !queues.iter().any(|q| q.name == corral_api::DEFAULT_QUEUE) {
        let unlimited = PoolQuota {
            nominal: ResourceAmount::UNLIMITED,
            borrowing_limit: None,
            lending_limit: None,
        };
        let names: Vec<String> = if pools.is_empty() {
            vec![gpu_type.unwrap_or_else(|| "cpu".to_string())]
        } else {
            pools.iter().map(|p| p.name.clone()).collect()
        };
        queues.push(QueueConfig {
            name: corral_api::DEFAULT_QUEUE.to_string(),
            cohort: None,
            weight: 1,
            quotas: names.into_iter().map(|p| (p, unlimited)).collect(),
        });
    }
    Ok((node, pools, queues))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_states_map_to_replica_phases() {
        assert_eq!(
            phase_of(ProcessState::Exited { code: 0 }),
            ReplicaPhase::Succeeded
        );
        assert_eq!(
            phase_of(ProcessState::Exited { code: 3 }),
            ReplicaPhase::Failed {
                exit_code: 3,
                reason: FailureReason::Error
            }
        );
        assert_eq!(
            phase_of(ProcessState::Signaled { signal: 9 }),
            ReplicaPhase::Failed {
                exit_code: 137,
                reason: FailureReason::Error
            }
        );
        assert_eq!(
            phase_of(ProcessState::OomKilled),
            ReplicaPhase::Failed {
                exit_code: 137,
                reason: FailureReason::OomKilled
            }
        );
        assert_eq!(phase_of(ProcessState::Gone), ReplicaPhase::Gone);
        assert_eq!(phase_of(ProcessState::Running), ReplicaPhase::Running);
    }

    #[test]
    fn the_cluster_can_move_between_threads() {
        fn send<T: Send>() {}
        send::<Cluster>();
    }

    #[test]
    fn names_are_unique_across_namespaces_and_recreations() {
        let id = ReplicaId::new(Role::Worker, 1);
        assert_ne!(process_name("a", "j", id), process_name("b", "j", id));
        let inc = Incarnation {
            attempt: 0,
            retry: 0,
        };
        assert_ne!(
            incarnation_label("aaaaaaaa11", inc),
            incarnation_label("bbbbbbbb22", inc)
        );
    }
}
