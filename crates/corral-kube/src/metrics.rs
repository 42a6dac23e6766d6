//! Prometheus metrics of the operator. The job- and queue-level series have the names,
//! labels and meaning of the embedded cluster's (`corral_api::metric_names`); the rest are
//! the operator's own.

use corral_api::metric_names as shared;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::apply::ApplyReport;
use crate::plan::Plan;

type Labels = Vec<(String, String)>;

/// Metric names, relative to the `corral` prefix. Counters get `_total` from the encoder.
pub mod names {
    pub use corral_api::metric_names::{ADMISSIONS, JOBS, PREEMPTIONS, PREFIX, QUEUE_GPUS_IN_USE};
    // The operator's own.
    pub const SCHEDULER_CYCLES: &str = "scheduler_cycles";
    pub const SCHEDULER_CYCLE_SECONDS: &str = "scheduler_cycle_duration_seconds";
    pub const PODS_CREATED: &str = "pods_created";
    pub const PODS_BOUND: &str = "pods_bound";
    pub const PODS_DELETED: &str = "pods_deleted";
    pub const RECONCILE_ERRORS: &str = "reconcile_errors";
    pub const LEADER: &str = "leader";
    pub const PLANE_REBUILDS: &str = "plane_rebuilds";
    pub const PLAN_SECONDS: &str = "plan_duration_seconds";
    pub const PASS_SLICE: &str = "pass_slice_replicas";
    pub const DEFERRED: &str = "scheduler_deferred_jobs";
}

pub struct Metrics {
    pub registry: Registry,
    pub cycles: Counter,
    pub cycle_seconds: Histogram,
    /// The plan of a pass alone (the control plane fed or rebuilt, and stepped), without
    /// its writes.
    pub plan_seconds: Histogram,
    pub admitted: Counter,
    pub preempted: Counter,
    /// `corral_jobs{queue,state}`.
    pub jobs: Family<Labels, Gauge>,
    /// `corral_queue_gpus_in_use{queue}`.
    pub queue_gpus: Family<Labels, Gauge>,
    pub pods_created: Counter,
    pub pods_bound: Counter,
    pub pods_deleted: Counter,
    pub errors: Counter,
    pub leader: Gauge,
    /// `corral_plane_rebuilds_total{reason}`: passes that rebuilt the control plane from
    /// the API server instead of feeding the kept one what changed.
    pub rebuilds: Family<Labels, Counter>,
    /// Replicas the last pass could admit at most (`--pass-budget-ms`; absent: no budget).
    pub slice: Gauge,
    /// Pending jobs the last pass did not reach because its slice was spent.
    pub deferred: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl Metrics {
    pub fn new() -> Self {
        use names::*;
        let mut registry = Registry::with_prefix(PREFIX);
        let m = Metrics {
            cycles: Counter::default(),
            // 0.5 ms .. 262 s: passes under load were seen lasting up to ~190 s.
            cycle_seconds: Histogram::new(exponential_buckets(0.0005, 2.0, 20)),
            plan_seconds: Histogram::new(exponential_buckets(0.0001, 2.0, 20)),
            admitted: Counter::default(),
            preempted: Counter::default(),
            jobs: Family::default(),
            queue_gpus: Family::default(),
            pods_created: Counter::default(),
            pods_bound: Counter::default(),
            pods_deleted: Counter::default(),
            errors: Counter::default(),
            leader: Gauge::default(),
            rebuilds: Family::default(),
            slice: Gauge::default(),
            deferred: Gauge::default(),
            registry: Registry::default(),
        };
        registry.register(SCHEDULER_CYCLES, "Scheduling cycles run", m.cycles.clone());
        registry.register(
            SCHEDULER_CYCLE_SECONDS,
            "Time of one plan (scheduler cycle and lifecycle of every job)",
            m.cycle_seconds.clone(),
        );
        registry.register(
            PLAN_SECONDS,
            "Time of the plan of one pass (the control plane fed or rebuilt, and stepped), \
             without its writes",
            m.plan_seconds.clone(),
        );
        registry.register(JOBS, "TrainingJobs by queue and state", m.jobs.clone());
        registry.register(
            QUEUE_GPUS_IN_USE,
            "GPUs held by the admitted jobs of a queue",
            m.queue_gpus.clone(),
        );
        registry.register(
            ADMISSIONS,
            "Jobs admitted by the scheduler",
            m.admitted.clone(),
        );
        registry.register(
            PREEMPTIONS,
            "Jobs preempted back to their queue",
            m.preempted.clone(),
        );
        registry.register(PODS_CREATED, "Replica pods created", m.pods_created.clone());
        registry.register(
            PODS_BOUND,
            "Replica pods bound to nodes",
            m.pods_bound.clone(),
        );
        registry.register(PODS_DELETED, "Replica pods deleted", m.pods_deleted.clone());
        registry.register(
            RECONCILE_ERRORS,
            "API calls that failed during apply",
            m.errors.clone(),
        );
        registry.register(
            LEADER,
            "1 while this replica holds the leader lease",
            m.leader.clone(),
        );
        registry.register(
            PLANE_REBUILDS,
            "Passes that rebuilt the control plane from the API server, by why (start, \
             each_pass, unapplied, cluster, job, vanished); the others fed the kept plane \
             what changed",
            m.rebuilds.clone(),
        );
        registry.register(
            PASS_SLICE,
            "Replicas a pass may admit at most, sized so that its writes end within \
             --pass-budget-ms (0: no budget)",
            m.slice.clone(),
        );
        registry.register(
            DEFERRED,
            "Pending jobs the last pass did not reach because its slice was spent; the next \
             pass takes them up",
            m.deferred.clone(),
        );
        Metrics { registry, ..m }
    }

    pub fn record(&self, plan: &Plan, report: &ApplyReport, seconds: f64) {
        self.cycles.inc();
        self.cycle_seconds.observe(seconds);
        self.plan_seconds.observe(plan.plan_seconds);
        self.admitted.inc_by(plan.counters.admitted);
        self.preempted.inc_by(plan.counters.preempted);
        // Every state of every queue seen so far: a queue whose jobs are gone reads 0.
        self.jobs.clear();
        self.queue_gpus.clear();
        let mut queues: Vec<&String> = plan
            .jobs_by_state
            .keys()
            .chain(plan.queue_gpus_in_use.keys())
            .collect();
        queues.sort();
        queues.dedup();
        for queue in queues {
            let counts = plan.jobs_by_state.get(queue);
            for state in shared::JOB_STATES {
                let n = counts.and_then(|c| c.get(state)).copied().unwrap_or(0);
                self.jobs
                    .get_or_create(&vec![
                        (shared::LABEL_QUEUE.to_string(), queue.clone()),
                        (shared::LABEL_STATE.to_string(), state.to_string()),
                    ])
                    .set(int(n));
            }
            let used = plan.queue_gpus_in_use.get(queue).copied().unwrap_or(0);
            self.queue_gpus
                .get_or_create(&vec![(shared::LABEL_QUEUE.to_string(), queue.clone())])
                .set(int(used));
        }
        self.pods_created.inc_by(report.pods_created);
        self.pods_bound.inc_by(report.pods_bound);
        self.pods_deleted.inc_by(report.pods_deleted);
        self.errors.inc_by(report.errors.len() as u64);
        self.slice.set(plan.slice.map_or(0, |n| int(u64::from(n))));
        self.deferred.set(int(plan.counters.deferred));
        if let Some(why) = plan.rebuilt {
            self.rebuilds
                .get_or_create(&vec![("reason".to_string(), why.as_str().to_string())])
                .inc();
        }
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn job_and_queue_series_use_the_embedded_clusters_names() {
        let m = Metrics::new();
        let mut plan = Plan::default();
        plan.counters.admitted = 2;
        plan.counters.preempted = 1;
        plan.jobs_by_state.insert(
            "team-a".into(),
            BTreeMap::from([("Running", 2), ("Queued", 1)]),
        );
        plan.queue_gpus_in_use.insert("team-a".into(), 4);
        m.record(&plan, &ApplyReport::default(), 0.01);
        let text = m.encode();
        for needle in [
            "corral_jobs{queue=\"team-a\",state=\"Running\"} 2",
            "corral_jobs{queue=\"team-a\",state=\"Queued\"} 1",
            "corral_jobs{queue=\"team-a\",state=\"Failed\"} 0",
            "corral_queue_gpus_in_use{queue=\"team-a\"} 4",
            "corral_admissions_total 2",
            "corral_preemptions_total 1",
            "corral_scheduler_cycles_total 1",
            "corral_leader 0",
        ] {
            assert!(text.contains(needle), "no {needle} in\n{text}");
        }
        for gone in [
            "corral_jobs_pending",
            "corral_jobs_running",
            "corral_jobs_admitted",
        ] {
            assert!(!text.contains(gone), "{gone} still in\n{text}");
        }
    }
}
