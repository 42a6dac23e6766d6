//! Elastic sizing (`sched::elastic`): admission at the largest size that fits, growth into
//! free room, shrink before preemption, the rendezvous replica kept, and the dwell between
//! resizes; examples first, then properties over random runs.

use std::collections::{BTreeMap, BTreeSet};

use corral_core::sched::{
    Admission, ClusterSnapshot, CycleOutcome, ElasticRange, JobRequest, Node, PoolQuota,
    QueueConfig, ReplicaGroup, ResizeReason, ResourceAmount, Scheduler, SchedulerConfig,
};
use proptest::prelude::*;

const DWELL: u64 = 60_000;

fn node(name: &str, gpus: u32) -> Node {
    Node::new(name, Some("A100".into()), gpus, 256_000, 1 << 40)
}

fn snapshot(nodes: Vec<Node>) -> ClusterSnapshot {
    ClusterSnapshot {
        nodes,
        pools: vec![],
        queues: vec![QueueConfig {
            name: "q".into(),
            cohort: None,
            weight: 1,
            namespaces: Vec::new(),
            quotas: BTreeMap::from([(
                "A100".to_string(),
                PoolQuota {
                    nominal: ResourceAmount::UNLIMITED,
                    borrowing_limit: None,
                    lending_limit: None,
                },
            )]),
        }],
        running: vec![],
    }
}

fn config() -> SchedulerConfig {
    SchedulerConfig {
        preemption_protection_ms: 0,
        resize_dwell_ms: DWELL,
        ..SchedulerConfig::default()
    }
}

/// A job of `count` one-GPU workers; elastic between `range` when given.
fn job(key: &str, priority: i32, count: u32, range: Option<(u32, u32)>) -> JobRequest {
    JobRequest {
        key: key.into(),
        queue: "q".into(),
        priority,
        submit_time: 0,
        groups: vec![ReplicaGroup {
            role: "worker".into(),
            count,
            cpu_milli: 1000,
            memory_bytes: 1 << 30,
            gpu: 1,
            allowed_gpu_types: Vec::new(),
            extended: BTreeMap::new(),
        }],
        throughput: BTreeMap::new(),
        preemptible: true,
        node_selector: BTreeMap::new(),
        tolerations: Default::default(),
        elastic: range.map(|(min, max)| ElasticRange {
            role: "worker".into(),
            min,
            max,
        }),
    }
}

fn elastic(key: &str, priority: i32, min: u32, max: u32) -> JobRequest {
    job(key, priority, min, Some((min, max)))
}

fn workers(a: &Admission) -> Vec<u32> {
    a.placements.iter().map(|p| p.index).collect()
}

fn admitted<'a>(out: &'a CycleOutcome, key: &str) -> Option<&'a Admission> {
    out.admitted.iter().find(|a| a.job == key)
}

#[test]
fn admitted_at_the_largest_size_that_fits() {
    let mut s = Scheduler::new(&snapshot(vec![node("n0", 4)]), config()).unwrap();
    s.submit(job("rigid", 0, 2, None)).unwrap();
    s.submit(elastic("e", 0, 1, 3)).unwrap();
    let out = s.cycle(0);
    let a = admitted(&out, "e").expect("admitted");
    assert_eq!(workers(a), vec![0, 1], "2 of 4 GPUs were left");
    assert!(out.resized.is_empty(), "growing at admission is no resize");
    assert_eq!(s.elastic_size("e"), Some(2));
}

#[test]
fn a_pending_rigid_job_goes_before_an_elastic_job_grows() {
    // The elastic job came first, but its growth waits for the rest of the cycle.
    let mut s = Scheduler::new(&snapshot(vec![node("n0", 4)]), config()).unwrap();
    s.submit(elastic("e", 0, 1, 4)).unwrap();
    s.submit(job("late", 0, 3, None)).unwrap();
    let out = s.cycle(0);
    assert!(admitted(&out, "late").is_some());
    assert_eq!(workers(admitted(&out, "e").unwrap()), vec![0]);
}

#[test]
fn grows_into_freed_room_once_the_dwell_has_passed() {
    let mut s = Scheduler::new(&snapshot(vec![node("n0", 4)]), config()).unwrap();
    s.submit(job("other", 0, 3, None)).unwrap();
    s.submit(elastic("e", 0, 1, 3)).unwrap();
    s.cycle(0);
    assert_eq!(s.elastic_size("e"), Some(1));
    assert!(s.finish("other"));
    let early = s.cycle(DWELL - 1);
    assert!(
        early.resized.is_empty(),
        "within the dwell of its admission"
    );
    let out = s.cycle(DWELL);
    assert_eq!(out.resized.len(), 1);
    let r = &out.resized[0];
    assert_eq!((r.from, r.to, &r.reason), (1, 3, &ResizeReason::Grew));
    assert_eq!(workers(&r.admission), vec![0, 1, 2]);
    assert_eq!(
        r.to_string(),
        "grew from 1 to 3 worker replicas into free GPUs"
    );
    assert!(s.cycle(2 * DWELL + 1).resized.is_empty(), "already at max");
}

#[test]
fn shrinks_for_higher_priority_work_before_preempting_a_gang() {
    let mut s = Scheduler::new(&snapshot(vec![node("n0", 4)]), config()).unwrap();
    s.submit(job("low-gang", 0, 1, None)).unwrap();
    s.submit(elastic("e", 0, 1, 3)).unwrap();
    let first = s.cycle(0);
    let rendezvous = admitted(&first, "e").unwrap().placements[0].clone();
    assert_eq!(s.elastic_size("e"), Some(3));
    s.submit(job("urgent", 10, 2, None)).unwrap();
    let out = s.cycle(DWELL);
    assert!(admitted(&out, "urgent").is_some(), "{out:?}");
    assert!(out.preempted.is_empty(), "no gang preempted: {out:?}");
    assert_eq!(out.resized.len(), 1);
    let r = &out.resized[0];
    assert_eq!((r.from, r.to), (3, 1));
    assert_eq!(
        r.reason,
        ResizeReason::ShrankFor {
            job: "urgent".into(),
            priority: 10
        }
    );
    assert_eq!(r.admission.placements, vec![rendezvous], "replica 0 stays");
}

#[test]
fn equal_priority_work_takes_room_from_an_elastic_job_but_lower_does_not() {
    let mut s = Scheduler::new(&snapshot(vec![node("n0", 2)]), config()).unwrap();
    s.submit(elastic("e", 5, 1, 2)).unwrap();
    s.cycle(0);
    assert_eq!(s.elastic_size("e"), Some(2));
    s.submit(job("lower", 4, 1, None)).unwrap();
    let out = s.cycle(DWELL);
    assert!(out.resized.is_empty() && out.admitted.is_empty());
    s.submit(job("equal", 5, 1, None)).unwrap();
    let out = s.cycle(DWELL + 1);
    assert!(admitted(&out, "equal").is_some());
    assert_eq!(out.resized[0].to, 1);
}

#[test]
fn never_shrinks_below_min_nor_unless_the_job_then_fits() {
    let mut s = Scheduler::new(&snapshot(vec![node("n0", 4)]), config()).unwrap();
    s.submit(elastic("e", 0, 2, 4)).unwrap();
    s.cycle(0);
    assert_eq!(s.elastic_size("e"), Some(4));
    // Needs 3: shrinking to min frees only 2, so nothing shrinks; the elastic job is
    // preempted whole instead (lower priority, not protected).
    s.submit(job("big", 10, 3, None)).unwrap();
    let out = s.cycle(DWELL);
    assert!(out.resized.is_empty(), "{out:?}");
    assert_eq!(out.preempted.len(), 1);
    assert_eq!(out.preempted[0].job, "e");
}

#[test]
fn the_dwell_holds_a_shrink_back_too() {
    let mut s = Scheduler::new(&snapshot(vec![node("n0", 2)]), config()).unwrap();
    s.submit(elastic("e", 0, 1, 2)).unwrap();
    s.cycle(0);
    s.submit(job("urgent", 10, 1, None)).unwrap();
    let out = s.cycle(DWELL / 2);
    assert!(out.resized.is_empty());
    assert_eq!(s.elastic_size("e"), Some(2));
}

#[test]
fn the_job_with_more_throughput_per_gpu_grows_first() {
    let mut s = Scheduler::new(&snapshot(vec![node("n0", 4)]), config()).unwrap();
    let mut slow = elastic("a-slow", 0, 1, 2);
    slow.throughput = BTreeMap::from([("A100".to_string(), 1.0)]);
    let mut fast = elastic("b-fast", 0, 1, 2);
    fast.throughput = BTreeMap::from([("A100".to_string(), 5.0)]);
    s.submit(slow).unwrap();
    s.submit(fast).unwrap();
    s.submit(job("rigid", 0, 1, None)).unwrap();
    let out = s.cycle(0);
    assert_eq!(workers(admitted(&out, "b-fast").unwrap()), vec![0, 1]);
    assert_eq!(workers(admitted(&out, "a-slow").unwrap()), vec![0]);
}

/// A replica doubles a job of one and adds half to a job of two: the free GPU goes to the
/// smaller job, though the larger one does more per GPU (samples of two models are not
/// comparable; each job's speed against its own is).
#[test]
fn the_smaller_job_grows_first() {
    let mut s = Scheduler::new(&snapshot(vec![node("n0", 4)]), config()).unwrap();
    let mut big = elastic("a-big", 0, 2, 3);
    big.throughput = BTreeMap::from([("A100".to_string(), 50.0)]);
    let mut small = elastic("b-small", 0, 1, 2);
    small.throughput = BTreeMap::from([("A100".to_string(), 1.0)]);
    s.submit(big).unwrap();
    s.submit(small).unwrap();
    let out = s.cycle(0);
    assert_eq!(workers(admitted(&out, "a-big").unwrap()), vec![0, 1]);
    assert_eq!(workers(admitted(&out, "b-small").unwrap()), vec![0, 1]);
}

#[test]
fn a_restored_elastic_job_keeps_its_size() {
    let mut s = Scheduler::new(&snapshot(vec![node("n0", 4)]), config()).unwrap();
    s.submit(elastic("e", 0, 1, 4)).unwrap();
    let out = s.cycle(0);
    let placements = admitted(&out, "e").unwrap().placements.clone();
    let mut snap = snapshot(vec![node("n0", 4)]);
    snap.running.push(corral_core::sched::RunningJob {
        // The request as the plane stores it: the spec's count, not the running size.
        request: job("e", 0, 2, Some((1, 4))),
        placements,
        admitted_at: 0,
    });
    let mut s = Scheduler::new(&snap, config()).unwrap();
    assert_eq!(s.elastic_size("e"), Some(4));
    s.submit(job("x", 0, 1, None)).unwrap();
    assert!(s.cycle(1).admitted.is_empty(), "the node is full");
}

#[test]
fn an_invalid_range_is_refused_naming_it() {
    let mut s = Scheduler::new(&snapshot(vec![node("n0", 4)]), config()).unwrap();
    let mut j = elastic("e", 0, 1, 2);
    j.elastic.as_mut().unwrap().role = "chief".into();
    let err = s.submit(j).unwrap_err().to_string();
    assert!(err.contains("elastic") && err.contains("chief"), "{err}");
    let err = s.submit(elastic("e", 0, 3, 2)).unwrap_err().to_string();
    assert!(err.contains("min <= max"), "{err}");
}

// ---- properties ---------------------------------------------------------------------

/// One step of a random run: submit a job, finish a running one, or let time pass.
#[derive(Clone, Debug)]
enum Op {
    Submit {
        priority: i32,
        count: u32,
        elastic: Option<(u32, u32)>,
    },
    Finish(usize),
    Wait(u64),
}

fn arb_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (
            prop::sample::select(vec![0, 5, 10]),
            1..5u32,
            prop::option::of((1..3u32, 0..4u32))
        )
            .prop_map(|(priority, count, e)| Op::Submit {
                priority,
                count,
                elastic: e.map(|(min, extra)| (min, min + extra)),
            }),
        (0..64usize).prop_map(Op::Finish),
        (1..90_000u64).prop_map(Op::Wait),
    ]
}

/// What the test knows of each running job, from the outcomes alone.
#[derive(Default)]
struct World {
    running: BTreeMap<String, Admission>,
    ranges: BTreeMap<String, (u32, u32)>,
    last_resize: BTreeMap<String, u64>,
    rendezvous: BTreeMap<String, (String, Vec<u32>)>,
}

impl World {
    fn apply(&mut self, out: &CycleOutcome, now: u64) -> Result<(), TestCaseError> {
        for p in &out.preempted {
            self.running.remove(&p.job);
            self.rendezvous.remove(&p.job);
        }
        // A moved job holds its new placement (a new start: its rendezvous moves with it).
        for a in &out.moved {
            self.running.insert(a.job.clone(), a.clone());
            if let Some(p) = a.placements.iter().find(|p| p.index == 0) {
                self.rendezvous
                    .insert(a.job.clone(), (p.node.clone(), p.gpu_indices.clone()));
            }
        }
        for a in &out.admitted {
            self.running.insert(a.job.clone(), a.clone());
            self.last_resize.insert(a.job.clone(), now);
            if let Some(p) = a.placements.iter().find(|p| p.index == 0) {
                self.rendezvous
                    .insert(a.job.clone(), (p.node.clone(), p.gpu_indices.clone()));
            }
        }
        for r in &out.resized {
            let job = &r.admission.job;
            let last = self.last_resize.get(job).copied().unwrap_or(0);
            prop_assert!(
                now >= last + DWELL,
                "{job} resized at {now}, last at {last}"
            );
            self.last_resize.insert(job.clone(), now);
            let p0 = r.admission.placements.iter().find(|p| p.index == 0);
            prop_assert_eq!(
                p0.map(|p| (p.node.clone(), p.gpu_indices.clone())),
                self.rendezvous.get(job).cloned(),
                "the rendezvous replica of {} never moves",
                job
            );
            prop_assert_eq!(r.admission.placements.len() as u32, r.to);
            self.running.insert(job.clone(), r.admission.clone());
        }
        self.check()
    }

    /// Sizes within range with indices 0..size; no GPU given twice.
    fn check(&self) -> Result<(), TestCaseError> {
        let mut used: BTreeSet<(String, u32)> = BTreeSet::new();
        for (job, a) in &self.running {
            let indices: Vec<u32> = a.placements.iter().map(|p| p.index).collect();
            let size = indices.len() as u32;
            prop_assert_eq!(indices, (0..size).collect::<Vec<_>>());
            if let Some(&(min, max)) = self.ranges.get(job) {
                prop_assert!(
                    min <= size && size <= max,
                    "{job} at {size}, range {min}..={max}"
                );
            }
            for p in &a.placements {
                for g in &p.gpu_indices {
                    prop_assert!(
                        used.insert((p.node.clone(), *g)),
                        "GPU {g} of {} twice",
                        p.node
                    );
                }
            }
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Over a long random run of arrivals, finishes and waits: sizes stay within their
    /// range, growth never gives a GPU twice, the rendezvous replica never moves, and no job
    /// is resized more often than the dwell allows.
    #[test]
    fn long_random_runs_keep_sizes_in_range_and_resizes_apart(
        gpus in prop::collection::vec(1..5u32, 1..4),
        ops in prop::collection::vec(arb_op(), 1..120),
    ) {
        let nodes = gpus.iter().enumerate().map(|(i, &g)| node(&format!("n{i}"), g)).collect();
        let mut s = Scheduler::new(&snapshot(nodes), config()).unwrap();
        let mut w = World::default();
        let mut now = 0u64;
        for (i, op) in ops.into_iter().enumerate() {
            match op {
                Op::Submit { priority, count, elastic } => {
                    let key = format!("j{i}");
                    let count = elastic.map_or(count, |(min, _)| min);
                    let mut j = job(&key, priority, count, elastic);
                    j.submit_time = now;
                    s.submit(j).unwrap();
                    if let Some(r) = elastic {
                        w.ranges.insert(key, r);
                    }
                }
                Op::Finish(n) => {
                    if let Some(key) = w.running.keys().nth(n % w.running.len().max(1)).cloned() {
                        s.finish(&key);
                        w.running.remove(&key);
                    }
                }
                Op::Wait(ms) => now += ms,
            }
            let out = s.cycle(now);
            w.apply(&out, now)?;
            for (key, a) in &w.running {
                if w.ranges.contains_key(key) {
                    prop_assert_eq!(s.elastic_size(key), Some(a.placements.len() as u32));
                }
            }
        }
    }

    /// The same with two GPU types, measured throughputs and moves in place (rebalancing):
    /// a job shrunk and then moved in one cycle reports the placement it holds at the end.
    #[test]
    fn resizes_and_moves_agree_on_where_a_job_runs(
        gpus in prop::collection::vec((1..5u32, any::<bool>()), 2..5),
        ops in prop::collection::vec((arb_op(), 0.5..4.0f64), 1..80),
    ) {
        let nodes = gpus
            .iter()
            .enumerate()
            .map(|(i, &(g, fast))| {
                let ty = if fast { "H100" } else { "A100" };
                Node::new(format!("n{i}"), Some(ty.into()), g, 256_000, 1 << 40)
            })
            .collect();
        let mut snap = snapshot(nodes);
        let quota = snap.queues[0].quotas["A100"];
        snap.queues[0].quotas.insert("H100".into(), quota);
        let cfg = SchedulerConfig {
            move_in_place: true,
            rebalance_min_speedup: 1.3,
            ..config()
        };
        let mut s = Scheduler::new(&snap, cfg).unwrap();
        let mut w = World::default();
        let mut now = 0u64;
        for (i, (op, speedup)) in ops.into_iter().enumerate() {
            match op {
                Op::Submit { priority, count, elastic } => {
                    let key = format!("j{i}");
                    let count = elastic.map_or(count, |(min, _)| min);
                    let mut j = job(&key, priority, count, elastic);
                    j.submit_time = now;
                    j.throughput = BTreeMap::from([
                        ("A100".to_string(), 1.0),
                        ("H100".to_string(), speedup),
                    ]);
                    s.submit(j).unwrap();
                    if let Some(r) = elastic {
                        w.ranges.insert(key, r);
                    }
                }
                Op::Finish(n) => {
                    if let Some(key) = w.running.keys().nth(n % w.running.len().max(1)).cloned() {
                        s.finish(&key);
                        w.running.remove(&key);
                    }
                }
                Op::Wait(ms) => now += ms,
            }
            let out = s.cycle(now);
            for r in &out.resized {
                if let Some(m) = out.moved.iter().find(|m| m.job == r.admission.job) {
                    prop_assert_eq!(&r.admission, m);
                }
            }
            w.apply(&out, now)?;
        }
    }

    /// A job that fits once the elastic jobs of no higher priority shrink to their minimum
    /// is admitted by shrinking them: no whole gang is preempted.
    #[test]
    fn shrinking_comes_before_preempting_a_lower_priority_gang(
        gpus in prop::collection::vec(1..5u32, 1..4),
        rigid in prop::collection::vec(1..3u32, 0..4),
        elastic_jobs in prop::collection::vec((1..3u32, 0..4u32), 1..4),
        want in 1..6u32,
    ) {
        let total: u32 = gpus.iter().sum();
        let nodes = gpus.iter().enumerate().map(|(i, &g)| node(&format!("n{i}"), g)).collect();
        let mut s = Scheduler::new(&snapshot(nodes), config()).unwrap();
        let mut w = World::default();
        for (i, &c) in rigid.iter().enumerate() {
            s.submit(job(&format!("rigid{i}"), 0, c, None)).unwrap();
        }
        for (i, &(min, extra)) in elastic_jobs.iter().enumerate() {
            let key = format!("elastic{i}");
            s.submit(elastic(&key, 0, min, min + extra)).unwrap();
            w.ranges.insert(key, (min, min + extra));
        }
        let out = s.cycle(0);
        w.apply(&out, 0)?;
        let held: u32 = w.running.values().map(|a| a.placements.len() as u32).sum();
        let surplus: u32 = w
            .running
            .iter()
            .filter_map(|(k, a)| w.ranges.get(k).map(|r| a.placements.len() as u32 - r.0))
            .sum();
        let free = total - held;
        prop_assume!(want > free && want <= free + surplus);
        s.submit(job("urgent", 10, want, None)).unwrap();
        let out = s.cycle(DWELL);
        prop_assert!(admitted(&out, "urgent").is_some(), "{:?}", out);
        prop_assert!(out.preempted.is_empty(), "{:?}", out.preempted);
        prop_assert!(!out.resized.is_empty());
        w.apply(&out, DWELL)?;
    }
}

#[test]
fn an_elastic_job_is_judged_at_its_minimum() {
    let s = Scheduler::new(&snapshot(vec![node("n0", 2)]), config()).unwrap();
    // 4 workers could never run on 2 GPUs, but 1 can.
    assert!(s.never_fits(&job("e", 0, 4, Some((1, 4)))).is_none());
    assert!(s.never_fits(&job("r", 0, 4, None)).is_some());
}

#[test]
fn a_job_shrunk_then_moved_in_one_cycle_reports_where_it_runs() {
    let nodes = vec![
        Node::new("slow", Some("A100".into()), 2, 256_000, 1 << 40),
        Node::new("fast", Some("H100".into()), 2, 256_000, 1 << 40),
    ];
    let mut snap = snapshot(nodes);
    let quota = snap.queues[0].quotas["A100"];
    snap.queues[0].quotas.insert("H100".into(), quota);
    let cfg = SchedulerConfig {
        move_in_place: true,
        ..config()
    };
    let mut s = Scheduler::new(&snap, cfg).unwrap();
    let speeds = BTreeMap::from([("A100".to_string(), 1.0), ("H100".to_string(), 3.0)]);
    let mut filler = job("filler", 0, 2, None);
    filler.throughput = speeds.clone();
    let mut e = elastic("e", 0, 1, 2);
    e.throughput = speeds;
    e.submit_time = 1;
    s.submit(filler).unwrap();
    s.submit(e).unwrap();
    let out = s.cycle(0);
    assert_eq!(admitted(&out, "e").unwrap().pool, "A100");
    // The fast pool frees up and a job that runs only on the slow one arrives: e shrinks
    // for it, then moves to the fast pool, both in one cycle.
    s.finish("filler");
    let mut slow_only = job("slow-only", 10, 1, None);
    slow_only.groups[0].allowed_gpu_types = vec!["A100".into()];
    s.submit(slow_only).unwrap();
    let out = s.cycle(DWELL);
    let moved = out.moved.iter().find(|m| m.job == "e").expect("e moved");
    assert_eq!(moved.pool, "H100");
    let r = out
        .resized
        .iter()
        .find(|r| r.admission.job == "e")
        .expect("e resized");
    assert_eq!((r.from, r.to), (2, 1));
    assert_eq!(&r.admission, moved, "the resize reports where e runs now");
}
