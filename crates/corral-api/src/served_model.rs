//! ServedModel: replicas of an HTTP model server behind Corral's router, scaled on in-flight
//! requests. Not a Kubernetes Service: it owns the replicas, the Service-like routing is
//! Corral's router.
//!
//! Each replica is placed as a one-replica generic TrainingJob ([`replica_job`]), so that the
//! same scheduler, queues, quotas and priorities decide where and whether it runs.

use std::collections::BTreeMap;

use jiff::Timestamp;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::meta::{Kind, Object, ObjectMeta};
use crate::training_job::{
    EnvVar, Framework, ReplicaSpec, ReplicaTemplate, Resources, RestartPolicy, Role, RunPolicy,
    TrainingJob, TrainingJobSpec,
};

/// A served model.
pub type ServedModel = Object<ServedModelSpec, ServedModelStatus>;

/// The port a replica's model server must listen on (on every address, or 127.0.0.1
/// embedded), as Knative and Cloud Run name it.
pub const PORT_ENV: &str = "PORT";
/// Label on each replica job: the served model it belongs to.
pub const SERVED_MODEL_LABEL: &str = "corral.dev/served-model";
/// Label on each replica job: its replica index within the served model.
pub const SERVING_REPLICA_LABEL: &str = "corral.dev/serving-replica";
/// Label on each replica job: the revision of the model it runs (`<model>-00002`).
pub const SERVING_REVISION_LABEL: &str = "corral.dev/serving-revision";
/// The role of a serving replica inside its replica job.
pub const SERVING_ROLE: Role = Role::Worker;
/// A request body larger than this is refused (413) unless the model states its own.
pub const DEFAULT_MAX_REQUEST_BYTES: u64 = 16 << 20;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServedModelSpec {
    /// How to start the model server: `command` (and `args`), or `image` where the cluster
    /// runs containers. It must listen on the port in `$PORT`.
    pub template: ReplicaTemplate,
    /// What one replica needs (GPUs and GPU types included); reserved and enforced.
    #[serde(default, skip_serializing_if = "Resources::is_empty")]
    pub resources: Resources,
    /// When a replica is ready to take requests.
    #[serde(default)]
    pub readiness: Readiness,
    #[serde(default)]
    pub autoscaling: Autoscaling,
    /// The queue the replicas wait in (default: `default`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// Name of a JobPriorityClass; a serving class above training's preempts training.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class: Option<String>,
    /// Request bodies above this many bytes are refused with 413 (default 16 MiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_request_bytes: Option<u64>,
    /// Percent of the requests (0-100) the latest revision gets while the revision last
    /// promoted keeps the rest, as KServe's `canaryTrafficPercent`. Left out: the latest
    /// revision takes every request once it is ready (a rollout). 0 rolls back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary_traffic_percent: Option<u32>,
    /// The model to serve, from a TrainingJob's output or a pipeline step's: its replicas
    /// get the path in `$CORRAL_MODEL_PATH` (read-only to them in a container, as every
    /// artifact).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelSource>,
}

/// A model that a TrainingJob wrote into its output directory
/// ([`OUTPUT_DIR_ENV`](crate::training_job::OUTPUT_DIR_ENV)), or that a pipeline run's
/// step wrote as one of its outputs: `trainingJob`, or `pipelineRun` with `step` and
/// `output`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelSource {
    /// A TrainingJob of the model's namespace that has succeeded.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub training_job: String,
    /// A PipelineRun of the model's namespace, whose `step` has succeeded (or reused a
    /// cached result) with the artifact `output`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline_run: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// A file or directory in that job's output (or that step's artifact), relative (e.g.
    /// `model.json`); left out, the whole of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// The environment variable a serving replica finds its model's path in.
pub const MODEL_PATH_ENV: &str = "CORRAL_MODEL_PATH";
/// Annotation on a served model (and each of its revisions and replica jobs): the
/// [`ModelOrigin`] its `spec.model` was resolved to when it was submitted, as JSON. Part
/// of the revision: a model retrained under the same job name is a new revision.
pub const MODEL_ORIGIN_ANNOTATION: &str = "corral.dev/model-origin";

/// Where a served model's model came from: the run that trained it (lineage).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelOrigin {
    /// The job that wrote it (a pipeline step's job; empty for a step that reused a
    /// cached result).
    #[serde(default)]
    pub training_job: String,
    /// The job's uid (the run's, for a pipeline run's step): that run, not a later one of
    /// the same name.
    pub uid: String,
    /// The pipeline run and step whose artifact it is, where it is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline_run: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// When it succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Timestamp>,
    /// The model's path on the cluster (what `$CORRAL_MODEL_PATH` holds).
    pub path: String,
    /// `sha256:...` of the model's content when it was resolved.
    pub sha256: String,
}

impl ModelOrigin {
    /// The origin a model (or a replica job) carries, if it carries one.
    pub fn of(annotations: &BTreeMap<String, String>) -> Option<ModelOrigin> {
        serde_json::from_str(annotations.get(MODEL_ORIGIN_ANNOTATION)?).ok()
    }
}

impl Kind for ServedModelSpec {
    const KIND: &'static str = "ServedModel";
    const PLURAL: &'static str = "servedmodels";
    const NAMESPACED: bool = true;
}

impl ServedModelSpec {
    pub fn max_request_bytes(&self) -> u64 {
        self.max_request_bytes.unwrap_or(DEFAULT_MAX_REQUEST_BYTES)
    }
}

/// An HTTP GET that answers 2xx once the replica can serve.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Readiness {
    /// Path probed on the replica's port (default `/healthz`).
    #[serde(default = "default_readiness_path")]
    pub path: String,
    /// Seconds between probes (default 1).
    #[serde(default = "one")]
    pub period_seconds: u32,
    /// Failed probes in a row after which a ready replica leaves rotation (default 3).
    #[serde(default = "three")]
    pub failure_threshold: u32,
}

impl Default for Readiness {
    fn default() -> Self {
        Readiness {
            path: default_readiness_path(),
            period_seconds: 1,
            failure_threshold: 3,
        }
    }
}

fn default_readiness_path() -> String {
    "/healthz".to_string()
}
fn one() -> u32 {
    1
}
fn three() -> u32 {
    3
}

/// Scaling on in-flight requests per replica, as Knative's autoscaler (KPA) does.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Autoscaling {
    /// Fewest replicas; 0 lets the model scale to zero when idle (default 1).
    #[serde(default = "one")]
    pub min_replicas: u32,
    /// Most replicas (default: `minReplicas`, at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_replicas: Option<u32>,
    /// In-flight requests one replica should carry on average (default 4).
    #[serde(default = "default_target")]
    pub target_in_flight: u32,
    /// Seconds over which the average in-flight count is taken (default 60).
    #[serde(default = "default_stable_window")]
    pub stable_window_seconds: u32,
    /// The short window that detects a burst (default 6).
    #[serde(default = "default_panic_window")]
    pub panic_window_seconds: u32,
    /// Panic when the panic window's average exceeds this percentage of what the current
    /// replicas are meant to carry (default 200).
    #[serde(default = "default_panic_threshold")]
    pub panic_threshold_percent: u32,
    /// With `minReplicas: 0`: seconds without any request before the last replica stops
    /// (default 300).
    #[serde(default = "default_idle")]
    pub scale_to_zero_after_seconds: u32,
}

impl Default for Autoscaling {
    fn default() -> Self {
        Autoscaling {
            min_replicas: 1,
            max_replicas: None,
            target_in_flight: default_target(),
            stable_window_seconds: default_stable_window(),
            panic_window_seconds: default_panic_window(),
            panic_threshold_percent: default_panic_threshold(),
            scale_to_zero_after_seconds: default_idle(),
        }
    }
}

impl Autoscaling {
    pub fn max_replicas(&self) -> u32 {
        self.max_replicas.unwrap_or(self.min_replicas.max(1))
    }
}

fn default_target() -> u32 {
    4
}
fn default_stable_window() -> u32 {
    60
}
fn default_panic_window() -> u32 {
    6
}
fn default_panic_threshold() -> u32 {
    200
}
fn default_idle() -> u32 {
    300
}

/// What Corral reports of a served model.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServedModelStatus {
    /// Replicas the autoscaler wants now.
    #[serde(default)]
    pub desired_replicas: u32,
    /// Replica jobs that exist (queued, starting or running).
    #[serde(default)]
    pub replicas: u32,
    /// Replicas in rotation.
    #[serde(default)]
    pub ready_replicas: u32,
    /// The autoscaler is in panic mode (a burst above its threshold).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub panic: bool,
    /// The router's path for this model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_request_time: Option<Timestamp>,
    /// The newest revision (what the spec says now).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_revision: Option<String>,
    /// The revision last promoted (every request went to it once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stable_revision: Option<String>,
    /// The revisions that carry traffic or still have replicas, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub revisions: Vec<RevisionStatus>,
    /// The run that trained the latest revision's model (`spec.model`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelOrigin>,
    /// Why no replica is made, when none can be (`Invalid: <field>: <why>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// One revision of a served model: an immutable snapshot of what its replicas run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RevisionStatus {
    /// `<model>-<number, five digits>`, e.g. `tiny-00002`.
    pub name: String,
    /// `sha256:...` of what the replicas run (template, resources, readiness, queue,
    /// priority class, code snapshot).
    pub hash: String,
    /// Percent of new requests the router sends to it now.
    #[serde(default)]
    pub traffic_percent: u32,
    /// Percent the spec asks for (the router's share differs while a revision has no
    /// replica ready: its share goes to the other).
    #[serde(default)]
    pub target_percent: u32,
    #[serde(default)]
    pub desired_replicas: u32,
    #[serde(default)]
    pub replicas: u32,
    #[serde(default)]
    pub ready_replicas: u32,
    /// Requests under way on its replicas.
    #[serde(default)]
    pub in_flight: u32,
    /// The revision's own URL (path on the server): its replicas only, whatever the
    /// split, as `<model URL>` with `@<revision>` after the model's name; `@latest` and
    /// `@stable` name the latest and the stable revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// The router's path of a model.
pub fn serving_path(namespace: &str, name: &str) -> String {
    format!("/serve/{namespace}/{name}/")
}

/// The router's path of one revision of a model (its replicas only, whatever the split).
pub fn revision_path(namespace: &str, name: &str, revision: &str) -> String {
    format!("/serve/{namespace}/{name}@{revision}/")
}

/// The name of revision `number` of `model`: `<model>-00002`.
pub fn revision_name(model: &str, number: u32) -> String {
    format!("{model}-{number:05}")
}

/// The name of replica `index`'s job: `<model>-serving-<index>`.
pub fn replica_job_name(model: &str, index: u32) -> String {
    format!("{model}-serving-{index}")
}

/// Replica `index` of `model` as the one-replica generic TrainingJob the scheduler places:
/// the model's resources, queue and priority class; restarted whatever its exit, since a
/// model server is meant to run until it is scaled away.
pub fn replica_job(model: &ServedModel, index: u32) -> TrainingJob {
    let mut labels = BTreeMap::new();
    labels.insert(SERVED_MODEL_LABEL.to_string(), model.metadata.name.clone());
    labels.insert(SERVING_REPLICA_LABEL.to_string(), index.to_string());
    let mut template = model.spec.template.clone();
    // `$PORT` is the contract's; a user's own value would point the router elsewhere.
    template
        .env
        .retain(|v: &EnvVar| v.name != PORT_ENV && v.name != MODEL_PATH_ENV);
    if let Some(origin) = ModelOrigin::of(&model.metadata.annotations) {
        template
            .env
            .push(EnvVar::literal(MODEL_PATH_ENV, &origin.path));
    }
    let replica = ReplicaSpec {
        count: 1,
        resources: model.spec.resources.clone(),
        template,
        restart_policy: Some(RestartPolicy::Always),
    };
    let mut job = Object::new(
        &replica_job_name(&model.metadata.name, index),
        TrainingJobSpec {
            framework: Framework::Generic,
            replicas: BTreeMap::from([(SERVING_ROLE, Box::new(replica))]),
            run_policy: RunPolicy::default(),
            success_policy: None,
            queue: model.spec.queue.clone(),
            priority_class: model.spec.priority_class.clone(),
            elastic: None,
            nproc_per_node: None,
            mpi: None,
            port: None,
        },
    );
    job.metadata = ObjectMeta {
        name: job.metadata.name,
        namespace: model.metadata.namespace.clone(),
        labels,
        // What the model carries (its code snapshot's digest) goes with each replica.
        annotations: model.metadata.annotations.clone(),
        ..Default::default()
    };
    job
}

/// [`replica_job`] of revision `revision` (labelled with it).
pub fn revision_replica_job(model: &ServedModel, revision: &str, index: u32) -> TrainingJob {
    let mut job = replica_job(model, index);
    job.metadata
        .labels
        .insert(SERVING_REVISION_LABEL.to_string(), revision.to_string());
    job
}

/// The revision a replica job runs (none on replicas made before revisions existed).
pub fn serving_revision_of(job: &TrainingJob) -> Option<&str> {
    job.metadata
        .labels
        .get(SERVING_REVISION_LABEL)
        .map(String::as_str)
}

/// The served model a job is a replica of, and its index, if it is one.
pub fn serving_replica_of(job: &TrainingJob) -> Option<(&str, u32)> {
    let model = job.metadata.labels.get(SERVED_MODEL_LABEL)?;
    let index = job
        .metadata
        .labels
        .get(SERVING_REPLICA_LABEL)?
        .parse()
        .ok()?;
    Some((model, index))
}
