//! Served models on Kubernetes: ServedModel objects scaled after each operator pass by the
//! core's decision (`corral_core::control::serving`), the one `corral up` applies, and
//! routed by Corral's router in the operator (`/serve/<namespace>/<model>/...` on the
//! read API's port, [`crate::read_api`]).
//!
//! - Replicas are one-replica TrainingJobs (`<model>-serving-<i>`, owned by the model, so
//!   deleting it deletes them), queued, admitted, placed and preempted by the operator's own
//!   pass like any job. Each listens on [`ServingConfig::port`] of its pod's IP (`$PORT`);
//!   the router reaches it there and checks its readiness itself.
//! - Revisions are ControllerRevisions (apps/v1, as StatefulSets keep theirs), owned by the
//!   model: `<model>-00001`, ..., holding the model as it was and the core's
//!   `revision_hash`. A change of what the replicas run makes the next one; the stable
//!   revision is `status.stableRevision`.
//!
//! - `spec.model` names a pipeline run's step output (on the namespace's artifact claim, as
//!   pipelines keep them): resolved when the spec changes, by the core's
//!   `resolve_model_from_run`, pinned in the revision, and mounted read-only in its replicas.
//!
//! Pure: [`plan`] reads the models, their revisions, the pipeline runs, the operator's
//! [`World`] and what the router saw, and returns [`ServingAction`]s and the router's table; [`apply`] writes the
//! actions, [`watch`] runs both in the operator.

pub mod apply;
pub mod watch;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::api::ObjectMeta;
use serde_json::{Value, json};

use corral_api::PipelineRun;
use corral_api::served_model::{
    MODEL_ORIGIN_ANNOTATION, ModelOrigin, SERVED_MODEL_LABEL, ServedModel, ServedModelStatus,
    replica_job_name, revision_name, revision_replica_job, serving_replica_of, serving_revision_of,
};
use corral_api::training_job::JobState;
use corral_core::control::serving::{
    LoadSample, ModelView, ReplicaAction, ReplicaJob, Serving, ServingObservation,
    resolve_model_from_run, revision_hash, revision_views, same_revision, stable_index,
};
use corral_router::{ModelTarget, ReplicaTarget};

use crate::build::BuildOptions;
use crate::consts::JOB_NAME_LABEL;
use crate::observe::{World, job_key, label};

/// The port a replica listens on in its pod unless the operator is told another
/// (`--serving-port`; KServe's and Knative's default).
pub const DEFAULT_SERVING_PORT: u16 = 8080;
/// Annotation of a revision: the core's `revision_hash` of what its replicas run.
pub const REVISION_HASH_ANNOTATION: &str = "corral.dev/revision-hash";
/// `status.lastRequestTime` alone is written at most this often (it moves with every
/// request; the read API shows the fresh one).
const LAST_REQUEST_WRITE_EVERY: jiff::SignedDuration = jiff::SignedDuration::from_secs(30);

/// What serving needs beyond the models.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServingConfig {
    /// The port every replica listens on in its own pod (`$PORT`).
    pub port: u16,
    /// How the operator builds pods (the replicas' checks use it).
    pub build: BuildOptions,
    /// Where pipeline artifacts are (`--artifacts-claim` or `--artifact-store`): a model
    /// that serves a step's artifact reads it from there, read-only.
    pub artifacts: crate::pipelines::ArtifactLocation,
    /// The image that fetches it from an object store (the operator's own).
    pub tools_image: String,
}

/// One write of the serving plan.
#[derive(Clone, Debug, PartialEq)]
pub enum ServingAction {
    /// A new revision of a model (owned by it).
    CreateRevision {
        namespace: String,
        revision: Box<ControllerRevision>,
    },
    /// A revision the core retired (neither latest nor stable, no replica left).
    DeleteRevision { namespace: String, name: String },
    /// A replica's TrainingJob (JSON, owned by its model).
    CreateJob {
        namespace: String,
        name: String,
        job: Value,
    },
    /// A replica the autoscaler removed (its pods stop with their grace period).
    DeleteJob { namespace: String, name: String },
    /// The model's status (written when it changed).
    Status {
        namespace: String,
        name: String,
        status: Box<ServedModelStatus>,
    },
}

/// One pass's decision for every model.
#[derive(Debug, Default)]
pub struct Plan {
    pub actions: Vec<ServingAction>,
    /// The router's table: every model served now, by `namespace/name`.
    pub targets: Vec<(String, ModelTarget)>,
    /// The models with the status just decided (what the read API answers).
    pub models: Vec<ServedModel>,
}

impl Plan {
    /// `model` with its `status` now: written when it says something new, answered by the
    /// read API either way.
    fn record(&mut self, mut model: ServedModel, status: ServedModelStatus) {
        if worth_writing(model.status.as_ref(), &status) {
            self.actions.push(ServingAction::Status {
                namespace: model.metadata.namespace_or_default().to_string(),
                name: model.metadata.name.clone(),
                status: Box::new(status.clone()),
            });
        }
        model.status = Some(status);
        self.models.push(model);
    }
}

/// A revision as kept in its ControllerRevision.
#[derive(Clone, Debug)]
struct Kept {
    number: u32,
    name: String,
    hash: String,
    model: ServedModel,
}

fn key(m: &ServedModel) -> String {
    format!("{}/{}", m.metadata.namespace_or_default(), m.metadata.name)
}

/// The revisions of `model` kept in `revisions` (its own: labelled with its name and owned
/// by its uid), oldest first.
fn kept_of(model: &ServedModel, revisions: &[Arc<ControllerRevision>]) -> Vec<Kept> {
    let ns = model.metadata.namespace_or_default();
    let uid = model.metadata.uid.as_deref().unwrap_or_default();
    let mut kept: Vec<Kept> = revisions
        .iter()
        .filter(|r| r.metadata.namespace.as_deref() == Some(ns))
        .filter(|r| label(&r.metadata, SERVED_MODEL_LABEL) == Some(model.metadata.name.as_str()))
        .filter(|r| {
            r.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.uid == uid)
        })
        .filter_map(|r| {
            let number = u32::try_from(r.revision).ok()?;
            let model: ServedModel = serde_json::from_value(r.data.as_ref()?.0.clone()).ok()?;
            Some(Kept {
                number,
                name: r.metadata.name.clone()?,
                hash: r
                    .metadata
                    .annotations
                    .as_ref()?
                    .get(REVISION_HASH_ANNOTATION)?
                    .clone(),
                model,
            })
        })
        .collect();
    kept.sort_by_key(|k| k.number);
    kept
}

fn owner(model: &ServedModel) -> Value {
    crate::owners::controller(
        corral_api::API_VERSION,
        "ServedModel",
        &model.metadata.name,
        model.metadata.uid.as_deref().unwrap_or_default(),
    )
}

/// Revision `number` of `model` as its ControllerRevision: the model as written now (spec
/// and annotations: what the replicas of that revision run).
fn revision_object(model: &ServedModel, number: u32, hash: &str) -> ControllerRevision {
    let mut snapshot = model.clone();
    snapshot.status = None;
    snapshot.metadata.uid = None;
    snapshot.metadata.resource_version = None;
    snapshot.metadata.generation = None;
    snapshot.metadata.creation_timestamp = None;
    let owner = serde_json::from_value(owner(model)).ok();
    ControllerRevision {
        metadata: ObjectMeta {
            name: Some(revision_name(&model.metadata.name, number)),
            namespace: Some(model.metadata.namespace_or_default().to_string()),
            labels: Some(BTreeMap::from([(
                SERVED_MODEL_LABEL.to_string(),
                model.metadata.name.clone(),
            )])),
            annotations: Some(BTreeMap::from([(
                REVISION_HASH_ANNOTATION.to_string(),
                hash.to_string(),
            )])),
            owner_references: owner.map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        data: serde_json::to_value(&snapshot).ok().map(RawExtension),
        revision: i64::from(number),
    }
}

/// A replica's TrainingJob as the API server takes it: the revision's replica job,
/// listening on the configured port, owned by the model.
fn replica_job_action(
    model: &ServedModel,
    revision: &Kept,
    index: u32,
    cfg: &ServingConfig,
) -> ServingAction {
    let mut job = revision_replica_job(&revision.model, &revision.name, index);
    job.spec.port = Some(cfg.port);
    // A step's artifact is served from where it is kept (its path in $CORRAL_MODEL_PATH).
    let namespace = model.metadata.namespace_or_default().to_string();
    if let Some(origin) = ModelOrigin::of(&revision.model.metadata.annotations) {
        for replica in job.spec.replicas.values_mut() {
            let t = replica
                .template
                .pod_template
                .get_or_insert_with(serde_json::Map::new);
            crate::pipelines::artifacts::mount_artifacts(
                t,
                &cfg.artifacts,
                &cfg.tools_image,
                &namespace,
                std::slice::from_ref(&origin.path),
                &[],
            );
        }
    }
    job.metadata.namespace = Some(namespace.clone());
    let name = job.metadata.name.clone();
    let mut value = serde_json::to_value(&job).unwrap_or(Value::Null);
    if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("ownerReferences".into(), json!([owner(model)]));
    }
    ServingAction::CreateJob {
        namespace,
        name,
        job: value,
    }
}

/// The step artifact `source` names, as the core resolves it, with the hash the run
/// recorded for that output (on Kubernetes the operator does not read the claim: a path
/// inside the output is pinned by the output's hash, and its existence is the replica's
/// to find). Refused in the core's words otherwise.
fn origin_of(
    source: &corral_api::served_model::ModelSource,
    namespace: &str,
    runs: &[Arc<PipelineRun>],
) -> Result<ModelOrigin, String> {
    let run = source.pipeline_run.as_deref().and_then(|name| {
        runs.iter()
            .find(|r| r.metadata.namespace_or_default() == namespace && r.metadata.name == name)
    });
    let records: Vec<(String, String)> = run
        .and_then(|r| r.status.as_ref())
        .map(|s| {
            s.steps
                .values()
                .flat_map(|st| st.outputs.values())
                .map(|a| (a.path.clone(), a.sha256.clone()))
                .collect()
        })
        .unwrap_or_default();
    let mut hash = |path: &str| {
        records
            .iter()
            .find(|(p, _)| path == p || path.starts_with(&format!("{p}/")))
            .map(|(_, h)| h.clone())
    };
    let mut origin = resolve_model_from_run(source, namespace, run.map(|r| r.as_ref()), &mut hash)
        .map_err(|p| format!("Invalid: {}: {}", p.path, p.message))?;
    // The run, not a later one of the same name.
    if let Some(uid) = run.and_then(|r| r.metadata.uid.clone()) {
        origin.uid = uid;
    }
    Ok(origin)
}

/// Whether `next` says something `last` does not (its last request time only counts when
/// it moved by [`LAST_REQUEST_WRITE_EVERY`]).
fn worth_writing(last: Option<&ServedModelStatus>, next: &ServedModelStatus) -> bool {
    let Some(last) = last else {
        return true;
    };
    let moved = match (last.last_request_time, next.last_request_time) {
        (Some(a), Some(b)) => b.duration_since(a) >= LAST_REQUEST_WRITE_EVERY,
        (a, b) => a != b,
    };
    let mut without = next.clone();
    without.last_request_time = last.last_request_time;
    moved || without != *last
}

/// What one serving pass reads.
#[derive(Clone, Copy)]
pub struct Seen<'a> {
    pub models: &'a [Arc<ServedModel>],
    /// The ControllerRevisions labelled with a model's name.
    pub revisions: &'a [Arc<ControllerRevision>],
    /// The PipelineRuns (a model may serve a step's artifact).
    pub runs: &'a [Arc<PipelineRun>],
    pub world: &'a World,
    /// What the router saw of each model since the last pass.
    pub observed: &'a BTreeMap<String, ServingObservation>,
}

/// Every model's decision now: revisions to make or retire, replicas to make or remove,
/// statuses to write, and where the router finds each model's replicas.
pub fn plan(seen: Seen<'_>, serving: &mut Serving, cfg: &ServingConfig, now: Timestamp) -> Plan {
    let Seen {
        models,
        revisions,
        runs,
        world,
        observed,
    } = seen;
    let mut out = Plan::default();
    // Replica jobs and pods by model and job, once.
    let mut jobs_of: HashMap<String, Vec<&corral_api::TrainingJob>> = HashMap::new();
    for j in &world.jobs {
        if let Some((model, _)) = serving_replica_of(j) {
            jobs_of
                .entry(format!("{}/{model}", j.metadata.namespace_or_default()))
                .or_default()
                .push(j);
        }
    }
    let mut pods_of: HashMap<(String, String), Vec<&Pod>> = HashMap::new();
    for p in &world.pods {
        if let Some(job) = label(&p.metadata, JOB_NAME_LABEL) {
            let ns = p.metadata.namespace.clone().unwrap_or_default();
            pods_of.entry((ns, job.to_string())).or_default().push(p);
        }
    }
    let served: BTreeSet<String> = models.iter().map(|m| key(m)).collect();
    for k in observed.keys().filter(|k| !served.contains(*k)) {
        serving.forget(k);
    }
    for model in models {
        let k = key(model);
        let ns = model.metadata.namespace_or_default().to_string();
        let name = model.metadata.name.clone();
        let mut kept = kept_of(model, revisions);
        let verdict = crate::webhook::check_served_model(
            &serde_json::to_value(model.as_ref()).unwrap_or(Value::Null),
            &cfg.build,
        );
        let mut message = (!verdict.errors.is_empty()).then(|| {
            let fields: Vec<String> = verdict.errors.iter().map(ToString::to_string).collect();
            format!("Invalid: {}", fields.join("; "))
        });
        // What the spec says now is a revision once it can run; a model served from a
        // step's artifact is pinned to it when the spec changes (as a submit pins it
        // embedded), not each pass.
        let mut written = model.as_ref().clone();
        // Only the operator says where a model came from; the revision's pin stands.
        written.metadata.annotations.remove(MODEL_ORIGIN_ANNOTATION);
        let unchanged = kept
            .last()
            .is_some_and(|l| same_revision(&l.model, &written));
        if message.is_none() && !unchanged {
            let mut next = model.as_ref().clone();
            if let Some(source) = &model.spec.model {
                match origin_of(source, &ns, runs) {
                    Ok(origin) => {
                        next.metadata.annotations.insert(
                            MODEL_ORIGIN_ANNOTATION.to_string(),
                            serde_json::to_string(&origin).unwrap_or_default(),
                        );
                    }
                    Err(why) => message = Some(why),
                }
            }
            if message.is_none() {
                let hash = revision_hash(&next);
                let number = kept.last().map_or(1, |l| l.number + 1);
                out.actions.push(ServingAction::CreateRevision {
                    namespace: ns.clone(),
                    revision: Box::new(revision_object(&next, number, &hash)),
                });
                kept.push(Kept {
                    number,
                    name: revision_name(&name, number),
                    hash,
                    model: next,
                });
            }
        }
        let status_model = model.as_ref().clone();
        let Some(latest) = kept.last().cloned() else {
            // Nothing that can run was ever written: say why, serve nothing.
            let status = ServedModelStatus {
                message,
                ..ServedModelStatus::default()
            };
            out.record(status_model, status);
            continue;
        };
        let promoted_name = model
            .status
            .as_ref()
            .and_then(|s| s.stable_revision.as_deref());
        let promoted: Vec<bool> = kept
            .iter()
            .map(|r| Some(r.name.as_str()) == promoted_name)
            .collect();
        let stable = stable_index(&promoted)
            .and_then(|i| kept.get(i))
            .cloned()
            .unwrap_or_else(|| latest.clone());

        let seen = observed.get(&k).cloned().unwrap_or_default();
        serving.observe_load(
            &k,
            LoadSample {
                at: now,
                in_flight: seen.in_flight,
                arrived: seen.arrived,
            },
        );
        let jobs = jobs_of.get(&k).map(Vec::as_slice).unwrap_or_default();
        let replica_jobs: Vec<ReplicaJob<'_>> = jobs
            .iter()
            .filter_map(|j| {
                let (_, index) = serving_replica_of(j)?;
                let phase = j.status.as_ref().and_then(|s| s.phase);
                Some(ReplicaJob {
                    name: &j.metadata.name,
                    index,
                    revision: serving_revision_of(j),
                    finished: matches!(phase, Some(JobState::Succeeded | JobState::Failed)),
                    deleting: world.deleting_jobs.contains(&job_key(j)),
                })
            })
            .collect();
        let names: Vec<String> = kept.iter().map(|r| r.name.clone()).collect();
        let views = revision_views(&name, &names, &replica_jobs, &seen);
        let decision = serving.decide(
            &k,
            ModelView {
                spec: &model.spec,
                latest: &latest.name,
                stable: &stable.name,
                revisions: &views,
            },
            now,
        );
        for r in &decision.revisions {
            for action in &r.actions {
                match *action {
                    ReplicaAction::Create(i) => {
                        if let Some(rev) = kept.iter().find(|x| x.name == r.name) {
                            out.actions.push(replica_job_action(model, rev, i, cfg));
                        }
                    }
                    // The router is told below (the replica's `draining`).
                    ReplicaAction::Drain(_) => {}
                    ReplicaAction::Remove(i) => out.actions.push(ServingAction::DeleteJob {
                        namespace: ns.clone(),
                        name: replica_job_name(&name, i),
                    }),
                }
            }
        }
        for r in &decision.retired {
            if kept.iter().any(|x| &x.name == r) {
                out.actions.push(ServingAction::DeleteRevision {
                    namespace: ns.clone(),
                    name: r.clone(),
                });
            }
        }
        let origin = ModelOrigin::of(&latest.model.metadata.annotations);
        let mut status = decision.status(&ns, &name, &latest.name, origin, |r| {
            kept.iter().find(|x| x.name == r).map(|x| x.hash.clone())
        });
        // Why no replica is made: the model is invalid, else the core's back-off.
        status.message = message.or(status.message);
        out.record(status_model, status);

        // Where the router reaches each running replica: its pod's IP.
        let draining: BTreeSet<u32> = decision.draining.iter().copied().collect();
        let mut replicas = Vec::new();
        for j in jobs {
            let Some((_, index)) = serving_replica_of(j) else {
                continue;
            };
            if world.deleting_jobs.contains(&job_key(j)) {
                continue;
            }
            let Some(addr) = pods_of
                .get(&(ns.clone(), j.metadata.name.clone()))
                .into_iter()
                .flatten()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .find_map(|p| {
                    let ip: IpAddr = p.status.as_ref()?.pod_ip.as_deref()?.parse().ok()?;
                    Some(SocketAddr::new(ip, j.spec.port.unwrap_or(cfg.port)))
                })
            else {
                continue;
            };
            replicas.push(ReplicaTarget {
                name: j.metadata.name.clone(),
                addr,
                revision: serving_revision_of(j)
                    .map_or_else(|| revision_name(&name, 1), str::to_string),
                draining: draining.contains(&index),
            });
        }
        let spec = &model.spec;
        out.targets.push((
            k,
            ModelTarget {
                replicas,
                traffic: decision
                    .revisions
                    .iter()
                    .map(|r| (r.name.clone(), r.share.traffic))
                    .collect(),
                readiness_path: spec.readiness.path.clone(),
                probe_period: Duration::from_secs(u64::from(spec.readiness.period_seconds)),
                failure_threshold: spec.readiness.failure_threshold,
                max_request_bytes: spec.max_request_bytes(),
                aliases: vec![
                    ("latest".to_string(), latest.name.clone()),
                    ("stable".to_string(), decision.stable.clone()),
                ],
            },
        ));
    }
    out
}

#[cfg(test)]
mod tests;
