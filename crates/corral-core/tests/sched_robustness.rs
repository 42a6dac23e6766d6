//! Bad input is refused with the error that names it, absurd values are handled, and
//! neither ever panics nor stops valid jobs beside them from being admitted (found by the
//! simulator: huge node totals once overflowed).

use corral_core::sched::{
    ClusterSnapshot, Decision, JobRequest, Node, PoolQuota, QueueConfig, ReplicaGroup,
    ReplicaPlacement, ResourceAmount, RunningJob, SchedError, Scheduler, SchedulerConfig,
};

fn node(name: &str) -> Node {
    Node::new(name, Some("A100".into()), 8, u64::MAX, u64::MAX)
}

fn group(count: u32, gpu: u32, cpu_milli: u64, memory_bytes: u64) -> ReplicaGroup {
    ReplicaGroup {
        role: "worker".into(),
        count,
        cpu_milli,
        memory_bytes,
        gpu,
        allowed_gpu_types: Vec::new(),
        extended: Default::default(),
    }
}

fn job(key: &str, groups: Vec<ReplicaGroup>) -> JobRequest {
    JobRequest {
        key: key.into(),
        queue: "default".into(),
        priority: 0,
        submit_time: 0,
        groups,
        throughput: Default::default(),
        preemptible: true,
        node_selector: Default::default(),
        tolerations: Default::default(),
        elastic: None,
    }
}

/// Three nodes of u64::MAX CPU and memory (the cluster total does not fit in a u64), and
/// the queue `default` with unlimited quota on them.
fn three_huge_nodes() -> ClusterSnapshot {
    let unlimited = PoolQuota {
        nominal: ResourceAmount::UNLIMITED,
        borrowing_limit: None,
        lending_limit: None,
    };
    ClusterSnapshot {
        nodes: vec![node("a"), node("b"), node("c")],
        queues: vec![QueueConfig {
            name: "default".into(),
            cohort: None,
            weight: 1,
            namespaces: Vec::new(),
            quotas: [("A100".to_string(), unlimited)].into(),
        }],
        ..Default::default()
    }
}

fn admitted(s: &mut Scheduler, now: u64) -> Vec<String> {
    let mut keys: Vec<String> = s.cycle(now).admitted.into_iter().map(|a| a.job).collect();
    keys.sort();
    keys
}

#[test]
fn huge_node_totals_do_not_overflow() {
    let mut s = Scheduler::new(&three_huge_nodes(), SchedulerConfig::default()).expect("builds");
    // A gang that needs most of every node's CPU and memory, and all 24 GPUs.
    s.submit(job("big", vec![group(3, 8, u64::MAX / 2, u64::MAX / 2)]))
        .expect("valid job");
    let outcome = s.cycle(0);
    assert_eq!(outcome.admitted.len(), 1, "{:?}", outcome.pending);
    let a = &outcome.admitted[0];
    assert_eq!(a.job, "big");
    assert_eq!(a.placements.len(), 3);
    let mut nodes: Vec<&str> = a.placements.iter().map(|p| p.node.as_str()).collect();
    nodes.sort();
    assert_eq!(nodes, ["a", "b", "c"], "one replica per node");
    // Nothing is left: the next job waits, with a reason.
    s.submit(job("next", vec![group(1, 1, 1, 1)]))
        .expect("valid job");
    let outcome = s.cycle(1);
    assert!(outcome.admitted.is_empty(), "{:?}", outcome.admitted);
    assert_eq!(outcome.pending.len(), 1);
    assert_eq!(outcome.pending[0].job, "next");
}

#[test]
fn absurd_requests_wait_and_the_valid_job_beside_them_is_admitted() {
    let mut s = Scheduler::new(&three_huge_nodes(), SchedulerConfig::default()).expect("builds");
    let mut nobodys = job("queue", vec![group(1, 1, 1, 1)]);
    nobodys.queue = "nobody".into();
    for j in [
        // More GPUs per replica than any node has.
        job("gpus", vec![group(1, u32::MAX, 1, 1)]),
        // Four replicas that each take a whole node's CPU (u64::MAX), on three nodes.
        job("cpu", vec![group(4, 0, u64::MAX, 1)]),
        // u64::MAX memory each, many times over: the gang's total saturates.
        job("memory", vec![group(1_000, 0, 1, u64::MAX)]),
        // Far more replicas than the cluster has GPUs. (Not u32::MAX: `submit` keeps one
        // entry per replica, so that would take 16 GiB; the API caps replicas per role.)
        job("replicas", vec![group(100_000, 1, 1, 1)]),
        // A queue the cluster does not have.
        nobodys,
    ] {
        s.submit(j).expect("well-formed, only too big");
    }
    s.submit(job("fits", vec![group(2, 4, 1000, 1 << 30)]))
        .expect("valid job");
    let outcome = s.cycle(0);
    let admitted: Vec<&str> = outcome.admitted.iter().map(|a| a.job.as_str()).collect();
    assert_eq!(admitted, ["fits"], "{:#?}", outcome.pending);
    let mut pending: Vec<&str> = outcome.pending.iter().map(|p| p.job.as_str()).collect();
    pending.sort();
    assert_eq!(pending, ["cpu", "gpus", "memory", "queue", "replicas"]);
    for p in &outcome.pending {
        let reason = p.reason.to_string();
        let names_it = match p.job.as_str() {
            "gpus" => reason.contains("largest node has 8"),
            "queue" => reason.contains("nobody"),
            "replicas" => reason.contains("pool has only 24"),
            _ => !reason.is_empty(),
        };
        assert!(names_it, "{}: {reason}", p.job);
    }
}

#[test]
fn malformed_jobs_are_refused_and_the_valid_ones_still_admitted() {
    let mut s = Scheduler::new(&three_huge_nodes(), SchedulerConfig::default()).expect("builds");
    s.submit(job("ok-1", vec![group(1, 8, 1, 1)]))
        .expect("valid job");
    assert_eq!(
        s.submit(job("no-groups", Vec::new())),
        Err(SchedError::EmptyJob("no-groups".into()))
    );
    assert_eq!(
        s.submit(job(
            "zero-replicas",
            vec![group(0, 1, 1, 1), group(0, 0, 1, 1)]
        )),
        Err(SchedError::EmptyJob("zero-replicas".into()))
    );
    assert_eq!(
        s.submit(job("ok-1", vec![group(1, 1, 1, 1)])),
        Err(SchedError::DuplicateJob("ok-1".into()))
    );
    // The fast path refuses the same way and admits nothing.
    assert_eq!(
        s.try_admit(job("no-groups", Vec::new()), 0),
        Err(SchedError::EmptyJob("no-groups".into()))
    );
    s.submit(job("ok-2", vec![group(2, 8, 1, 1)]))
        .expect("valid job");
    assert_eq!(admitted(&mut s, 0), ["ok-1", "ok-2"]);
    // The refused keys were never stored: they can be submitted once fixed.
    s.submit(job("no-groups", vec![group(1, 0, 1, 1)]))
        .expect("fixed job");
    assert_eq!(admitted(&mut s, 1), ["no-groups"]);
    // A refused duplicate did not replace the job it collided with.
    assert!(s.finish("ok-1"));
    assert!(!s.finish("ok-1"));
    match s.try_admit(job("after", vec![group(1, 8, 1, 1)]), 2) {
        Ok(Decision::Admitted { admission, .. }) => assert_eq!(admission.placements.len(), 1),
        other => panic!("ok-1's GPUs are free again: {other:?}"),
    }
}

#[test]
fn malformed_snapshots_are_refused_with_what_is_wrong() {
    let err = |snapshot: &ClusterSnapshot| {
        Scheduler::new(snapshot, SchedulerConfig::default())
            .err()
            .expect("refused")
    };
    let mut s = three_huge_nodes();
    s.nodes
        .push(Node::new("wide", Some("A100".into()), 65, 1, 1));
    assert_eq!(
        err(&s),
        SchedError::TooManyGpus {
            node: "wide".into(),
            gpus: 65
        }
    );
    let mut s = three_huge_nodes();
    s.nodes.push(node("a"));
    assert_eq!(err(&s), SchedError::DuplicateNode("a".into()));

    let running = |key: &str, node: &str, gpu_indices: Vec<u32>| RunningJob {
        request: job(key, vec![group(1, gpu_indices.len() as u32, 1, 1)]),
        placements: vec![ReplicaPlacement {
            role: "worker".into(),
            index: 0,
            node: node.into(),
            gpu_indices,
        }],
        admitted_at: 0,
    };
    let mut s = three_huge_nodes();
    s.running.push(running("lost", "nowhere", vec![0]));
    assert_eq!(
        err(&s),
        SchedError::UnknownNode {
            job: "lost".into(),
            node: "nowhere".into()
        }
    );
    // Two running jobs on the same GPU: the snapshot is inconsistent.
    let mut s = three_huge_nodes();
    s.running.push(running("first", "a", vec![3]));
    s.running.push(running("second", "a", vec![3]));
    assert_eq!(
        err(&s),
        SchedError::Overcommitted {
            job: "second".into(),
            node: "a".into()
        }
    );
    // The same running jobs on distinct GPUs are fine, and hold them.
    let mut s = three_huge_nodes();
    s.running.push(running("first", "a", vec![3]));
    s.running.push(running("second", "a", vec![4]));
    let mut sched = Scheduler::new(&s, SchedulerConfig::default()).expect("consistent");
    sched
        .submit(job("rest", vec![group(1, 7, 1, 1)]))
        .expect("valid job");
    let outcome = sched.cycle(0);
    assert_eq!(outcome.admitted.len(), 1, "{:?}", outcome.pending);
    assert_ne!(
        outcome.admitted[0].placements[0].node, "a",
        "node a has only 6 GPUs free"
    );
}
