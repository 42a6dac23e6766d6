//! Stored Pipelines, embedded: kept with the submission that brings them (a new version
//! becomes the current one of its name; earlier versions and their code snapshots are
//! kept, for runs that name them), listed, read and deleted. A run that names one
//! (`spec.pipelineRef`) was given a copy of its spec when it was parsed
//! (`corral_api::pipeline::PipelineRunSpec::resolve`, against the namespace's pipelines and
//! the submission's own); here it gets the version's number and, when it brings no code of
//! its own, the code snapshot the pipeline was submitted with.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use corral_api::pipeline::{Pipeline, PipelineRun};
use jiff::Timestamp;

use super::engine::{Cluster, new_uid};
use super::{ClusterError, SubmitResult};

/// A submission's pipelines as stored in its batch, and how to take them back.
#[derive(Default)]
pub(super) struct StoredPipelines {
    pub(super) results: Vec<SubmitResult>,
    /// Each new version's generation, by name: the runs of the same submission that name
    /// it record it.
    pub(super) generations: BTreeMap<String, i64>,
    /// What each stored name held before (to put back) and the code directory the new
    /// version placed (to remove), if the submission is refused after all.
    undo: Vec<(Pipeline, Option<Pipeline>, bool)>,
}

impl StoredPipelines {
    /// The code directories the new versions placed (removed if the batch fails).
    pub(super) fn placed_code(&self, code: crate::code::CodeStore) -> Vec<PathBuf> {
        self.undo
            .iter()
            .filter(|(_, _, placed)| *placed)
            .filter_map(|(p, _, _)| p.metadata.uid.as_deref().map(|u| code.job_dir(u)))
            .collect()
    }
}

fn code_of(p: &Pipeline) -> Option<&str> {
    p.metadata
        .annotations
        .get(crate::code::ANNOTATION)
        .map(String::as_str)
}

impl Cluster {
    /// Stores a submission's pipelines (inside its batch): a pipeline whose spec and code
    /// are those stored under its name is kept as it is; any other is a new version
    /// (`metadata.generation` one more, a new uid, its own copy of the code snapshot).
    pub(super) fn insert_pipelines(
        &mut self,
        namespace: &str,
        pipelines: Vec<Pipeline>,
        code: Option<&Path>,
        now: Timestamp,
    ) -> Result<StoredPipelines, ClusterError> {
        let mut out = StoredPipelines::default();
        for mut p in pipelines {
            let name = p.metadata.name.clone();
            let before = match self.store.pipeline(namespace, &name) {
                Ok(b) => b,
                Err(e) => {
                    self.undo_pipelines(&out);
                    return Err(e.into());
                }
            };
            let unchanged = before
                .as_ref()
                .filter(|b| b.spec == p.spec && code_of(b) == code_of(&p));
            if let Some(kept) = unchanged {
                let generation = kept.metadata.generation.unwrap_or(1);
                out.generations.insert(name.clone(), generation);
                out.results
                    .push(pipeline_result(namespace, kept, generation, false));
                continue;
            }
            let generation = before
                .as_ref()
                .and_then(|b| b.metadata.generation)
                .unwrap_or(0)
                + 1;
            self.uid_counter += 1;
            let uid = new_uid(namespace, &name, now, self.uid_counter);
            p.metadata.uid = Some(uid.clone());
            p.metadata.generation = Some(generation);
            p.metadata.creation_timestamp = Some(
                before
                    .as_ref()
                    .and_then(|b| b.metadata.creation_timestamp)
                    .unwrap_or(now),
            );
            let placed = match code {
                Some(staged) => match self.code_store().copy(staged, &uid) {
                    Ok(_) => true,
                    Err(e) => {
                        self.undo_pipelines(&out);
                        return Err(ClusterError::Store(format!(
                            "placing the code snapshot of Pipeline {namespace}/{name}: {e}"
                        )));
                    }
                },
                None => false,
            };
            if let Err(e) = self.store.put_pipeline(&p) {
                if placed {
                    let _ = self.code_store().remove(&uid);
                }
                self.undo_pipelines(&out);
                return Err(e.into());
            }
            out.generations.insert(name.clone(), generation);
            out.results
                .push(pipeline_result(namespace, &p, generation, true));
            out.undo.push((p, before, placed));
        }
        Ok(out)
    }

    /// Puts back what a refused submission's pipelines replaced.
    pub(super) fn undo_pipelines(&mut self, stored: &StoredPipelines) {
        for (new, before, placed) in stored.undo.iter().rev() {
            let ns = new.metadata.namespace_or_default();
            let _ = match before {
                Some(b) => self.store.put_pipeline(b).and_then(|()| {
                    self.store.remove_pipeline_version(
                        ns,
                        &new.metadata.name,
                        new.metadata.generation.unwrap_or(1),
                    )
                }),
                None => self
                    .store
                    .remove_pipeline(ns, &new.metadata.name)
                    .map(|_| ()),
            };
            if *placed && let Some(uid) = &new.metadata.uid {
                let _ = self.code_store().remove(uid);
            }
        }
    }

    /// A run that names a pipeline: records the version it runs (a version of the same
    /// submission has its number only now) and says where its code comes from, the
    /// pipeline's snapshot when the run brings none. Refused when the pipeline changed
    /// between the run's check and now (another submission revised it).
    pub(super) fn run_from_pipeline(
        &self,
        namespace: &str,
        run: &mut PipelineRun,
        generations: &BTreeMap<String, i64>,
    ) -> Result<Option<PathBuf>, ClusterError> {
        let Some(r) = run.spec.pipeline_ref.as_mut() else {
            return Ok(None);
        };
        let versions = self
            .store
            .pipeline_versions(Some(namespace), Some(&r.name))?;
        if versions.is_empty() {
            return Err(ClusterError::Conflict(format!(
                "Pipeline {namespace}/{} was deleted while PipelineRun {} was submitted",
                r.name, run.metadata.name
            )));
        }
        if let (None, Some(&g)) = (r.generation, generations.get(&r.name)) {
            r.generation = Some(g);
        }
        let Some(p) = versions
            .into_iter()
            .find(|v| v.metadata.generation.is_some() && v.metadata.generation == r.generation)
        else {
            return Err(ClusterError::Conflict(format!(
                "Pipeline {namespace}/{} changed while PipelineRun {} was submitted; \
                 submit the run again",
                r.name, run.metadata.name
            )));
        };
        if run
            .metadata
            .annotations
            .contains_key(crate::code::ANNOTATION)
        {
            return Ok(None);
        }
        let (Some(digest), Some(uid)) = (code_of(&p), p.metadata.uid.as_deref()) else {
            return Ok(None);
        };
        run.metadata
            .annotations
            .insert(crate::code::ANNOTATION.to_string(), digest.to_string());
        Ok(Some(self.code_store().job_dir(uid)))
    }

    /// Where the code of a run that brings none comes from: the snapshot of the stored
    /// pipeline it names, if that has one (for the checks of its steps' files).
    pub(super) fn pipeline_code(&self, namespace: &str, run: &PipelineRun) -> Option<PathBuf> {
        let r = run.spec.pipeline_ref.as_ref()?;
        if run
            .metadata
            .annotations
            .contains_key(crate::code::ANNOTATION)
        {
            return None;
        }
        let versions = self
            .store
            .pipeline_versions(Some(namespace), Some(&r.name))
            .ok()?;
        // The version the run names, else the current one (the last).
        let p = match r.generation {
            Some(g) => versions
                .into_iter()
                .find(|v| v.metadata.generation == Some(g))?,
            None => versions.into_iter().last()?,
        };
        code_of(&p)?;
        Some(self.code_store().job_dir(p.metadata.uid.as_deref()?))
    }

    /// The pipelines of a namespace (or of every namespace), by namespace and name.
    pub fn pipelines(&self, namespace: Option<&str>) -> Result<Vec<Pipeline>, ClusterError> {
        Ok(self.store.pipelines(namespace)?)
    }

    pub fn pipeline(&self, namespace: &str, name: &str) -> Result<Option<Pipeline>, ClusterError> {
        Ok(self.store.pipeline(namespace, name)?)
    }

    /// Every kept version of the pipelines of a namespace (of one name, or all), oldest
    /// first, the current one last.
    pub fn pipeline_versions(
        &self,
        namespace: &str,
        name: Option<&str>,
    ) -> Result<Vec<Pipeline>, ClusterError> {
        Ok(self.store.pipeline_versions(Some(namespace), name)?)
    }

    /// Deletes a pipeline, every version of it and their code snapshots; the runs made
    /// from it keep their copies. `None`: no such pipeline.
    pub fn delete_pipeline(
        &mut self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<()>, ClusterError> {
        if self.store.pipeline(namespace, name)?.is_none() {
            return Ok(None);
        }
        let versions = self.store.pipeline_versions(Some(namespace), Some(name))?;
        self.store.remove_pipeline(namespace, name)?;
        for uid in versions.iter().filter_map(|v| v.metadata.uid.as_deref()) {
            let _ = self.code_store().remove(uid);
        }
        Ok(Some(()))
    }
}

fn pipeline_result(namespace: &str, p: &Pipeline, generation: i64, new: bool) -> SubmitResult {
    SubmitResult {
        namespace: namespace.to_string(),
        name: p.metadata.name.clone(),
        uid: p.metadata.uid.clone().unwrap_or_default(),
        converted_from: None,
        warnings: Vec::new(),
        kind: Some("Pipeline".into()),
        revision: Some(format!("generation {generation}")),
        new_revision: new,
    }
}
