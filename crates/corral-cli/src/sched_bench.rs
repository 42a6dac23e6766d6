//! `corral bench scheduler`: generates the synthetic workload of
//! `corral_core::sched::workload`, runs one full scheduling pass, then measures how long
//! the scheduler takes to decide single new jobs against a cluster with 10,000 pending.

use std::time::Instant;

use corral_core::sched::workload::{self, Rng, WorkloadSpec};
use corral_core::sched::{Decision, Scheduler, SchedulerConfig};
use serde_json::{Value, json};

/// Pending jobs kept for the new-job latency measurement.
const PENDING_FOR_LATENCY: usize = 10_000;
/// New jobs whose decision time makes the latency percentiles.
const ARRIVALS: usize = 1_000;

/// Runs the scheduler benchmark and returns its report as JSON.
pub fn scheduler_bench(nodes: usize, jobs: usize, gpu_types: usize, seed: u64) -> Value {
    let spec = WorkloadSpec::new(nodes, jobs, gpu_types, seed);
    let generate_start = Instant::now();
    let w = workload::generate(&spec);
    let generate_s = generate_start.elapsed().as_secs_f64();

    let mut scheduler = match Scheduler::new(&w.snapshot, SchedulerConfig::default()) {
        Ok(s) => s,
        Err(e) => return json!({ "error": e.to_string() }),
    };
    let submit_start = Instant::now();
    for j in w.jobs {
        if let Err(e) = scheduler.submit(j) {
            return json!({ "error": e.to_string() });
        }
    }
    let submit_s = submit_start.elapsed().as_secs_f64();

    let pass_start = Instant::now();
    let outcome = scheduler.cycle(0);
    let pass_s = pass_start.elapsed().as_secs_f64().max(1e-9);
    let c = outcome.counters;
    let placed_gpus: u64 = outcome
        .admitted
        .iter()
        .flat_map(|a| &a.placements)
        .map(|p| p.gpu_indices.len() as u64)
        .sum();
    drop(outcome);

    // New-job latency: keep PENDING_FOR_LATENCY pending jobs, free 5% of the running jobs
    // so that arrivals can also be admitted, then decide ARRIVALS new jobs one by one.
    let pending: Vec<String> = scheduler
        .pending_jobs()
        .into_iter()
        .map(str::to_string)
        .collect();
    for key in pending.iter().skip(PENDING_FOR_LATENCY) {
        scheduler.finish(key);
    }
    let running: Vec<String> = scheduler
        .running_jobs()
        .into_iter()
        .map(|r| r.request.key)
        .collect();
    for key in running.iter().step_by(20) {
        scheduler.finish(key);
    }
    let mut rng = Rng::new(seed.wrapping_add(1));
    let mut latencies_us: Vec<f64> = Vec::with_capacity(ARRIVALS);
    let mut arrivals_admitted = 0u64;
    for i in 0..ARRIVALS {
        let mut job = workload::job(&mut rng, jobs + i, &spec);
        job.key = format!("arrival-{i}");
        let start = Instant::now();
        let decision = scheduler.try_admit(job, 1);
        latencies_us.push(start.elapsed().as_secs_f64() * 1e6);
        if let Ok(Decision::Admitted { .. }) = decision {
            arrivals_admitted += 1;
        }
    }
    latencies_us.sort_by(f64::total_cmp);
    let pct = |p: f64| {
        let i = ((latencies_us.len() as f64 * p).ceil() as usize).saturating_sub(1);
        latencies_us.get(i).copied().unwrap_or(0.0)
    };

    json!({
        "nodes": nodes,
        "jobs": jobs,
        "gpu_types": gpu_types,
        "seed": seed,
        "pods_per_second": (c.pods_placed as f64 / pass_s).round(),
        "jobs_per_second": (c.attempts as f64 / pass_s).round(),
        "new_job_p50_ms": pct(0.50) / 1000.0,
        "new_job_p99_ms": pct(0.99) / 1000.0,
        "new_job_max_ms": pct(1.0) / 1000.0,
        "peak_rss_mb": peak_rss_mb(),
        "full_pass": {
            "seconds": pass_s,
            "attempts": c.attempts,
            "admitted": c.admitted,
            "pending": c.pending,
            "pods_placed": c.pods_placed,
            "gpus_placed": placed_gpus,
            "gpus_total": nodes as u64 * 8,
            "preemption_searches": c.preemption_searches,
            "reservations": c.reservations,
        },
        "setup_seconds": { "generate": generate_s, "submit": submit_s },
        "new_jobs": {
            "arrivals": ARRIVALS,
            "pending_at_start": pending.len().min(PENDING_FOR_LATENCY),
            "admitted": arrivals_admitted,
        },
    })
}

/// Peak resident memory of this process (VmHWM), in MiB; 0 where /proc is missing.
fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| (kb / 1024.0 * 10.0).round() / 10.0)
}
