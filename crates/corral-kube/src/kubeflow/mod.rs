//! Kubeflow's job kinds on Kubernetes, two ways (see `deploy/README.md`):
//!
//! - **serve** ("instead of Kubeflow's training operator"): Corral serves TFJob, PyTorchJob,
//!   XGBoostJob, JAXJob (kubeflow.org/v1) and MPIJob (v2beta1) itself (CRDs from
//!   [`crds`], `corral crd --kubeflow`). Each job is converted
//!   (`corral_api::kubeflow::convert`) into a TrainingJob of the same name that it owns, and
//!   that TrainingJob's status is written back in Kubeflow's format ([`status`]), so that
//!   `kubectl get pytorchjobs` and Kubeflow's SDK keep working.
//! - **alongside** Kubeflow's training operator (as Kueue integrates): a Kubeflow job that
//!   carries [`QUEUE_LABEL`] is kept suspended (`runPolicy.suspend`) until Corral admits it.
//!   Corral admits a *workload*: a TrainingJob converted from it, owned by it and marked with
//!   [`RUNNER_ANNOTATION`], whose replicas Corral never creates. Once the workload holds an
//!   admission, the Kubeflow job's replica templates get a node affinity to the placed nodes
//!   and it is unsuspended; Kubeflow's operator then runs it. An admission lost (preemption)
//!   suspends it again; a finished Kubeflow job deletes its workload (its quota is free).
//!
//! Both are pure plans ([`serve::plan`], [`alongside::plan`]) over what the API server
//! holds, carried out by [`apply`]. Alongside mode reads and writes a job only through its
//! kind's adapter ([`adapter::GenericJob`], as Kueue's `jobframework`), and lets it run, keeps
//! it suspended or drops its workload as the core's `lifecycle::Gate` says. Which job is admitted and where its replicas go is
//! decided by the same control plane as every TrainingJob (the workload or the owned job
//! is one); this module only converts, observes and applies.

pub mod adapter;
pub mod alongside;
pub mod apply;
pub mod crds;
pub mod serve;
pub mod status;
pub mod watch;

use kube::api::{ApiResource, GroupVersionKind};
use serde_json::{Map, Value, json};
use std::sync::Arc;

use corral_api::training_job::{Role, TrainingJob};

use adapter::GenericJob;

/// The label that puts a Kubeflow job into a Corral queue (alongside mode), as Kueue's
/// `kueue.x-k8s.io/queue-name`. In serve mode it names the queue too, unless the job's
/// `runPolicy.schedulingPolicy.queue` does.
pub const QUEUE_LABEL: &str = "corral.dev/queue";
/// On a TrainingJob: another operator runs its replicas (value: the API group, e.g.
/// `kubeflow.org`); Corral admits and places it, and creates none of its pods.
pub const RUNNER_ANNOTATION: &str = "corral.dev/runner";
/// On a TrainingJob converted from a Kubeflow job: `<Kind>/<uid>` of that job.
pub const SOURCE_ANNOTATION: &str = "corral.dev/kubeflow-source";
/// Field manager of the writes this module makes.
pub const FIELD_MANAGER: &str = "corral-kubeflow";
/// Labels Kubeflow's operator puts on replica pods; the SDK finds pods by them.
pub const KF_JOB_NAME_LABEL: &str = "training.kubeflow.org/job-name";
pub const KF_REPLICA_TYPE_LABEL: &str = "training.kubeflow.org/replica-type";
pub const KF_OPERATOR_LABEL: &str = "training.kubeflow.org/operator-name";

/// How Corral treats Kubeflow's job kinds (`corral operator --kubeflow`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// Kubeflow kinds are not watched.
    #[default]
    Off,
    /// Corral serves the Kubeflow kinds itself (instead of Kubeflow's operator).
    Serve,
    /// Corral queues and places Kubeflow jobs labelled `corral.dev/queue`; Kubeflow's
    /// operator runs them.
    Alongside,
}

/// One Kubeflow job kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KubeflowKind {
    pub kind: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    /// The key of the replica specs in `spec`.
    pub specs_key: &'static str,
}

pub const GROUP: &str = "kubeflow.org";

pub const KINDS: [KubeflowKind; 5] = [
    KubeflowKind {
        kind: "TFJob",
        version: "v1",
        plural: "tfjobs",
        specs_key: "tfReplicaSpecs",
    },
    KubeflowKind {
        kind: "PyTorchJob",
        version: "v1",
        plural: "pytorchjobs",
        specs_key: "pytorchReplicaSpecs",
    },
    KubeflowKind {
        kind: "XGBoostJob",
        version: "v1",
        plural: "xgboostjobs",
        specs_key: "xgbReplicaSpecs",
    },
    KubeflowKind {
        kind: "JAXJob",
        version: "v1",
        plural: "jaxjobs",
        specs_key: "jaxReplicaSpecs",
    },
    KubeflowKind {
        kind: "MPIJob",
        version: "v2beta1",
        plural: "mpijobs",
        specs_key: "mpiReplicaSpecs",
    },
];

impl KubeflowKind {
    pub fn by_kind(kind: &str) -> Option<&'static KubeflowKind> {
        KINDS.iter().find(|k| k.kind == kind)
    }

    pub fn api_version(&self) -> String {
        format!("{GROUP}/{}", self.version)
    }

    pub fn api_resource(&self) -> ApiResource {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(GROUP, self.version, self.kind),
            self.plural,
        )
    }
}

/// One Kubeflow job as the API server returned it.
#[derive(Clone, Debug)]
pub struct KubeflowJob {
    pub kind: &'static KubeflowKind,
    pub raw: Value,
}

impl KubeflowJob {
    /// Reads a served object; `None` for a kind Corral does not know.
    pub fn new(raw: Value) -> Option<Self> {
        let kind = KubeflowKind::by_kind(raw.get("kind")?.as_str()?)?;
        Some(KubeflowJob { kind, raw })
    }

    fn meta(&self, field: &str) -> Option<&str> {
        self.raw.get("metadata")?.get(field)?.as_str()
    }
    pub fn name(&self) -> &str {
        self.meta("name").unwrap_or("")
    }
    pub fn namespace(&self) -> &str {
        self.meta("namespace").unwrap_or("default")
    }
    pub fn uid(&self) -> Option<&str> {
        self.meta("uid")
    }
    pub fn resource_version(&self) -> Option<&str> {
        self.meta("resourceVersion")
    }
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace(), self.name())
    }
    pub fn label(&self, key: &str) -> Option<&str> {
        self.raw.get("metadata")?.get("labels")?.get(key)?.as_str()
    }
    pub fn deleting(&self) -> bool {
        self.raw
            .get("metadata")
            .and_then(|m| m.get("deletionTimestamp"))
            .is_some_and(|t| !t.is_null())
    }
    /// `spec.runPolicy.suspend`.
    pub fn suspended(&self) -> bool {
        self.raw
            .pointer("/spec/runPolicy/suspend")
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }
    /// Whether Kubeflow's status says it finished (a Succeeded or Failed condition is True).
    pub fn finished(&self) -> bool {
        self.raw
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|cs| {
                cs.iter().any(|c| {
                    matches!(
                        c.get("type").and_then(Value::as_str),
                        Some("Succeeded" | "Failed")
                    ) && c.get("status").and_then(Value::as_str) == Some("True")
                })
            })
    }
    /// When the job may be deleted: `status.completionTime` plus
    /// `spec.runPolicy.ttlSecondsAfterFinished`, when both are there.
    pub fn ttl_expires(&self) -> Option<jiff::Timestamp> {
        let done: jiff::Timestamp = self
            .raw
            .pointer("/status/completionTime")?
            .as_str()?
            .parse()
            .ok()?;
        let ttl = self
            .raw
            .pointer("/spec/runPolicy/ttlSecondsAfterFinished")?
            .as_i64()?;
        done.checked_add(jiff::SignedDuration::from_secs(ttl)).ok()
    }

    /// The replica types as the manifest spells them (`Master`, `Worker`, ...).
    pub fn replica_types(&self) -> Vec<String> {
        self.raw
            .pointer(&format!("/spec/{}", self.kind.specs_key))
            .and_then(Value::as_object)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// The manifest's replica type of a Corral role (TFJob's `Master` is Corral's chief).
    pub fn replica_type_of(&self, role: Role) -> String {
        let types = self.replica_types();
        let want = role.as_str();
        types
            .iter()
            .find(|t| t.to_ascii_lowercase() == want)
            .or_else(|| {
                (role == Role::Chief)
                    .then(|| types.iter().find(|t| t.eq_ignore_ascii_case("master")))
                    .flatten()
            })
            .cloned()
            .unwrap_or_else(|| capitalized(want))
    }

    /// The job as `corral_api::kubeflow::convert` reads a manifest: the user's intent only
    /// (name, namespace, labels, annotations and spec; what the server adds is dropped).
    pub fn manifest(&self) -> Value {
        let mut meta = Map::new();
        if let Some(m) = self.raw.get("metadata").and_then(Value::as_object) {
            for k in ["name", "namespace", "labels"] {
                if let Some(v) = m.get(k) {
                    meta.insert(k.into(), v.clone());
                }
            }
            if let Some(Value::Object(a)) = m.get("annotations") {
                // kubectl's copy of the whole manifest is not intent of the job.
                let kept: Map<String, Value> = a
                    .iter()
                    .filter(|(k, _)| !k.starts_with("kubectl.kubernetes.io/"))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                if !kept.is_empty() {
                    meta.insert("annotations".into(), Value::Object(kept));
                }
            }
        }
        json!({
            "apiVersion": self.kind.api_version(),
            "kind": self.kind.kind,
            "metadata": meta,
            "spec": self.raw.get("spec").cloned().unwrap_or(Value::Null),
        })
    }

    /// The owner reference of what is made for this job (garbage-collected with it).
    pub fn owner_reference(&self) -> Value {
        crate::owners::controller(
            &self.kind.api_version(),
            self.kind.kind,
            self.name(),
            self.uid().unwrap_or(""),
        )
    }

    /// `<Kind>/<uid>`: what [`SOURCE_ANNOTATION`] says of a TrainingJob made from it.
    pub fn source(&self) -> String {
        format!("{}/{}", self.kind.kind, self.uid().unwrap_or(""))
    }
}

fn capitalized(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

/// The TrainingJob of the world made from this Kubeflow job (same namespace and name,
/// its source annotation naming this very job).
pub fn owned_training_job<'a>(
    job: &KubeflowJob,
    jobs: &'a [Arc<TrainingJob>],
) -> Result<Option<&'a TrainingJob>, String> {
    let Some(tj) = jobs.iter().find(|t| {
        t.metadata.name == job.name() && t.metadata.namespace_or_default() == job.namespace()
    }) else {
        return Ok(None);
    };
    match tj.metadata.annotations.get(SOURCE_ANNOTATION) {
        Some(s) if *s == job.source() => Ok(Some(tj)),
        // Made from an earlier job of the same name: it goes with that job (owner reference).
        Some(s) => Err(format!(
            "TrainingJob {}/{} still belongs to an earlier {} ({s}); it is removed with it",
            job.namespace(),
            job.name(),
            job.kind.kind
        )),
        None => Err(format!(
            "a TrainingJob {}/{} that Corral did not make from this {} exists; rename one of them",
            job.namespace(),
            job.name(),
            job.kind.kind
        )),
    }
}

/// What the Kubeflow integration writes, in the order [`apply`] carries it out.
#[derive(Clone, Debug, PartialEq)]
pub enum KubeflowAction {
    /// Create or update the TrainingJob made from a Kubeflow job (server-side apply).
    ApplyTrainingJob { namespace: String, body: Value },
    /// Delete the workload of a finished Kubeflow job (only that very object).
    DeleteTrainingJob {
        namespace: String,
        name: String,
        uid: Option<String>,
    },
    /// A merge patch of the Kubeflow job (suspend, node affinity), with a resourceVersion
    /// precondition in `patch`.
    PatchJob {
        kind: &'static KubeflowKind,
        namespace: String,
        name: String,
        patch: Value,
    },
    /// Delete a finished Kubeflow job after its `ttlSecondsAfterFinished` (serve mode:
    /// Corral's control plane deleted its TrainingJob for the TTL), only that very object.
    DeleteJob {
        kind: &'static KubeflowKind,
        namespace: String,
        name: String,
        uid: Option<String>,
    },
    /// A merge patch of its status subresource (serve mode).
    PatchJobStatus {
        kind: &'static KubeflowKind,
        namespace: String,
        name: String,
        status: Value,
    },
    Event {
        kind: &'static KubeflowKind,
        namespace: String,
        name: String,
        uid: Option<String>,
        warning: bool,
        reason: String,
        note: String,
    },
}

impl KubeflowAction {
    fn event(job: &impl GenericJob, warning: bool, reason: &str, note: String) -> Self {
        KubeflowAction::Event {
            kind: job.kind(),
            namespace: job.namespace().to_string(),
            name: job.name().to_string(),
            uid: job.uid().map(str::to_string),
            warning,
            reason: reason.to_string(),
            note,
        }
    }
}

/// The plan of one pass for `mode`.
pub fn plan(
    mode: Mode,
    jobs: &[KubeflowJob],
    training_jobs: &[Arc<TrainingJob>],
    now: jiff::Timestamp,
) -> Vec<KubeflowAction> {
    match mode {
        Mode::Off => Vec::new(),
        Mode::Serve => serve::plan(jobs, training_jobs, now),
        Mode::Alongside => alongside::plan(jobs, training_jobs),
    }
}
