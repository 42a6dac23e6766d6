//! Observe: what the API server holds, as plain data ([`World`]), and the pure functions that
//! read it: the scheduler's view of each node (allocatable minus the requests of every
//! non-terminal pod bound there, whoever scheduled it), replica states from pods, and a job's
//! node selector and tolerations in the scheduler's terms.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod, Service, Taint, Toleration};

use corral_api::training_job::{Role, TrainingJob};
use corral_api::{JobPriorityClass, NodePool, Quantity, Queue};
use corral_core::lifecycle::{
    FailureReason, Incarnation, ObservedReplica, ReplicaId, ReplicaPhase,
};
use corral_core::sched;

use crate::consts::*;

/// Everything the operator reads, as of one moment.
#[derive(Clone, Debug, Default)]
pub struct World {
    /// Shared with the operator's decode cache (`Arc`): a pass copies none of them.
    pub jobs: Vec<Arc<TrainingJob>>,
    /// Jobs (`namespace/name`) with a deletionTimestamp: deleted, waiting on a finalizer
    /// (foreground deletion) while their pods stop.
    pub deleting_jobs: BTreeSet<String>,
    /// Every pod of the cluster (all schedulers): their requests occupy nodes. Shared with
    /// the watch caches (`Arc`): a pass copies none of them.
    pub pods: Vec<Arc<Pod>>,
    pub nodes: Vec<Arc<Node>>,
    /// Services Corral made (label `corral.dev/job-name`).
    pub services: Vec<Arc<Service>>,
    pub queues: Vec<Queue>,
    pub pools: Vec<NodePool>,
    pub classes: Vec<JobPriorityClass>,
    /// Objects that could not be decoded, in words (reported, never fatal).
    pub warnings: Vec<String>,
    /// Progress reports replicas sent since the last pass ([`crate::progress`]).
    pub progress: Vec<crate::progress::Reported>,
    /// The usage ledger's ConfigMaps, of the operator's namespace only ([`crate::ledger`]).
    pub ledger: Vec<Arc<k8s_openapi::api::core::v1::ConfigMap>>,
}

/// Resources one pod requests (or one node offers).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Amounts {
    pub cpu_milli: u64,
    pub memory_bytes: u64,
    pub gpus: u64,
    pub extended: BTreeMap<String, u64>,
}

impl Amounts {
    fn add(&mut self, o: &Amounts) {
        self.cpu_milli = self.cpu_milli.saturating_add(o.cpu_milli);
        self.memory_bytes = self.memory_bytes.saturating_add(o.memory_bytes);
        self.gpus = self.gpus.saturating_add(o.gpus);
        for (k, v) in &o.extended {
            let e = self.extended.entry(k.clone()).or_insert(0);
            *e = e.saturating_add(*v);
        }
    }

    fn max(&mut self, o: &Amounts) {
        self.cpu_milli = self.cpu_milli.max(o.cpu_milli);
        self.memory_bytes = self.memory_bytes.max(o.memory_bytes);
        self.gpus = self.gpus.max(o.gpus);
        for (k, v) in &o.extended {
            let e = self.extended.entry(k.clone()).or_insert(0);
            *e = (*e).max(*v);
        }
    }

    /// Whether `need` fits into `self`.
    pub fn holds(&self, need: &Amounts) -> bool {
        self.cpu_milli >= need.cpu_milli
            && self.memory_bytes >= need.memory_bytes
            && self.gpus >= need.gpus
            && need
                .extended
                .iter()
                .all(|(k, v)| *v == 0 || self.extended.get(k).is_some_and(|h| h >= v))
    }

    pub fn take(&mut self, need: &Amounts) {
        self.cpu_milli = self.cpu_milli.saturating_sub(need.cpu_milli);
        self.memory_bytes = self.memory_bytes.saturating_sub(need.memory_bytes);
        self.gpus = self.gpus.saturating_sub(need.gpus);
        for (k, v) in &need.extended {
            if let Some(h) = self.extended.get_mut(k) {
                *h = h.saturating_sub(*v);
            }
        }
    }
}

/// Resources that are not scheduled on (or that Corral tracks separately).
fn is_extended(name: &str) -> bool {
    name.contains('/') && name != GPU_RESOURCE && !name.starts_with("hugepages-")
}

fn quantity_milli(q: &str) -> Option<u64> {
    Quantity::parse(q)
        .ok()
        .and_then(|q| q.milli().ok())
        .map(|m| u64::try_from(m).unwrap_or(u64::MAX))
}

fn quantity_units(q: &str) -> Option<u64> {
    Quantity::parse(q)
        .ok()
        .and_then(|q| q.units().ok())
        .map(|m| u64::try_from(m).unwrap_or(u64::MAX))
}

fn amounts_of<'a>(
    list: impl IntoIterator<
        Item = (
            &'a String,
            &'a k8s_openapi::apimachinery::pkg::api::resource::Quantity,
        ),
    >,
) -> Amounts {
    let mut a = Amounts::default();
    for (name, q) in list {
        let q = q.0.as_str();
        match name.as_str() {
            "cpu" => a.cpu_milli = quantity_milli(q).unwrap_or(0),
            "memory" => a.memory_bytes = quantity_units(q).unwrap_or(0),
            n if n == GPU_RESOURCE => a.gpus = quantity_units(q).unwrap_or(0),
            n if is_extended(n) => {
                a.extended
                    .insert(n.to_string(), quantity_units(q).unwrap_or(0));
            }
            _ => {}
        }
    }
    a
}

fn container_requests(c: &k8s_openapi::api::core::v1::Container) -> Amounts {
    let Some(r) = &c.resources else {
        return Amounts::default();
    };
    // A limit without a request is the request (the API server defaults it so too).
    let mut merged: BTreeMap<&String, &k8s_openapi::apimachinery::pkg::api::resource::Quantity> =
        BTreeMap::new();
    if let Some(l) = &r.limits {
        merged.extend(l.iter());
    }
    if let Some(req) = &r.requests {
        merged.extend(req.iter());
    }
    amounts_of(merged)
}

/// What a pod requests, as kube-scheduler counts it: the sum of its containers (and sidecar
/// init containers), or the largest init container if more, plus the pod overhead.
pub fn pod_requests(pod: &Pod) -> Amounts {
    let Some(spec) = &pod.spec else {
        return Amounts::default();
    };
    let mut sum = Amounts::default();
    for c in &spec.containers {
        sum.add(&container_requests(c));
    }
    let mut init_max = Amounts::default();
    let mut sidecars = Amounts::default();
    for c in spec.init_containers.iter().flatten() {
        let r = container_requests(c);
        let mut at_start = sidecars.clone();
        at_start.add(&r);
        init_max.max(&at_start);
        if c.restart_policy.as_deref() == Some("Always") {
            sidecars.add(&r);
        }
    }
    sum.add(&sidecars);
    sum.max(&init_max);
    if let Some(o) = &spec.overhead {
        sum.add(&amounts_of(o.iter()));
    }
    sum
}

/// A pod that holds no resources any more (Succeeded or Failed).
pub fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

pub fn pod_node(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref().and_then(|s| s.node_name.as_deref())
}

pub fn label<'a>(
    meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    key: &str,
) -> Option<&'a str> {
    meta.labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map(String::as_str)
}

/// The replica and incarnation a Corral pod stands for (from its labels).
pub fn replica_of(pod: &Pod) -> Option<(ReplicaId, Incarnation)> {
    let role: Role = label(&pod.metadata, ROLE_LABEL)?.parse().ok()?;
    let index: u32 = label(&pod.metadata, INDEX_LABEL)?.parse().ok()?;
    let inc: Incarnation = label(&pod.metadata, INCARNATION_LABEL)?.parse().ok()?;
    Some((ReplicaId::new(role, index), inc))
}

/// Why a failed pod failed, as far as its status tells.
fn failure_reason(pod: &Pod) -> (i32, FailureReason) {
    let status = pod.status.as_ref();
    let pod_reason = status.and_then(|s| s.reason.as_deref()).unwrap_or("");
    let disruption = status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .find(|c| c.type_ == "DisruptionTarget" && c.status == "True")
        .and_then(|c| c.reason.clone())
        .unwrap_or_default();
    let terminated = status
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.first())
        .and_then(|c| c.state.as_ref())
        .and_then(|s| s.terminated.as_ref());
    let exit_code = terminated.map_or(1, |t| t.exit_code);
    let container_reason = terminated.and_then(|t| t.reason.as_deref()).unwrap_or("");
    let reason = if pod_reason == "Evicted" || disruption == "EvictionByEvictionAPI" {
        FailureReason::Evicted
    } else if disruption == "PreemptionByScheduler" || pod_reason == "Preempting" {
        FailureReason::Preempted
    } else if matches!(pod_reason, "NodeLost" | "NodeShutdown" | "Terminated")
        || disruption == "DeletionByPodGC"
        || disruption == "TerminationByKubelet"
    {
        FailureReason::NodeLost
    } else if pod_reason == "DeadlineExceeded" {
        FailureReason::DeadlineExceeded
    } else if container_reason == "OOMKilled" {
        FailureReason::OomKilled
    } else {
        FailureReason::Error
    };
    (exit_code, reason)
}

/// Reasons a container waits with when the kubelet cannot start it as it is (it backs off
/// and retries while the pod keeps its node's resources): an image it cannot pull, a
/// container it cannot create or run.
pub const START_FAILURE_REASONS: [&str; 6] = [
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
];

/// Reasons a container terminated with when the runtime could not start its command (a
/// program the image lacks): containerd's and CRI-O's, then dockershim's.
pub const START_ERROR_REASONS: [&str; 2] = ["StartError", "ContainerCannotRun"];

/// Why the platform cannot start a pod's program, in its words (`reason: message` of the
/// container status): an init or app container waiting with one of
/// [`START_FAILURE_REASONS`], or one that ended with one of [`START_ERROR_REASONS`] (its
/// command never ran). `None` otherwise.
pub fn start_failure(pod: &Pod) -> Option<String> {
    let status = pod.status.as_ref()?;
    let words = |reason: &str, message: Option<&str>| match message.filter(|m| !m.is_empty()) {
        Some(m) => format!("{reason}: {m}"),
        None => reason.to_string(),
    };
    let ended = matches!(status.phase.as_deref(), Some("Succeeded" | "Failed"));
    status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten())
        .find_map(|c| {
            let state = c.state.as_ref()?;
            if let Some(w) = state.waiting.as_ref().filter(|_| !ended) {
                let reason = w.reason.as_deref()?;
                return START_FAILURE_REASONS
                    .contains(&reason)
                    .then(|| words(reason, w.message.as_deref()));
            }
            let t = state.terminated.as_ref()?;
            let reason = t.reason.as_deref()?;
            START_ERROR_REASONS
                .contains(&reason)
                .then(|| words(reason, t.message.as_deref()))
        })
}

/// A Corral pod whose program the platform cannot start, as the control plane is told it:
/// with the container status's words ([`start_failure`]).
pub fn pod_start_failure(pod: &Pod) -> Option<corral_core::control::StartFailure> {
    let message = start_failure(pod)?;
    let (replica, incarnation) = replica_of(pod)?;
    Some(corral_core::control::StartFailure {
        replica,
        incarnation,
        exit_code: start_exit_code(pod),
        message,
    })
}

/// The exit code of a container whose command never ran (128 for containerd's StartError),
/// else 0: a container waiting for its image never exited.
fn start_exit_code(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .find_map(|c| c.state.as_ref()?.terminated.as_ref().map(|t| t.exit_code))
        .unwrap_or(0)
}

/// The replica state of one Corral pod; `None` for pods without Corral's labels. A pod
/// whose container the kubelet cannot start ([`start_failure`]) is `Failed` with
/// [`FailureReason::StartFailed`]: the control plane decides what that means.
pub fn observe_pod(pod: &Pod) -> Option<ObservedReplica> {
    let (id, incarnation) = replica_of(pod)?;
    if start_failure(pod).is_some() {
        let phase = ReplicaPhase::Failed {
            exit_code: start_exit_code(pod),
            reason: FailureReason::StartFailed,
        };
        return Some(ObservedReplica::new(id, incarnation, phase));
    }
    let phase = match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
        Some("Running") => ReplicaPhase::Running,
        Some("Succeeded") => ReplicaPhase::Succeeded,
        Some("Failed") => {
            let (exit_code, reason) = failure_reason(pod);
            ReplicaPhase::Failed { exit_code, reason }
        }
        _ if pod_node(pod).is_some() => ReplicaPhase::Starting,
        _ => ReplicaPhase::Pending,
    };
    Some(ObservedReplica::new(id, incarnation, phase))
}

/// A node's taint in the scheduler's terms; `None` for an effect Kubernetes does not know
/// (its scheduler ignores such a taint too). The scheduler decides which taints keep pods
/// off and what tolerates them.
pub fn taint_of(t: &Taint) -> Option<sched::Taint> {
    Some(sched::Taint::new(
        t.key.clone(),
        t.value.clone().unwrap_or_default(),
        sched::TaintEffect::parse(&t.effect)?,
    ))
}

/// A pod's toleration in the scheduler's terms; `None` for one that tolerates no taint (an
/// operator or effect Kubernetes does not know: its `ToleratesTaint` is false for them).
pub fn toleration_of(t: &Toleration) -> Option<sched::Toleration> {
    let operator = match t.operator.as_deref().unwrap_or("") {
        "" | "Equal" => sched::TolerationOperator::Equal,
        "Exists" => sched::TolerationOperator::Exists,
        _ => return None,
    };
    let effect = match t.effect.as_deref().unwrap_or("") {
        "" => None,
        e => Some(sched::TaintEffect::parse(e)?),
    };
    Some(sched::Toleration {
        key: t.key.clone().unwrap_or_default(),
        operator,
        value: t.value.clone().unwrap_or_default(),
        effect,
    })
}

/// A role's pod-template field, decoded.
fn template_field<T: serde::de::DeserializeOwned>(
    job: &TrainingJob,
    role: Role,
    field: &str,
) -> Result<Option<T>, String> {
    let Some(v) = job
        .spec
        .replicas
        .get(&role)
        .and_then(|r| r.template.pod_template.as_ref())
        .and_then(|t| t.get("spec"))
        .and_then(|s| s.get(field))
    else {
        return Ok(None);
    };
    serde_json::from_value(v.clone())
        .map(Some)
        .map_err(|e| format!("spec.replicas.{role}.template.podTemplate.spec.{field}: {e}"))
}

/// The node selector of a job (every role's, together) and the tolerations of each role
/// with replicas, as the scheduler takes them (it matches them to node taints).
pub fn job_constraints(
    job: &TrainingJob,
) -> Result<(BTreeMap<String, String>, sched::JobTolerations), String> {
    let mut selector = BTreeMap::new();
    let mut tolerations = sched::JobTolerations::new();
    for (role, spec) in &job.spec.replicas {
        if spec.count == 0 {
            continue;
        }
        if let Some(sel) = template_field::<BTreeMap<String, String>>(job, *role, "nodeSelector")? {
            selector.extend(sel);
        }
        let tols =
            template_field::<Vec<Toleration>>(job, *role, "tolerations")?.unwrap_or_default();
        tolerations.insert(
            role.as_str().to_string(),
            tols.iter().filter_map(toleration_of).collect(),
        );
    }
    Ok((selector, tolerations))
}

fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// What a node offers: its allocatable resources.
pub fn node_allocatable(node: &Node) -> Amounts {
    node.status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .map(|a| amounts_of(a.iter()))
        .unwrap_or_default()
}

/// The most GPUs per node the scheduler tracks (its GPU masks are 64 bits wide).
const MAX_GPUS: u64 = 64;

/// The scheduler's view of one node, with `foreign` (requests of pods that are not replicas
/// of admitted Corral jobs) allocated, and GPU indices `reserved` by Corral's own placements.
pub fn sched_node(
    node: &Node,
    foreign: &Amounts,
    reserved_gpus: &BTreeSet<u32>,
    topology_label: Option<&str>,
) -> sched::Node {
    let alloc = node_allocatable(node);
    let labels: BTreeMap<String, String> = node.metadata.labels.clone().unwrap_or_default();
    let gpus = alloc.gpus.min(MAX_GPUS) as u32;
    // Kubernetes' device plugin picks GPU indices; the scheduler only needs the count right.
    // Pods of other schedulers get the lowest indices Corral's placements do not hold.
    let gpu_indices: Vec<u32> = (0..gpus)
        .filter(|i| !reserved_gpus.contains(i))
        .take(usize::try_from(foreign.gpus).unwrap_or(usize::MAX))
        .collect();
    let unschedulable = node
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false);
    sched::Node {
        name: node.metadata.name.clone().unwrap_or_default(),
        gpu_type: labels.get(GPU_PRODUCT_LABEL).cloned(),
        gpus,
        cpu_milli: alloc.cpu_milli,
        memory_bytes: alloc.memory_bytes,
        extended: alloc.extended.clone(),
        topology: topology_label.and_then(|l| labels.get(l).cloned()),
        labels,
        schedulable: !unschedulable && node_ready(node),
        taints: node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .into_iter()
            .flatten()
            .filter_map(taint_of)
            .collect(),
        allocated: sched::NodeAllocation {
            cpu_milli: foreign.cpu_milli.min(alloc.cpu_milli),
            memory_bytes: foreign.memory_bytes.min(alloc.memory_bytes),
            gpu_indices,
            extended: foreign
                .extended
                .iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        (*v).min(alloc.extended.get(k).copied().unwrap_or(0)),
                    )
                })
                .collect(),
        },
    }
}

/// What is in use on each node right now by every non-terminal pod bound there (the
/// kubelet's view; used to decide whether a Binding can succeed now).
pub fn node_usage<'a>(pods: impl IntoIterator<Item = &'a Pod>) -> BTreeMap<String, Amounts> {
    let mut out: BTreeMap<String, Amounts> = BTreeMap::new();
    for p in pods {
        if is_terminal(p) {
            continue;
        }
        if let Some(n) = pod_node(p) {
            out.entry(n.to_string()).or_default().add(&pod_requests(p));
        }
    }
    out
}

/// Free room on every node now: allocatable minus the requests of every non-terminal pod
/// bound to it (terminating ones included: their resources are not free yet).
pub fn free_now(world: &World) -> BTreeMap<String, Amounts> {
    let used = node_usage(world.pods.iter().map(|p| &**p));
    world
        .nodes
        .iter()
        .filter_map(|n| {
            let name = n.metadata.name.clone()?;
            let mut free = node_allocatable(n);
            if let Some(u) = used.get(&name) {
                free.take(u);
            }
            Some((name, free))
        })
        .collect()
}

/// The job a pod belongs to (`namespace/name`), from its label.
pub fn pod_job_key(pod: &Pod) -> Option<String> {
    let job = label(&pod.metadata, JOB_NAME_LABEL)?;
    Some(format!(
        "{}/{job}",
        pod.metadata.namespace.as_deref().unwrap_or("default")
    ))
}

/// The key the scheduler knows a job by.
pub fn job_key(job: &TrainingJob) -> String {
    format!(
        "{}/{}",
        job.metadata.namespace_or_default(),
        job.metadata.name
    )
}
