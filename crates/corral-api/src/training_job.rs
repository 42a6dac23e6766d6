//! TrainingJob: one distributed training run, its replicas by role, and its status.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use jiff::Timestamp;
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::meta::{Kind, Object};
use crate::quantity::Quantity;
use crate::suggest::did_you_mean;

/// One distributed training run.
pub type TrainingJob = Object<TrainingJobSpec, TrainingJobStatus>;

/// The queue a job waits in when it names none.
pub const DEFAULT_QUEUE: &str = "default";
/// The environment variable a TrainingJob's replicas find the job's output directory in:
/// what the job writes there outlives it (a ServedModel may serve it).
pub const OUTPUT_DIR_ENV: &str = "CORRAL_OUTPUT_DIR";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TrainingJobSpec {
    /// Which distributed-training environment the replicas get.
    pub framework: Framework,
    /// Replica groups by role (e.g. `master`, `worker`).
    // Boxed: a map node holds room for 11 values whatever it holds, and a `ReplicaSpec` is
    // 376 bytes, so every copy of a job carried a 4 KB node (a queued job cost the server
    // 18 KB; boxed, about 10).
    pub replicas: BTreeMap<Role, Box<ReplicaSpec>>,
    #[serde(default, skip_serializing_if = "RunPolicy::is_empty")]
    pub run_policy: RunPolicy,
    /// When the job counts as succeeded (TensorFlow: `Default` = chief, or worker 0 without
    /// a chief; `AllWorkers`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success_policy: Option<SuccessPolicy>,
    /// The queue this job waits in (default: `default`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// Name of a JobPriorityClass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class: Option<String>,
    /// Elastic training (PyTorch): the worker count may move between min and max.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elastic: Option<ElasticPolicy>,
    /// Processes per replica for torchrun: `auto`, `cpu`, `gpu` or a positive integer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nproc_per_node: Option<String>,
    /// MPI settings (framework `mpi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mpi: Option<MpiOptions>,
    /// The port replicas talk on (framework default: TF 2222, PyTorch 23456, XGBoost 9999,
    /// JAX 6666). Locally Corral allocates free ports instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
}

impl Kind for TrainingJobSpec {
    const KIND: &'static str = "TrainingJob";
    const PLURAL: &'static str = "trainingjobs";
    const NAMESPACED: bool = true;
}

/// The distributed-training framework of a job.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Framework {
    #[serde(rename = "pytorch")]
    PyTorch,
    #[serde(rename = "tensorflow")]
    TensorFlow,
    Mpi,
    Jax,
    #[serde(rename = "xgboost")]
    XGBoost,
    Generic,
}

impl Framework {
    pub const ALL: [Framework; 6] = [
        Framework::PyTorch,
        Framework::TensorFlow,
        Framework::Mpi,
        Framework::Jax,
        Framework::XGBoost,
        Framework::Generic,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Framework::PyTorch => "pytorch",
            Framework::TensorFlow => "tensorflow",
            Framework::Mpi => "mpi",
            Framework::Jax => "jax",
            Framework::XGBoost => "xgboost",
            Framework::Generic => "generic",
        }
    }

    /// The roles a job of this framework may have, as Kubeflow defines them.
    pub fn roles(self) -> &'static [Role] {
        match self {
            Framework::PyTorch => &[Role::Master, Role::Worker],
            Framework::TensorFlow => &[Role::Chief, Role::Ps, Role::Worker, Role::Evaluator],
            Framework::Mpi => &[Role::Launcher, Role::Worker],
            Framework::Jax => &[Role::Worker],
            Framework::XGBoost => &[Role::Master, Role::Worker],
            Framework::Generic => &Role::ALL,
        }
    }

    /// Roles of which a job may have at most one replica.
    pub fn singleton_roles(self) -> &'static [Role] {
        match self {
            Framework::PyTorch | Framework::XGBoost => &[Role::Master],
            Framework::TensorFlow => &[Role::Chief, Role::Evaluator],
            Framework::Mpi => &[Role::Launcher],
            Framework::Jax | Framework::Generic => &[],
        }
    }

    /// The default port, as the Kubeflow training operator sets it (MPI talks over ssh or
    /// the launcher's own transport; generic jobs choose their own).
    pub fn default_port(self) -> Option<u16> {
        match self {
            Framework::TensorFlow => Some(2222),
            Framework::PyTorch => Some(23456),
            Framework::XGBoost => Some(9999),
            Framework::Jax => Some(6666),
            Framework::Mpi | Framework::Generic => None,
        }
    }

    /// The default restart policy of a role, as Kubeflow sets it.
    pub fn default_restart_policy(self, role: Role) -> RestartPolicy {
        match (self, role) {
            (Framework::PyTorch, _) => RestartPolicy::OnFailure,
            (Framework::Mpi, Role::Launcher) => RestartPolicy::OnFailure,
            _ => RestartPolicy::Never,
        }
    }
}

impl fmt::Display for Framework {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A replica role. The declaration order is the launch order (ranks start at the first role).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Chief,
    Master,
    Launcher,
    Ps,
    Worker,
    Evaluator,
}

impl Role {
    pub const ALL: [Role; 6] = [
        Role::Chief,
        Role::Master,
        Role::Launcher,
        Role::Ps,
        Role::Worker,
        Role::Evaluator,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Chief => "chief",
            Role::Master => "master",
            Role::Launcher => "launcher",
            Role::Ps => "ps",
            Role::Worker => "worker",
            Role::Evaluator => "evaluator",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Role::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Role::ALL.iter().map(|r| r.as_str()).collect();
                let hint = did_you_mean(s, names.iter().copied())
                    .map(|m| format!("did you mean `{m}`? "))
                    .unwrap_or_default();
                format!("unknown role `{s}`; {hint}roles are {}", names.join(", "))
            })
    }
}

impl Serialize for Role {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Role {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// One replica group: `count` identical replicas of one role.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaSpec {
    /// Number of replicas (default 1).
    #[serde(default = "one")]
    pub count: u32,
    #[serde(default, skip_serializing_if = "Resources::is_empty")]
    pub resources: Resources,
    #[serde(default)]
    pub template: ReplicaTemplate,
    /// What happens when a replica exits (framework default when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<RestartPolicy>,
}

fn one() -> u32 {
    1
}

/// What one replica needs; reserved for it and enforced.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Resources {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<Quantity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Quantity>,
    /// Whole GPUs per replica.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub gpu: u32,
    /// GPU types this replica may run on (product names, e.g. `NVIDIA-A100-SXM4-80GB`);
    /// empty means any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_types: Vec<String>,
    /// Other countable resources, by name (e.g. `rdma/hca: 1`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extended: BTreeMap<String, Quantity>,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

impl Resources {
    pub fn is_empty(&self) -> bool {
        *self == Resources::default()
    }
}

/// How to start one replica.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaTemplate {
    /// Container image. Embedded: run with podman or docker when the cluster has one,
    /// else `command` runs on the host (see `containers` in corral.yaml).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
    /// Kubernetes pod template fields that Corral passes through unchanged (volumes, node
    /// selectors, tolerations, sidecars, security contexts). Applied only on Kubernetes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
    pub pod_template: Option<serde_json::Map<String, serde_json::Value>>,
    /// Python packages the command needs (embedded cluster, without an image): Corral
    /// builds one environment per distinct set with uv, caches it, and runs the command
    /// with it first on PATH.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<PythonEnv>,
}

/// A Python environment: requirement lines as pip reads them, and optionally the Python
/// version.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PythonEnv {
    /// e.g. `"3.11"`; default: the Python uv finds first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// e.g. `["torch==2.5.1", "numpy<2"]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requirements: Vec<String>,
    /// A requirements file in the job's code snapshot (`corral submit --code DIR`), by its
    /// path inside it, e.g. `requirements.txt`: one requirement per line (comments and blank
    /// lines aside; no options), besides `requirements`. The environment is chosen by the
    /// content, as read from the snapshot, so the same file gives the same environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requirements_file: Option<String>,
}

/// An environment variable: a literal `value`, or on Kubernetes a `valueFrom` reference.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EnvVar {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// A Kubernetes EnvVarSource (secretKeyRef, fieldRef, ...); Kubernetes only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
    pub value_from: Option<serde_json::Map<String, serde_json::Value>>,
}

impl EnvVar {
    pub fn literal(name: &str, value: &str) -> Self {
        EnvVar {
            name: name.to_string(),
            value: Some(value.to_string()),
            value_from: None,
        }
    }
}

/// What happens when a replica exits, as Kubeflow defines it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum RestartPolicy {
    /// Never restart; a failure fails the job.
    Never,
    /// Restart on a non-zero exit.
    OnFailure,
    /// Exit codes 1-127 are permanent failures; 128 and above (signals) are retried.
    ExitCode,
    /// Restart on any exit.
    Always,
}

/// Job-wide run settings, as Kubeflow's RunPolicy.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunPolicy {
    /// Restarts of the job allowed before it fails (counted durably in status).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_limit: Option<u32>,
    /// Seconds the job may run after it starts before it is failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_deadline_seconds: Option<u64>,
    /// Seconds after the job finishes before it is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds_after_finished: Option<u64>,
    /// Which replicas to stop and delete when the job finishes (default `None`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clean_pod_policy: Option<CleanPodPolicy>,
    /// A suspended job keeps its place but runs no replicas.
    #[serde(default, skip_serializing_if = "is_false")]
    pub suspend: bool,
}

fn is_false(v: &bool) -> bool {
    !*v
}

impl RunPolicy {
    pub fn is_empty(&self) -> bool {
        *self == RunPolicy::default()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum CleanPodPolicy {
    /// Keep every replica's process/pod record after the job finishes.
    None,
    /// Stop replicas that are still running.
    Running,
    /// Stop and delete all replicas.
    All,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum SuccessPolicy {
    /// Framework default: TF chief (or worker 0), PyTorch/XGBoost master, MPI launcher,
    /// JAX and generic: all replicas.
    Default,
    /// TensorFlow: every worker must succeed.
    AllWorkers,
}

/// Elastic training: torchrun rendezvous with a moving worker count.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ElasticPolicy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_replicas: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_replicas: Option<u32>,
    /// Rendezvous backend (default `c10d`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rdzv_backend: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rdzv_port: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rdzv_host: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rdzv_id: Option<String>,
    /// Extra rendezvous settings (`key=value` pairs for PET_RDZV_CONF).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub rdzv_conf: BTreeMap<String, String>,
    /// torchrun's own restart budget for worker groups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_restarts: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub standalone: Option<bool>,
}

/// MPI settings, as Kubeflow's MPIJob v2beta1.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MpiOptions {
    /// Slots (processes) per worker in the hostfile (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slots_per_worker: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub implementation: Option<MpiImplementation>,
    /// The launcher also runs ranks (it is listed in the hostfile).
    #[serde(default, skip_serializing_if = "is_false")]
    pub run_launcher_as_worker: bool,
    /// Where ssh keys are mounted (Kubernetes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_auth_mount_path: Option<String>,
    /// When the launcher starts: `AtStartup` or `WaitForWorkersReady`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launcher_creation_policy: Option<LauncherCreationPolicy>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum MpiImplementation {
    OpenMPI,
    Intel,
    #[serde(rename = "MPICH")]
    Mpich,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum LauncherCreationPolicy {
    AtStartup,
    WaitForWorkersReady,
}

/// What Corral has recorded of a job. Survives restarts of the control plane: counts and
/// terminal conditions live here, never only in memory.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TrainingJobStatus {
    /// Where the job is now, in one word: the same word `corral list` shows and the `state`
    /// label of `corral_jobs` (Queued, Admitted, Running, Restarting, Preempting, BackOff,
    /// Suspended, Succeeded or Failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<JobState>,
    /// GPUs the job holds now (0 while it waits or after it finished).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub gpus: u32,
    /// What keeps a waiting job from being admitted, by kind (Capacity, Quota, NodeSize,
    /// PoolSize, NoMatchingPool, NoSuchQueue, NamespaceNotAllowed, NoSuitableNode, Protected,
    /// AwaitingCycle, StartBackOff):
    /// the `Queued` condition's message in words, this for programs. Empty unless waiting.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocked_by: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub replica_statuses: BTreeMap<Role, ReplicaStatus>,
    /// Restarts of the job so far (what backoffLimit counts).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub restart_count: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Timestamp>,
    /// Which launch of the whole gang is current: bumped when the gang restarts or returns to
    /// its queue. Replicas of an older attempt are stale: stopped, and never counted again.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub attempt: u32,
    /// Replicas restarted on their own within the current attempt (TF parameter servers,
    /// elastic workers): `<role>-<index>` -> how many times.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub replica_retries: BTreeMap<String, u32>,
    /// Times the job was preempted and returned to its queue (never counted as restarts).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub preemption_count: u32,
    /// Restart back-off: no replica starts before this time. In start back-off (state
    /// BackOff): when the job re-enters its queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_until: Option<Timestamp>,
    /// Starts in a row that the platform could not make (an image it cannot pull, a command
    /// that does not exist): each takes the job out of its queue for a back-off of 10 s,
    /// doubling up to 5 min; never counted against backoffLimit. Reset once a start
    /// succeeds.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub start_failures: u32,
    /// How far the training is, as its replicas report it (see [`crate::progress`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<Box<crate::progress::JobProgress>>,
    /// The newest checkpoint a replica reported saved (see [`crate::progress`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_checkpoint: Option<Box<crate::progress::Checkpoint>>,
    /// Samples per second per GPU that the job's replicas reported, by the GPU type they
    /// ran on (the latest report on each type): what the scheduler compares GPU types by
    /// when the job waits again, in place of the static speed table where measured.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub measured_throughput: BTreeMap<String, f64>,
    /// The admission the job holds: its pool and GPU type, and each replica's node and GPU
    /// indices; absent while it waits and once it finished. Written by the Kubernetes
    /// operator, for which the TrainingJob is the job's only record: the admission becomes
    /// durable in the same write as the status that announces it. (Embedded, the store keeps
    /// it and the API shows it as the job's `admission`.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admission: Option<Box<AdmissionRecord>>,
}

/// Where an admission placed a job (see [`TrainingJobStatus::admission`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionRecord {
    /// When the job was admitted: recently admitted jobs are protected from preemption.
    pub admitted_at: Timestamp,
    pub pool: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_type: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub placements: Vec<PlacementRecord>,
}

/// Where one replica of an admitted job runs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlacementRecord {
    pub role: String,
    pub index: u32,
    pub node: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_indices: Vec<u32>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaStatus {
    #[serde(default)]
    pub active: u32,
    #[serde(default)]
    pub succeeded: u32,
    #[serde(default)]
    pub failed: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: ConditionType,
    pub status: ConditionStatus,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub message: String,
    pub last_transition_time: Timestamp,
}

#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
pub enum ConditionType {
    Queued,
    Admitted,
    Running,
    Restarting,
    Succeeded,
    Failed,
    Suspended,
    // The job cannot be admitted even on an empty cluster (no node or pool is large enough,
    // no GPU type matches, its queue does not exist). It stays queued, so that a node added
    // later admits it, as Kubernetes keeps an unschedulable pod. (Plain comments: doc
    // comments on variants would make the CRD schema non-structural.)
    Unschedulable,
}

/// Where a job is in its life, in one word, derived from its conditions by the core's
/// lifecycle (`corral_core::lifecycle::job_state`): what `corral list` shows, the job's
/// `status.phase` and the `state` label of `corral_jobs{queue,state}`. (Variants carry plain
/// comments: doc comments would make the CRD schema non-structural.)
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
pub enum JobState {
    // Waiting in its queue for admission.
    Queued,
    // Admitted; replicas are starting.
    Admitted,
    Running,
    // A replica failed and the job restarts (after its back-off).
    Restarting,
    // Preempted; replicas stop and the job goes back to its queue.
    Preempting,
    // The platform could not start a replica (an image it cannot pull, a command that does
    // not exist): the job gave its resources back and waits out a back-off before it
    // re-enters its queue.
    BackOff,
    Suspended,
    Succeeded,
    Failed,
    // Deleted; replicas are stopping and then the job is removed. Only shells that keep a
    // deleted job while it stops report this (Kubernetes removes a deleted job itself); it
    // is never written into a status.
    Deleting,
}

impl JobState {
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "Queued",
            JobState::Admitted => "Admitted",
            JobState::Running => "Running",
            JobState::Restarting => "Restarting",
            JobState::Preempting => "Preempting",
            JobState::BackOff => "BackOff",
            JobState::Suspended => "Suspended",
            JobState::Succeeded => "Succeeded",
            JobState::Failed => "Failed",
            JobState::Deleting => "Deleting",
        }
    }

    /// Succeeded or Failed.
    pub fn is_finished(self) -> bool {
        matches!(self, JobState::Succeeded | JobState::Failed)
    }
}

impl std::fmt::Display for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

impl TrainingJobSpec {
    /// Total replicas over all roles.
    pub fn total_replicas(&self) -> u64 {
        self.replicas.values().map(|r| u64::from(r.count)).sum()
    }

    /// Total GPUs over all replicas.
    pub fn total_gpus(&self) -> u64 {
        self.replicas
            .values()
            .map(|r| u64::from(r.count) * u64::from(r.resources.gpu))
            .sum()
    }

    /// The restart policy in force for a role (its own, or the framework default).
    pub fn restart_policy(&self, role: Role) -> RestartPolicy {
        self.replicas
            .get(&role)
            .and_then(|r| r.restart_policy)
            .unwrap_or_else(|| self.framework.default_restart_policy(role))
    }

    pub fn queue_name(&self) -> &str {
        self.queue.as_deref().unwrap_or(DEFAULT_QUEUE)
    }

    /// Fills every default as the Kubeflow training operator would (restart policies,
    /// port, clean-pod policy, success policy, queue, elastic bounds, nprocPerNode).
    /// Idempotent.
    pub fn apply_defaults(&mut self) {
        let framework = self.framework;
        for (role, replica) in self.replicas.iter_mut() {
            if replica.restart_policy.is_none() {
                replica.restart_policy = Some(framework.default_restart_policy(*role));
            }
        }
        if self.port.is_none() {
            self.port = framework.default_port();
        }
        if self.run_policy.clean_pod_policy.is_none() {
            self.run_policy.clean_pod_policy = Some(CleanPodPolicy::None);
        }
        if self.success_policy.is_none() {
            self.success_policy = Some(SuccessPolicy::Default);
        }
        if self.queue.is_none() {
            self.queue = Some(DEFAULT_QUEUE.to_string());
        }
        if framework == Framework::PyTorch {
            let workers = self.replicas.get(&Role::Worker).map(|w| w.count);
            if let Some(elastic) = self.elastic.as_mut() {
                match (elastic.min_replicas, elastic.max_replicas) {
                    (Some(_), Some(_)) => {}
                    (None, Some(max)) => elastic.min_replicas = Some(max),
                    (Some(min), None) => elastic.max_replicas = Some(min),
                    (None, None) => {
                        elastic.min_replicas = workers;
                        elastic.max_replicas = workers;
                    }
                }
                if elastic.rdzv_backend.is_none() {
                    elastic.rdzv_backend = Some("c10d".to_string());
                }
            }
            if self.nproc_per_node.is_none() {
                self.nproc_per_node = Some("auto".to_string());
            }
        }
        if framework == Framework::Mpi {
            let mpi = self.mpi.get_or_insert_with(MpiOptions::default);
            mpi.slots_per_worker.get_or_insert(1);
            mpi.implementation.get_or_insert(MpiImplementation::OpenMPI);
            mpi.launcher_creation_policy
                .get_or_insert(LauncherCreationPolicy::AtStartup);
        }
    }
}
