//! What a submit is refused for where the platform's nodes are fixed (processes on known
//! machines, the simulator): a job that no node of the cluster can ever hold, said with
//! the field to change ([`Refusal`]). The plane refuses it in [`super::ControlPlane::submit`];
//! a shell that checks submissions before it takes its lock does the same with a
//! [`SubmitCheck`]. Both ask the scheduler's own judgement
//! ([`crate::sched::ClusterFit`]), the one that names a waiting job Unschedulable; on
//! Kubernetes, where nodes come and go, such a job is admitted and waits Unschedulable.

use std::fmt;

use corral_api::TrainingJob;

use super::config::ControlConfig;
use super::rules;
use crate::sched::explain::{CPU, GPU, MEMORY, quota_amount, resource_amount, resource_bare};
use crate::sched::{
    Blocker, ClusterFit, ClusterSnapshot, JobRequest, Misfit, PendingReason, SchedError,
    priority_of,
};

/// Why a job is refused at submit: the field to change and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The field, e.g. `spec.replicas.worker.resources.memory`.
    pub path: String,
    /// What was asked, what the cluster has and what would be valid.
    pub message: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// The check a shell makes before it takes its lock: the same as the plane's at submit.
/// Made from the snapshot and settings the shell gives its plane.
#[derive(Debug)]
pub struct SubmitCheck {
    /// `None` where the nodes are not fixed: nothing is refused for its size.
    fit: Option<ClusterFit>,
    config: ControlConfig,
}

impl SubmitCheck {
    pub fn new(cluster: &ClusterSnapshot, config: &ControlConfig) -> Result<Self, SchedError> {
        let fit = if config.fixed_nodes {
            let queues =
                rules::with_default_queue(cluster.queues.clone(), &cluster.pools, &cluster.nodes);
            Some(ClusterFit::new(&ClusterSnapshot {
                nodes: cluster.nodes.clone(),
                pools: cluster.pools.clone(),
                queues,
                running: Vec::new(),
            })?)
        } else {
            None
        };
        Ok(SubmitCheck {
            fit,
            config: config.clone(),
        })
    }

    /// Refuses what the plane would refuse at submit for its size (a job submitted with no
    /// scheduling hints, as the embedded cluster submits). A job the scheduler cannot read
    /// passes: the plane refuses it with its own words.
    pub fn check(&self, job: &TrainingJob) -> Result<(), Refusal> {
        let Some(fit) = &self.fit else {
            return Ok(());
        };
        let mut defaulted = job.clone();
        defaulted.spec.apply_defaults();
        let priority = priority_of(&defaulted, &self.config.priority_classes);
        let Ok(request) = JobRequest::from_training_job(&defaulted, priority, 0) else {
            return Ok(());
        };
        match fit.never_fits(&request) {
            Some(reason) if refused_for_size(&reason) => Err(refusal(&defaulted, &reason)),
            _ => Ok(()),
        }
    }
}

/// Whether a job that never fits is refused at submit: for what the cluster's nodes and
/// quotas can hold, not for its queue (a queue that does not exist is validation's to
/// refuse; one that does not admit the job's namespace is the tenants' rule, said while
/// the job waits, `NamespaceNotAllowed`).
fn refused_for_size(reason: &PendingReason) -> bool {
    !reason.blockers.iter().any(|b| {
        matches!(
            b,
            Blocker::NoSuchQueue { .. } | Blocker::NamespaceNotAllowed { .. }
        )
    })
}

/// The refusal of a job that never fits: the field the first blocker is about, the reason
/// in the scheduler's words, and what would be valid.
pub(crate) fn refusal(job: &TrainingJob, reason: &PendingReason) -> Refusal {
    let first = reason.blockers.first();
    let role = |named: Option<&String>| named.cloned().unwrap_or_else(|| main_role(job));
    let (path, remedy) = match first {
        Some(Blocker::NoQuota {
            pool,
            resource,
            most,
            ..
        }) => (
            "spec.queue".to_string(),
            Some(if *most == 0 {
                format!("name a queue with {resource} quota in pool {pool}")
            } else {
                format!(
                    "ask for at most {} in all, or name a queue with more quota in pool {pool}",
                    quota_amount(*resource, *most)
                )
            }),
        ),
        Some(Blocker::TooLargeForNode {
            largest_node_gpus, ..
        }) => (
            format!("spec.replicas.{}.resources.gpu", main_role(job)),
            Some(format!(
                "use at most {largest_node_gpus} per replica, and more replicas"
            )),
        ),
        Some(Blocker::TooLargeForPool { pool_gpus, .. }) => (
            count_path(job, None),
            Some(format!("ask for at most {pool_gpus} GPUs in all")),
        ),
        Some(Blocker::GangTooLarge {
            resource: Some(r),
            most,
            ..
        }) => (
            count_path(job, None),
            Some(format!(
                "ask for at most {} in all",
                resource_amount(r, *most)
            )),
        ),
        Some(Blocker::GangTooLarge {
            resource: None,
            most,
            role: named,
            ..
        }) => (
            count_path(job, Some(role(named.as_ref()))),
            Some(format!("use at most {most} such replicas, or smaller ones")),
        ),
        Some(Blocker::NoSuitableNode {
            misfit: Some(Misfit::Resources(s)),
            taint: None,
            ..
        }) => {
            let role = role(s.role.as_ref());
            match s.resources.iter().find(|r| r.most < r.needed) {
                Some(short) => {
                    let field = match short.resource.as_str() {
                        GPU => "gpu".to_string(),
                        CPU => "cpu".to_string(),
                        MEMORY => "memory".to_string(),
                        ext => format!("extended.{ext}"),
                    };
                    let remedy = if short.most == 0 {
                        None
                    } else {
                        Some(format!(
                            "ask for at most {} per replica",
                            resource_bare(&short.resource, short.most)
                        ))
                    };
                    (format!("spec.replicas.{role}.resources.{field}"), remedy)
                }
                None => (format!("spec.replicas.{role}.resources"), None),
            }
        }
        Some(Blocker::NoMatchingPool {
            gpu_types,
            asks_gpus,
            ..
        }) => {
            let field = if !gpu_types.is_empty() {
                "gpuTypes"
            } else if *asks_gpus {
                "gpu"
            } else {
                ""
            };
            if field.is_empty() {
                ("spec.replicas".to_string(), None)
            } else {
                (
                    format!("spec.replicas.{}.resources.{field}", main_role(job)),
                    None,
                )
            }
        }
        _ => ("spec.replicas".to_string(), None),
    };
    let mut message = format!("this cluster can never run the job: {reason}");
    if let Some(r) = remedy {
        message.push_str("; ");
        message.push_str(&r);
    }
    Refusal { path, message }
}

/// The role a reason that names none is about: the only one with replicas, else the one
/// with the most GPUs per replica (the first of those).
fn main_role(job: &TrainingJob) -> String {
    job.spec
        .replicas
        .iter()
        .filter(|(_, r)| r.count > 0)
        .fold(None, |best: Option<(&str, u32)>, (role, r)| match best {
            Some((_, g)) if g >= r.resources.gpu => best,
            _ => Some((role.as_str(), r.resources.gpu)),
        })
        .map_or_else(String::new, |(r, _)| r.to_string())
}

/// `spec.replicas.<role>.count` for a gang of one role (or the role named), else
/// `spec.replicas`.
fn count_path(job: &TrainingJob, role: Option<String>) -> String {
    let mut roles = job.spec.replicas.iter().filter(|(_, r)| r.count > 0);
    match (role, roles.next(), roles.next()) {
        (Some(r), _, _) if !r.is_empty() => format!("spec.replicas.{r}.count"),
        (_, Some((only, _)), None) => format!("spec.replicas.{}.count", only.as_str()),
        _ => "spec.replicas".to_string(),
    }
}

/// [`SubmitCheck::check`] inside the plane: `request` as the plane built it.
pub(crate) fn check_request(
    scheduler: &crate::sched::Scheduler,
    job: &TrainingJob,
    request: &JobRequest,
) -> Result<(), Refusal> {
    match scheduler.never_fits(request) {
        Some(reason) if refused_for_size(&reason) => {
            let mut defaulted = job.clone();
            defaulted.spec.apply_defaults();
            Err(refusal(&defaulted, &reason))
        }
        _ => Ok(()),
    }
}
