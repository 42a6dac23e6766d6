//! Served models, embedded: stored as submitted, their replicas run as jobs through the
//! control plane. Each serving pass hands the router's observations (load, readiness) to
//! the core's [`Serving`], submits or deletes the replica jobs it asks for, and answers
//! where each model's replicas listen, for the router. No decision is made here.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::path::Path;
use std::time::Duration;

use corral_api::document::{Document, parse_documents};
use corral_api::served_model::{
    ServedModel, ServedModelStatus, replica_job, replica_job_name, serving_replica_of,
};
use corral_core::control::Effect;
use corral_core::control::serving::{LoadSample, ReplicaAction, ReplicaView, Serving};
use jiff::Timestamp;

use super::commands::{CheckedSubmission, SubmitContext};
use super::engine::Cluster;
use super::{ClusterError, DocumentProblem, FieldProblem, JobState, SubmitResult, SummaryRow};

/// What the router saw of one model since the last pass.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServingObservation {
    pub in_flight: u32,
    pub arrived: u64,
    /// Replica job names in rotation.
    pub ready: BTreeSet<String>,
}

/// Where one model's replicas listen, and how the router should treat them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServingEndpoint {
    /// `namespace/name`.
    pub key: String,
    /// Replica job name and its port on this machine, for every replica that runs.
    pub replicas: Vec<(String, u16)>,
    pub readiness_path: String,
    pub probe_period: Duration,
    pub failure_threshold: u32,
    pub max_request_bytes: u64,
}

/// Served models and their autoscalers (the embedded cluster's part of serving).
#[derive(Default)]
pub(super) struct ServedModels {
    /// By `namespace/name`, with the status of the last pass.
    pub(super) models: BTreeMap<String, ServedModel>,
    pub(super) serving: Serving,
}

/// Whether a submission holds ServedModels (stored by [`Cluster::submit_served_models`],
/// not queued as jobs). The text test first: a job's submission pays one scan, no parse.
pub fn has_served_models(text: &str) -> bool {
    text.contains("ServedModel")
        && corral_api::document::raw_documents(text).is_ok_and(|docs| {
            docs.iter()
                .any(|d| d.get("kind").and_then(|k| k.as_str()) == Some("ServedModel"))
        })
}

/// Where a served model's code snapshot is kept in the code store (names and namespaces
/// are DNS labels: no job uid has this form).
pub(super) fn code_id(namespace: &str, name: &str) -> String {
    format!("served.{namespace}.{name}")
}

/// The router's path of a model.
pub fn serving_path(namespace: &str, name: &str) -> String {
    format!("/serve/{namespace}/{name}/")
}

fn submitted(m: &ServedModel, namespace: &str) -> SubmitResult {
    SubmitResult {
        namespace: namespace.to_string(),
        name: m.metadata.name.clone(),
        uid: String::new(),
        converted_from: None,
        warnings: Vec::new(),
        kind: Some(m.kind.clone()),
    }
}

fn key(m: &ServedModel) -> String {
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
                .map(|m| submitted(m, m.metadata.namespace_or_default()))
                .collect());
        }
        self.store
            .insert_served_models(&models)
            .map_err(|e| match e {
                crate::store::StoreError::AlreadyExists { namespace, name } => {
                    ClusterError::AlreadyExists { namespace, name }
                }
                other => ClusterError::Store(other.to_string()),
            })?;
        if let Some((staged, _)) = code {
            let store = self.code_store();
            for (i, m) in models.iter().enumerate() {
                let id = code_id(m.metadata.namespace_or_default(), &m.metadata.name);
                let placed = if i + 1 == models.len() {
                    store.place(staged, &id)
                } else {
                    store.copy(staged, &id)
                };
                if let Err(e) = placed {
                    for m in &models {
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
        for m in models {
            out.push(submitted(&m, m.metadata.namespace_or_default()));
            self.served.models.insert(key(&m), m);
        }
        Ok(out)
    }

    /// Submits replica `index` of `model`, from a copy of the model's code when it has one.
    fn create_replica(
        &mut self,
        model: &ServedModel,
        index: u32,
        now: Timestamp,
    ) -> Result<(), ClusterError> {
        let ns = model.metadata.namespace_or_default().to_string();
        let checked = CheckedSubmission::internal(&ns, replica_job(model, index));
        let Some(digest) = model.metadata.annotations.get(crate::code::ANNOTATION) else {
            return self.submit_checked(checked, now).map(|_| ());
        };
        let store = self.code_store();
        let staged = store
            .stage_copy(&store.job_dir(&code_id(&ns, &model.metadata.name)))
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
        let _ = self.code_store().remove(&code_id(namespace, name));
        self.served.models.remove(&k);
        self.served.serving.forget(&k);
        Ok(Effect::Made)
    }

    /// One serving pass: each model's observation to the autoscaler, the replica jobs it
    /// asks for submitted or deleted, and where every model's replicas listen.
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
            let seen = observed.get(&k).cloned().unwrap_or_default();
            self.served.serving.observe_load(
                &k,
                LoadSample {
                    at: now,
                    in_flight: seen.in_flight,
                    arrived: seen.arrived,
                },
            );
            let rows = self.serving_replicas(&ns, &name);
            let views: Vec<ReplicaView> = rows
                .iter()
                .filter_map(|row| {
                    let index = row
                        .name()
                        .strip_prefix(&format!("{name}-serving-"))?
                        .parse()
                        .ok()?;
                    Some(ReplicaView {
                        index,
                        ready: seen.ready.contains(row.name()),
                        finished: matches!(row.state(), JobState::Succeeded | JobState::Failed),
                        deleting: row.state() == JobState::Deleting,
                    })
                })
                .collect();
            let plan = self.served.serving.decide(&k, &model.spec, now, &views);
            for action in &plan.actions {
                let done = match *action {
                    ReplicaAction::Create(i) => self.create_replica(&model, i, now),
                    ReplicaAction::Remove(i) => self
                        .delete(&ns, &replica_job_name(&name, i), now)
                        .map(|_| ()),
                };
                if let Err(e) = done {
                    errors.push(format!("served model {k}: {action:?}: {e}"));
                }
            }
            let mut replicas = Vec::new();
            for row in self.serving_replicas(&ns, &name) {
                if row.state() != JobState::Running {
                    continue;
                }
                if let Some(port) = self.executor.ports_mut().ports_of(row.uid()).first() {
                    replicas.push((row.name().to_string(), *port));
                }
            }
            let spec = &model.spec;
            endpoints.push(ServingEndpoint {
                key: k.clone(),
                replicas,
                readiness_path: spec.readiness.path.clone(),
                probe_period: Duration::from_secs(u64::from(spec.readiness.period_seconds)),
                failure_threshold: spec.readiness.failure_threshold,
                max_request_bytes: spec.max_request_bytes(),
            });
            if let Some(m) = self.served.models.get_mut(&k) {
                m.status = Some(ServedModelStatus {
                    desired_replicas: plan.scale.desired,
                    replicas: plan.current,
                    ready_replicas: plan.ready,
                    panic: plan.scale.panic,
                    url: Some(serving_path(&ns, &name)),
                    last_request_time: plan.last_request,
                });
            }
        }
        (endpoints, errors)
    }
}
