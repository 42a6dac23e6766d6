//! The counting rule of the usage ledger (`control::accounting`), through the whole plane:
//! under arrivals, preemptions, suspends, resumes, finishes and deletes, a job's charged
//! intervals never overlap, their GPU-seconds are its GPUs times the time it held an
//! admission (as the step changes say, independently summed here), and the cluster's GPUs
//! are never charged twice at one instant. A queue over budget admits no new job and says
//! so; it admits again when its period renews.

use std::collections::BTreeMap;

use corral_api::queue::{BudgetPeriod, QueueBudget};
use corral_core::control::accounting::UsageInterval;
use corral_core::control::{Change, ControlPlane};
use corral_core::lifecycle::{JobState, ReplicaPhase};
use plane_world::shell::FakeShell;
use plane_world::{cluster, config, job, record};
use proptest::prelude::*;

mod plane_world;

const GPUS: u32 = 4;

#[derive(Clone, Debug)]
enum Op {
    Submit { workers: u32, gpus: u32, high: bool },
    Pass(i64),
    Suspend(usize),
    Resume(usize),
    Delete(usize),
    Finish(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1u32..=2, 1u32..=2, any::<bool>())
            .prop_map(|(workers, gpus, high)| Op::Submit { workers, gpus, high }),
        4 => (1i64..=400).prop_map(Op::Pass),
        1 => (0usize..8).prop_map(Op::Suspend),
        1 => (0usize..8).prop_map(Op::Resume),
        1 => (0usize..8).prop_map(Op::Delete),
        2 => (0usize..8).prop_map(Op::Finish),
    ]
}

/// Runs the ops; returns the shell, the time (s) of each step of its log, and every
/// interval: closed by the steps, and open at the end.
fn play(ops: &[Op], slow: bool) -> (FakeShell, Vec<i64>, Vec<UsageInterval>) {
    let plane = ControlPlane::new(cluster(GPUS), config()).expect("plane");
    let mut shell = FakeShell::new(plane);
    shell.room_of = Some(GPUS);
    let mut times: Vec<i64> = Vec::new();
    let mut names: Vec<String> = Vec::new();
    let run = |shell: &mut FakeShell, times: &mut Vec<i64>, s: i64| {
        shell.run(s);
        times.resize(shell.log.len(), shell.now);
    };
    for o in ops {
        let key = |i: &usize| names.get(i % names.len().max(1)).cloned();
        match o {
            Op::Submit {
                workers,
                gpus,
                high,
            } => {
                let name = format!("j{}", names.len());
                let class = if *high { "high" } else { "low" };
                let submitted = u64::try_from(shell.now).unwrap_or(0);
                if shell
                    .plane
                    .submit(record(job(&name, *workers, *gpus, Some(class)), submitted))
                    .is_ok()
                {
                    if slow {
                        shell.slow_to_stop.insert(format!("team/{name}"));
                    }
                    names.push(format!("team/{name}"));
                }
            }
            Op::Pass(s) => run(&mut shell, &mut times, *s),
            Op::Suspend(i) | Op::Resume(i) => {
                if let Some(k) = key(i) {
                    let _ = shell.plane.set_suspend(&k, matches!(o, Op::Suspend(_)));
                }
            }
            Op::Delete(i) => {
                if let Some(k) = key(i) {
                    let _ = shell.plane.delete(&k);
                }
            }
            Op::Finish(i) => {
                if let Some(k) = key(i) {
                    for (id, inc) in shell.running_replicas(&k) {
                        shell.end(&k, id, inc, ReplicaPhase::Succeeded);
                    }
                }
            }
        }
        run(&mut shell, &mut times, 1);
    }
    let mut intervals: Vec<UsageInterval> =
        shell.log.iter().flat_map(|s| s.usage.clone()).collect();
    // Open charges as of now (one admitted this very second is still empty).
    intervals.extend(
        shell
            .plane
            .open_usage(shell.ts())
            .into_iter()
            .filter(|i| i.start < i.end),
    );
    (shell, times, intervals)
}

/// GPU-milliseconds each job held an admission, from the steps' admission changes alone.
fn held_from_changes(shell: &FakeShell, times: &[i64]) -> BTreeMap<String, u64> {
    let mut open: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut held: BTreeMap<String, u64> = BTreeMap::new();
    for (step, &t) in shell.log.iter().zip(times) {
        let t = u64::try_from(t).expect("positive") * 1000;
        for c in &step.changes {
            if let Change::Admission { job, admission } = c {
                if let Some((since, gpus)) = open.remove(job) {
                    *held.entry(job.clone()).or_default() += gpus * (t - since);
                }
                if let Some(a) = admission {
                    let gpus = a
                        .admission
                        .placements
                        .iter()
                        .map(|p| p.gpu_indices.len() as u64)
                        .sum();
                    open.insert(job.clone(), (a.admitted_at, gpus));
                }
            }
        }
    }
    let now = u64::try_from(shell.now).expect("positive") * 1000;
    for (job, (since, gpus)) in open {
        *held.entry(job).or_default() += gpus * (now - since);
    }
    held.retain(|_, v| *v > 0);
    held
}

fn check(ops: &[Op], slow: bool) -> Result<(), TestCaseError> {
    let (shell, times, intervals) = play(ops, slow);
    // A job's intervals never overlap.
    let mut by_job: BTreeMap<&str, Vec<&UsageInterval>> = BTreeMap::new();
    for i in &intervals {
        prop_assert!(i.start < i.end, "an empty interval was recorded: {i:?}");
        by_job.entry(&i.job).or_default().push(i);
    }
    for list in by_job.values_mut() {
        list.sort_by_key(|i| i.start);
        for w in list.windows(2) {
            prop_assert!(w[0].end <= w[1].start, "overlap: {:?} {:?}", w[0], w[1]);
        }
    }
    // Their sum is the time the job held its admissions, times its GPUs.
    let charged: BTreeMap<String, u64> = by_job
        .iter()
        .map(|(j, l)| {
            let ms: u64 = l
                .iter()
                .map(|i| u64::from(i.gpus) * (i.end - i.start))
                .sum();
            (j.to_string(), ms)
        })
        .filter(|(_, ms)| *ms > 0)
        .collect();
    prop_assert_eq!(&charged, &held_from_changes(&shell, &times));
    // No instant has more GPUs charged than the cluster has.
    let mut edges: Vec<(u64, i64)> = Vec::new();
    for i in &intervals {
        edges.push((i.start, i64::from(i.gpus)));
        edges.push((i.end, -i64::from(i.gpus)));
    }
    edges.sort_by_key(|&(t, d)| (t, d));
    let mut level = 0i64;
    for (_, d) in edges {
        level += d;
        prop_assert!(level <= i64::from(GPUS), "{level} GPUs charged at once");
    }
    // CPU is charged with the GPUs: one core per replica in these jobs.
    for i in &intervals {
        prop_assert!(i.cpu_milli >= 1000 && i.gpu_type == "H100", "{i:?}");
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn intervals_never_overlap_and_sum_to_the_time_held(
        ops in proptest::collection::vec(op(), 1..40),
        slow in any::<bool>(),
    ) {
        check(&ops, slow)?;
    }
}

#[test]
fn a_finished_job_is_charged_from_admission_until_its_replicas_stopped() {
    let ops = [
        Op::Submit {
            workers: 2,
            gpus: 1,
            high: false,
        },
        Op::Pass(100),
        Op::Finish(0),
        Op::Pass(50),
    ];
    let (shell, _, intervals) = play(&ops, false);
    assert_eq!(shell.state("team/j0"), JobState::Succeeded);
    assert_eq!(intervals.len(), 1, "{intervals:?}");
    // Admitted 1 s after the submit; 100 s and a second pass later its replicas end, and
    // the next pass (1 s on) releases it: 102 s held.
    assert_eq!(intervals[0].gpu_seconds(), 2.0 * 102.0);
    assert_eq!(intervals[0].cpu_seconds(), 2.0 * 102.0);
    assert!(shell.plane.open_usage(shell.ts()).is_empty());
}

#[test]
fn a_queue_over_budget_admits_no_new_job_until_its_period_renews() {
    let mut config = config();
    config.budgets.insert(
        corral_api::DEFAULT_QUEUE.to_string(),
        QueueBudget {
            gpu_hours: corral_api::quantity::Quantity::from_units(1),
            period: BudgetPeriod::Day,
        },
    );
    let plane = ControlPlane::new(cluster(GPUS), config).expect("plane");
    let mut shell = FakeShell::new(plane);
    // Start at midnight UTC, day 20,000.
    shell.now = 20_000 * 86_400;
    shell
        .plane
        .submit(record(job("first", 1, 2, None), 1))
        .expect("submit");
    shell.run(1);
    assert_eq!(shell.state("team/first"), JobState::Running);
    // Two GPUs for half an hour: the day's GPU-hour is spent; the running job runs on.
    shell.run(1800);
    shell
        .plane
        .submit(record(job("second", 1, 1, None), 2))
        .expect("submit");
    shell.run(1);
    assert_eq!(shell.state("team/first"), JobState::Running);
    assert_eq!(shell.state("team/second"), JobState::Queued);
    let reason = shell.plane.pending_reason("team/second").expect("reason");
    assert!(
        reason.contains("queue default is over its budget")
            && reason.contains("of its 1 GPU-hours this day")
            && reason.contains("until 2024-10-05T00:00:00Z"),
        "{reason}"
    );
    let standing = &shell.plane.budget_standings(shell.ts())["default"];
    assert!(standing.exhausted());
    // The plane asks to be woken when the period renews.
    let wake = shell.log.last().and_then(|s| s.wake_in);
    assert!(wake.is_some());
    // A new day: the budget renews and the job is admitted (room permitting).
    for (id, inc) in shell.running_replicas("team/first") {
        shell.end("team/first", id, inc, ReplicaPhase::Succeeded);
    }
    shell.run(86_400 - 1802);
    shell.run(1);
    assert_eq!(shell.state("team/second"), JobState::Running);
}
