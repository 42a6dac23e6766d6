//! Property tests of the scheduler over random clusters and workloads.

use std::collections::{BTreeMap, BTreeSet};

use corral_core::sched::{
    ClusterSnapshot, JobRequest, Node, PoolQuota, QueueConfig, ReplicaGroup, ResourceAmount,
    RunningJob, Scheduler, SchedulerConfig,
};
use proptest::prelude::*;

const TYPES: [&str; 2] = ["A100", "V100"];

fn node(i: usize, gpus: u32, ty: usize) -> Node {
    Node {
        topology: Some(format!("rack{}", i / 2)),
        ..Node::new(
            format!("n{i}"),
            Some(TYPES[ty].to_string()),
            gpus,
            16_000,
            64 << 30,
        )
    }
}

fn arb_nodes() -> impl Strategy<Value = Vec<Node>> {
    prop::collection::vec((prop::sample::select(vec![1u32, 2, 4, 8]), 0..2usize), 1..7).prop_map(
        |v| {
            v.into_iter()
                .enumerate()
                .map(|(i, (g, t))| node(i, g, t))
                .collect()
        },
    )
}

/// (nominal GPUs per type, borrowing limit, lending limit) per queue.
/// (nominal GPUs per type, borrowing limit, lending limit) of one queue.
type QueueSpec = (u64, Option<u64>, Option<u64>);

fn arb_queues() -> impl Strategy<Value = (bool, Vec<QueueSpec>)> {
    (
        any::<bool>(),
        prop::collection::vec(
            (
                0..12u64,
                prop::option::of(0..8u64),
                prop::option::of(0..8u64),
            ),
            1..4,
        ),
    )
}

fn queues(cohort: bool, spec: &[(u64, Option<u64>, Option<u64>)]) -> Vec<QueueConfig> {
    spec.iter()
        .enumerate()
        .map(|(i, &(nominal, borrow, lend))| QueueConfig {
            name: format!("q{i}"),
            cohort: cohort.then(|| "c".to_string()),
            weight: 1,
            namespaces: Vec::new(),
            quotas: TYPES
                .iter()
                .map(|t| {
                    (
                        t.to_string(),
                        PoolQuota {
                            nominal: ResourceAmount::gpus(nominal),
                            borrowing_limit: borrow.map(ResourceAmount::gpus),
                            lending_limit: lend.map(ResourceAmount::gpus),
                        },
                    )
                })
                .collect(),
        })
        .collect()
}

/// (priority, queue, groups as (count, gpu), allowed type mask)
type JobSpec = (i32, usize, Vec<(u32, u32)>, u8);

fn arb_jobs() -> impl Strategy<Value = Vec<JobSpec>> {
    prop::collection::vec(
        (
            prop::sample::select(vec![0, 10, 100]),
            0..3usize,
            prop::collection::vec((1..4u32, 0..5u32), 1..3),
            0..3u8,
        ),
        1..12,
    )
}

fn job(i: usize, spec: &JobSpec, queues: usize) -> JobRequest {
    let (priority, queue, groups, mask) = spec;
    let allowed: Vec<String> = match mask {
        0 => Vec::new(),
        1 => vec!["A100".into()],
        _ => vec!["V100".into()],
    };
    JobRequest {
        key: format!("j{i}"),
        queue: format!("q{}", queue % queues),
        priority: *priority,
        submit_time: i as u64,
        groups: groups
            .iter()
            .enumerate()
            .map(|(gi, &(count, gpu))| ReplicaGroup {
                role: format!("r{gi}"),
                count,
                cpu_milli: 1_000,
                memory_bytes: 1 << 30,
                gpu,
                allowed_gpu_types: allowed.clone(),
                extended: BTreeMap::new(),
            })
            .collect(),
        throughput: BTreeMap::new(),
        preemptible: true,
        node_selector: BTreeMap::new(),
        tolerations: Default::default(),
        elastic: None,
    }
}

/// Checks capacity, gang shape and quota invariants of the running set.
fn check_invariants(
    snapshot: &ClusterSnapshot,
    running: &[RunningJob],
    q: &[(u64, Option<u64>, Option<u64>)],
    cohort: bool,
) -> Result<(), TestCaseError> {
    let nodes: BTreeMap<&str, &Node> = snapshot
        .nodes
        .iter()
        .map(|n| (n.name.as_str(), n))
        .collect();
    let mut gpus_used: BTreeMap<&str, BTreeSet<u32>> = BTreeMap::new();
    let mut cpu: BTreeMap<&str, u64> = BTreeMap::new();
    let mut mem: BTreeMap<&str, u64> = BTreeMap::new();
    // usage[queue][type]
    let mut usage = vec![[0u64; 2]; q.len()];
    for r in running {
        // Gang: exactly every replica, each with its GPUs, on one GPU type.
        prop_assert_eq!(r.placements.len() as u64, r.request.total_replicas());
        let mut types = BTreeSet::new();
        for g in &r.request.groups {
            let mine: Vec<_> = r.placements.iter().filter(|p| p.role == g.role).collect();
            prop_assert_eq!(mine.len() as u32, g.count);
            let idx: BTreeSet<u32> = mine.iter().map(|p| p.index).collect();
            prop_assert_eq!(idx, (0..g.count).collect::<BTreeSet<_>>());
            for p in mine {
                prop_assert_eq!(p.gpu_indices.len() as u32, g.gpu);
                let n = nodes[p.node.as_str()];
                if g.gpu > 0 {
                    types.insert(n.gpu_type.clone());
                    if !g.allowed_gpu_types.is_empty() {
                        prop_assert!(g.allowed_gpu_types.contains(n.gpu_type.as_ref().unwrap()));
                    }
                }
                for &i in &p.gpu_indices {
                    prop_assert!(i < n.gpus);
                    prop_assert!(
                        gpus_used.entry(n.name.as_str()).or_default().insert(i),
                        "GPU {} of {} twice",
                        i,
                        n.name
                    );
                }
                *cpu.entry(n.name.as_str()).or_default() += g.cpu_milli;
                *mem.entry(n.name.as_str()).or_default() += g.memory_bytes;
            }
        }
        prop_assert!(types.len() <= 1, "job {} spans GPU types", r.request.key);
        let qi: usize = r.request.queue[1..].parse().unwrap();
        let ty = r
            .placements
            .iter()
            .map(|p| nodes[p.node.as_str()].gpu_type.clone().unwrap())
            .next()
            .unwrap();
        let ti = TYPES.iter().position(|t| *t == ty).unwrap();
        usage[qi][ti] += r.request.total_gpus();
    }
    for n in &snapshot.nodes {
        prop_assert!(cpu.get(n.name.as_str()).copied().unwrap_or(0) <= n.cpu_milli);
        prop_assert!(mem.get(n.name.as_str()).copied().unwrap_or(0) <= n.memory_bytes);
    }
    #[allow(clippy::needless_range_loop)] // ti indexes usage rows per type
    for ti in 0..2 {
        let mut cohort_used = 0u64;
        let mut cohort_cap = 0u64;
        for (qi, &(nominal, borrow, lend)) in q.iter().enumerate() {
            let u = usage[qi][ti];
            if cohort {
                if let Some(b) = borrow {
                    prop_assert!(u <= nominal + b, "q{} over borrowing limit", qi);
                }
                let guaranteed = lend.map_or(0, |l| nominal.saturating_sub(l));
                cohort_used += u.saturating_sub(guaranteed);
                cohort_cap += nominal - guaranteed;
            } else {
                prop_assert!(u <= nominal, "q{} over quota without cohort", qi);
            }
        }
        prop_assert!(cohort_used <= cohort_cap, "cohort lends more than it has");
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// No node over-committed, gangs whole, quotas and borrowing limits kept, across
    /// several cycles with jobs finishing in between.
    #[test]
    fn cycles_keep_capacity_gang_and_quota_invariants(
        nodes in arb_nodes(), (cohort, qs) in arb_queues(), jobs in arb_jobs(), finish_every in 1..4usize,
    ) {
        let snapshot = ClusterSnapshot { nodes, pools: vec![], queues: queues(cohort, &qs), running: vec![] };
        let mut s = Scheduler::new(&snapshot, SchedulerConfig { preemption_protection_ms: 0, ..Default::default() }).unwrap();
        for (i, j) in jobs.iter().enumerate() {
            s.submit(job(i, j, qs.len())).unwrap();
        }
        for round in 0..4u64 {
            let out = s.cycle(round * 1000);
            let running = s.running_jobs();
            // Every admission is in the running set with the same placements.
            for a in &out.admitted {
                let r = running.iter().find(|r| r.request.key == a.job).unwrap();
                let mut placements = a.placements.clone();
                placements.sort_by(|x, y| (&x.role, x.index).cmp(&(&y.role, y.index)));
                prop_assert_eq!(&r.placements, &placements);
            }
            check_invariants(&snapshot, &running, &qs, cohort)?;
            for (k, r) in running.iter().enumerate() {
                if k % finish_every == 0 {
                    s.finish(&r.request.key);
                }
            }
        }
    }

    /// Every job that fits the empty cluster (within its queue's reach) is eventually
    /// admitted when running jobs finish between cycles.
    #[test]
    fn every_job_that_fits_an_empty_cluster_is_eventually_admitted(
        nodes in arb_nodes(), jobs in arb_jobs(),
    ) {
        // Unlimited quotas: this property is about placement, reservations and backfill.
        let q: Vec<QueueConfig> = (0..3).map(|i| QueueConfig {
            name: format!("q{i}"), cohort: None, weight: 1, namespaces: Vec::new(),
            quotas: TYPES.iter().map(|t| (t.to_string(), PoolQuota {
                nominal: ResourceAmount::UNLIMITED, borrowing_limit: None, lending_limit: None,
            })).collect(),
        }).collect();
        let snapshot = ClusterSnapshot { nodes, pools: vec![], queues: q, running: vec![] };
        let mut fits_alone = BTreeSet::new();
        for (i, spec) in jobs.iter().enumerate() {
            let j = job(i, spec, 3);
            let mut empty = Scheduler::new(&snapshot, SchedulerConfig::default()).unwrap();
            empty.submit(j.clone()).unwrap();
            if !empty.cycle(0).admitted.is_empty() {
                fits_alone.insert(j.key.clone());
            }
        }
        let mut s = Scheduler::new(&snapshot, SchedulerConfig::default()).unwrap();
        for (i, spec) in jobs.iter().enumerate() {
            s.submit(job(i, spec, 3)).unwrap();
        }
        let mut admitted = BTreeSet::new();
        for round in 0..(jobs.len() as u64 + 2) {
            let out = s.cycle(round);
            for a in out.admitted {
                admitted.insert(a.job);
            }
            // Everything running finishes before the next cycle.
            for r in s.running_jobs() {
                s.finish(&r.request.key);
            }
        }
        prop_assert_eq!(admitted, fits_alone);
    }

    /// A higher-priority job does not wait while preempting lower-priority, unprotected
    /// work would let it fit; and nothing is preempted for a job that does not then fit.
    #[test]
    fn higher_priority_preempts_lower_when_that_makes_it_fit(
        nodes in arb_nodes(), low in arb_jobs(), high_groups in prop::collection::vec((1..3u32, 1..5u32), 1..3),
    ) {
        let q = vec![QueueConfig {
            name: "q0".into(), cohort: None, weight: 1, namespaces: Vec::new(),
            quotas: TYPES.iter().map(|t| (t.to_string(), PoolQuota {
                nominal: ResourceAmount::UNLIMITED, borrowing_limit: None, lending_limit: None,
            })).collect(),
        }];
        let snapshot = ClusterSnapshot { nodes, pools: vec![], queues: q, running: vec![] };
        let config = SchedulerConfig { preemption_protection_ms: 10, max_preemption_attempts: 100, ..Default::default() };
        let mut s = Scheduler::new(&snapshot, config.clone()).unwrap();
        for (i, spec) in low.iter().enumerate() {
            let mut j = job(i, spec, 1);
            j.priority = 0;
            s.submit(j).unwrap();
        }
        s.cycle(0);
        let before = s.running_jobs();
        let high = job(999, &(100, 0, high_groups, 0), 1);
        // Would it fit with every lower-priority job gone?
        let mut empty = Scheduler::new(&snapshot, config.clone()).unwrap();
        empty.submit(high.clone()).unwrap();
        let fits_without_low = !empty.cycle(0).admitted.is_empty();
        s.submit(high.clone()).unwrap();
        let out = s.cycle(1000);
        let admitted = out.admitted.iter().any(|a| a.job == high.key);
        if fits_without_low {
            prop_assert!(admitted, "high-priority job waits: {:?}", out.pending.iter().find(|p| p.job == high.key).map(|p| p.reason.to_string()));
        }
        if !admitted {
            prop_assert!(out.preempted.is_empty(), "preempted without admitting the preemptor");
        }
        for p in &out.preempted {
            prop_assert!(before.iter().any(|r| r.request.key == p.job));
        }
        check_invariants(&snapshot, &s.running_jobs(), &[(u64::MAX / 4, None, None)], false)?;
    }

    /// Protected (recently admitted) work is never preempted.
    #[test]
    fn recently_admitted_jobs_are_not_preempted(nodes in arb_nodes(), low in arb_jobs()) {
        let q = vec![QueueConfig {
            name: "q0".into(), cohort: None, weight: 1, namespaces: Vec::new(),
            quotas: TYPES.iter().map(|t| (t.to_string(), PoolQuota {
                nominal: ResourceAmount::UNLIMITED, borrowing_limit: None, lending_limit: None,
            })).collect(),
        }];
        let snapshot = ClusterSnapshot { nodes, pools: vec![], queues: q, running: vec![] };
        let mut s = Scheduler::new(&snapshot, SchedulerConfig { preemption_protection_ms: 60_000, ..Default::default() }).unwrap();
        for (i, spec) in low.iter().enumerate() {
            s.submit(job(i, spec, 1)).unwrap();
        }
        s.cycle(0);
        s.submit(job(999, &(1000, 0, vec![(1, 1)], 0), 1)).unwrap();
        let out = s.cycle(30_000);
        prop_assert!(out.preempted.is_empty());
    }
}

const NAMESPACES: [&str; 3] = ["vision", "nlp", "infra"];

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// `Queue.spec.namespaces` walls tenants off: over several cycles no job is ever admitted
    /// into a queue that does not list its namespace, and every such job waits with a reason
    /// naming the queue and the namespaces it admits. Queues that list none admit all.
    #[test]
    fn a_queue_admits_only_the_namespaces_it_lists(
        nodes in arb_nodes(),
        (cohort, qs) in arb_queues(),
        masks in prop::collection::vec(0..8u8, 3),
        jobs in arb_jobs(),
        job_ns in prop::collection::vec(0..3usize, 12),
    ) {
        let mut q = queues(cohort, &qs);
        for (i, queue) in q.iter_mut().enumerate() {
            queue.namespaces = NAMESPACES
                .iter()
                .enumerate()
                .filter(|(b, _)| masks[i] & (1 << b) != 0)
                .map(|(_, n)| n.to_string())
                .collect();
        }
        let allowed = |queue: &str, ns: &str| {
            q.iter().find(|x| x.name == queue).is_some_and(|x| {
                x.namespaces.is_empty() || x.namespaces.iter().any(|n| n == ns)
            })
        };
        let snapshot = ClusterSnapshot { nodes, pools: vec![], queues: q.clone(), running: vec![] };
        let mut s = Scheduler::new(&snapshot, SchedulerConfig { preemption_protection_ms: 0, ..Default::default() }).unwrap();
        let mut requests = Vec::new();
        for (i, j) in jobs.iter().enumerate() {
            let mut r = job(i, j, qs.len());
            r.key = format!("{}/j{i}", NAMESPACES[job_ns[i]]);
            s.submit(r.clone()).unwrap();
            requests.push(r);
        }
        for round in 0..3u64 {
            let out = s.cycle(round * 1000);
            for r in s.running_jobs() {
                let ns = r.request.key.split('/').next().unwrap();
                prop_assert!(allowed(&r.request.queue, ns), "{} admitted into {}", r.request.key, r.request.queue);
            }
            for p in &out.pending {
                let r = requests.iter().find(|r| r.key == p.job).unwrap();
                let ns = r.key.split('/').next().unwrap();
                if !allowed(&r.queue, ns) {
                    let text = p.reason.to_string();
                    prop_assert!(p.reason.never_fits(), "{}", text);
                    prop_assert!(text.contains(&format!("queue {} admits only", r.queue)), "{}", text);
                    prop_assert!(text.contains(&format!("not of {ns}")), "{}", text);
                }
            }
            if let Some(r) = s.running_jobs().first() {
                s.finish(&r.request.key);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// A cycle cut into slices (the operator's bounded passes) decides what one whole
    /// cycle decides: the same jobs admitted, in the same order, at the same placements;
    /// each slice stops at the first job that reaches its limit (a gang is never cut) and
    /// says how many it left for the next one.
    #[test]
    fn sliced_cycles_admit_what_one_cycle_admits(
        nodes in arb_nodes(), (cohort, qs) in arb_queues(), jobs in arb_jobs(), slice in 1..6u32,
    ) {
        let snapshot = ClusterSnapshot { nodes, pools: vec![], queues: queues(cohort, &qs), running: vec![] };
        let mut whole = Scheduler::new(&snapshot, SchedulerConfig::default()).unwrap();
        let mut sliced = Scheduler::new(&snapshot, SchedulerConfig::default()).unwrap();
        for (i, j) in jobs.iter().enumerate() {
            whole.submit(job(i, j, qs.len())).unwrap();
            sliced.submit(job(i, j, qs.len())).unwrap();
        }
        let once = whole.cycle(0);
        prop_assert_eq!(once.counters.deferred, 0);
        let mut admitted = Vec::new();
        let mut cycles = 0;
        loop {
            cycles += 1;
            prop_assert!(cycles <= jobs.len() + 1, "slices never end");
            let out = sliced.cycle_sliced(0, Some(slice));
            let sizes: Vec<u32> = out.admitted.iter().map(|a| a.placements.len() as u32).collect();
            if let Some((_, before_last)) = sizes.split_last() {
                prop_assert!(before_last.iter().sum::<u32>() < slice, "a slice went on past its limit: {:?}", sizes);
            }
            let placed: u32 = sizes.iter().sum();
            if out.counters.deferred > 0 {
                prop_assert!(placed >= slice, "{} jobs deferred with {} of {} placed", out.counters.deferred, placed, slice);
            }
            prop_assert!(out.preempted.is_empty());
            admitted.extend(out.admitted);
            if out.counters.deferred == 0 {
                break;
            }
        }
        prop_assert_eq!(admitted, once.admitted);
    }
}
