//! Pipeline runs, embedded: stored with the submission that brings them, advanced once per
//! tick by the core's decision (`corral_core::control::pipeline`), their steps submitted as
//! ordinary TrainingJobs through the same plane (queues, quotas, gang admission,
//! priorities), their artifacts under the data directory ([`crate::artifacts`]).
//!
//! One pass over a run: observe the jobs of its running steps, answer what the decision
//! wants (outputs' hashes, cache lookups, artifacts a condition reads), then in one
//! transaction create the steps' jobs, save the run's status and record the results and
//! their lineage for the cache. After a crash, what was committed is all there is: a
//! finished step is never run again, a running one is its job, which the plane re-adopts.

use std::collections::BTreeMap;

use corral_api::PipelineRun;
use corral_api::pipeline::ArtifactRecord;
use corral_core::control::EventType;
use corral_core::control::pipeline::{
    Decision, Facts, Observed, Recorded, StepLaunch, Wants, decide, max_rounds, observe_job,
    step_job_with_artifacts, step_jobs, watched_jobs,
};
use jiff::Timestamp;

use super::commands::Inserted;
use super::engine::{Cluster, millis, new_uid};
use super::{ClusterError, SubmitResult, TickReport};
use crate::store::StoredRun;
pub use corral_core::views::{PipelineRunDetails, StepRow};

/// `prefix` and 5 random characters, as Kubernetes completes a `generateName` (its
/// alphabet: no vowels, no look-alikes).
pub(super) fn generated_name(prefix: &str) -> String {
    use std::hash::{BuildHasher, Hasher};
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write(prefix.as_bytes());
    let mut bits = h.finish();
    let mut name = prefix.to_string();
    for _ in 0..corral_api::pipeline::GENERATED_SUFFIX_LEN {
        name.push(char::from(
            ALPHABET[(bits % ALPHABET.len() as u64) as usize],
        ));
        bits /= ALPHABET.len() as u64;
    }
    name
}

impl Cluster {
    /// Stores a submission's runs (inside its batch). A name taken refuses them all.
    pub(super) fn insert_runs(
        &mut self,
        namespace: &str,
        runs: Vec<PipelineRun>,
        code: Option<&std::path::Path>,
        pipelines: &super::stored_pipelines::StoredPipelines,
        now: Timestamp,
    ) -> Result<Vec<SubmitResult>, ClusterError> {
        let mut out: Vec<SubmitResult> = Vec::new();
        let undo = |c: &mut Cluster, out: &[SubmitResult]| {
            for r in out {
                let _ = c.store.remove_run(&r.uid);
                let _ = c.code_store().remove(&r.uid);
            }
        };
        for mut run in runs {
            let name = run.metadata.name.clone();
            if self.store.run(namespace, &name)?.is_some() {
                undo(self, &out);
                return Err(ClusterError::Conflict(format!(
                    "PipelineRun {name} already exists in namespace {namespace}: choose another \
                     metadata.name, or `corral delete pipelinerun/{name} -n {namespace}` first"
                )));
            }
            // A run of a stored pipeline: its version, and its code unless it brings some.
            let from_pipeline =
                match self.run_from_pipeline(namespace, &mut run, &pipelines.generations) {
                    Ok(dir) => dir,
                    Err(e) => {
                        undo(self, &out);
                        return Err(e);
                    }
                };
            let code = code.or(from_pipeline.as_deref());
            self.uid_counter += 1;
            let uid = new_uid(namespace, &name, now, self.uid_counter);
            run.metadata.uid = Some(uid.clone());
            run.metadata.creation_timestamp = Some(now);
            run.metadata.generation = Some(1);
            // The run keeps its own copy of the snapshot for the jobs of its steps.
            if let Some(staged) = code
                && let Err(e) = self.code_store().copy(staged, &uid)
            {
                undo(self, &out);
                return Err(ClusterError::Store(format!(
                    "placing the code snapshot of PipelineRun {namespace}/{name}: {e}"
                )));
            }
            if let Err(e) = self.store.insert_run(&uid, &run) {
                let _ = self.code_store().remove(&uid);
                undo(self, &out);
                return Err(e.into());
            }
            self.event(
                namespace,
                &name,
                now,
                EventType::Normal,
                "Submitted",
                format!(
                    "pipeline run of {} steps",
                    run.spec.pipeline_spec.step_count()
                ),
            );
            out.push(SubmitResult {
                namespace: namespace.to_string(),
                name,
                uid,
                converted_from: None,
                kind: Some("PipelineRun".into()),
                revision: None,
                new_revision: false,
                warnings: Vec::new(),
            });
        }
        Ok(out)
    }

    /// Advances every run that has not ended (see the module docs). A run that cannot be
    /// advanced now (its artifacts unreadable, the store busy) is reported and tried again
    /// next pass; it holds up neither the other runs nor the rest of the pass.
    /// Returns how many step jobs it created.
    pub(super) fn advance_pipelines(&mut self, now: Timestamp, report: &mut TickReport) -> usize {
        let runs = match self.store.active_runs() {
            Ok(runs) => runs,
            Err(e) => {
                report.errors.push(format!("reading pipeline runs: {e}"));
                return 0;
            }
        };
        let mut created = 0;
        for stored in runs {
            let name = format!(
                "{}/{}",
                stored.run.metadata.namespace_or_default(),
                stored.run.metadata.name
            );
            match self.advance_run(stored, now) {
                Ok(n) => created += n,
                Err(e) => report.errors.push(format!("pipeline run {name}: {e}")),
            }
        }
        created
    }

    /// Returns how many step jobs it created.
    fn advance_run(&mut self, stored: StoredRun, now: Timestamp) -> Result<usize, ClusterError> {
        let StoredRun { uid, mut run } = stored;
        let namespace = run.metadata.namespace_or_default().to_string();
        let original = run.status.clone().unwrap_or_default();
        let mut jobs = BTreeMap::new();
        for (step, job) in watched_jobs(&run) {
            let record = self.job_record(&namespace, &job)?;
            jobs.insert(step, observe_job(record.as_ref()));
        }
        let mut facts = Facts::default();
        let first = self.decision(&run, &jobs, &mut facts, now)?;
        if first.is_empty(&original) {
            return Ok(0);
        }
        let mut created: Vec<Inserted> = Vec::new();
        let mut records = Vec::new();
        let mut events = Vec::new();
        self.store.begin_batch()?;
        let mut decided = Ok(first);
        for _ in 0..max_rounds(&run) {
            let d = match decided {
                Ok(d) => d,
                Err(e) => {
                    decided = Err(e);
                    break;
                }
            };
            records.extend(d.record);
            events.extend(d.events);
            run.status = Some(d.status);
            if d.create.is_empty() {
                decided = Ok(Decision::default());
                break;
            }
            // Started steps are observed running; a job the plane refuses fails its step,
            // and the next decision says what that means for the run.
            for launch in d.create {
                let step = launch.step.clone();
                match self.create_step_job(&namespace, &run, launch, now) {
                    Ok(inserted) => {
                        created.push(inserted);
                        jobs.insert(step, Observed::Active);
                    }
                    Err(e) => {
                        jobs.insert(
                            step,
                            Observed::Failed(format!("its job could not be created: {e}")),
                        );
                    }
                }
            }
            decided = self.decision(&run, &jobs, &mut facts, now);
        }
        let mut decided = decided.map(|_| ());
        let status = run.status.clone().unwrap_or_default();
        if decided.is_ok() && (status != original || !records.is_empty()) {
            decided = self.record_run(&namespace, &run, &uid, &records, now);
            for e in events {
                self.event(
                    &namespace,
                    &run.metadata.name,
                    now,
                    EventType::Normal,
                    "Pipeline",
                    e,
                );
            }
        }
        let committed = decided.and_then(|()| Ok(self.store.commit_batch()?));
        if let Err(e) = committed {
            let _ = self.store.rollback_batch();
            for inserted in &created {
                self.unsubmit_inserted(inserted);
            }
            let _ = self.plane.settle(now);
            return Err(e);
        }
        let count = created.len();
        for inserted in created {
            self.cache_submitted(inserted);
        }
        Ok(count)
    }

    /// The run's new status and the results it records for the cache, with lineage.
    fn record_run(
        &mut self,
        namespace: &str,
        run: &PipelineRun,
        uid: &str,
        records: &[Recorded],
        now: Timestamp,
    ) -> Result<(), ClusterError> {
        let status = run.status.clone().unwrap_or_default();
        self.store.save_run_status(uid, &status)?;
        for r in records {
            self.store
                .record_artifacts(namespace, &run.metadata.name, r, millis(now))?;
        }
        Ok(())
    }

    /// The core's decision once it wants nothing more: what it asks is gathered first.
    fn decision(
        &self,
        run: &PipelineRun,
        jobs: &BTreeMap<String, Observed>,
        facts: &mut Facts,
        now: Timestamp,
    ) -> Result<Decision, ClusterError> {
        let namespace = run.metadata.namespace_or_default();
        for _ in 0..max_rounds(run) {
            let d = decide(run, jobs, facts, now);
            if d.wants.is_empty() {
                return Ok(d);
            }
            self.gather(namespace, &run.metadata.name, d.wants, facts)?;
        }
        Err(ClusterError::Scheduler(format!(
            "pipeline run {namespace}/{}: the decision kept asking for facts",
            run.metadata.name
        )))
    }

    /// The facts a decision wants, read from the artifacts and the store.
    fn gather(
        &self,
        namespace: &str,
        run: &str,
        wants: Wants,
        facts: &mut Facts,
    ) -> Result<(), ClusterError> {
        for (step, outputs) in wants.hash {
            let mut records = BTreeMap::new();
            for output in outputs {
                let dir = crate::artifacts::output_dir(
                    &self.config.data_dir,
                    namespace,
                    run,
                    &step,
                    &output,
                );
                let sha256 = crate::artifacts::hash(&dir).map_err(|e| {
                    ClusterError::Store(format!("hashing artifact {}: {e}", dir.display()))
                })?;
                let path = dir.to_string_lossy().into_owned();
                records.insert(output, ArtifactRecord { path, sha256 });
            }
            facts.outputs.insert(step, records);
        }
        for key in wants.lookup {
            let hit = self.store.cache_hit(namespace, &key)?;
            facts.cache.insert(key, hit);
        }
        for path in wants.read {
            let text = crate::artifacts::condition_text(std::path::Path::new(&path));
            facts.contents.insert(path, text);
        }
        Ok(())
    }

    fn create_step_job(
        &mut self,
        namespace: &str,
        run: &PipelineRun,
        launch: StepLaunch,
        now: Timestamp,
    ) -> Result<Inserted, ClusterError> {
        let code = run
            .metadata
            .annotations
            .get(crate::code::ANNOTATION)
            .cloned();
        let run_uid = run.metadata.uid.clone().unwrap_or_default();
        let run = run.metadata.name.as_str();
        let who = self
            .tenancy
            .identity(&self.store, namespace)
            .map_err(|e| ClusterError::Config(e.to_string()))?;
        let dirs = crate::artifacts::prepare_outputs(
            &self.config.data_dir,
            namespace,
            run,
            &launch.step,
            &launch.outputs,
            who,
        )
        .map_err(|e| ClusterError::Store(format!("making the step's output directories: {e}")))?;
        let dirs: BTreeMap<String, String> = dirs
            .into_iter()
            .map(|(n, p)| (n, p.to_string_lossy().into_owned()))
            .collect();
        let mut job = step_job_with_artifacts(&launch, &dirs);
        let code_dir = code.as_ref().map(|digest| {
            job.metadata
                .annotations
                .insert(crate::code::ANNOTATION.to_string(), digest.clone());
            self.code_store().job_dir(&run_uid)
        });
        self.insert_step_job(namespace, job, code_dir.as_deref(), now)
    }

    /// A job's whole record: the plane's copy while it lives, else the store's.
    fn job_record(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<corral_api::TrainingJob>, ClusterError> {
        let key = format!("{namespace}/{name}");
        if let Some(j) = self.stored(&key) {
            return Ok(Some(j.job.clone()));
        }
        Ok(self.store.job(namespace, name)?.map(|j| j.job))
    }

    /// Every run of a namespace (or of all), with its status.
    pub fn pipeline_runs(&self, namespace: Option<&str>) -> Result<Vec<PipelineRun>, ClusterError> {
        Ok(self
            .store
            .runs(namespace)?
            .into_iter()
            .map(|r| r.run)
            .collect())
    }

    pub fn pipeline_run(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<PipelineRun>, ClusterError> {
        Ok(self.store.run(namespace, name)?.map(|r| r.run))
    }

    /// A run with each step's phase and job, in DAG order.
    pub fn describe_pipeline_run(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<PipelineRunDetails>, ClusterError> {
        let Some(stored) = self.store.run(namespace, name)? else {
            return Ok(None);
        };
        let run = stored.run;
        let mut missing = Ok(());
        let steps =
            corral_core::views::run_steps(&run, |job| match self.job_record(namespace, job) {
                Ok(j) => j
                    .map(|j| corral_core::lifecycle::job_state(&j.spec, j.status.as_ref()))
                    .map(|s| s.as_str().to_string()),
                Err(e) => {
                    missing = Err(e);
                    None
                }
            });
        missing?;
        let events = self
            .store
            .events(namespace, name)?
            .into_iter()
            .map(super::views::event_of)
            .collect();
        Ok(Some(PipelineRunDetails { run, steps, events }))
    }

    /// Deletes a run and the jobs of its steps (their replicas stop as any deleted job's);
    /// its artifacts stay, for the cache. `None`: no such run.
    pub fn delete_pipeline_run(
        &mut self,
        namespace: &str,
        name: &str,
        now: Timestamp,
    ) -> Result<Option<()>, ClusterError> {
        let Some(stored) = self.store.run(namespace, name)? else {
            return Ok(None);
        };
        for job in step_jobs(&stored.run) {
            match self.delete(namespace, &job, now) {
                Ok(_) | Err(ClusterError::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        self.store.remove_run(&stored.uid)?;
        let _ = self.code_store().remove(&stored.uid);
        Ok(Some(()))
    }
}
