//! What the scheduler reads: the cluster snapshot, jobs, queues, node pools and its settings.
//!
//! Time is plain `u64` milliseconds since the Unix epoch ([`Millis`]); the core never reads a
//! clock, the shell passes `now`.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::taint::{JobTolerations, Taint};

/// Milliseconds since the Unix epoch. The scheduler's only notion of time.
pub type Millis = u64;

/// Everything the scheduler knows about the cluster at the start of a cycle.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterSnapshot {
    pub nodes: Vec<Node>,
    /// Node pools; when empty, every GPU type forms its own pool named after the type
    /// (CPU-only nodes form the pool `cpu`).
    #[serde(default)]
    pub pools: Vec<NodePoolConfig>,
    #[serde(default)]
    pub queues: Vec<QueueConfig>,
    /// Jobs admitted earlier, with where their replicas run.
    #[serde(default)]
    pub running: Vec<RunningJob>,
}

/// One machine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Node {
    pub name: String,
    #[serde(default)]
    pub gpu_type: Option<String>,
    /// GPUs on the node, with indices `0..gpus` (at most 64).
    #[serde(default)]
    pub gpus: u32,
    pub cpu_milli: u64,
    pub memory_bytes: u64,
    /// Other countable resources the node offers (e.g. `rdma/hca`).
    #[serde(default)]
    pub extended: BTreeMap<String, u64>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Topology domain (rack, NVLink/IB island); replicas of a gang prefer one domain.
    #[serde(default)]
    pub topology: Option<String>,
    /// False when cordoned: nothing new lands here, running work stays.
    #[serde(default = "yes")]
    pub schedulable: bool,
    /// Taints; a job lands here only if it tolerates every one that keeps pods off
    /// (`NoSchedule`, `NoExecute`), by Kubernetes' rules (see [`super::taint`]).
    #[serde(default)]
    pub taints: Vec<Taint>,
    /// What is in use on the node by work the scheduler does not manage.
    #[serde(default)]
    pub allocated: NodeAllocation,
}

fn yes() -> bool {
    true
}

impl Node {
    /// A schedulable node with these capacities and nothing else: no extended resources,
    /// labels, topology domain, taints, or use by work the scheduler does not manage.
    pub fn new(
        name: impl Into<String>,
        gpu_type: Option<String>,
        gpus: u32,
        cpu_milli: u64,
        memory_bytes: u64,
    ) -> Node {
        Node {
            name: name.into(),
            gpu_type,
            gpus,
            cpu_milli,
            memory_bytes,
            extended: BTreeMap::new(),
            labels: BTreeMap::new(),
            topology: None,
            schedulable: true,
            taints: Vec::new(),
            allocated: NodeAllocation::default(),
        }
    }
}

/// Resources in use on a node by something other than the scheduler's running jobs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeAllocation {
    #[serde(default)]
    pub cpu_milli: u64,
    #[serde(default)]
    pub memory_bytes: u64,
    #[serde(default)]
    pub gpu_indices: Vec<u32>,
    #[serde(default)]
    pub extended: BTreeMap<String, u64>,
}

/// Nodes of one GPU type (Kueue: ResourceFlavor). A node belongs to the first pool, in the
/// given order, whose GPU type and selector it matches.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodePoolConfig {
    pub name: String,
    #[serde(default)]
    pub gpu_type: Option<String>,
    #[serde(default)]
    pub node_selector: BTreeMap<String, String>,
}

/// An amount of the three quota-managed resources. `u64::MAX` means unlimited.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResourceAmount {
    #[serde(default)]
    pub gpu: u64,
    #[serde(default)]
    pub cpu_milli: u64,
    #[serde(default)]
    pub memory_bytes: u64,
}

impl ResourceAmount {
    pub const ZERO: ResourceAmount = ResourceAmount {
        gpu: 0,
        cpu_milli: 0,
        memory_bytes: 0,
    };
    pub const UNLIMITED: ResourceAmount = ResourceAmount {
        gpu: u64::MAX,
        cpu_milli: u64::MAX,
        memory_bytes: u64::MAX,
    };
    /// Only GPUs limited; CPU and memory unlimited.
    pub fn gpus(gpu: u64) -> Self {
        ResourceAmount {
            gpu,
            ..Self::UNLIMITED
        }
    }
    pub(crate) fn as_array(self) -> [u64; 3] {
        [self.gpu, self.cpu_milli, self.memory_bytes]
    }
    pub(crate) fn from_array(a: [u64; 3]) -> Self {
        ResourceAmount {
            gpu: a[0],
            cpu_milli: a[1],
            memory_bytes: a[2],
        }
    }
}

/// A team's queue: quota per node pool, borrowing within its cohort, fair-share weight.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct QueueConfig {
    pub name: String,
    /// Queues of one cohort lend each other unused quota.
    #[serde(default)]
    pub cohort: Option<String>,
    /// Fair-share weight (0 is read as 1).
    #[serde(default = "one")]
    pub weight: u32,
    /// Namespaces whose jobs may use this queue; empty: every namespace. A job of another
    /// namespace waits with a reason naming them (tenants are walled off here, so every
    /// shell enforces it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// Quota by pool name. A pool not listed has a nominal quota of zero (borrowing only).
    #[serde(default)]
    pub quotas: BTreeMap<String, PoolQuota>,
}

fn one() -> u32 {
    1
}

/// A queue's quota in one pool (Kueue's semantics).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PoolQuota {
    /// What the queue is guaranteed (unless it lends it and the borrower is reclaimed).
    pub nominal: ResourceAmount,
    /// How much above nominal the queue may borrow from its cohort (none: no limit).
    #[serde(default)]
    pub borrowing_limit: Option<ResourceAmount>,
    /// How much of its unused nominal quota others in the cohort may borrow (none: all).
    #[serde(default)]
    pub lending_limit: Option<ResourceAmount>,
}

/// One role's replicas: `count` identical replicas.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReplicaGroup {
    pub role: String,
    #[serde(default = "one")]
    pub count: u32,
    #[serde(default)]
    pub cpu_milli: u64,
    #[serde(default)]
    pub memory_bytes: u64,
    #[serde(default)]
    pub gpu: u32,
    /// GPU types this group may run on; empty means any.
    #[serde(default)]
    pub allowed_gpu_types: Vec<String>,
    #[serde(default)]
    pub extended: BTreeMap<String, u64>,
}

/// A job waiting for admission: a gang of replica groups, all placed or none.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JobRequest {
    /// Unique key, e.g. `namespace/name`.
    pub key: String,
    pub queue: String,
    #[serde(default)]
    pub priority: i32,
    #[serde(default)]
    pub submit_time: Millis,
    pub groups: Vec<ReplicaGroup>,
    /// Measured throughput (steps/s) per GPU type, e.g. from Gavel's matrix. Types missing
    /// here rank below types with a measurement.
    #[serde(default)]
    pub throughput: BTreeMap<String, f64>,
    /// Whether the job may be preempted (checkpointing jobs: yes).
    #[serde(default = "yes")]
    pub preemptible: bool,
    #[serde(default)]
    pub node_selector: BTreeMap<String, String>,
    /// Tolerations of the job's pod templates by role (a role not listed tolerates
    /// nothing); the scheduler uses what every role with replicas tolerates.
    #[serde(default)]
    pub tolerations: JobTolerations,
    /// The group whose replica count the scheduler may move (elastic PyTorch workers); the
    /// group's `count` is then ignored on submit: the job is admitted at `min` and grows
    /// (see [`super::elastic`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elastic: Option<ElasticRange>,
}

/// The replicas of one group an elastic job may run with: `min..=max` (torchrun's
/// `--nnodes=min:max`). Replica 0 of the group hosts the rendezvous and is never removed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ElasticRange {
    pub role: String,
    pub min: u32,
    pub max: u32,
}

/// A job admitted earlier and where its replicas run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunningJob {
    pub request: JobRequest,
    pub placements: Vec<super::ReplicaPlacement>,
    #[serde(default)]
    pub admitted_at: Millis,
}

/// Scheduler settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct SchedulerConfig {
    /// A job admitted less than this long ago is not preempted (breaks preemption loops).
    pub preemption_protection_ms: Millis,
    /// Preemption searches per cycle (each costs a victim search); bounds cycle time.
    pub max_preemption_attempts: u32,
    /// Blocked gangs per pool that get nodes reserved (backfill may not use them).
    pub reservations_per_pool: u32,
    /// Relative speed of each GPU type, for jobs without measured throughput
    /// (default: all equal).
    pub gpu_type_speed: BTreeMap<String, f64>,
    /// At most this many nodes are examined per bucket when looking for a node for one
    /// replica (kube-scheduler's percentageOfNodesToScore, as a count).
    pub node_scan_limit: u32,
    /// Least attained service (Tiresias' discretized 2D-LAS): within one priority, jobs whose
    /// attained service ([`Scheduler::set_attained_service`](super::Scheduler::set_attained_service),
    /// GPU-seconds) is in a lower level go first, and may preempt running jobs of the same
    /// priority in a higher level. Level 0 is below this many GPU-seconds; 0 turns levels off
    /// (every job in level 0: order by submit time, as without service).
    pub service_quantum_gpu_s: f64,
    /// Each level above 0 spans this many times the service of the one below (geometric, so
    /// that no trace's time scale is built in).
    pub service_level_ratio: f64,
    /// After the pass, a running job moves to a pool with room left over where it runs at
    /// least this many times faster (measured throughput or configured type speed). Below 1
    /// (e.g. 0): never. Moved jobs are protected like new admissions, so they do not bounce.
    pub rebalance_min_speedup: f64,
    /// Whether the shell can move a running job: a rebalanced job is then placed at once
    /// and listed in [`CycleOutcome::moved`](super::CycleOutcome::moved). Otherwise it goes
    /// back to pending like any preempted job and is placed again by a later cycle.
    pub move_in_place: bool,
    /// An elastic job is resized at most once in this long (its admission counts as a
    /// resize): sizes cannot oscillate faster than this (see [`super::elastic`]).
    pub resize_dwell_ms: Millis,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            preemption_protection_ms: 5 * 60 * 1000,
            max_preemption_attempts: 32,
            reservations_per_pool: 1,
            gpu_type_speed: BTreeMap::new(),
            node_scan_limit: 256,
            service_quantum_gpu_s: 3600.0,
            service_level_ratio: 4.0,
            rebalance_min_speedup: 1.3,
            move_in_place: false,
            resize_dwell_ms: 60_000,
        }
    }
}

/// Why the scheduler could not be set up or a job not be accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SchedError {
    DuplicateNode(String),
    TooManyGpus {
        node: String,
        gpus: u32,
    },
    DuplicateJob(String),
    UnknownNode {
        job: String,
        node: String,
    },
    /// A running job's placement does not fit its node (the snapshot is inconsistent).
    Overcommitted {
        job: String,
        node: String,
    },
    InvalidQuantity {
        job: String,
        what: String,
        message: String,
    },
    EmptyJob(String),
}

impl fmt::Display for SchedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SchedError::DuplicateNode(n) => write!(f, "node {n} appears twice in the snapshot"),
            SchedError::TooManyGpus { node, gpus } => {
                write!(f, "node {node} has {gpus} GPUs; at most 64 are supported")
            }
            SchedError::DuplicateJob(j) => write!(f, "job {j} is already known"),
            SchedError::UnknownNode { job, node } => {
                write!(
                    f,
                    "job {job} runs on node {node}, which is not in the snapshot"
                )
            }
            SchedError::Overcommitted { job, node } => write!(
                f,
                "job {job} does not fit on node {node} next to what is already allocated there"
            ),
            SchedError::InvalidQuantity { job, what, message } => {
                write!(f, "job {job}: {what}: {message}")
            }
            SchedError::EmptyJob(j) => write!(f, "job {j} has no replicas"),
        }
    }
}

impl std::error::Error for SchedError {}

impl SchedError {
    /// The job the error is about (its key), when it is about one job rather than the
    /// cluster: the caller drops that job's admission or request, never a guessed one.
    pub fn job(&self) -> Option<&str> {
        match self {
            SchedError::DuplicateJob(j) | SchedError::EmptyJob(j) => Some(j),
            SchedError::UnknownNode { job, .. }
            | SchedError::Overcommitted { job, .. }
            | SchedError::InvalidQuantity { job, .. } => Some(job),
            SchedError::DuplicateNode(_) | SchedError::TooManyGpus { .. } => None,
        }
    }
}

impl JobRequest {
    /// Maps a TrainingJob onto what the scheduler needs. The key is `namespace/name`; the
    /// queue is `spec.queue` or `default`. Priority comes from the JobPriorityClass, which the
    /// caller resolves.
    pub fn from_training_job(
        job: &corral_api::TrainingJob,
        priority: i32,
        submit_time: Millis,
    ) -> Result<JobRequest, SchedError> {
        let key = format!(
            "{}/{}",
            job.metadata.namespace_or_default(),
            job.metadata.name
        );
        let invalid = |what: String, message: String| SchedError::InvalidQuantity {
            job: key.clone(),
            what,
            message,
        };
        let to_u64 = |v: u128, what: &str| {
            u64::try_from(v).map_err(|_| invalid(what.to_string(), "too large".to_string()))
        };
        let mut groups = Vec::with_capacity(job.spec.replicas.len());
        for (role, spec) in &job.spec.replicas {
            let r = &spec.resources;
            let role = role.as_str();
            let cpu_milli = match &r.cpu {
                Some(q) => to_u64(
                    q.milli()
                        .map_err(|e| invalid(format!("{role} cpu"), e.to_string()))?,
                    "cpu",
                )?,
                None => 0,
            };
            let memory_bytes = match &r.memory {
                Some(q) => to_u64(
                    q.units()
                        .map_err(|e| invalid(format!("{role} memory"), e.to_string()))?,
                    "memory",
                )?,
                None => 0,
            };
            let mut extended = BTreeMap::new();
            for (name, q) in &r.extended {
                let v = q
                    .units()
                    .map_err(|e| invalid(format!("{role} {name}"), e.to_string()))?;
                extended.insert(name.clone(), to_u64(v, name)?);
            }
            groups.push(ReplicaGroup {
                role: role.to_string(),
                count: spec.count,
                cpu_milli,
                memory_bytes,
                gpu: r.gpu,
                allowed_gpu_types: r.gpu_types.clone(),
                extended,
            });
        }
        if groups.iter().all(|g| g.count == 0) {
            return Err(SchedError::EmptyJob(key));
        }
        Ok(JobRequest {
            queue: job
                .spec
                .queue
                .clone()
                .unwrap_or_else(|| corral_api::DEFAULT_QUEUE.to_string()),
            key,
            priority,
            submit_time,
            groups,
            throughput: BTreeMap::new(),
            preemptible: true,
            node_selector: BTreeMap::new(),
            tolerations: JobTolerations::new(),
            elastic: elastic_range(job),
        })
    }

    /// GPUs the whole gang needs (an elastic job at the size its groups say).
    pub fn total_gpus(&self) -> u64 {
        self.groups
            .iter()
            .map(|g| u64::from(g.gpu) * u64::from(g.count))
            .sum()
    }

    /// Replicas (pods) in the gang.
    pub fn total_replicas(&self) -> u64 {
        self.groups.iter().map(|g| u64::from(g.count)).sum()
    }
}

/// The elastic range of a TrainingJob, by the lifecycle's rules (the worker role of an
/// elastic PyTorch job; bounds default to the worker count).
fn elastic_range(job: &corral_api::TrainingJob) -> Option<ElasticRange> {
    let role = crate::lifecycle::policy::elastic_role(&job.spec)?;
    let (min, max) = crate::lifecycle::policy::elastic_bounds(&job.spec);
    Some(ElasticRange {
        role: role.as_str().to_string(),
        min,
        max,
    })
}
