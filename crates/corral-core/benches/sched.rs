//! Scheduler benches: a full pass over a large backlog, and single new jobs.
//! `cargo bench -p corral-core --bench sched` (CORRAL_BENCH_NODES / CORRAL_BENCH_JOBS
//! scale it; the target is 10,000 nodes and 100,000 jobs).

use std::hint::black_box;

use corral_core::sched::workload::{self, Rng, WorkloadSpec};
use corral_core::sched::{Scheduler, SchedulerConfig};
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn full_pass(c: &mut Criterion) {
    let nodes = env_or("CORRAL_BENCH_NODES", 10_000);
    let jobs = env_or("CORRAL_BENCH_JOBS", 100_000);
    let spec = WorkloadSpec::new(nodes, jobs, 4, 42);
    let w = workload::generate(&spec);
    let mut group = c.benchmark_group("scheduler");
    group.sample_size(10);
    group.bench_function(format!("full_pass_{nodes}n_{jobs}j"), |b| {
        b.iter_batched(
            || {
                let mut s = Scheduler::new(&w.snapshot, SchedulerConfig::default())
                    .expect("synthetic cluster is valid");
                for j in &w.jobs {
                    s.submit(j.clone()).expect("unique keys");
                }
                s
            },
            |mut s| black_box(s.cycle(0)),
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

fn new_job(c: &mut Criterion) {
    let nodes = env_or("CORRAL_BENCH_NODES", 10_000);
    let spec = WorkloadSpec::new(nodes, 30_000, 4, 7);
    let w = workload::generate(&spec);
    let mut s = Scheduler::new(&w.snapshot, SchedulerConfig::default())
        .expect("synthetic cluster is valid");
    for j in w.jobs {
        s.submit(j).expect("unique keys");
    }
    s.cycle(0);
    let mut rng = Rng::new(99);
    let mut i = 0usize;
    c.bench_function("scheduler/new_job_decision", |b| {
        b.iter(|| {
            i += 1;
            let mut j = workload::job(&mut rng, i, &spec);
            j.key = format!("arrival-{i}");
            let key = j.key.clone();
            let d = s.try_admit(j, 1).expect("unique key");
            // Keep the cluster's state steady between iterations.
            s.finish(&key);
            black_box(d)
        })
    });
}

criterion_group!(benches, full_pass, new_job);
criterion_main!(benches);
