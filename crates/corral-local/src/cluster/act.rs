//! Carrying out a step of the control plane: persist its changes (status, admissions with
//! their ports, deletions) before anything is done, record its events, then start and stop
//! replica processes and record what happened. No decision about a job is taken here: a start
//! that could not be made is an observation for the plane (`ControlPlane::start_failed`), a
//! spec that cannot be launched a refusal (`ControlPlane::launch_rejected`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use corral_api::TrainingJob;
use corral_core::control::{
    Change, EventType, HeldAdmission, JobEvent, LaunchRejection, StartFailure, Step, event_reason,
};
use corral_core::lifecycle::{Action, Incarnation, ObservedReplica, ReplicaId};
use corral_core::sched::RunningJob;
use jiff::Timestamp;

use super::engine::{Cluster, millis};
use super::replicas::{
    incarnation_label, incarnation_prefix, observed, process_name, replica_slots,
};
use super::{ClusterError, TickReport};
use crate::executor::container::ContainerRequest;
use crate::executor::{ExecutorError, ProcessRecord, ProcessState, ReplicaProcessSpec};
use crate::store::{StoredAdmission, StoredEvent, StoredJob, StoredReplica};

/// What every start of one job's replicas in a step reads, read once for all of them:
/// its row, the plane's view of it, its ports and the incarnations already recorded.
struct StartContext {
    stored: StoredJob,
    job: TrainingJob,
    /// Port by replica key.
    ports: BTreeMap<String, u16>,
    /// (replica name, attempt, retry) of every recorded incarnation of the job.
    recorded: BTreeSet<(String, u32, u32)>,
}

/// A replica ready to start: what the executor runs and what the store records.
struct PendingStart {
    id: ReplicaId,
    inc: Incarnation,
    port: Option<u16>,
    process: ReplicaProcessSpec,
}

impl Cluster {
    /// Persists a step, records its events and applies its actions. Returns whether any
    /// action was carried out (the plane then has new observations to settle).
    pub(super) fn apply(
        &mut self,
        step: Step,
        now: Timestamp,
        report: &mut TickReport,
    ) -> Result<bool, ClusterError> {
        if let Some(after) = step.wake_in {
            report.next_tick_in = Some(report.next_tick_in.map_or(after, |n| n.min(after)));
        }
        // Changes and events in one transaction, committed before any action.
        if !step.changes.is_empty() || !step.events.is_empty() {
            self.store.begin_batch()?;
            let mut persisted = Ok(());
            for change in step.changes {
                persisted = self.persist(change, now, report);
                if persisted.is_err() {
                    break;
                }
            }
            if persisted.is_ok() {
                for e in step.events {
                    self.record_event(&e, now, report);
                }
                // The intervals the step's admission changes closed, with those changes.
                persisted = self.store.add_usage(&step.usage).map_err(Into::into);
            }
            // What was written stays written, as it would have one write at a time.
            self.store.commit_batch()?;
            persisted?;
        }
        let acted = !step.actions.is_empty();
        // Consecutive starts of one job (a gang) go to the executor together, which
        // launches them in parallel; anything else first flushes the starts before it.
        let mut batch: Vec<PendingStart> = Vec::new();
        let mut batch_job = String::new();
        let mut context: Option<StartContext> = None;
        for a in step.actions {
            if batch_job != a.job {
                self.start_replicas(&batch_job, std::mem::take(&mut batch), now, report)?;
                batch_job = a.job.clone();
                context = None;
            }
            match a.action {
                Action::Start {
                    replica,
                    incarnation,
                    placement,
                } => {
                    if context.is_none() {
                        context = self.start_context(&a.job)?;
                    }
                    let Some(ctx) = &context else {
                        continue;
                    };
                    if let Some(p) =
                        self.prepare_start(ctx, replica, incarnation, &placement.gpu_indices)?
                    {
                        batch.push(p);
                    }
                }
                Action::Stop {
                    replica,
                    incarnation,
                    grace_period,
                    delete,
                    reason,
                } => {
                    self.start_replicas(&a.job, std::mem::take(&mut batch), now, report)?;
                    // What the starts read may change from here on.
                    context = None;
                    self.stop_replica(
                        &a.job,
                        (replica, incarnation),
                        grace_period,
                        delete,
                        reason.as_str(),
                        report,
                    )?;
                }
                // The plane handles the rest itself.
                _ => {}
            }
        }
        self.start_replicas(&batch_job, batch, now, report)?;
        Ok(acted)
    }

    fn persist(
        &mut self,
        change: Change,
        now: Timestamp,
        report: &mut TickReport,
    ) -> Result<(), ClusterError> {
        match change {
            Change::Status { job, status } => {
                // The row changes in the store and in the cache alike, without reading it back.
                let Some(stored) = self.live.get_mut(&job) else {
                    return Ok(());
                };
                self.store.save_status(&stored.uid, &status)?;
                stored.job.status = Some(status);
                self.resummarize(&job);
            }
            Change::Admission {
                job,
                admission: Some(held),
            } => {
                let Some(stored) = self.stored(&job).cloned() else {
                    return Ok(());
                };
                self.record_admission(&stored, held, report)?;
                self.ports_to_release.remove(&stored.uid);
                report.admitted.push(job);
            }
            Change::Admission {
                job,
                admission: None,
            } => {
                let Some(uid) = self.uid_of(&job).map(str::to_string) else {
                    return Ok(());
                };
                // Its replicas may still stop: the ports go once none runs.
                self.store.drop_admission(&uid)?;
                self.ports_to_release.insert(uid, job);
            }
            Change::Deleting { job } => {
                let Some(stored) = self.live.get_mut(&job) else {
                    return Ok(());
                };
                self.store.mark_deleting(&stored.uid)?;
                stored.deleting = true;
                self.resummarize(&job);
            }
            Change::Retired { job } => {
                // Its last status is stored already; the summary is all the views need.
                // The executor stops tracking its ended replicas (their records and logs
                // stay in the store and on disk), so a pass does not grow with history.
                self.pack_row(&job);
                if let Some(stored) = self.live.remove(&job) {
                    for r in self.store.replicas_of(&stored.uid)? {
                        if self
                            .executor
                            .record(&r.name)
                            .is_some_and(|rec| rec.incarnation == r.record.incarnation)
                        {
                            self.executor.forget(&r.name);
                        }
                    }
                }
            }
            Change::Removed { job } => {
                // A retired job is known by its summary only.
                let Some(uid) = self.uid_of(&job).map(str::to_string) else {
                    return Ok(());
                };
                // Every replica name the job had: a live job's spec's (replicas stopped
                // for the deletion took their records with them) and those still recorded
                // (a retired job's are all).
                let mut names: BTreeSet<String> = self
                    .stored(&job)
                    .map(replica_names)
                    .into_iter()
                    .flatten()
                    .collect();
                for r in self.store.replicas_of(&uid)? {
                    self.stopping
                        .remove(&(r.name.clone(), r.record.incarnation.clone()));
                    if self
                        .executor
                        .record(&r.name)
                        .is_some_and(|rec| rec.incarnation == r.record.incarnation)
                    {
                        self.executor.forget(&r.name);
                    }
                    names.insert(r.name);
                }
                // Its files go with it: logs no one can ask for any more.
                for name in names {
                    if let Err(e) = self
                        .executor
                        .discard_files(&name, &incarnation_prefix(&uid))
                    {
                        report.errors.push(format!("{name}: {e}"));
                    }
                }
                if let Err(e) = self
                    .executor
                    .discard_scratch(&job, &incarnation_prefix(&uid))
                {
                    report.errors.push(format!("{job}: {e}"));
                }
                self.executor.ports_mut().release(&uid);
                self.ports_to_release.remove(&uid);
                self.store.remove_job(&uid)?;
                if let Some((namespace, name)) = job.split_once('/')
                    && let Err(e) = self.discard_job_output(namespace, name, &uid, now)
                {
                    report.errors.push(format!("{job}: {e}"));
                }
                // The job's code snapshot goes with it.
                if let Err(e) = self.code_store().remove(&uid) {
                    report
                        .errors
                        .push(format!("{job}: removing its code snapshot: {e}"));
                }
                self.forget_job(&job);
                report.deleted.push(job);
            }
        }
        Ok(())
    }

    /// Stores an admission with the ports of its replica slots (kept when the job moves).
    fn record_admission(
        &mut self,
        stored: &StoredJob,
        held: HeldAdmission,
        report: &mut TickReport,
    ) -> Result<(), ClusterError> {
        let slots = replica_slots(&stored.job);
        let mut ports = self.executor.ports_mut().ports_of(&stored.uid);
        if ports.len() != slots.len() {
            self.executor.ports_mut().release(&stored.uid);
            ports = match self.executor.ports_mut().allocate(&stored.uid, slots.len()) {
                Ok(p) => p,
                Err(e) => {
                    // Its starts cannot be made without them: each is a start failure for
                    // the plane to decide on (see `prepare_start`).
                    report.errors.push(format!("{}: {e}", stored.key()));
                    Vec::new()
                }
            };
        }
        let port_rows: Vec<(String, u16)> = slots
            .iter()
            .zip(&ports)
            .map(|(id, p)| (id.key(), *p))
            .collect();
        // The scheduler's request as the plane made it (an admitted job always has one).
        let Some(request) = self.plane.request(&stored.key()).cloned() else {
            return Ok(());
        };
        let admission = StoredAdmission {
            pool: held.admission.pool.clone(),
            gpu_type: held.admission.gpu_type.clone(),
            running: RunningJob {
                request,
                placements: held.admission.placements.clone(),
                admitted_at: held.admitted_at,
            },
        };
        self.store.admit(&stored.uid, &admission, &port_rows)?;
        Ok(())
    }

    /// Ports of jobs that gave their admission back are released once none of their
    /// replicas runs.
    pub(super) fn release_idle_ports(&mut self) -> Result<(), ClusterError> {
        let held: Vec<(String, String)> = self
            .ports_to_release
            .iter()
            .map(|(u, k)| (u.clone(), k.clone()))
            .collect();
        for (uid, key) in held {
            let running = self
                .store
                .replicas_of(&uid)?
                .iter()
                .any(|r| r.state == ProcessState::Running);
            if !running && self.plane.admission(&key).is_none() {
                self.store.release(&uid)?;
                self.executor.ports_mut().release(&uid);
                self.ports_to_release.remove(&uid);
            }
        }
        Ok(())
    }

    /// Records an event of the plane (or the shell's own) and counts it for `/metrics`.
    fn record_event(&mut self, e: &JobEvent, now: Timestamp, report: &mut TickReport) {
        match e.reason {
            event_reason::ADMITTED => self.counters.admissions += 1,
            event_reason::PREEMPTED => {
                self.counters.preemptions += 1;
                report.preempted.push(e.job.clone());
            }
            event_reason::RESTARTING => self.counters.restarts += 1,
            event_reason::SUCCEEDED => {
                self.counters.succeeded += 1;
                report.finished.push(e.job.clone());
            }
            event_reason::FAILED => {
                self.counters.failed += 1;
                report.finished.push(e.job.clone());
            }
            _ => {}
        }
        let Some((namespace, job)) = e.job.split_once('/') else {
            return;
        };
        self.event(namespace, job, now, e.type_, e.reason, e.message.clone());
    }

    /// Records an event; a failure to record it is not worth failing the operation for.
    pub(super) fn event(
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

    /// What the starts of a job's replicas read, once per job and step (a gang of 8 read
    /// its row, its ports and its recorded replicas 8 times before); `None` when the job
    /// is gone.
    fn start_context(&self, key: &str) -> Result<Option<StartContext>, ClusterError> {
        let Some(stored) = self.stored(key).cloned() else {
            return Ok(None);
        };
        // The plane's view of the job carries the status this step persisted.
        let Some(job) = self.plane.job(key).cloned() else {
            return Ok(None);
        };
        let ports = self.store.ports_of(&stored.uid)?.into_iter().collect();
        let recorded = self
            .store
            .replicas_of(&stored.uid)?
            .into_iter()
            .map(|r| (r.name, r.attempt, r.retry))
            .collect();
        Ok(Some(StartContext {
            stored,
            job,
            ports,
            recorded,
        }))
    }

    /// What starting a replica takes: its process spec, or nothing when it must not start
    /// now (already recorded or running) or cannot: no port of its own (a start failure) or
    /// no launch env for its spec (a launch refused), which the plane is told.
    fn prepare_start(
        &mut self,
        ctx: &StartContext,
        id: ReplicaId,
        inc: Incarnation,
        gpu_indices: &[u32],
    ) -> Result<Option<PendingStart>, ClusterError> {
        let StartContext {
            stored,
            job,
            ports,
            recorded,
        } = ctx;
        let name = process_name(&stored.namespace, &stored.name, id);
        if recorded.contains(&(name.clone(), inc.attempt, inc.retry)) {
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
        let key = stored.key();
        let Some(port) = ports.get(&id.key()).copied() else {
            let range = self.executor.ports_mut().range();
            self.plane.start_failed(
                &key,
                StartFailure {
                    replica: id,
                    incarnation: inc,
                    exit_code: 0,
                    message: format!(
                        "no port of its own is free: every port of {}..={} (settings.ports) \
                         is held by another replica or cannot be bound",
                        range.start,
                        range.end.saturating_sub(1)
                    ),
                },
            );
            return Ok(None);
        };
        let label = incarnation_label(&stored.uid, inc);
        let dir = self.executor.replica_dir(&name, &label);
        let addresses =
            corral_core::launch::Addresses::local(job, &self.config.host_address, |rid| {
                ports.get(&rid.key()).copied()
            });
        let options = corral_core::launch::LaunchOptions {
            gpu_indices: Some(gpu_indices.to_vec()),
            mpi_config_dir: dir.display().to_string(),
            mpi_rsh_agent: self.exec_agent.clone(),
            replica_tmp_dir: Some(dir.join(crate::executor::TMP_DIR).display().to_string()),
        };
        let launch = match corral_core::launch::replica_env(job, id, &addresses, &options) {
            Ok(l) => l,
            Err(e) => {
                // The job's spec cannot be launched: every retry would be refused the same.
                self.plane.launch_rejected(
                    &key,
                    LaunchRejection {
                        replica: id,
                        incarnation: inc,
                        message: e.to_string(),
                    },
                );
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
        env.push((
            corral_api::progress::PROGRESS_FILE_ENV.into(),
            super::progress::progress_path(&dir).display().to_string(),
        ));
        env.push((
            corral_api::progress::STOP_NOTICE_FILE_ENV.into(),
            super::progress::stop_notice_path(&dir)
                .display()
                .to_string(),
        ));
        // The job's output: it goes with the job unless a ServedModel serves from it.
        let output = crate::artifacts::job_output_dir(
            &self.config.data_dir,
            &stored.namespace,
            &stored.name,
            &stored.uid,
        );
        env.push((
            corral_api::training_job::OUTPUT_DIR_ENV.into(),
            output.display().to_string(),
        ));
        if launch.exec_credentials {
            // What the MPI launcher's rsh agent (`corral rsh`) calls the API with: a token
            // that may exec into this job's replicas and nothing else.
            if let Some(url) = &self.api_url {
                env.push(("CORRAL_SERVER".into(), url.clone()));
            }
            if let Some(fingerprint) = &self.api_fingerprint {
                env.push(("CORRAL_FINGERPRINT".into(), fingerprint.clone()));
            }
            let token = self.job_token(&stored.namespace, &stored.name, &stored.uid);
            env.push(("CORRAL_TOKEN".into(), token));
        }
        let files = launch
            .files
            .iter()
            .map(|f| {
                let p = PathBuf::from(&f.path);
                let rel = p.strip_prefix(&dir).map(PathBuf::from).unwrap_or(p);
                (rel, f.contents.clone())
            })
            .collect();
        let containers = self.executor.config().containers.is_some();
        // The job's own snapshot, never another's.
        let code = job
            .metadata
            .annotations
            .contains_key(crate::code::ANNOTATION)
            .then(|| self.code_store().job_dir(&stored.uid));
        let process = process_spec(
            job,
            stored,
            id,
            (name, label),
            env,
            files,
            gpu_indices,
            (containers, code),
        );
        let Some(mut process) = process else {
            return Ok(None);
        };
        // Its namespace's identity (no uid may be free for a new namespace: its replicas
        // must not run as root), and the job's output directory owned by it.
        let who = self
            .tenancy
            .identity(&self.store, &stored.namespace)
            .map_err(|e| e.to_string())
            .and_then(|who| {
                crate::artifacts::prepare_job_output(
                    &self.config.data_dir,
                    &stored.namespace,
                    &output,
                    who,
                )
                .map(|()| who)
                .map_err(|e| {
                    format!(
                        "making the job's output directory {}: {e}",
                        output.display()
                    )
                })
            });
        match who {
            Ok(who) => process.run_as = who.map(Into::into),
            Err(message) => {
                self.plane.start_failed(
                    &key,
                    StartFailure {
                        replica: id,
                        incarnation: inc,
                        exit_code: 0,
                        message,
                    },
                );
                return Ok(None);
            }
        }
        // In a container, the namespace's artifacts (pipeline steps' and jobs' outputs) are
        // where its environment says.
        let artifacts = crate::artifacts::root(&self.config.data_dir).join(&stored.namespace);
        if process.container.is_some() && artifacts.is_dir() {
            process.mounts.push(artifacts);
        }
        if let Some(why) = process.missing_program() {
            self.plane.start_failed(
                &key,
                StartFailure {
                    replica: id,
                    incarnation: inc,
                    exit_code: 127,
                    message: why,
                },
            );
            return Ok(None);
        }
        Ok(Some(PendingStart {
            id,
            inc,
            port: Some(port),
            process,
        }))
    }

    /// Starts the prepared replicas of one job together and records each one that runs.
    fn start_replicas(
        &mut self,
        key: &str,
        pending: Vec<PendingStart>,
        now: Timestamp,
        report: &mut TickReport,
    ) -> Result<(), ClusterError> {
        if pending.is_empty() {
            return Ok(());
        }
        let Some(stored) = self.stored(key).cloned() else {
            return Ok(());
        };
        let specs: Vec<ReplicaProcessSpec> = pending.iter().map(|p| p.process.clone()).collect();
        // A gang's shims wait until the pass has recorded it (one replica alone has no
        // one to wait for).
        if specs.len() > 1 && self.start_gate.is_none() {
            self.start_gate = self.executor.close_start_gate();
        }
        let results = self.executor.start_all(&specs);
        let mut first_error = None;
        // The gang's records in one transaction (each replica also wrote its own record
        // file before its command ran, so a crash before the commit loses none).
        self.store.begin_batch()?;
        for (p, result) in pending.into_iter().zip(results) {
            if let Err(e) = self.record_start(&stored, p, result, now, report)
                && first_error.is_none()
            {
                first_error = Some(e);
            }
        }
        self.store.commit_batch()?;
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
        let python_env = process
            .python
            .as_ref()
            .zip(self.executor.config().python.as_ref())
            .and_then(|(env, (uv, dir))| {
                let launch = crate::executor::python::PythonLaunch::new(
                    uv.clone(),
                    dir.clone(),
                    env,
                    process.code.as_deref(),
                )
                .ok()?;
                Some(dir.join(launch.key()))
            });
        let image = process.container.as_ref().map(|c| c.image.clone());
        let record = match result {
            Ok(r) => r,
            // Another process of the name still runs (not adopted yet): the plane asks again.
            Err(e @ (ExecutorError::AlreadyRunning(_) | ExecutorError::AlreadyStarted { .. })) => {
                report.errors.push(format!("{name}: {e}"));
                return Ok(());
            }
            // The executor could not start it: a start failure, for the plane to decide on.
            Err(e) => {
                self.plane.start_failed(
                    &stored.key(),
                    StartFailure {
                        replica: id,
                        incarnation: inc,
                        exit_code: 0,
                        message: e.to_string(),
                    },
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
        self.plane.observe(
            &stored.key(),
            ObservedReplica::new(id, inc, corral_core::lifecycle::ReplicaPhase::Running),
        );
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
        if let Some(image) = image {
            msg.push_str(&format!(", in a container of {image}"));
        }
        if let Some(env) = python_env {
            msg.push_str(&format!(
                ", python environment {} (build log: {})",
                env.display(),
                env.join(crate::executor::python::BUILD_LOG).display()
            ));
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

    /// Stops a replica incarnation (SIGTERM, then SIGKILL after the grace period). Once it
    /// has ended, a stop with `delete` removes its record, so that the name is free.
    fn stop_replica(
        &mut self,
        key: &str,
        (id, inc): (ReplicaId, Incarnation),
        grace: Duration,
        delete: bool,
        reason: &str,
        report: &mut TickReport,
    ) -> Result<(), ClusterError> {
        // What it needs of the row, not a copy of the whole job for each replica stopped.
        let Some((name, uid)) = self.stored(key).map(|stored| {
            (
                process_name(&stored.namespace, &stored.name, id),
                stored.uid.clone(),
            )
        }) else {
            return Ok(());
        };
        let Some(r) = self
            .store
            .replicas_named(&name)?
            .into_iter()
            .find(|r| r.job_uid == uid && r.attempt == inc.attempt && r.retry == inc.retry)
        else {
            // No record: nothing runs under it; the plane may forget it.
            self.plane.forget_replica(key, id, inc);
            return Ok(());
        };
        let current = self
            .executor
            .record(&r.name)
            .is_some_and(|rec| rec.incarnation == r.record.incarnation);
        if r.state == ProcessState::Running && current {
            let stop_key = (r.name.clone(), r.record.incarnation.clone());
            let sent = self.stopping.get(&stop_key).copied();
            if sent.is_none_or(|g| grace < g) {
                if sent.is_none() && !grace.is_zero() {
                    // SIGTERM's words: why, and by when the replica must be done.
                    super::progress::write_stop_notice(&r.record.dir, reason, grace);
                }
                if let Err(e) = self.executor.stop(&r.name, grace) {
                    report.errors.push(format!("stopping {}: {e}", r.name));
                } else {
                    self.stopping.insert(stop_key, grace);
                    if sent.is_none() {
                        report
                            .stopped
                            .push(format!("{}-{}-{} ({reason})", r.job, r.role, r.index));
                    }
                }
            }
            return Ok(());
        }
        if r.state == ProcessState::Running {
            // Not the executor's current incarnation, yet recorded running: it was never
            // adopted (cannot happen after open); observe it as gone.
            self.store
                .set_replica_state(&r.name, r.attempt, r.retry, ProcessState::Gone)?;
            if let Some(o) = observed(&r, ProcessState::Gone) {
                self.plane.observe(key, o);
            }
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
            // Its files stay (`logs --previous` reads a restart's stale incarnation); they
            // go when the job is removed.
            self.plane.forget_replica(key, id, inc);
        }
        Ok(())
    }
}

/// The process names of a job's replica slots.
fn replica_names(stored: &StoredJob) -> impl Iterator<Item = String> + '_ {
    replica_slots(&stored.job)
        .into_iter()
        .map(|id| process_name(&stored.namespace, &stored.name, id))
}

/// The process a replica runs: its command, env, files, working directory and limits.
#[allow(clippy::too_many_arguments)]
fn process_spec(
    job: &TrainingJob,
    stored: &StoredJob,
    id: ReplicaId,
    (name, label): (String, String),
    env: Vec<(String, String)>,
    files: Vec<(PathBuf, String)>,
    gpu_indices: &[u32],
    (containers, code): (bool, Option<PathBuf>),
) -> Option<ReplicaProcessSpec> {
    let mut spec = job.spec.clone();
    spec.apply_defaults();
    let rspec = spec.replicas.get(&id.role)?;
    let in_container = containers && rspec.template.image.is_some();
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
    Some(ReplicaProcessSpec {
        name,
        job: stored.key(),
        incarnation: label,
        command,
        env,
        // With a snapshot, a relative working directory is inside it: the copy on the host,
        // or its mount in a container (submit refuses a relative one without a snapshot).
        working_dir: rspec.template.working_dir.as_ref().map(|wd| match &code {
            Some(_) if !wd.starts_with('/') && in_container => {
                Path::new(crate::code::CONTAINER_DIR).join(wd)
            }
            Some(code) if !wd.starts_with('/') => code.join(wd),
            _ => PathBuf::from(wd),
        }),
        code,
        files,
        cpu_milli,
        memory_bytes,
        gpu_indices: gpu_indices.to_vec(),
        // Without a runtime the command runs on the host (the submit said so in an event).
        container: rspec
            .template
            .image
            .as_ref()
            .filter(|_| containers)
            .map(|image| ContainerRequest {
                image: image.clone(),
                command: rspec.template.command.clone(),
                args: rspec.template.args.clone(),
            }),
        python: rspec.template.python.clone(),
        run_as: None,
        mounts: Vec::new(),
    })
}
