//! What the read API answers from: the world a pass planned from and what the plane showed
//! after it ([`corral_core::views::PlaneView`]), made into the shapes the embedded server
//! sends (`corral_core::views`). Pure: the handlers read one snapshot, never the plane.

use std::collections::BTreeMap;

use corral_api::meta::Object;
use corral_api::training_job::TrainingJob;
use corral_core::control::accounting::UsageInterval;
use corral_core::sched::{ClusterSnapshot, Millis};
use corral_core::views::{
    Event, GpuDevice, JobDetails, JobSummary, NodeInfo, PlaneView, ReplicaInfo, phase_name,
};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;

use crate::consts::JOB_NAME_LABEL;
use crate::observe::{self, World};

/// One pass's world, cluster and plane, as the read API answers from them.
pub struct Snapshot {
    pub world: World,
    pub cluster: ClusterSnapshot,
    pub plane: PlaneView,
    /// The PipelineRuns as the pass after it left them.
    pub runs: Vec<std::sync::Arc<corral_api::PipelineRun>>,
    /// The stored Pipelines the runs name.
    pub pipelines: Vec<std::sync::Arc<corral_api::pipeline::Pipeline>>,
    /// The ServedModels with the status the serving pass decided.
    pub served_models: Vec<std::sync::Arc<corral_api::ServedModel>>,
}

/// The objects of the namespaces `allows` lets through, by namespace then name.
fn in_namespaces<S, T>(
    objects: &[std::sync::Arc<Object<S, T>>],
    allows: impl Fn(&str) -> bool,
) -> Vec<&Object<S, T>> {
    let mut out: Vec<&Object<S, T>> = objects
        .iter()
        .filter(|o| allows(o.metadata.namespace_or_default()))
        .map(|o| &**o)
        .collect();
    out.sort_by(|a, b| {
        (a.metadata.namespace_or_default(), &a.metadata.name)
            .cmp(&(b.metadata.namespace_or_default(), &b.metadata.name))
    });
    out
}

/// The namespaces that hold `objects`, once each.
pub fn namespaces_of<S, T>(objects: &[std::sync::Arc<Object<S, T>>]) -> Vec<String> {
    let mut out: Vec<String> = objects
        .iter()
        .map(|o| o.metadata.namespace_or_default().to_string())
        .collect();
    out.sort();
    out.dedup();
    out
}

fn created(job: &TrainingJob) -> Timestamp {
    job.metadata
        .creation_timestamp
        .unwrap_or(Timestamp::UNIX_EPOCH)
}

impl Snapshot {
    fn summary(&self, job: &TrainingJob) -> JobSummary {
        let key = observe::job_key(job);
        JobSummary::of(
            job,
            job.metadata.uid.as_deref().unwrap_or_default(),
            created(job),
            self.world.deleting_jobs.contains(&key),
        )
    }

    /// The jobs of the namespaces `allows` lets through, by namespace then name.
    pub fn summaries(&self, allows: impl Fn(&str) -> bool) -> Vec<JobSummary> {
        let mut out: Vec<JobSummary> = self
            .world
            .jobs
            .iter()
            .filter(|j| allows(j.metadata.namespace_or_default()))
            .map(|j| self.summary(j))
            .collect();
        out.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        out
    }

    /// The namespaces that hold jobs, for a caller who may see some of them.
    pub fn namespaces(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .world
            .jobs
            .iter()
            .map(|j| j.metadata.namespace_or_default().to_string())
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// The runs of the namespaces `allows` lets through, by namespace then name.
    pub fn runs(&self, allows: impl Fn(&str) -> bool) -> Vec<&corral_api::PipelineRun> {
        in_namespaces(&self.runs, allows)
    }

    /// The stored Pipelines of the namespaces `allows` lets through, by namespace then name.
    pub fn pipelines(&self, allows: impl Fn(&str) -> bool) -> Vec<&corral_api::pipeline::Pipeline> {
        in_namespaces(&self.pipelines, allows)
    }

    /// The served models of the namespaces `allows` lets through, by namespace then name.
    pub fn served_models(&self, allows: impl Fn(&str) -> bool) -> Vec<&corral_api::ServedModel> {
        in_namespaces(&self.served_models, allows)
    }

    pub fn run(&self, namespace: &str, name: &str) -> Option<&corral_api::PipelineRun> {
        self.runs
            .iter()
            .find(|r| r.metadata.name == name && r.metadata.namespace_or_default() == namespace)
            .map(|r| &**r)
    }

    /// `corral describe pipelinerun`: the run and each step in DAG order with its job's
    /// state, and `events`.
    pub fn run_details(
        &self,
        namespace: &str,
        name: &str,
        events: Vec<Event>,
    ) -> Option<corral_core::views::PipelineRunDetails> {
        let run = self.run(namespace, name)?;
        let steps = corral_core::views::run_steps(run, |job| {
            self.job(namespace, job)
                .map(|j| self.summary(j).state.as_str().to_string())
        });
        Some(corral_core::views::PipelineRunDetails {
            run: run.clone(),
            steps,
            events,
        })
    }

    pub fn job(&self, namespace: &str, name: &str) -> Option<&TrainingJob> {
        self.world
            .jobs
            .iter()
            .find(|j| j.metadata.name == name && j.metadata.namespace_or_default() == namespace)
            .map(|j| &**j)
    }

    /// `corral describe`: the job, its admission, its replicas (its pods) down to node and
    /// GPU indices, `events` (oldest first) and why it waits.
    pub fn details(&self, namespace: &str, name: &str, events: Vec<Event>) -> Option<JobDetails> {
        let job = self.job(namespace, name)?;
        let key = observe::job_key(job);
        let admission = self.plane.admissions.get(&key).cloned();
        let mut replicas: Vec<ReplicaInfo> = self
            .world
            .pods
            .iter()
            .filter(|p| p.metadata.namespace.as_deref() == Some(namespace))
            .filter(|p| label(p, JOB_NAME_LABEL) == Some(name))
            .filter_map(|p| replica(p, admission.as_ref()))
            .collect();
        replicas.sort_by(|a, b| (&a.role, a.index).cmp(&(&b.role, b.index)));
        Some(JobDetails {
            summary: self.summary(job),
            job: job.clone(),
            admission,
            replicas,
            events,
            pending_reason: self.plane.pending.get(&key).cloned(),
        })
    }

    /// Every node with its GPUs, which job holds each (`namespace/name`) and what is
    /// requested on it by the pods it runs.
    pub fn nodes(&self) -> Vec<NodeInfo> {
        let mut held: BTreeMap<(&str, u32), &str> = BTreeMap::new();
        for (job, a) in &self.plane.admissions {
            for p in &a.placements {
                for g in &p.gpu_indices {
                    held.insert((p.node.as_str(), *g), job.as_str());
                }
            }
        }
        let requested = observe::node_usage(self.world.pods.iter().map(|p| &**p));
        self.cluster
            .nodes
            .iter()
            .map(|n| {
                let used = requested.get(&n.name);
                NodeInfo {
                    name: n.name.clone(),
                    pool: corral_core::sched::pool_of(&self.cluster.pools, n),
                    gpu_type: n.gpu_type.clone(),
                    gpus: (0..n.gpus)
                        .map(|i| GpuDevice {
                            index: i,
                            name: n.gpu_type.clone().unwrap_or_default(),
                            memory_bytes: None,
                            used_by: held.get(&(n.name.as_str(), i)).map(|j| j.to_string()),
                            uuid: None,
                            utilization_percent: None,
                            memory_used_bytes: None,
                            power_watts: None,
                            temperature_celsius: None,
                            unhealthy: None,
                        })
                        .collect(),
                    cpu_milli: n.cpu_milli,
                    memory_bytes: n.memory_bytes,
                    cpu_milli_allocated: used.map_or(0, |u| u.cpu_milli),
                    memory_bytes_allocated: used.map_or(0, |u| u.memory_bytes),
                    extended: n.extended.clone(),
                }
            })
            .collect()
    }

    /// The usage ledger over `[from, to)` of one namespace or all: what the ledger holds
    /// (deleted jobs' included) and the admissions held now, charged until the snapshot.
    pub fn usage(&self, namespace: Option<&str>, from: Millis, to: Millis) -> Vec<UsageInterval> {
        let (closed, _) = crate::ledger::intervals(&self.world.ledger);
        closed
            .into_iter()
            .chain(self.plane.open_usage.iter().cloned())
            .filter(|i| namespace.is_none_or(|ns| i.namespace() == ns))
            .filter(|i| i.end > from && i.start < to)
            .collect()
    }
}

fn label<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

/// A replica as `describe` shows it, from its pod.
fn replica(
    pod: &Pod,
    admission: Option<&corral_core::views::AdmissionInfo>,
) -> Option<ReplicaInfo> {
    let observed = observe::observe_pod(pod)?;
    let (id, incarnation) = (observed.id, observed.incarnation);
    let (exit_code, reason) = corral_core::views::exit_of(&observed.phase);
    let status = pod.status.as_ref();
    let containers = status.and_then(|s| s.container_statuses.as_ref());
    let message = containers
        .into_iter()
        .flatten()
        .find_map(|c| c.state.as_ref()?.terminated.as_ref()?.message.clone());
    let restarts = containers
        .into_iter()
        .flatten()
        .map(|c| u32::try_from(c.restart_count).unwrap_or(0))
        .max()
        .unwrap_or(0);
    let gpus = admission
        .and_then(|a| {
            a.placements
                .iter()
                .find(|p| p.role == id.role.as_str() && p.index == id.index)
        })
        .map(|p| p.gpu_indices.clone())
        .unwrap_or_default();
    Some(ReplicaInfo {
        name: pod.metadata.name.clone().unwrap_or_default(),
        role: id.role.as_str().to_string(),
        index: id.index,
        incarnation: incarnation.to_string(),
        phase: phase_name(&observed.phase).to_string(),
        exit_code,
        reason,
        message,
        pid: None,
        gpus,
        port: None,
        restarts,
        started: status
            .and_then(|s| s.start_time.as_ref())
            .map(|t| t.0.to_string())
            .and_then(|t| t.parse().ok()),
        log_path: None,
    })
}
