//! Rules every shell applies the same way: the implicit `default` queue and a job's grace
//! period. They live here so that the same YAML behaves the same embedded, on Kubernetes and
//! in the simulator.

use std::time::Duration;

use corral_api::TrainingJob;

use crate::lifecycle::DEFAULT_GRACE_PERIOD;
use crate::sched::{Node, NodePoolConfig, PoolQuota, QueueConfig, ResourceAmount};

/// The pool a node without a GPU type belongs to when no pools are declared.
pub const CPU_POOL: &str = "cpu";

/// The queues of a cluster: the declared ones, plus an implicit `default` queue with
/// unlimited quota in every pool when none of that name is declared. Jobs that name no
/// queue go to `default` (`TrainingJobSpec::queue_name`), so a cluster that declares no
/// queues admits them; declaring a `default` queue puts it under quota like any other.
pub fn with_default_queue(
    mut queues: Vec<QueueConfig>,
    pools: &[NodePoolConfig],
    nodes: &[Node],
) -> Vec<QueueConfig> {
    if queues.iter().any(|q| q.name == corral_api::DEFAULT_QUEUE) {
        return queues;
    }
    let unlimited = PoolQuota {
        nominal: ResourceAmount::UNLIMITED,
        borrowing_limit: None,
        lending_limit: None,
    };
    // Without declared pools every GPU type is its own pool (see `ClusterSnapshot::pools`).
    let mut names: Vec<String> = if pools.is_empty() {
        nodes
            .iter()
            .map(|n| n.gpu_type.clone().unwrap_or_else(|| CPU_POOL.to_string()))
            .collect()
    } else {
        pools.iter().map(|p| p.name.clone()).collect()
    };
    names.sort();
    names.dedup();
    queues.push(QueueConfig {
        name: corral_api::DEFAULT_QUEUE.to_string(),
        cohort: None,
        weight: 1,
        namespaces: Vec::new(),
        quotas: names.into_iter().map(|p| (p, unlimited)).collect(),
    });
    queues
}

/// How long a job's replicas get between SIGTERM and SIGKILL when they are stopped
/// (preemption, suspend, restart, delete): the longest `terminationGracePeriodSeconds` of
/// its pod templates (Kubeflow manifests carry one), else the cluster's setting, else 30 s.
pub fn grace_period(job: &TrainingJob, cluster_default: Option<Duration>) -> Duration {
    job.spec
        .replicas
        .values()
        .filter_map(|r| r.template.pod_template.as_ref())
        .filter_map(|t| {
            t.get("spec")?
                .get("terminationGracePeriodSeconds")?
                .as_u64()
        })
        .max()
        .map(Duration::from_secs)
        .or(cluster_default)
        .unwrap_or(DEFAULT_GRACE_PERIOD)
}

/// Whether a job has finished for good: it ended (succeeded or failed) and nothing will
/// delete it on a timer (`ttlSecondsAfterFinished`). Such a job, once nothing of it runs,
/// is kept by the control plane by name only ([`Change::Retired`]), and a shell rebuilding
/// the plane hands it over by name ([`ControlPlane::restore_retired`]) without decoding it
/// into the plane, so that a long history costs neither memory nor time.
///
/// [`Change::Retired`]: super::Change::Retired
/// [`ControlPlane::restore_retired`]: super::ControlPlane::restore_retired
pub fn finished_for_good(job: &TrainingJob) -> bool {
    job.spec.run_policy.ttl_seconds_after_finished.is_none()
        && job
            .status
            .as_ref()
            .is_some_and(crate::lifecycle::conditions::is_terminal)
}

/// Whether a shell rebuilding the plane hands a stored job over by name only
/// ([`ControlPlane::restore_retired`]): finished for good, not being deleted, holding no
/// admission and with no replica recorded running. Any other job goes through
/// [`ControlPlane::restore`], and the plane retires it itself once it is settled.
///
/// [`ControlPlane::restore_retired`]: super::ControlPlane::restore_retired
/// [`ControlPlane::restore`]: super::ControlPlane::restore
pub fn restorable_by_name(
    job: &TrainingJob,
    deleting: bool,
    holds_admission: bool,
    replica_running: bool,
) -> bool {
    !deleting && !holds_admission && !replica_running && finished_for_good(job)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_queue_covers_every_gpu_type_and_cpu_nodes() {
        let nodes = vec![
            Node::new("a", Some("H100".into()), 8, 1000, 1),
            Node::new("b", None, 0, 1000, 1),
            Node::new("c", Some("H100".into()), 8, 1000, 1),
        ];
        let queues = with_default_queue(Vec::new(), &[], &nodes);
        assert_eq!(queues.len(), 1);
        let pools: Vec<&str> = queues[0].quotas.keys().map(String::as_str).collect();
        assert_eq!(pools, ["H100", "cpu"]);
    }

    #[test]
    fn a_declared_default_queue_is_kept_as_declared() {
        let declared = QueueConfig {
            name: "default".into(),
            cohort: None,
            weight: 3,
            namespaces: Vec::new(),
            quotas: Default::default(),
        };
        let queues = with_default_queue(vec![declared.clone()], &[], &[]);
        assert_eq!(queues, vec![declared]);
    }
}
