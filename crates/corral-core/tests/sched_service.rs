//! Least attained service (ordering and same-priority preemption) and rebalancing to
//! faster GPU types (moves and swaps).

use std::collections::BTreeMap;

use corral_core::sched::{
    ClusterSnapshot, JobRequest, Node, PoolQuota, PreemptionReason, QueueConfig, ReplicaGroup,
    ResourceAmount, Scheduler, SchedulerConfig,
};

const HOUR: f64 = 3600.0;
const MIN: u64 = 60_000;

fn node(name: &str, ty: &str, gpus: u32) -> Node {
    Node::new(name, Some(ty.into()), gpus, 64_000, 512 << 30)
}

fn snapshot(nodes: Vec<Node>) -> ClusterSnapshot {
    let types: Vec<String> = nodes.iter().filter_map(|n| n.gpu_type.clone()).collect();
    ClusterSnapshot {
        nodes,
        pools: vec![],
        queues: vec![QueueConfig {
            name: "q".into(),
            cohort: None,
            weight: 1,
            namespaces: Vec::new(),
            quotas: types
                .into_iter()
                .map(|t| {
                    (
                        t,
                        PoolQuota {
                            nominal: ResourceAmount::UNLIMITED,
                            borrowing_limit: None,
                            lending_limit: None,
                        },
                    )
                })
                .collect(),
        }],
        running: vec![],
    }
}

fn job(key: &str, submit: u64, gpus: u32, tput: &[(&str, f64)]) -> JobRequest {
    JobRequest {
        key: key.into(),
        queue: "q".into(),
        priority: 0,
        submit_time: submit,
        groups: vec![ReplicaGroup {
            role: "worker".into(),
            count: gpus,
            cpu_milli: 1000,
            memory_bytes: 1 << 30,
            gpu: 1,
            allowed_gpu_types: Vec::new(),
            extended: BTreeMap::new(),
        }],
        throughput: tput.iter().map(|(t, v)| (t.to_string(), *v)).collect(),
        preemptible: true,
        node_selector: BTreeMap::new(),
        tolerations: Default::default(),
        elastic: None,
    }
}

fn admitted(out: &corral_core::sched::CycleOutcome) -> Vec<&str> {
    out.admitted.iter().map(|a| a.job.as_str()).collect()
}

#[test]
fn less_service_goes_first_at_one_priority() {
    let mut s = Scheduler::new(
        &snapshot(vec![node("n0", "V100", 1)]),
        SchedulerConfig::default(),
    )
    .unwrap();
    s.submit(job("old", 0, 1, &[])).unwrap();
    s.submit(job("new", 10, 1, &[])).unwrap();
    assert!(s.set_attained_service("old", 2.0 * HOUR));
    assert!(!s.set_attained_service("nobody", 1.0));
    let out = s.cycle(1000);
    assert_eq!(admitted(&out), ["new"]);
}

#[test]
fn without_service_order_is_submit_time_and_nothing_is_preempted() {
    let mut s = Scheduler::new(
        &snapshot(vec![node("n0", "V100", 1)]),
        SchedulerConfig::default(),
    )
    .unwrap();
    s.submit(job("a", 0, 1, &[])).unwrap();
    assert_eq!(admitted(&s.cycle(0)), ["a"]);
    s.submit(job("b", 10, 1, &[])).unwrap();
    let out = s.cycle(60 * MIN);
    assert!(out.admitted.is_empty() && out.preempted.is_empty());
}

#[test]
fn much_less_service_preempts_after_the_protection_window() {
    let mut s = Scheduler::new(
        &snapshot(vec![node("n0", "V100", 2)]),
        SchedulerConfig::default(),
    )
    .unwrap();
    s.submit(job("long", 0, 2, &[])).unwrap();
    assert_eq!(admitted(&s.cycle(0)), ["long"]);
    s.set_attained_service("long", 3.0 * HOUR);
    s.submit(job("short", 10, 1, &[])).unwrap();
    // Protected: admitted 1 minute ago.
    let out = s.cycle(MIN);
    assert!(out.preempted.is_empty() && out.admitted.is_empty());
    let out = s.cycle(30 * MIN);
    assert_eq!(admitted(&out), ["short"]);
    assert_eq!(out.preempted.len(), 1);
    assert_eq!(out.preempted[0].job, "long");
    assert!(matches!(
        out.preempted[0].reason,
        PreemptionReason::AttainedService { .. }
    ));
    // The same level: no preemption back and forth.
    s.set_attained_service("short", 0.5 * HOUR);
    s.set_attained_service("long", 0.9 * HOUR);
    let out = s.cycle(120 * MIN);
    assert!(out.preempted.is_empty());
}

#[test]
fn a_job_moves_to_a_faster_type_that_frees_up() {
    let tput = [("K80", 1.0), ("V100", 4.0)];
    let nodes = vec![node("k0", "K80", 1), node("v0", "V100", 1)];
    let config = SchedulerConfig {
        move_in_place: true,
        ..SchedulerConfig::default()
    };
    let mut s = Scheduler::new(&snapshot(nodes), config).unwrap();
    s.submit(job("fast", 0, 1, &tput)).unwrap();
    s.submit(job("slow", 1, 1, &tput)).unwrap();
    let out = s.cycle(0);
    assert_eq!(out.admitted.len(), 2);
    assert_eq!(out.admitted[0].gpu_type.as_deref(), Some("V100"));
    assert_eq!(out.admitted[1].gpu_type.as_deref(), Some("K80"));
    s.finish("fast");
    // Protected still.
    assert!(s.cycle(MIN).moved.is_empty());
    let out = s.cycle(10 * MIN);
    assert_eq!(out.moved.len(), 1);
    assert_eq!(out.moved[0].job, "slow");
    assert_eq!(out.moved[0].gpu_type.as_deref(), Some("V100"));
    assert!(matches!(
        &out.preempted[0].reason,
        PreemptionReason::Rebalance { to_pool, swapped_with: None, .. } if to_pool == "V100"
    ));
    let running = s.running_jobs();
    assert_eq!(running.len(), 1);
    assert_eq!(running[0].placements[0].node, "v0");
    // It does not bounce.
    assert!(s.cycle(60 * MIN).preempted.is_empty());
}

#[test]
fn without_in_place_moves_a_rebalanced_job_is_pending_again() {
    let tput = [("K80", 1.0), ("V100", 4.0)];
    let nodes = vec![node("k0", "K80", 1), node("v0", "V100", 1)];
    let mut s = Scheduler::new(&snapshot(nodes), SchedulerConfig::default()).unwrap();
    s.submit(job("fast", 0, 1, &tput)).unwrap();
    s.submit(job("slow", 1, 1, &tput)).unwrap();
    s.cycle(0);
    s.finish("fast");
    let out = s.cycle(10 * MIN);
    assert!(out.moved.is_empty());
    assert_eq!(out.preempted.len(), 1);
    assert_eq!(s.pending_jobs(), ["slow"]);
    let out = s.cycle(11 * MIN);
    assert_eq!(out.admitted[0].gpu_type.as_deref(), Some("V100"));
}

#[test]
fn small_speedups_do_not_move() {
    let tput = [("K80", 1.0), ("V100", 1.2)];
    let nodes = vec![node("k0", "K80", 1), node("v0", "V100", 1)];
    let config = SchedulerConfig {
        move_in_place: true,
        ..SchedulerConfig::default()
    };
    let mut s = Scheduler::new(&snapshot(nodes), config).unwrap();
    s.submit(job("a", 0, 1, &tput)).unwrap();
    s.submit(job("b", 1, 1, &tput)).unwrap();
    s.cycle(0);
    s.finish("a");
    let out = s.cycle(10 * MIN);
    assert!(out.preempted.is_empty() && out.moved.is_empty());
}

#[test]
fn jobs_swap_when_one_gains_much_more_from_the_fast_type() {
    let nodes = vec![node("k0", "K80", 1), node("v0", "V100", 1)];
    let config = SchedulerConfig {
        move_in_place: true,
        ..SchedulerConfig::default()
    };
    let mut s = Scheduler::new(&snapshot(nodes), config).unwrap();
    // `meh` gains 1.1x from V100 and takes it first; `eager` gains 5x.
    s.submit(job("meh", 0, 1, &[("K80", 1.0), ("V100", 1.1)]))
        .unwrap();
    s.submit(job("eager", 1, 1, &[("K80", 1.0), ("V100", 5.0)]))
        .unwrap();
    let out = s.cycle(0);
    assert_eq!(out.admitted[0].job, "meh");
    assert_eq!(out.admitted[0].gpu_type.as_deref(), Some("V100"));
    let out = s.cycle(10 * MIN);
    let mut moved: Vec<(&str, Option<&str>)> = out
        .moved
        .iter()
        .map(|a| (a.job.as_str(), a.gpu_type.as_deref()))
        .collect();
    moved.sort();
    assert_eq!(moved, [("eager", Some("V100")), ("meh", Some("K80"))]);
    // No over-commit: one job per GPU.
    let mut nodes: Vec<String> = s
        .running_jobs()
        .iter()
        .map(|r| r.placements[0].node.clone())
        .collect();
    nodes.sort();
    assert_eq!(nodes, ["k0", "v0"]);
    // And no swap back.
    assert!(s.cycle(60 * MIN).preempted.is_empty());
}
