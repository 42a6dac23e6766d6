//! Prometheus metrics of the operator, under the names the embedded cluster uses.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::apply::ApplyReport;
use crate::plan::Plan;

/// Metric names (shared with corral-local/corral-server so dashboards work on both).
pub mod names {
    pub const SCHEDULER_CYCLES: &str = "corral_scheduler_cycles";
    pub const SCHEDULER_CYCLE_SECONDS: &str = "corral_scheduler_cycle_duration_seconds";
    pub const JOBS_ADMITTED: &str = "corral_jobs_admitted";
    pub const JOBS_PREEMPTED: &str = "corral_jobs_preempted";
    pub const JOBS_PENDING: &str = "corral_jobs_pending";
    pub const JOBS_RUNNING: &str = "corral_jobs_running";
    pub const PODS_CREATED: &str = "corral_pods_created";
    pub const PODS_BOUND: &str = "corral_pods_bound";
    pub const PODS_DELETED: &str = "corral_pods_deleted";
    pub const RECONCILE_ERRORS: &str = "corral_reconcile_errors";
    pub const LEADER: &str = "corral_leader";
}

pub struct Metrics {
    pub registry: Registry,
    pub cycles: Counter,
    pub cycle_seconds: Histogram,
    pub admitted: Counter,
    pub preempted: Counter,
    pub pending: Gauge,
    pub running: Gauge,
    pub pods_created: Counter,
    pub pods_bound: Counter,
    pub pods_deleted: Counter,
    pub errors: Counter,
    pub leader: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        use names::*;
        let mut registry = Registry::default();
        let m = Metrics {
            cycles: Counter::default(),
            cycle_seconds: Histogram::new(exponential_buckets(0.0005, 2.0, 16)),
            admitted: Counter::default(),
            preempted: Counter::default(),
            pending: Gauge::default(),
            running: Gauge::default(),
            pods_created: Counter::default(),
            pods_bound: Counter::default(),
            pods_deleted: Counter::default(),
            errors: Counter::default(),
            leader: Gauge::default(),
            registry: Registry::default(),
        };
        registry.register(SCHEDULER_CYCLES, "Scheduling cycles run", m.cycles.clone());
        registry.register(
            SCHEDULER_CYCLE_SECONDS,
            "Time of one plan (scheduler cycle and lifecycle of every job)",
            m.cycle_seconds.clone(),
        );
        registry.register(JOBS_ADMITTED, "Jobs admitted", m.admitted.clone());
        registry.register(JOBS_PREEMPTED, "Jobs preempted", m.preempted.clone());
        registry.register(
            JOBS_PENDING,
            "Jobs waiting for admission",
            m.pending.clone(),
        );
        registry.register(JOBS_RUNNING, "Jobs holding an admission", m.running.clone());
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
        Metrics { registry, ..m }
    }

    pub fn record(&self, plan: &Plan, report: &ApplyReport, seconds: f64) {
        self.cycles.inc();
        self.cycle_seconds.observe(seconds);
        self.admitted.inc_by(plan.counters.admitted);
        self.preempted.inc_by(plan.counters.preempted);
        self.pending
            .set(i64::try_from(plan.pending).unwrap_or(i64::MAX));
        self.running
            .set(i64::try_from(plan.running).unwrap_or(i64::MAX));
        self.pods_created.inc_by(report.pods_created);
        self.pods_bound.inc_by(report.pods_bound);
        self.pods_deleted.inc_by(report.pods_deleted);
        self.errors.inc_by(report.errors.len() as u64);
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
