//! Served models, embedded: stored as submitted, their replicas run as jobs through the
//! control plane. Each serving pass hands the router's observations (load, readiness) to
//! the core's [`Serving`], submits or deletes the replica jobs it asks for, and answers
//! where each model's replicas listen, for the router. No decision is made here.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::time::Duration;

use corral_api::document::{Document, parse_documents};
pub use corral_api::served_model::serving_path;
use corral_api::served_model::{
    ModelOrigin, ServedModel, replica_job, replica_job_name, revision_name, revision_replica_job,
    serving_replica_of, serving_revision_of,
};
use corral_core::control::Effect;
pub use corral_core::control::serving::ServingObservation;
use corral_core::control::serving::{
    LoadSample, ModelView, ReplicaAction, ReplicaJob, Serving, revision_views,
};
use jiff::Timestamp;

use super::engine::Cluster;
use super::revisions::{Revised, latest, revision_code_id, stable};
use super::submission::{CheckedSubmission, SubmitContext};
use super::{ClusterError, DocumentProblem, FieldProblem, JobState, SubmitResult, SummaryRow};

/// One replica of a served model as the router should reach it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointReplica {
    /// Its job's name.
    pub name: String,
    /// Its port on this machine.
    pub port: u16,
    pub revision: String,
    /// Out of rotation for a scale-down: no new request, those under way end.
    pub draining: bool,
}

/// Where one model's replicas listen, and how the router should treat them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServingEndpoint {
    /// `namespace/name`.
    pub key: String,
    /// Every replica that runs: where the router reaches it and whether it drains.
    pub replicas: Vec<EndpointReplica>,
    /// Percent of new requests per revision (summing to 100), as the core split them.
    pub traffic: Vec<(String, u32)>,
    pub readiness_path: String,
    pub probe_period: Duration,
    pub failure_threshold: u32,
    pub max_request_bytes: u64,
    /// `latest` and `stable`, each with the revision it names now (a revision's URL may
    /// use them: `/serve/<namespace>/<model>@latest/`).
    pub aliases: Vec<(String, String)>,
}

/// Served models and their autoscalers (the embedded cluster's part of serving).
#[derive(Default)]
pub(super) struct ServedModels {
    /// By `namespace/name`, with the status of the last pass.
    pub(super) models: BTreeMap<String, ServedModel>,
    /// Each model's revisions (by the same key), oldest first.
    pub(super) revisions: BTreeMap<String, Vec<crate::store::StoredRevision>>,
    pub(super) serving: Serving,
}

/// Whether a submission holds ServedModels or KServe InferenceServices (stored by
/// [`Cluster::submit_served_models`], not queued as jobs). The text test first: a job's
/// submission pays one scan, no parse.
pub fn has_served_models(text: &str) -> bool {
    let kinds = ["ServedModel", corral_api::kserve::KIND];
    kinds.iter().any(|k| text.contains(k))
        && corral_api::document::raw_documents(text).is_ok_and(|docs| {
            docs.iter().any(|d| {
                d.get("kind")
                    .and_then(|k| k.as_str())
                    .is_some_and(|k| kinds.contains(&k))
            })
        })
}

/// Where a served model's code snapshot is kept in the code store (names and namespaces
/// are DNS labels: no job uid has this form).
pub(super) fn code_id(namespace: &str, name: &str) -> String {
    format!("served.{namespace}.{name}")
}

fn submitted(m: &ServedModel, namespace: &str, revised: Option<Revised>) -> SubmitResult {
    let (revision, updated) = match revised {
        Some(Revised::New(r)) => (Some(r), true),
        Some(Revised::Same(r)) => (Some(r), false),
        None => (None, false),
    };
    SubmitResult {
        revision,
        new_revision: updated,
        namespace: namespace.to_string(),
        name: m.metadata.name.clone(),
        uid: String::new(),
        converted_from: None,
        warnings: Vec::new(),
        kind: Some(m.kind.clone()),
    }
}

pub(super) fn key(m: &ServedModel) -> String {
    format!("{}/{}", m.metadata.namespace_or_default(), m.metadata.name)
}

impl Cluster {
    /// Submits ServedModels (YAML or JSON, several at once; every document a ServedModel),
    /// all or nothing. Each is checked as its replicas will be submitted (this machine can
    /// hold one), with the model's field paths.
    pub fn submit_served_models(
        &mut self,
        text: &str,
        namespace: &str,
        dry_run: bool,
    ) -> Result<Vec<SubmitResult>, ClusterError> {
        self.submit_served_models_with_code(text, namespace, None, dry_run)
    }

    /// [`Cluster::submit_served_models`] (`dry_run`: checked, nothing stored) with a code
    /// snapshot unpacked at `code.0` (digest `code.1`): kept for the models, and each
    /// replica runs from a copy of it.
    pub fn submit_served_models_with_code(
        &mut self,
        text: &str,
        namespace: &str,
        code: Option<(&Path, &str)>,
        dry_run: bool,
    ) -> Result<Vec<SubmitResult>, ClusterError> {
        let ctx: SubmitContext = self.submit_context();
        let mut problems = Vec::new();
        let mut models = Vec::new();
        for r in parse_documents(text, &ctx.validation) {
            let p = match r {
                Ok(p) => p,
                Err(e) => {
                    problems.push(DocumentProblem::from(&e));
                    continue;
                }
            };
            let what = Some(format!("{} {}", p.document.kind(), p.document.name()));
            let mut errors = Vec::new();
            match p.document {
                Document::ServedModel(m) => {
                    let mut m = *m;
                    if let Some(ns) = &m.metadata.namespace
                        && ns != namespace
                    {
                        errors.push(FieldProblem {
                            path: "metadata.namespace".into(),
                            message: format!(
                                "`{ns}` is not this request's namespace `{namespace}`"
                            ),
                        });
                    }
                    m.metadata.namespace = Some(namespace.to_string());
                    if let Some((_, digest)) = code {
                        m.metadata
                            .annotations
                            .insert(crate::code::ANNOTATION.to_string(), digest.to_string());
                    }
                    // Only the cluster says where a model came from.
                    m.metadata
                        .annotations
                        .remove(corral_api::served_model::MODEL_ORIGIN_ANNOTATION);
                    if errors.is_empty()
                        && let Some(source) = &m.spec.model
                    {
                        match self.model_origin(source, namespace) {
                            Ok(origin) => {
                                m.metadata.annotations.insert(
                                    corral_api::served_model::MODEL_ORIGIN_ANNOTATION.to_string(),
                                    origin,
                                );
                            }
                            Err(p) => errors.push(FieldProblem {
                                path: p.path.into(),
                                message: p.message,
                            }),
                        }
                    }
                    if errors.is_empty()
                        && let Err(r) = ctx.fit.check(&replica_job(&m, 0))
                    {
                        errors.push(FieldProblem {
                            path: r.path.replacen(
                                "spec.replicas.worker.resources",
                                "spec.resources",
                                1,
                            ),
                            message: r.message,
                        });
                    }
                    if errors.is_empty() {
                        models.push(m);
                    }
                }
                other => errors.push(FieldProblem {
                    path: "kind".into(),
                    message: format!(
                        "{} cannot be submitted with ServedModels; submit it in a file of its own",
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
        if !problems.is_empty() {
            return Err(ClusterError::Invalid(problems));
        }
        if dry_run {
            return Ok(models
                .iter()
                .map(|m| submitted(m, m.metadata.namespace_or_default(), None))
                .collect());
        }
        // A model that exists is revised (a submission is how a model changes); the new
        // ones are stored all or none.
        let (existing, fresh): (Vec<ServedModel>, Vec<ServedModel>) = models
            .into_iter()
            .partition(|m| self.served.models.contains_key(&key(m)));
        self.store
            .insert_served_models(&fresh)
            .map_err(|e| match e {
                crate::store::StoreError::AlreadyExists { namespace, name } => {
                    ClusterError::AlreadyExists { namespace, name }
                }
                other => ClusterError::Store(other.to_string()),
            })?;
        let now = Timestamp::now();
        if let Some((staged, _)) = code {
            let store = self.code_store();
            for m in &fresh {
                let id = code_id(m.metadata.namespace_or_default(), &m.metadata.name);
                // Copies (hard links): the caller removes what it staged.
                if let Err(e) = store.copy(staged, &id) {
                    for m in &fresh {
                        let _ = self.store.remove_served_model(
                            m.metadata.namespace_or_default(),
                            &m.metadata.name,
                        );
                    }
                    return Err(ClusterError::Store(format!(
                        "placing the code snapshot of {}: {e}",
                        m.metadata.name
                    )));
                }
            }
        }
        let mut out = Vec::new();
        for m in fresh {
            let first = self.first_revision(&m, now)?;
            out.push(submitted(
                &m,
                m.metadata.namespace_or_default(),
                Some(Revised::New(first)),
            ));
            self.served.models.insert(key(&m), m);
        }
        for m in existing {
            let copy = match code {
                Some((staged, _)) => Some(
                    self.code_store()
                        .stage_copy(staged)
                        .map_err(|e| ClusterError::Store(e.to_string()))?,
                ),
                None => None,
            };
            let ns = m.metadata.namespace_or_default().to_string();
            let revised = self.revise(m.clone(), copy.as_deref());
            if let Some(c) = &copy {
                let _ = crate::code::remove_tree(c);
            }
            out.push(submitted(&m, &ns, Some(revised?)));
        }
        Ok(out)
    }

    /// `spec.model` resolved (the core's `resolve_model`) to the origin it is served from,
    /// as the annotation's JSON.
    fn model_origin(
        &self,
        source: &corral_api::served_model::ModelSource,
        namespace: &str,
    ) -> Result<String, corral_core::control::serving::ModelSourceProblem> {
        // Content where there is some: an empty directory holds no model.
        let mut hash = |path: &str| {
            let p = Path::new(path);
            let meta = std::fs::symlink_metadata(p).ok()?;
            if meta.is_dir() && std::fs::read_dir(p).ok()?.next().is_none() {
                return None;
            }
            crate::artifacts::hash(p).ok()
        };
        if let Some(name) = &source.pipeline_run {
            let run = self.store.run(namespace, name).ok().flatten().map(|r| {
                let mut run = r.run;
                run.metadata.uid = Some(r.uid);
                run
            });
            let origin = corral_core::control::serving::resolve_model_from_run(
                source,
                namespace,
                run.as_ref(),
                &mut hash,
            )?;
            return Ok(serde_json::to_string(&origin).unwrap_or_default());
        }
        let stored = self
            .store
            .job(namespace, &source.training_job)
            .ok()
            .flatten();
        let job = stored.as_ref().map(|s| {
            let mut job = s.job.clone();
            job.metadata.uid = Some(s.uid.clone());
            job
        });
        let output = stored.as_ref().map_or_else(PathBuf::new, |s| {
            crate::artifacts::job_output_dir(&self.config.data_dir, namespace, &s.name, &s.uid)
        });
        let origin = corral_core::control::serving::resolve_model(
            source,
            namespace,
            job.as_ref(),
            &output.to_string_lossy(),
            &mut hash,
        )?;
        Ok(serde_json::to_string(&origin).unwrap_or_default())
    }

    /// Submits replica `index` of revision `number` (`revision`: the model as it was then),
    /// from a copy of the revision's code when it has one.
    fn create_replica(
        &mut self,
        revision: &ServedModel,
        number: u32,
        index: u32,
        now: Timestamp,
    ) -> Result<(), ClusterError> {
        let ns = revision.metadata.namespace_or_default().to_string();
        let name = &revision.metadata.name;
        let job = revision_replica_job(revision, &revision_name(name, number), index);
        let checked = CheckedSubmission::internal(&ns, job);
        let Some(digest) = revision.metadata.annotations.get(crate::code::ANNOTATION) else {
            return self.submit_checked(checked, now).map(|_| ());
        };
        let store = self.code_store();
        let staged = store
            .stage_copy(&store.job_dir(&revision_code_id(&ns, name, number)))
            .map_err(|e| ClusterError::Store(e.to_string()))?;
        let done = self.submit_checked_with_code(checked.with_code(digest), Some(&staged), now);
        let _ = crate::code::remove_tree(&staged);
        done.map(|_| ())
    }

    /// Served models (of `namespace`, or all), with the status of the last pass.
    pub fn served_models(&self, namespace: Option<&str>) -> Vec<ServedModel> {
        self.served
            .models
            .values()
            .filter(|m| namespace.is_none_or(|ns| m.metadata.namespace_or_default() == ns))
            .cloned()
            .collect()
    }

    pub fn served_model(&self, namespace: &str, name: &str) -> Option<ServedModel> {
        self.served
            .models
            .get(&format!("{namespace}/{name}"))
            .cloned()
    }

    /// The replica jobs of a served model, by name (for describe and logs).
    pub fn serving_replicas(&self, namespace: &str, name: &str) -> Vec<SummaryRow> {
        let (start, end) = (
            SummaryRow::key_of(namespace, &format!("{name}-serving-")),
            SummaryRow::key_of(namespace, &format!("{name}-serving.")),
        );
        self.summaries
            .range::<[u8], _>((
                Bound::Included(start.as_slice()),
                Bound::Excluded(end.as_slice()),
            ))
            .filter(|row| {
                self.live
                    .get(&format!("{namespace}/{}", row.name()))
                    .is_none_or(|j| {
                        serving_replica_of(&j.job).is_some_and(|(model, _)| model == name)
                    })
            })
            .cloned()
            .collect()
    }

    /// Deletes a served model: its replica jobs stop (with their grace period) and go, the
    /// model is removed at once (the router stops routing to it).
    pub fn delete_served_model(
        &mut self,
        namespace: &str,
        name: &str,
        now: Timestamp,
    ) -> Result<Effect, ClusterError> {
        let k = format!("{namespace}/{name}");
        if !self.served.models.contains_key(&k) {
            return Err(ClusterError::NotFound {
                namespace: namespace.to_string(),
                name: name.to_string(),
            });
        }
        // A replica job already being deleted is left so (the plane says AlreadySo).
        for row in self.serving_replicas(namespace, name) {
            self.delete(namespace, row.name(), now)?;
        }
        self.store
            .remove_served_model(namespace, name)
            .map_err(|e| ClusterError::Store(e.to_string()))?;
        let released =
            super::revisions::origins(self.served.revisions.get(&k).into_iter().flatten());
        self.forget_revisions(namespace, name);
        self.served.models.remove(&k);
        self.served.serving.forget(&k);
        // The outputs it alone served, of jobs already gone, go with it.
        self.release_outputs(namespace, &released, now);
        Ok(Effect::Made)
    }

    /// One serving pass: each model's observation to the core (load, readiness, what is
    /// under way on each revision), the replica jobs it asks for submitted or deleted,
    /// its promotions and retirements recorded, and where every model's replicas listen
    /// with the split of new requests between its revisions.
    pub fn serve_pass(
        &mut self,
        now: Timestamp,
        observed: &BTreeMap<String, ServingObservation>,
    ) -> (Vec<ServingEndpoint>, Vec<String>) {
        let mut endpoints = Vec::new();
        let mut errors = Vec::new();
        let keys: Vec<String> = self.served.models.keys().cloned().collect();
        for k in keys {
            let Some(model) = self.served.models.get(&k).cloned() else {
                continue;
            };
            let ns = model.metadata.namespace_or_default().to_string();
            let name = model.metadata.name.clone();
            let stored = self.served.revisions.get(&k).cloned().unwrap_or_default();
            let (Some(latest), Some(stable)) = (latest(&stored), stable(&stored)) else {
                errors.push(format!("served model {k}: no revision stored"));
                continue;
            };
            let seen = observed.get(&k).cloned().unwrap_or_default();
            self.served.serving.observe_load(
                &k,
                LoadSample {
                    at: now,
                    in_flight: seen.in_flight,
                    arrived: seen.arrived,
                },
            );
            // Replica jobs by revision (one made before revisions runs the first).
            let rows = self.serving_replicas(&ns, &name);
            let labels: Vec<Option<String>> = rows
                .iter()
                .map(|row| {
                    self.live
                        .get(&format!("{ns}/{}", row.name()))
                        .and_then(|j| serving_revision_of(&j.job).map(str::to_string))
                })
                .collect();
            let jobs: Vec<ReplicaJob<'_>> = rows
                .iter()
                .zip(&labels)
                .filter_map(|(row, revision)| {
                    Some(ReplicaJob {
                        name: row.name(),
                        index: row
                            .name()
                            .strip_prefix(&format!("{name}-serving-"))
                            .and_then(|i| i.parse().ok())?,
                        revision: revision.as_deref(),
                        finished: matches!(row.state(), JobState::Succeeded | JobState::Failed),
                        deleting: row.state() == JobState::Deleting,
                    })
                })
                .collect();
            let kept: Vec<String> = stored
                .iter()
                .map(|r| revision_name(&name, r.number))
                .collect();
            let views = revision_views(&name, &kept, &jobs, &seen);
            let (latest_name, stable_name) = (
                revision_name(&name, latest.number),
                revision_name(&name, stable.number),
            );
            let plan = self.served.serving.decide(
                &k,
                ModelView {
                    spec: &model.spec,
                    latest: &latest_name,
                    stable: &stable_name,
                    revisions: &views,
                },
                now,
            );
            let number_of = |revision: &str| {
                stored
                    .iter()
                    .find(|r| revision_name(&name, r.number) == revision)
                    .map(|r| r.number)
            };
            for r in &plan.revisions {
                for action in &r.actions {
                    let done = match (*action, number_of(&r.name)) {
                        (ReplicaAction::Create(i), Some(n)) => stored
                            .iter()
                            .find(|s| s.number == n)
                            .map_or(Ok(()), |s| self.create_replica(&s.model, n, i, now)),
                        // The core creates only for revisions it was given.
                        (ReplicaAction::Create(_), None) => Ok(()),
                        // The router is told below, with the replicas' endpoints.
                        (ReplicaAction::Drain(_), _) => Ok(()),
                        (ReplicaAction::Remove(i), _) => self
                            .delete(&ns, &replica_job_name(&name, i), now)
                            .map(|_| ()),
                    };
                    if let Err(e) = done {
                        errors.push(format!("served model {k}: {} {action:?}: {e}", r.name));
                    }
                }
            }
            let promoted = plan.promoted.then_some(latest.number);
            let retired: Vec<u32> = plan.retired.iter().filter_map(|r| number_of(r)).collect();
            errors.extend(self.record_revisions(&model, promoted, &retired, now));

            let mut replicas = Vec::new();
            for row in self.serving_replicas(&ns, &name) {
                if row.state() != JobState::Running {
                    continue;
                }
                let revision = self
                    .live
                    .get(&format!("{ns}/{}", row.name()))
                    .and_then(|j| serving_revision_of(&j.job).map(str::to_string))
                    .unwrap_or_else(|| revision_name(&name, 1));
                let draining = row
                    .name()
                    .strip_prefix(&format!("{name}-serving-"))
                    .and_then(|i| i.parse::<u32>().ok())
                    .is_some_and(|i| plan.draining.contains(&i));
                if let Some(port) = self.executor.ports_mut().ports_of(row.uid()).first() {
                    replicas.push(EndpointReplica {
                        name: row.name().to_string(),
                        port: *port,
                        revision,
                        draining,
                    });
                }
            }
            let spec = &model.spec;
            endpoints.push(ServingEndpoint {
                key: k.clone(),
                replicas,
                traffic: plan
                    .revisions
                    .iter()
                    .map(|r| (r.name.clone(), r.share.traffic))
                    .collect(),
                readiness_path: spec.readiness.path.clone(),
                probe_period: Duration::from_secs(u64::from(spec.readiness.period_seconds)),
                failure_threshold: spec.readiness.failure_threshold,
                max_request_bytes: spec.max_request_bytes(),
                aliases: vec![
                    ("latest".to_string(), latest_name.clone()),
                    ("stable".to_string(), plan.stable.clone()),
                ],
            });
            if let Some(m) = self.served.models.get_mut(&k) {
                let origin = ModelOrigin::of(&m.metadata.annotations);
                m.status = Some(plan.status(&ns, &name, &latest_name, origin, |r| {
                    let n = number_of(r)?;
                    Some(stored.iter().find(|s| s.number == n)?.hash.clone())
                }));
            }
        }
        (endpoints, errors)
    }
}
