//! Rules every shell applies the same way: the implicit `default` queue and a job's grace
//! period. They live here so that the same YAML behaves the same embedded, on Kubernetes and
//! in the simulator.

use std::collections::BTreeMap;
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

/// A job's speed on each of the cluster's GPU `types`, once it measured its own
/// (`measured`: samples/s per GPU by the type it ran on): measured where it ran, and
/// elsewhere its measurement on one type scaled by what the job's hints (`hints`, or
/// without them the static `table`, 1 for a type it does not list) say of the two types,
/// Gavel's way of filling its throughput matrix until a type is measured. So a job that
/// gains nothing from the fastest cards, once seen there, stops taking them from jobs that
/// do.
pub fn measured_speeds(
    hints: &BTreeMap<String, f64>,
    measured: &BTreeMap<String, f64>,
    table: &BTreeMap<String, f64>,
    types: &[&str],
) -> BTreeMap<String, f64> {
    let find = |m: &BTreeMap<String, f64>, t: &str| {
        m.get(t).copied().or_else(|| {
            m.iter()
                .find(|(k, _)| corral_api::gpu_type::selects(k, t, types.iter().copied()))
                .map(|(_, v)| *v)
        })
    };
    // As the scheduler ranks types without a measurement (`sched::cycle`).
    let base = |t: &str| {
        if hints.is_empty() {
            find(table, t).unwrap_or(1.0)
        } else {
            find(hints, t).unwrap_or(0.0)
        }
    };
    let usable = |v: f64| v.is_finite() && v > 0.0;
    let reference = types.iter().find_map(|t| {
        let m = find(measured, t).filter(|v| usable(*v))?;
        let b = base(t);
        usable(b).then_some((m, b))
    });
    let mut out = hints.clone();
    for t in types {
        let speed = match (find(measured, t).filter(|v| usable(*v)), reference) {
            (Some(m), _) => m,
            (None, Some((m, b))) => m * base(t) / b,
            (None, None) => continue,
        };
        out.insert((*t).to_string(), speed);
    }
    out
}

#[cfg(test)]
mod measured_speeds_tests {
    use super::*;

    fn map(v: &[(&str, f64)]) -> BTreeMap<String, f64> {
        v.iter().map(|(k, s)| (k.to_string(), *s)).collect()
    }

    #[test]
    fn measured_types_keep_their_speed_and_others_scale_from_one() {
        let table = map(&[("H100", 3.0), ("A100", 1.0)]);
        let types = ["A100", "H100", "L4"];
        // Measured on the A100 only: the table's ratios, in the job's own units; a type
        // the table does not list counts 1, as the scheduler counts it.
        let s = measured_speeds(&BTreeMap::new(), &map(&[("A100", 100.0)]), &table, &types);
        assert_eq!(s, map(&[("A100", 100.0), ("H100", 300.0), ("L4", 100.0)]));
        // Measured on both: the measurements, whatever the table says.
        let s = measured_speeds(
            &BTreeMap::new(),
            &map(&[("A100", 100.0), ("H100", 90.0)]),
            &table,
            &types,
        );
        assert_eq!(s["A100"], 100.0);
        assert_eq!(s["H100"], 90.0);
        // The job's own hints, where it has them, scale in place of the table; a type
        // they do not list stays unranked (0), as without a measurement.
        let hints = map(&[("A100", 2.0), ("H100", 4.0)]);
        let s = measured_speeds(&hints, &map(&[("H100", 80.0)]), &table, &types);
        assert_eq!(s["A100"], 40.0);
        assert_eq!(s["H100"], 80.0);
        assert_eq!(s["L4"], 0.0);
        // Nothing usable measured: the hints as they were.
        let s = measured_speeds(&hints, &map(&[("H100", f64::NAN)]), &table, &types);
        assert_eq!(s, hints);
    }
}
