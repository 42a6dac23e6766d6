//! The commands users give: submit, delete, suspend, resume. Each is checked and stored
//! here, and handed to the control plane, which decides what follows.

use std::collections::BTreeSet;
use std::sync::Arc;

use corral_api::document::{Document, parse_documents};
use corral_api::validate::ValidationContext;
use corral_api::{PipelineRun, TrainingJob};
use corral_core::control::{ControlError, Effect, EventType, JobRecord, SubmitCheck};
use jiff::Timestamp;

use super::engine::{Cluster, millis, new_uid};
use super::{ClusterError, DocumentProblem, FieldProblem, SubmitResult};
use crate::config::WithoutRuntime;
use crate::store::{NewJob, StoredJob};

/// What submissions are checked against ([`Cluster::submit_context`]).
#[derive(Clone, Debug)]
pub struct SubmitContext {
    pub(super) validation: ValidationContext,
    images: ImagePolicy,
    /// What no node of this machine can ever hold: the plane's own check at submit.
    pub(super) fit: Arc<SubmitCheck>,
}

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

/// Documents of a submission, parsed and checked ([`Cluster::check_submission`]).
#[derive(Debug)]
pub struct CheckedSubmission {
    namespace: String,
    /// Each job, with the kind it was converted from.
    jobs: Vec<(TrainingJob, Option<String>)>,
    /// Each job's warnings (same order): what it asks that this cluster accepts but does
    /// not honour.
    warnings: Vec<Vec<String>>,
    /// PipelineRuns, checked with their steps' jobs.
    runs: Vec<PipelineRun>,
}

impl CheckedSubmission {
    /// One job Corral itself submits (a served model's replica), checked as the plane
    /// checks every submission.
    pub(super) fn internal(namespace: &str, job: TrainingJob) -> Self {
        CheckedSubmission {
            namespace: namespace.to_string(),
            jobs: vec![(job, None)],
            warnings: vec![Vec::new()],
            runs: Vec::new(),
        }
    }

    /// Each checked job, with the kind it was converted from.
    pub fn jobs(&self) -> &[(TrainingJob, Option<String>)] {
        &self.jobs
    }

    /// Each job's warnings, in the order of [`CheckedSubmission::jobs`]: `path: message`.
    pub fn warnings(&self) -> &[Vec<String>] {
        &self.warnings
    }

    /// The checked PipelineRuns.
    pub fn runs(&self) -> &[PipelineRun] {
        &self.runs
    }

    /// Names the code snapshot (`sha256:...` of its archive) that every job of the
    /// submission runs from ([`crate::code`]).
    pub fn with_code(mut self, digest: &str) -> Self {
        for (job, _) in &mut self.jobs {
            job.metadata
                .annotations
                .insert(crate::code::ANNOTATION.to_string(), digest.to_string());
        }
        // A run's steps run from it too: each step's job gets its copy when it is made.
        for run in &mut self.runs {
            run.metadata
                .annotations
                .insert(crate::code::ANNOTATION.to_string(), digest.to_string());
        }
        self
    }
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
        let checked = Self::check_submission(&self.submit_context(), text, namespace)?;
        self.submit_checked(checked, now)
    }

    /// What a submission is checked against: the configuration (priority classes, queues,
    /// pools), this machine's node, and what it can run (a container runtime, uv). None of
    /// it changes while the cluster is open, so a server keeps one and checks submissions
    /// without the cluster's lock.
    pub fn submit_context(&self) -> SubmitContext {
        SubmitContext {
            validation: super::node::validation_context(&self.config.file, &self.node),
            images: self.image_policy(),
            fit: Arc::clone(&self.submit_check),
        }
    }

    fn image_policy(&self) -> ImagePolicy {
        ImagePolicy {
            runtime: self
                .executor
                .config()
                .containers
                .as_ref()
                .map(|r| r.kind.as_str()),
            without_runtime: self.config.file.settings.containers.without_runtime,
            uv: self.executor.config().python.is_some(),
        }
    }

    /// The part of [`Cluster::submit`] that needs no cluster: parse, validate against
    /// `ctx` ([`Cluster::submit_context`]), check names. `submit` and a dry run
    /// (`corral validate` against a server) share it, so they give the same errors.
    pub fn check_submission(
        ctx: &SubmitContext,
        text: &str,
        namespace: &str,
    ) -> Result<CheckedSubmission, ClusterError> {
        let images = ctx.images;
        let mut problems = Vec::new();
        let mut accepted = Vec::new();
        let mut warned = Vec::new();
        let mut runs = Vec::new();
        for r in parse_documents(text, &ctx.validation) {
            match r {
                Err(e) => problems.push(DocumentProblem::from(&e)),
                Ok(p) => {
                    let what = Some(match &p.converted_from {
                        Some(k) => format!("{k} {} as TrainingJob", p.document.name()),
                        None => format!("{} {}", p.document.kind(), p.document.name()),
                    });
                    let mut errors = Vec::new();
                    let mut warnings: Vec<FieldProblem> = p
                        .warnings
                        .iter()
                        .map(|w| FieldProblem {
                            path: w.path.clone(),
                            message: w.message.clone(),
                        })
                        .collect();
                    match p.document {
                        Document::TrainingJob(job) => {
                            let mut job = *job;
                            check_local(&job, namespace, images, &mut errors, &mut warnings);
                            job.metadata.namespace = Some(namespace.to_string());
                            // What this machine can never hold: refused as the plane refuses
                            // it, before the lock (and by `corral validate` against a server).
                            if errors.is_empty()
                                && let Err(r) = ctx.fit.check(&job)
                            {
                                errors.push(FieldProblem {
                                    path: r.path,
                                    message: r.message,
                                });
                            }
                            if errors.is_empty() {
                                accepted.push((job, p.converted_from.clone()));
                                warned.push(
                                    warnings
                                        .iter()
                                        .map(|w| format!("{}: {}", w.path, w.message))
                                        .collect(),
                                );
                            }
                        }
                        Document::PipelineRun(run) => {
                            let mut run = *run;
                            run.metadata.namespace = Some(namespace.to_string());
                            if run.metadata.name.is_empty()
                                && let Some(prefix) = &run.metadata.generate_name
                            {
                                run.metadata.name = super::pipelines::generated_name(prefix);
                            }
                            run.status = None;
                            // Each step's job as it will be submitted, checked as a job is.
                            for (i, step) in run.spec.pipeline_spec.steps.iter().enumerate() {
                                let job = corral_api::pipeline::step_job(&run.metadata, step);
                                let mut step_errors = Vec::new();
                                check_local(
                                    &job,
                                    namespace,
                                    images,
                                    &mut step_errors,
                                    &mut warnings,
                                );
                                if step_errors.is_empty()
                                    && let Err(r) = ctx.fit.check(&job)
                                {
                                    step_errors.push(FieldProblem {
                                        path: r.path,
                                        message: r.message,
                                    });
                                }
                                errors.extend(step_errors.into_iter().map(|e| FieldProblem {
                                    path: format!(
                                        "spec.pipelineSpec.steps[{i}] (job {}): {}",
                                        job.metadata.name, e.path
                                    ),
                                    message: e.message,
                                }));
                            }
                            if errors.is_empty() {
                                runs.push(run);
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
        Ok(CheckedSubmission {
            namespace: namespace.to_string(),
            jobs: accepted,
            warnings: warned,
            runs,
        })
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
            let steps: Vec<(TrainingJob, Option<String>)> = runs
                .iter()
                .flat_map(|r| {
                    let steps = &r.spec.pipeline_spec.steps;
                    steps
                        .iter()
                        .map(|s| (corral_api::pipeline::step_job(&r.metadata, s), None))
                })
                .collect();
            let mut files = code_references(&checked.jobs, code);
            files.extend(code_references(&steps, code));
            if !files.is_empty() {
                stored.push(Err(ClusterError::Invalid(files)));
                continue;
            }
            let warnings = checked.warnings.clone();
            let namespace = checked.namespace.clone();
            let new_jobs = self.new_jobs(checked, now, submitted_ms);
            // The runs first: a name taken refuses the whole submission.
            let run_results = match self.insert_runs(&namespace, runs, code, now) {
                Ok(r) => r,
                Err(e) => {
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
            }
            stored.push(inserted.map(|mut i| {
                i.runs = run_results;
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
        let checked = CheckedSubmission {
            namespace: namespace.to_string(),
            jobs: vec![(job, None)],
            warnings: vec![Vec::new()],
            runs: Vec::new(),
        };
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

/// What the embedded cluster needs beyond validation: a command to run, the namespace.
/// What this cluster does with a template's `image`.
#[derive(Clone, Copy, Debug)]
struct ImagePolicy {
    /// The container runtime (`podman`, `docker`), if there is one.
    runtime: Option<&'static str>,
    without_runtime: WithoutRuntime,
    /// Whether uv is there to build Python environments.
    uv: bool,
}

fn check_local(
    job: &TrainingJob,
    namespace: &str,
    images: ImagePolicy,
    errors: &mut Vec<FieldProblem>,
    warnings: &mut Vec<FieldProblem>,
) {
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
    if job
        .metadata
        .annotations
        .contains_key(crate::code::ANNOTATION)
    {
        errors.push(FieldProblem {
            path: format!("metadata.annotations.{}", crate::code::ANNOTATION),
            message: "is set by the server when code is shipped with the job (`corral submit \
                      --code DIR`); remove it"
                .into(),
        });
    }
    for (role, spec) in &job.spec.replicas {
        if spec.template.python.is_some() && !images.uv {
            errors.push(FieldProblem {
                path: format!("spec.replicas.{role}.template.python"),
                message: "this cluster cannot build Python environments: uv is not installed \
                          on the server's PATH (pip install uv)"
                    .into(),
            });
        }
        let image = spec.template.image.as_deref();
        match (images.runtime, image) {
            // A relative working directory is inside the code snapshot, in a container as
            // on the host ([`code_references`]).
            (Some(_), Some(_)) => {}
            (None, Some(image)) if images.without_runtime == WithoutRuntime::Reject => {
                errors.push(FieldProblem {
                    path: format!("spec.replicas.{role}.template.image"),
                    message: format!(
                        "this cluster has no container runtime (podman or docker) to run \
                         `{image}`, and refuses jobs with images (containers.withoutRuntime: \
                         reject); remove `image` to run `command` on the host"
                    ),
                });
            }
            _ if spec.template.command.is_empty() => errors.push(FieldProblem {
                path: format!("spec.replicas.{role}.template.command"),
                message: match image {
                    Some(image) => format!(
                        "this cluster has no container runtime (podman or docker), so the \
                         entrypoint of `{image}` cannot run: set `command` to run on the host"
                    ),
                    None => "set `command` (or `image`, to run in a container)".into(),
                },
            }),
            _ => {}
        }
        for (i, v) in spec.template.env.iter().enumerate() {
            let Some(from) = v.value_from.as_ref().filter(|_| v.value.is_none()) else {
                continue;
            };
            let path = format!("spec.replicas.{role}.template.env[{i}].valueFrom");
            // A Secret or ConfigMap this cluster does not have: Kubernetes would not start
            // the pod either. What the pod says of itself is only not there.
            if from.contains_key("secretKeyRef") || from.contains_key("configMapKeyRef") {
                errors.push(FieldProblem {
                    path,
                    message: "valueFrom works on Kubernetes only; give a literal `value`".into(),
                });
            } else {
                warnings.push(FieldProblem {
                    path,
                    message: format!(
                        "ignored on the embedded cluster: {} is not set (Kubernetes resolves \
                         valueFrom)",
                        v.name
                    ),
                });
            }
        }
        // Pod fields Kubernetes applies (volumes, node selectors, tolerations, sidecars,
        // security contexts): kept for it, not honoured here.
        if let Some(pod) = &spec.template.pod_template {
            let base = format!("spec.replicas.{role}.template.podTemplate");
            pod_warnings(&base, pod, warnings);
        }
    }
}

/// What a replica's pod template asks that only Kubernetes applies. Container ports and pull
/// policies say nothing here (Corral allocates ports; images are local), so they are not
/// worth a warning.
fn pod_warnings(
    base: &str,
    pod: &serde_json::Map<String, serde_json::Value>,
    warnings: &mut Vec<FieldProblem>,
) {
    const IGNORED: &str = "ignored on the embedded cluster (applied on Kubernetes only)";
    let mut warn = |path: String, message: String| warnings.push(FieldProblem { path, message });
    for (k, v) in pod {
        let Some(inner) = v.as_object().filter(|_| k == "spec" || k == "metadata") else {
            warn(format!("{base}.{k}"), IGNORED.into());
            continue;
        };
        for (key, value) in inner {
            let path = format!("{base}.{k}.{key}");
            let containers = value
                .as_array()
                .filter(|_| k == "spec" && key == "containers");
            let Some(containers) = containers else {
                warn(path, IGNORED.into());
                continue;
            };
            for (i, c) in containers.iter().enumerate() {
                let Some(c) = c.as_object() else { continue };
                let name = c.get("name").and_then(|n| n.as_str()).unwrap_or("");
                if c.contains_key("image") {
                    warn(
                        format!("{path}[{i}]"),
                        format!(
                            "sidecar `{name}` does not run on the embedded cluster (Kubernetes \
                             only)"
                        ),
                    );
                    continue;
                }
                for f in c.keys() {
                    if !matches!(f.as_str(), "name" | "ports" | "imagePullPolicy") {
                        warn(format!("{path}[{i}].{f}"), IGNORED.into());
                    }
                }
            }
        }
    }
}

/// Each requirements file a job names must be in its code snapshot (`code`, unpacked) and
/// list packages only.
fn code_references(
    jobs: &[(TrainingJob, Option<String>)],
    code: Option<&std::path::Path>,
) -> Vec<DocumentProblem> {
    let mut problems = Vec::new();
    for (i, (job, _)) in jobs.iter().enumerate() {
        let mut errors = Vec::new();
        for (role, spec) in &job.spec.replicas {
            // A relative working directory means a directory of the code snapshot (in a
            // container too, where the snapshot is /workspace), never the server's own
            // directory: it exists only where the snapshot has it.
            if let Some(wd) = spec
                .template
                .working_dir
                .as_ref()
                .filter(|wd| !wd.starts_with('/'))
            {
                let message = match code {
                    None => Some(format!(
                        "`{wd}` is relative, so it names a directory of the job's code \
                         snapshot, and this submission has none: submit with `corral submit \
                         --code DIR`, or give an absolute path"
                    )),
                    Some(dir) if !dir.join(wd).is_dir() => Some(format!(
                        "`{wd}` is not a directory of the code snapshot; name one that is, \
                         or remove workingDir to start in the snapshot's top directory"
                    )),
                    Some(_) => None,
                };
                if let Some(message) = message {
                    errors.push(FieldProblem {
                        path: format!("spec.replicas.{role}.template.workingDir"),
                        message,
                    });
                }
            }
            let Some(file) = spec
                .template
                .python
                .as_ref()
                .and_then(|p| p.requirements_file.as_ref())
            else {
                continue;
            };
            let path = format!("spec.replicas.{role}.template.python.requirementsFile");
            let message = match code {
                None => Some(format!(
                    "`{file}` is read from the job's code snapshot, and this submission has \
                     none: submit with `corral submit --code DIR`"
                )),
                Some(dir) => match std::fs::read_to_string(dir.join(file)) {
                    Err(e) => Some(format!("`{file}` is not in the code snapshot ({e})")),
                    Ok(text) => crate::executor::python::requirement_lines(&text)
                        .err()
                        .map(|e| format!("`{file}`: {e}")),
                },
            };
            if let Some(message) = message {
                errors.push(FieldProblem { path, message });
            }
        }
        if !errors.is_empty() {
            problems.push(DocumentProblem {
                index: i + 1,
                what: Some(format!("TrainingJob {}", job.metadata.name)),
                errors,
            });
        }
    }
    problems
}
