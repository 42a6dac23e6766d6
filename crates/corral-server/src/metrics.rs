//! `/metrics`: the cluster's gauges and counters and each running replica's CPU, memory and
//! GPUs, in the OpenMetrics text format (prometheus-client). Names carry the `corral_`
//! prefix, base units (`_seconds`, `_bytes`) and `_total` on counters.

use std::sync::atomic::AtomicU64;

use corral_api::metric_names as names;
use corral_local::cluster::{JobState, MetricsSnapshot, ReplicaUsageRow};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

type Labels = Vec<(String, String)>;

const STATES: [JobState; 9] = [
    JobState::Queued,
    JobState::Admitted,
    JobState::Running,
    JobState::Restarting,
    JobState::Preempting,
    JobState::Suspended,
    JobState::Succeeded,
    JobState::Failed,
    JobState::Deleting,
];

fn gauge(registry: &mut Registry, name: &str, help: &str, value: i64) {
    let g: Gauge = Gauge::default();
    g.set(value);
    registry.register(name, help, g);
}

fn gauge_f64(registry: &mut Registry, name: &str, help: &str, unit: Unit, value: f64) {
    let g: Gauge<f64, AtomicU64> = Gauge::default();
    g.set(value);
    registry.register_with_unit(name, help, unit, g);
}

fn counter(registry: &mut Registry, name: &str, help: &str, value: u64) {
    let c: Counter = Counter::default();
    c.inc_by(value);
    registry.register(name, help, c);
}

fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The text of `/metrics`.
pub fn render(
    m: &MetricsSnapshot,
    replicas: &[ReplicaUsageRow],
) -> Result<String, std::fmt::Error> {
    let mut registry = Registry::with_prefix(names::PREFIX);

    let jobs = Family::<Labels, Gauge>::default();
    let mut queues: Vec<&String> = m.jobs.keys().chain(m.queue_gpus_used.keys()).collect();
    queues.sort();
    queues.dedup();
    for queue in &queues {
        let counts = m.jobs.get(*queue);
        for state in STATES {
            let n = counts
                .and_then(|c| c.get(state.as_str()))
                .copied()
                .unwrap_or(0);
            jobs.get_or_create(&vec![
                (names::LABEL_QUEUE.to_string(), queue.to_string()),
                (names::LABEL_STATE.to_string(), state.as_str().to_string()),
            ])
            .set(int(n));
        }
    }
    registry.register(names::JOBS, "TrainingJobs by queue and state", jobs);

    let queue_gpus = Family::<Labels, Gauge>::default();
    for queue in &queues {
        let used = m.queue_gpus_used.get(*queue).copied().unwrap_or(0);
        queue_gpus
            .get_or_create(&vec![(names::LABEL_QUEUE.to_string(), queue.to_string())])
            .set(int(used));
    }
    registry.register(
        names::QUEUE_GPUS_IN_USE,
        "GPUs held by the admitted jobs of a queue",
        queue_gpus,
    );

    gauge(
        &mut registry,
        "gpus",
        "GPUs the cluster offers",
        int(m.gpus_total),
    );
    gauge(
        &mut registry,
        "gpus_allocated",
        "GPUs held by admitted jobs",
        int(m.gpus_allocated),
    );
    gauge(
        &mut registry,
        "replicas_running",
        "Replica processes running",
        int(m.running_replicas),
    );
    counter(
        &mut registry,
        "jobs_submitted",
        "TrainingJobs accepted since the server started",
        m.jobs_submitted_total,
    );
    counter(
        &mut registry,
        names::ADMISSIONS,
        "Jobs admitted by the scheduler",
        m.admissions_total,
    );
    counter(
        &mut registry,
        names::PREEMPTIONS,
        "Jobs preempted back to their queue",
        m.preemptions_total,
    );
    counter(
        &mut registry,
        "replica_starts",
        "Replica processes started",
        m.replica_starts_total,
    );
    counter(
        &mut registry,
        "job_restarts",
        "Job restarts after a failure (what backoffLimit counts)",
        m.restarts_total,
    );
    counter(
        &mut registry,
        "jobs_succeeded",
        "Jobs that reached Succeeded",
        m.jobs_succeeded_total,
    );
    counter(
        &mut registry,
        "jobs_failed",
        "Jobs that reached Failed",
        m.jobs_failed_total,
    );
    counter(
        &mut registry,
        "control_loop_ticks",
        "Passes of the control loop",
        m.ticks_total,
    );
    gauge_f64(
        &mut registry,
        "scheduling_cycle_last",
        "Duration of the last scheduling cycle",
        Unit::Seconds,
        m.last_cycle_seconds,
    );
    gauge_f64(
        &mut registry,
        "control_loop_tick_last",
        "Duration of the last control-loop pass",
        Unit::Seconds,
        m.last_tick_seconds,
    );

    let cpu = Family::<Labels, Counter<f64, AtomicU64>>::default();
    let memory = Family::<Labels, Gauge>::default();
    let gpus = Family::<Labels, Gauge>::default();
    for r in replicas {
        let labels = vec![
            ("namespace".to_string(), r.namespace.clone()),
            ("job".to_string(), r.job.clone()),
            ("replica".to_string(), r.replica.clone()),
        ];
        if let Some(s) = r.cpu_seconds {
            cpu.get_or_create(&labels).inc_by(s.max(0.0));
        }
        if let Some(b) = r.memory_bytes {
            memory.get_or_create(&labels).set(int(b));
        }
        gpus.get_or_create(&labels)
            .set(i64::try_from(r.gpus.len()).unwrap_or(i64::MAX));
    }
    registry.register_with_unit(
        "replica_cpu",
        "CPU time used by a running replica",
        Unit::Seconds,
        cpu,
    );
    registry.register_with_unit(
        "replica_memory",
        "Resident memory of a running replica",
        Unit::Bytes,
        memory,
    );
    registry.register("replica_gpus", "GPUs pinned to a running replica", gpus);

    let mut text = String::new();
    encode(&mut text, &registry)?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_states_are_the_shared_label_values() {
        let ours: Vec<&str> = STATES.iter().map(|s| s.as_str()).collect();
        assert_eq!(ours, names::JOB_STATES);
    }

    #[test]
    fn renders_cluster_and_replica_metrics() {
        let mut m = MetricsSnapshot::default();
        m.jobs
            .entry("team-a".into())
            .or_default()
            .insert("Running".into(), 2);
        m.gpus_total = 8;
        m.jobs_submitted_total = 3;
        let rows = vec![ReplicaUsageRow {
            namespace: "ns".into(),
            job: "j".into(),
            replica: "j-worker-0".into(),
            pid: Some(1),
            cpu_seconds: Some(1.5),
            memory_bytes: Some(1024),
            gpus: vec![0, 1],
        }];
        let text = render(&m, &rows).expect("encodes");
        for needle in [
            "corral_jobs{queue=\"team-a\",state=\"Running\"} 2",
            "corral_jobs{queue=\"team-a\",state=\"Failed\"} 0",
            "corral_queue_gpus_in_use{queue=\"team-a\"} 0",
            "corral_gpus 8",
            "corral_jobs_submitted_total 3",
            "corral_replica_cpu_seconds_total{namespace=\"ns\",job=\"j\",replica=\"j-worker-0\"} 1.5",
            "corral_replica_memory_bytes{namespace=\"ns\",job=\"j\",replica=\"j-worker-0\"} 1024",
            "corral_replica_gpus{namespace=\"ns\",job=\"j\",replica=\"j-worker-0\"} 2",
            "# EOF",
        ] {
            assert!(text.contains(needle), "no {needle} in\n{text}");
        }
    }
}
