//! The commands users give: submit, delete, suspend, resume. Each is checked
//! ([`super::submission`]), stored here, and handed to the control plane, which decides what
//! follows.

use std::collections::BTreeSet;

use corral_api::TrainingJob;
use corral_core::control::{ControlError, Effect, EventType, JobRecord};
use jiff::Timestamp;

use super::engine::{Cluster, millis, new_uid};
use super::submission::{CheckedSubmission, ImagePolicy, code_references};
use super::{ClusterError, SubmitResult};
use crate::store::{NewJob, StoredJob};

/// A submission as inserted in the open batch: its rows with their submission order
/// (`seq`), each job's warnings, and the code copies to remove if the batch fails.
pub(super) struct Inserted {
    jobs: Vec<NewJob>,
    /// PipelineRuns of the submission, stored with its jobs.
    runs: Vec<SubmitResult>,
    seqs: Vec<i64>,
    warnings: Vec<Vec<String>>,
    code_dirs: Vec<std::path::PathBuf>,
}

impl Cluster {
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
        if super::serving::has_served_models(text) {
            return self.submit_served_models(text, namespace, false);
        }
        let mut ctx = self.submit_context();
        if super::submission::names_stored_pipelines(text) {
            ctx = ctx.with_pipelines(self.pipeline_versions(namespace, None)?);
        }
        let checked = Self::check_submission(&ctx, text, namespace)?;
        self.submit_checked(checked, now)
    }

    /// Stores checked documents and hands them to the control plane (all or nothing).
    pub fn submit_checked(
        &mut self,
        checked: CheckedSubmission,
        now: Timestamp,
    ) -> Result<Vec<SubmitResult>, ClusterError> {
        self.submit_checked_with_code(checked, None, now)
    }

    /// [`Cluster::submit_checked`] with a code snapshot unpacked at `code` (in the code
    /// store's staging directory, see [`crate::code`]): each job gets its own copy. All or
    /// nothing: when the submission fails no copy is left (the staged one is the caller's).
    pub fn submit_checked_with_code(
        &mut self,
        checked: CheckedSubmission,
        code: Option<&std::path::Path>,
        now: Timestamp,
    ) -> Result<Vec<SubmitResult>, ClusterError> {
        self.store_submissions(vec![(checked, code)], now)
            .pop()
            .unwrap_or_else(|| Err(ClusterError::Store("the submission was not stored".into())))
    }

    /// Several submissions in one transaction (the server gathers concurrent requests, so
    /// that a burst costs one commit, not one each). Each submission is all or nothing on
    /// its own and one refused does not refuse the others; one result per submission, in
    /// order.
    pub fn submit_checked_all(
        &mut self,
        batch: Vec<CheckedSubmission>,
        now: Timestamp,
    ) -> Vec<Result<Vec<SubmitResult>, ClusterError>> {
        self.store_submissions(batch.into_iter().map(|c| (c, None)).collect(), now)
    }

    fn store_submissions(
        &mut self,
        batch: Vec<(CheckedSubmission, Option<&std::path::Path>)>,
        now: Timestamp,
    ) -> Vec<Result<Vec<SubmitResult>, ClusterError>> {
        let images = self.image_policy();
        let submitted_ms = millis(now);
        if let Err(e) = self.store.begin_batch() {
            let message = e.to_string();
            return batch
                .iter()
                .map(|_| Err(ClusterError::Store(message.clone())))
                .collect();
        }
        // Each submission: the control plane first (it refuses what it cannot schedule,
        // and nothing is stored then), its code, then its rows and events in a savepoint.
        let mut stored: Vec<Result<Inserted, ClusterError>> = Vec::with_capacity(batch.len());
        for (mut checked, code) in batch {
            let runs = std::mem::take(&mut checked.runs);
            let pipelines = std::mem::take(&mut checked.pipelines);
            let mut files = code_references(&checked.jobs, code);
            let step_jobs = |meta, steps: &[corral_api::pipeline::StepSpec]| {
                let jobs: Vec<(TrainingJob, Option<String>)> = steps
                    .iter()
                    .map(|s| (corral_api::pipeline::step_job(meta, s), None))
                    .collect();
                jobs
            };
            for r in &runs {
                // A run of a stored pipeline that brings no code runs from the pipeline's.
                let from_pipeline = self.pipeline_code(&checked.namespace, r);
                let steps = step_jobs(&r.metadata, &r.spec.pipeline_spec.steps);
                files.extend(code_references(&steps, code.or(from_pipeline.as_deref())));
            }
            for p in &pipelines {
                files.extend(code_references(
                    &step_jobs(&p.metadata, &p.spec.steps),
                    code,
                ));
            }
            if !files.is_empty() {
                stored.push(Err(ClusterError::Invalid(files)));
                continue;
            }
            let warnings = checked.warnings.clone();
            let namespace = checked.namespace.clone();
            let new_jobs = self.new_jobs(checked, now, submitted_ms);
            // Pipelines, then the runs (which may name them): a run's name taken refuses
            // the whole submission.
            let kept = match self.insert_pipelines(&namespace, pipelines, code, now) {
                Ok(k) => k,
                Err(e) => {
                    stored.push(Err(e));
                    continue;
                }
            };
            let run_results = match self.insert_runs(&namespace, runs, code, &kept, now) {
                Ok(r) => r,
                Err(e) => {
                    self.undo_pipelines(&kept);
                    stored.push(Err(e));
                    continue;
                }
            };
            let inserted = self.plan_and_insert(new_jobs, warnings, code, images, now);
            if inserted.is_err() {
                for r in &run_results {
                    let _ = self.store.remove_run(&r.uid);
                    let _ = self.code_store().remove(&r.uid);
                }
                self.undo_pipelines(&kept);
            }
            stored.push(inserted.map(|mut i| {
                i.runs = run_results;
                i.code_dirs.extend(kept.placed_code(self.code_store()));
                i.runs.extend(kept.results);
                i
            }));
        }
        if let Err(e) = self.store.commit_batch() {
            let _ = self.store.rollback_batch();
            let message = e.to_string();
            for inserted in stored.iter().flatten() {
                for dir in &inserted.code_dirs {
                    let _ = crate::code::remove_tree(dir);
                }
                self.unsubmit(&inserted.jobs);
            }
            let _ = self.plane.settle(now);
            return stored
                .iter()
                .map(|_| Err(ClusterError::Store(message.clone())))
                .collect();
        }
        stored
            .into_iter()
            .map(|r| r.map(|inserted| self.cache_submitted(inserted)))
            .collect()
    }

    /// The rows of a checked submission: a uid, creation time and generation each.
    fn new_jobs(
        &mut self,
        checked: CheckedSubmission,
        now: Timestamp,
        submitted_ms: u64,
    ) -> Vec<NewJob> {
        let CheckedSubmission {
            namespace, jobs, ..
        } = checked;
        let mut new_jobs = Vec::with_capacity(jobs.len());
        for (mut job, converted_from) in jobs {
            self.uid_counter += 1;
            let uid = new_uid(&namespace, &job.metadata.name, now, self.uid_counter);
            job.metadata.uid = Some(uid.clone());
            job.metadata.creation_timestamp = Some(now);
            job.metadata.generation = Some(1);
            job.status = None;
            new_jobs.push(NewJob {
                namespace: namespace.clone(),
                name: job.metadata.name.clone(),
                uid,
                submitted_ms,
                converted_from,
                job,
            });
        }
        new_jobs
    }

    /// Hands one submission to the control plane, gives each job its copy of the code
    /// (before the jobs are stored: a job never runs without its code) and writes its rows
    /// and events inside the open batch; undoes all of it when any step refuses.
    fn plan_and_insert(
        &mut self,
        new_jobs: Vec<NewJob>,
        warnings: Vec<Vec<String>>,
        code: Option<&std::path::Path>,
        images: ImagePolicy,
        now: Timestamp,
    ) -> Result<Inserted, ClusterError> {
        for (n, j) in new_jobs.iter().enumerate() {
            let record = JobRecord {
                job: j.job.clone(),
                uid: j.uid.clone(),
                submitted: j.submitted_ms,
                hints: Default::default(),
            };
            if let Err(e) = self.plane.submit(record) {
                self.unsubmit(&new_jobs[..n]);
                let _ = self.plane.settle(now);
                return Err(match e {
                    ControlError::AlreadyExists(_) => ClusterError::AlreadyExists {
                        namespace: j.namespace.clone(),
                        name: j.name.clone(),
                    },
                    other => ClusterError::Conflict(other.to_string()),
                });
            }
        }
        let code_dirs = match code.map(|staged| self.place_code(staged, &new_jobs)) {
            None => Vec::new(),
            Some(Ok(dirs)) => dirs,
            Some(Err(e)) => {
                self.unsubmit(&new_jobs);
                let _ = self.plane.settle(now);
                return Err(e);
            }
        };
        // insert_jobs is a savepoint: a refused submission leaves no row behind.
        match self.store.insert_jobs(&new_jobs) {
            Ok(seqs) => {
                for (j, warned) in new_jobs.iter().zip(&warnings) {
                    self.submitted_events(j, images, now);
                    for w in warned {
                        self.event(
                            &j.namespace,
                            &j.name,
                            now,
                            EventType::Warning,
                            "FieldIgnored",
                            w.clone(),
                        );
                    }
                }
                Ok(Inserted {
                    jobs: new_jobs,
                    runs: Vec::new(),
                    seqs,
                    warnings,
                    code_dirs,
                })
            }
            Err(e) => {
                for dir in &code_dirs {
                    let _ = crate::code::remove_tree(dir);
                }
                self.unsubmit(&new_jobs);
                let _ = self.plane.settle(now);
                Err(e.into())
            }
        }
    }

    /// Hands a pipeline step's job (checked with its run at submit) to the plane and
    /// inserts it, inside the open batch, as any submitted job.
    pub(super) fn insert_step_job(
        &mut self,
        namespace: &str,
        job: TrainingJob,
        code: Option<&std::path::Path>,
        now: Timestamp,
    ) -> Result<Inserted, ClusterError> {
        let checked = CheckedSubmission::internal(namespace, job);
        let new_jobs = self.new_jobs(checked, now, millis(now));
        let images = self.image_policy();
        // The run's snapshot, copied (hard links) for the job as a submission's jobs get it.
        let copied = match code {
            None => None,
            Some(from) => {
                let uid = new_jobs.first().map(|j| j.uid.clone()).unwrap_or_default();
                self.code_store().copy(from, &uid).map_err(|e| {
                    ClusterError::Store(format!("copying the run's code snapshot: {e}"))
                })?;
                Some(uid)
            }
        };
        let inserted = self.plan_and_insert(new_jobs, vec![Vec::new()], None, images, now);
        if let (Err(_), Some(uid)) = (&inserted, copied) {
            let _ = self.code_store().remove(&uid);
        }
        inserted
    }

    /// [`Cluster::unsubmit`] for an inserted submission whose batch failed.
    pub(super) fn unsubmit_inserted(&mut self, inserted: &Inserted) {
        self.unsubmit(&inserted.jobs);
    }

    /// Takes jobs handed to the control plane back out (a submission that was not stored).
    fn unsubmit(&mut self, jobs: &[NewJob]) {
        for j in jobs {
            let _ = self.plane.delete(&format!("{}/{}", j.namespace, j.name));
        }
    }

    /// Counts and caches stored jobs (as stored, without reading them back).
    pub(super) fn cache_submitted(&mut self, inserted: Inserted) -> Vec<SubmitResult> {
        let Inserted {
            jobs,
            runs,
            seqs,
            warnings,
            ..
        } = inserted;
        let mut out = Vec::with_capacity(jobs.len());
        for ((j, seq), warnings) in jobs.into_iter().zip(seqs).zip(warnings) {
            self.counters.jobs_submitted += 1;
            out.push(SubmitResult {
                namespace: j.namespace.clone(),
                name: j.name.clone(),
                uid: j.uid.clone(),
                converted_from: j.converted_from.clone(),
                warnings,
                kind: None,
                revision: None,
                new_revision: false,
            });
            self.cache(StoredJob {
                namespace: j.namespace,
                name: j.name,
                uid: j.uid,
                seq,
                submitted_ms: j.submitted_ms,
                converted_from: j.converted_from,
                job: j.job,
                deleting: false,
            });
        }
        out.extend(runs);
        out
    }

    /// Gives every new job its copy of the staged snapshot: the staged tree itself for
    /// the last, hard-linked copies for the others. On error, removes what it placed.
    fn place_code(
        &self,
        staged: &std::path::Path,
        jobs: &[NewJob],
    ) -> Result<Vec<std::path::PathBuf>, ClusterError> {
        let store = self.code_store();
        let mut placed = Vec::with_capacity(jobs.len());
        for (i, j) in jobs.iter().enumerate() {
            let r = if i + 1 == jobs.len() {
                store.place(staged, &j.uid)
            } else {
                store.copy(staged, &j.uid)
            };
            match r {
                Ok(dir) => placed.push(dir),
                Err(e) => {
                    for dir in &placed {
                        let _ = crate::code::remove_tree(dir);
                    }
                    let _ = crate::code::remove_tree(&store.job_dir(&j.uid));
                    return Err(ClusterError::Store(format!(
                        "placing the code snapshot of {}/{}: {e}",
                        j.namespace, j.name
                    )));
                }
            }
        }
        Ok(placed)
    }

    /// A new job's events: Submitted, and a Warning when its image cannot be used here.
    fn submitted_events(&self, j: &NewJob, images: ImagePolicy, now: Timestamp) {
        self.event(
            &j.namespace,
            &j.name,
            now,
            EventType::Normal,
            "Submitted",
            format!("queued in {}", j.job.spec.queue_name()),
        );
        if images.runtime.is_some() {
            return;
        }
        let unused: BTreeSet<&str> = j
            .job
            .spec
            .replicas
            .values()
            .filter_map(|r| r.template.image.as_deref())
            .collect();
        if !unused.is_empty() {
            let list: Vec<&str> = unused.into_iter().collect();
            self.event(
                &j.namespace,
                &j.name,
                now,
                EventType::Warning,
                "ImageNotUsed",
                format!(
                    "this cluster has no container runtime (podman or docker): the image {} \
                     is not used, the command runs on the host with what is installed there \
                     (set containers.withoutRuntime: reject in corral.yaml to refuse such jobs)",
                    list.join(", ")
                ),
            );
        }
    }

    pub(super) fn require(&self, namespace: &str, name: &str) -> Result<StoredJob, ClusterError> {
        self.store
            .job(namespace, name)?
            .ok_or_else(|| ClusterError::NotFound {
                namespace: namespace.to_string(),
                name: name.to_string(),
            })
    }

    /// Deletes a job: its replicas stop (SIGTERM, then SIGKILL after the grace period) in
    /// the following ticks, then it is removed from the store, its replicas' files (logs)
    /// with it.
    pub fn delete(
        &mut self,
        namespace: &str,
        name: &str,
        now: Timestamp,
    ) -> Result<Effect, ClusterError> {
        let stored = self.require(namespace, name)?;
        let effect = match self.plane.delete(&stored.key()) {
            Ok(effect) => effect,
            // Kept by the store alone (the plane never held it): the store's flag says.
            Err(ControlError::NotFound(_)) if stored.deleting => Effect::AlreadySo,
            Err(ControlError::NotFound(_)) => Effect::Made,
            Err(e) => return Err(ClusterError::Conflict(e.to_string())),
        };
        if effect == Effect::Made {
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
        Ok(effect)
    }

    /// Sets `runPolicy.suspend`: replicas stop, the admission is given back, the job keeps
    /// its history.
    pub fn suspend(
        &mut self,
        namespace: &str,
        name: &str,
        now: Timestamp,
    ) -> Result<Effect, ClusterError> {
        self.set_suspend(namespace, name, true, now)
    }

    /// Clears `runPolicy.suspend`: the job goes back to its queue.
    pub fn resume(
        &mut self,
        namespace: &str,
        name: &str,
        now: Timestamp,
    ) -> Result<Effect, ClusterError> {
        self.set_suspend(namespace, name, false, now)
    }

    fn set_suspend(
        &mut self,
        namespace: &str,
        name: &str,
        suspend: bool,
        now: Timestamp,
    ) -> Result<Effect, ClusterError> {
        let stored = self.require(namespace, name)?;
        let (mut job, effect) =
            self.plane
                .set_suspend(&stored.key(), suspend)
                .map_err(|e| match e {
                    ControlError::NotFound(_) => ClusterError::NotFound {
                        namespace: namespace.to_string(),
                        name: name.to_string(),
                    },
                    other => ClusterError::Conflict(other.to_string()),
                })?;
        if effect == Effect::AlreadySo {
            return Ok(effect);
        }
        job.metadata.generation = Some(stored.job.metadata.generation.unwrap_or(1) + 1);
        self.store.update_spec(&stored.uid, &job)?;
        self.refresh_job(namespace, name)?;
        let (reason, msg) = if suspend {
            ("Suspend", "runPolicy.suspend set by the user")
        } else {
            ("Resume", "runPolicy.suspend cleared by the user")
        };
        self.event(namespace, name, now, EventType::Normal, reason, msg.into());
        Ok(Effect::Made)
    }
}
