//! Per-policy metrics of a run.

use serde::Serialize;

use crate::cluster::SimCluster;
use crate::engine::SimResult;
use crate::job::SimJob;

/// Summary of one policy's run. Times in seconds.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PolicyMetrics {
    pub policy: String,
    pub jobs: usize,
    pub jobs_completed: usize,
    /// Jobs no GPU type of the cluster can run (left out of every metric).
    pub jobs_unschedulable: usize,
    pub avg_jct_s: f64,
    pub median_jct_s: f64,
    pub p95_jct_s: f64,
    pub p99_jct_s: f64,
    pub max_jct_s: f64,
    /// Time from the first arrival to the last completion.
    pub makespan_s: f64,
    /// Mean time from arrival to first start.
    pub avg_queueing_delay_s: f64,
    /// GPU-seconds allocated to jobs / (GPUs x makespan) (Gavel's utilisation).
    pub utilization: f64,
    /// GPU-seconds of progress kept (no restart time, no lost work) / (GPUs x makespan).
    pub effective_utilization: f64,
    /// Finish-time fairness (Themis): JCT / time on an equal 1/N share of the cluster, N the
    /// mean number of active jobs while the job was active.
    pub rho_mean: f64,
    pub rho_p95: f64,
    pub rho_max: f64,
    /// Running jobs stopped (not counting migrations).
    pub preemptions: u64,
    /// Running jobs moved to other GPUs.
    pub migrations: u64,
    /// Starts after a preemption or migration (each paid the restart cost).
    pub restarts: u64,
    pub rounds: u64,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (p / 100.0 * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

pub fn summarize(jobs: &[SimJob], cluster: &SimCluster, r: &SimResult) -> PolicyMetrics {
    let total = f64::from(cluster.total_gpus());
    let per_type = cluster.gpus_per_type();
    let mut jct = Vec::new();
    let mut rho = Vec::new();
    let mut delay = 0.0;
    let mut first = f64::INFINITY;
    let mut last: f64 = 0.0;
    let (mut pre, mut mig, mut rst) = (0u64, 0u64, 0u64);
    let mut unsched = 0;
    for (j, s) in jobs.iter().zip(&r.states) {
        if s.unschedulable {
            unsched += 1;
            continue;
        }
        first = first.min(j.arrival_s);
        pre += u64::from(s.preemptions);
        mig += u64::from(s.migrations);
        rst += u64::from(s.restarts);
        let Some(f) = s.finished_at else { continue };
        last = last.max(f);
        let c = f - j.arrival_s;
        jct.push(c);
        delay += s.started_at.unwrap_or(f) - j.arrival_s;
        // Throughput of the whole job on a proportional mix of the cluster's types, scaled
        // down when an equal 1/N share has fewer GPUs than the job needs.
        let n = if s.active_rounds > 0 {
            s.contention_sum / f64::from(s.active_rounds)
        } else {
            1.0
        };
        let mix: f64 = cluster
            .types
            .iter()
            .zip(&per_type)
            .map(|(t, &g)| {
                let v = if j.can_run_on(t) {
                    j.throughput.on(t)
                } else {
                    0.0
                };
                v * f64::from(g) / total
            })
            .sum();
        let share = ((total / n.max(1.0)) / f64::from(j.gpus)).min(1.0);
        if mix > 0.0 && j.steps > 0.0 {
            let isolated = j.steps / (mix * share);
            rho.push(c / isolated);
        }
    }
    let done = jct.len();
    let avg = if done > 0 {
        jct.iter().sum::<f64>() / done as f64
    } else {
        0.0
    };
    jct.sort_by(f64::total_cmp);
    rho.sort_by(f64::total_cmp);
    let makespan = if done > 0 { last - first } else { 0.0 };
    let denom = total * makespan;
    PolicyMetrics {
        policy: r.policy.clone(),
        jobs: jobs.len(),
        jobs_completed: done,
        jobs_unschedulable: unsched,
        avg_jct_s: avg,
        median_jct_s: percentile(&jct, 50.0),
        p95_jct_s: percentile(&jct, 95.0),
        p99_jct_s: percentile(&jct, 99.0),
        max_jct_s: jct.last().copied().unwrap_or(0.0),
        makespan_s: makespan,
        avg_queueing_delay_s: if done > 0 { delay / done as f64 } else { 0.0 },
        utilization: if denom > 0.0 {
            r.allocated_gpu_s / denom
        } else {
            0.0
        },
        effective_utilization: if denom > 0.0 {
            r.productive_gpu_s / denom
        } else {
            0.0
        },
        rho_mean: if rho.is_empty() {
            0.0
        } else {
            rho.iter().sum::<f64>() / rho.len() as f64
        },
        rho_p95: percentile(&rho, 95.0),
        rho_max: rho.last().copied().unwrap_or(0.0),
        preemptions: pre,
        migrations: mig,
        restarts: rst,
        rounds: r.rounds,
    }
}
