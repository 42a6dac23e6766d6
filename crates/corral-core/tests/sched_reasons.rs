//! One test per pending-reason message, plus the issue's example end to end.

use std::collections::BTreeMap;

use corral_core::sched::{
    Blocker, ClusterSnapshot, JobRequest, Misfit, Needs, Node, NodeAllocation, NodePoolConfig,
    PendingReason, PoolQuota, PreemptionReason, QueueConfig, QuotaResource, ReplicaGroup,
    ReplicaPlacement, ResourceAmount, RunningJob, SchedulerConfig, Taint, TaintBlock, TaintEffect,
    Toleration, schedule,
};

fn needs(replicas: u64, per: Option<u32>, total: u64, types: &[&str]) -> Needs {
    Needs {
        replicas,
        gpus_per_replica: per,
        total_gpus: total,
        gpu_types: types.iter().map(|t| t.to_string()).collect(),
        cpu_milli: 2000,
        memory_bytes: 4 << 30,
    }
}

fn a100_node(name: &str, used: &[u32]) -> Node {
    Node {
        allocated: NodeAllocation {
            gpu_indices: used.to_vec(),
            ..Default::default()
        },
        ..Node::new(name, Some("A100".into()), 8, 64_000, 512 << 30)
    }
}

fn group(role: &str, count: u32, gpu: u32) -> ReplicaGroup {
    ReplicaGroup {
        role: role.into(),
        count,
        cpu_milli: 1000,
        memory_bytes: 1 << 30,
        gpu,
        allowed_gpu_types: vec!["A100".into()],
        extended: BTreeMap::new(),
    }
}

fn job(key: &str, queue: &str, groups: Vec<ReplicaGroup>) -> JobRequest {
    JobRequest {
        key: key.into(),
        queue: queue.into(),
        priority: 0,
        submit_time: 0,
        groups,
        throughput: BTreeMap::new(),
        preemptible: true,
        node_selector: BTreeMap::new(),
        tolerations: Default::default(),
        elastic: None,
    }
}

#[test]
fn issue_example_reads_as_written() {
    let quota = |gpu| PoolQuota {
        nominal: ResourceAmount::gpus(gpu),
        borrowing_limit: None,
        lending_limit: None,
    };
    let snapshot = ClusterSnapshot {
        nodes: vec![
            a100_node("node-0", &[]),
            a100_node("node-1", &[]),
            a100_node("node-2", &[0, 1, 2, 3, 4, 5, 6, 7]),
            a100_node("node-3", &[0, 1]),
        ],
        pools: vec![],
        queues: vec![
            QueueConfig {
                name: "team-a".into(),
                cohort: Some("org".into()),
                weight: 1,
                namespaces: Vec::new(),
                quotas: [("A100".to_string(), quota(16))].into(),
            },
            QueueConfig {
                name: "team-b".into(),
                cohort: Some("org".into()),
                weight: 1,
                namespaces: Vec::new(),
                quotas: [("A100".to_string(), quota(0))].into(),
            },
        ],
        running: vec![RunningJob {
            request: job("a/running", "team-a", vec![group("worker", 2, 8)]),
            placements: (0..2)
                .map(|i| ReplicaPlacement {
                    role: "worker".into(),
                    index: i,
                    node: format!("node-{i}"),
                    gpu_indices: (0..8).collect(),
                })
                .collect(),
            admitted_at: 0,
        }],
    };
    let pending = [job("a/big", "team-a", vec![group("worker", 1, 8)])];
    let out = schedule(&snapshot, &pending, SchedulerConfig::default(), 1).unwrap();
    assert!(out.admitted.is_empty());
    assert_eq!(
        out.pending[0].reason.to_string(),
        "needs 8 GPUs of type A100 on one node; the largest free block is 6 GPUs on node-3; \
         queue team-a is at its GPU quota 16/16 and its cohort has nothing to lend"
    );
}

#[test]
fn needs_single_gang_mixed_and_cpu_only() {
    assert_eq!(
        needs(1, Some(1), 1, &[]).to_string(),
        "needs 1 GPU of any type on one node"
    );
    assert_eq!(
        needs(4, Some(8), 32, &["A100", "H100"]).to_string(),
        "needs 4 replicas x 8 GPUs (32 GPUs) of type A100 or H100"
    );
    assert_eq!(
        needs(3, None, 9, &["A100"]).to_string(),
        "needs 3 replicas with 9 GPUs in all of type A100"
    );
    assert_eq!(
        needs(1, Some(0), 0, &[]).to_string(),
        "needs 2 CPUs and 4 GiB memory on one node"
    );
}

fn reason(blockers: Vec<Blocker>) -> String {
    PendingReason {
        needs: needs(1, Some(8), 8, &["A100"]),
        blockers,
    }
    .to_string()
}

#[test]
fn no_such_queue() {
    assert_eq!(
        reason(vec![Blocker::NoSuchQueue {
            queue: "nope".into()
        }]),
        "needs 8 GPUs of type A100 on one node; queue nope does not exist"
    );
}

#[test]
fn no_matching_pool() {
    assert_eq!(
        reason(vec![Blocker::NoMatchingPool {
            gpu_types: vec!["A100".into()],
            asks_gpus: true,
            unpooled: vec![],
            unpooled_total: 0,
        }]),
        "needs 8 GPUs of type A100 on one node; no node pool has GPUs of type A100"
    );
    assert_eq!(
        reason(vec![Blocker::NoMatchingPool {
            gpu_types: vec![],
            asks_gpus: true,
            unpooled: vec![],
            unpooled_total: 0,
        }]),
        "needs 8 GPUs of type A100 on one node; no node pool has GPUs, and this job asks for GPUs"
    );
}

/// Aliases select pools by the words of their type (corral_api::gpu_type): a job asking for
/// `H100` or the NVML spelling runs on a node labelled with the product name; `A100` does not.
#[test]
fn aliases_and_nvml_names_select_the_product_label_pool() {
    let run = |asked: &str| {
        let snapshot = ClusterSnapshot {
            nodes: vec![Node::new(
                "gpu-0",
                Some("NVIDIA-H100-80GB-HBM3".into()),
                1,
                16_000,
                64 << 30,
            )],
            pools: vec![],
            queues: vec![QueueConfig {
                name: "q".into(),
                cohort: None,
                weight: 1,
                namespaces: Vec::new(),
                quotas: [(
                    "NVIDIA-H100-80GB-HBM3".to_string(),
                    PoolQuota {
                        nominal: ResourceAmount::gpus(8),
                        borrowing_limit: None,
                        lending_limit: None,
                    },
                )]
                .into(),
            }],
            running: vec![],
        };
        let g = ReplicaGroup {
            allowed_gpu_types: vec![asked.to_string()],
            ..group("worker", 1, 1)
        };
        let out = schedule(
            &snapshot,
            &[job("a/j", "q", vec![g])],
            SchedulerConfig::default(),
            1,
        )
        .expect("schedule");
        out.admitted.len()
    };
    for asked in [
        "H100",
        "h100-80gb",
        "NVIDIA H100 80GB HBM3",
        "NVIDIA-H100-80GB-HBM3",
    ] {
        assert_eq!(run(asked), 1, "{asked}");
    }
    for asked in ["A100", "H100-PCIe", "H200"] {
        assert_eq!(run(asked), 0, "{asked}");
    }
}

#[test]
fn too_large_for_node() {
    assert_eq!(
        reason(vec![Blocker::TooLargeForNode {
            pool: "A100".into(),
            gpu_type: Some("A100".into()),
            gpus_per_replica: 8,
            largest_node_gpus: 4,
        }]),
        "needs 8 GPUs of type A100 on one node; a replica needs 8 GPUs but the largest node has 4"
    );
}

#[test]
fn too_large_for_pool() {
    assert_eq!(
        reason(vec![Blocker::TooLargeForPool {
            pool: "A100".into(),
            gpu_type: Some("A100".into()),
            total_gpus: 64,
            pool_gpus: 32,
        }]),
        "needs 8 GPUs of type A100 on one node; the gang needs 64 GPUs but the pool has only 32"
    );
}

/// A reason stored before the scheduler said what rules the nodes out keeps its words.
#[test]
fn no_suitable_node() {
    assert!(
        reason(vec![Blocker::NoSuitableNode {
            pool: "A100".into(),
            gpu_type: Some("A100".into()),
            taint: None,
            misfit: None,
        }])
        .ends_with("no node matches the job's node selector, tolerations, CPU, memory and extended resources")
    );
}

fn capacity(largest: u32, free: u64, fit: u64, replicas: u64, reserved: &[&str]) -> Blocker {
    Blocker::Capacity {
        pool: "A100".into(),
        gpu_type: Some("A100".into()),
        largest_free: largest,
        largest_free_node: (largest > 0).then(|| "node-3".to_string()),
        gpus_per_replica: 8,
        free_gpus: free,
        replicas_that_fit: fit,
        replicas,
        reserved_for: reserved.iter().map(|s| s.to_string()).collect(),
        reserved_free: if reserved.is_empty() { 0 } else { 8 },
        tainted: None,
        short: None,
    }
}

#[test]
fn capacity_messages() {
    assert_eq!(
        capacity(6, 6, 0, 1, &[]).to_string(),
        "the largest free block is 6 GPUs on node-3"
    );
    assert_eq!(capacity(0, 0, 0, 1, &[]).to_string(), "no GPUs are free");
    // The GPUs are there; the node's CPU or memory is not.
    assert_eq!(
        capacity(8, 12, 1, 1, &[]).to_string(),
        "8 GPUs are free on node-3, but no node with enough free GPUs has the CPU, memory \
         and extended resources a replica needs free"
    );
    assert_eq!(
        capacity(8, 20, 2, 4, &["ns/big"]).to_string(),
        "the largest free block is 8 GPUs on node-3 (20 GPUs free in all; room for 2 of 4 replicas); \
         8 free GPUs are on nodes reserved for ns/big so that it is not starved"
    );
}

fn quota(used: u64, nominal: u64, cohort: Option<&str>, lend: u64, limit: Option<u64>) -> Blocker {
    Blocker::Quota {
        queue: "team-a".into(),
        pool: "A100".into(),
        gpu_type: Some("A100".into()),
        resource: QuotaResource::Gpu,
        used,
        requested: 8,
        nominal,
        borrowing_limit: limit,
        cohort: cohort.map(str::to_string),
        cohort_can_lend: lend,
    }
}

#[test]
fn quota_messages() {
    assert_eq!(
        quota(16, 16, None, 0, None).to_string(),
        "queue team-a is at its GPU quota 16/16 and has no cohort to borrow from"
    );
    assert_eq!(
        quota(16, 16, Some("org"), 0, None).to_string(),
        "queue team-a is at its GPU quota 16/16 and its cohort has nothing to lend"
    );
    assert_eq!(
        quota(12, 16, Some("org"), 2, None).to_string(),
        "queue team-a uses 12/16 of its GPU quota and needs 8 more and its cohort can lend only 2"
    );
    assert_eq!(
        quota(16, 16, Some("org"), 40, Some(4)).to_string(),
        "queue team-a is at its GPU quota 16/16 and may borrow at most 4"
    );
}

#[test]
fn several_pools_are_labelled() {
    let mut b = capacity(6, 6, 0, 1, &[]);
    if let Blocker::Capacity { pool, gpu_type, .. } = &mut b {
        *pool = "H100".into();
        *gpu_type = Some("H100".into());
    }
    let text = reason(vec![capacity(6, 6, 0, 1, &[]), b]);
    assert_eq!(
        text,
        "needs 8 GPUs of type A100 on one node; on A100: the largest free block is 6 GPUs on node-3; \
         on H100: the largest free block is 6 GPUs on node-3"
    );
}

#[test]
fn preemption_reasons() {
    assert_eq!(
        PreemptionReason::LowerPriority {
            preemptor: "ns/urgent".into(),
            preemptor_priority: 100,
            victim_priority: 0
        }
        .to_string(),
        "preempted to make room for ns/urgent, which has higher priority (100 > 0)"
    );
    assert!(
        PreemptionReason::Reclaim {
            preemptor: "ns/a".into(),
            queue: "team-a".into(),
            pool: "A100".into()
        }
        .to_string()
        .starts_with("preempted because queue team-a reclaims its quota in pool A100")
    );
}

#[test]
fn a_namespace_the_queue_does_not_list_waits_with_the_queue_and_its_namespaces() {
    let queue = |name: &str, namespaces: &[&str]| QueueConfig {
        name: name.into(),
        cohort: None,
        weight: 1,
        namespaces: namespaces.iter().map(|n| n.to_string()).collect(),
        quotas: [(
            "A100".to_string(),
            PoolQuota {
                nominal: ResourceAmount::UNLIMITED,
                borrowing_limit: None,
                lending_limit: None,
            },
        )]
        .into(),
    };
    let snapshot = ClusterSnapshot {
        nodes: vec![a100_node("node-0", &[])],
        pools: vec![],
        queues: vec![queue("team-vision", &["vision"]), queue("open", &[])],
        running: vec![],
    };
    // The issue's case: a job of namespace nlp names team-vision on an empty cluster.
    let pending = [
        job("nlp/steal", "team-vision", vec![group("worker", 1, 1)]),
        job("vision/own", "team-vision", vec![group("worker", 1, 1)]),
        job("nlp/open", "open", vec![group("worker", 1, 1)]),
    ];
    let out = schedule(&snapshot, &pending, SchedulerConfig::default(), 1).unwrap();
    let mut admitted: Vec<&str> = out.admitted.iter().map(|a| a.job.as_str()).collect();
    admitted.sort();
    assert_eq!(admitted, ["nlp/open", "vision/own"]);
    assert_eq!(out.pending.len(), 1);
    let reason = &out.pending[0].reason;
    assert_eq!(
        reason.blockers,
        [Blocker::NamespaceNotAllowed {
            queue: "team-vision".into(),
            namespace: "nlp".into(),
            allowed: vec!["vision".into()],
        }]
    );
    assert!(reason.never_fits());
    assert_eq!(
        reason.to_string(),
        "needs 1 GPU of type A100 on one node; queue team-vision admits only jobs of namespace \
         vision, not of nlp; use a queue of namespace nlp or ask for it to be listed in the \
         queue's spec.namespaces"
    );
}

/// The issue's case: a small job was told "no GPUs are free; nodes are reserved for
/// vision/ddp-c" while GPUs were free. A gang reserves node-a (busy) and node-b (8 free);
/// node-c has 8 free GPUs behind a taint the small job does not tolerate.
#[test]
fn a_reservation_is_named_only_where_it_holds_room_the_job_could_use_and_taints_are_named() {
    let busy = a100_node("node-a", &[]);
    let tainted = Node {
        taints: vec![Taint::new("dedicated", "infra", TaintEffect::NoSchedule)],
        ..a100_node("node-c", &[])
    };
    let snapshot = ClusterSnapshot {
        nodes: vec![busy, a100_node("node-b", &[]), tainted],
        pools: vec![],
        queues: vec![open_queue()],
        running: vec![RunningJob {
            request: job("a/run", "default", vec![group("worker", 1, 8)]),
            placements: vec![ReplicaPlacement {
                role: "worker".into(),
                index: 0,
                node: "node-a".into(),
                gpu_indices: (0..8).collect(),
            }],
            admitted_at: 0,
        }],
    };
    let mut gang = job("vision/ddp-c", "default", vec![group("worker", 2, 8)]);
    gang.submit_time = 0;
    let mut small = job("nlp/small", "default", vec![group("worker", 1, 1)]);
    small.submit_time = 1;
    // The gang needs node-a's GPUs and reserves node-a and node-b; nothing is preempted
    // (same priority).
    let out = schedule(
        &snapshot,
        &[gang, small.clone()],
        SchedulerConfig::default(),
        1,
    )
    .unwrap();
    assert!(out.admitted.is_empty(), "{:?}", out.admitted);
    let text = |key: &str| {
        out.pending
            .iter()
            .find(|p| p.job == key)
            .map(|p| p.reason.to_string())
            .unwrap_or_default()
    };
    // Was: "needs 1 GPU of type A100 on one node; the largest free block is 8 GPUs on
    // node-c (...); nodes are reserved for vision/ddp-c so that it is not starved": node-c
    // is not usable (taint) and the reserved GPUs were not said to be free.
    assert_eq!(
        text("nlp/small"),
        "needs 1 GPU of type A100 on one node; no node the job may use has a free GPU; \
         8 free GPUs are on nodes reserved for vision/ddp-c so that it is not starved; \
         node-c has 8 GPUs but taint dedicated=infra:NoSchedule, which the job does not \
         tolerate"
    );
    // A job that tolerates the taint is placed on node-c: not blocked by the reservation.
    let mut tolerant = small.clone();
    tolerant.key = "infra/tolerant".into();
    tolerant.tolerations = [(
        "worker".to_string(),
        vec![Toleration::equal(
            "dedicated",
            "infra",
            Some(TaintEffect::NoSchedule),
        )],
    )]
    .into();
    let mut gang = job("vision/ddp-c", "default", vec![group("worker", 2, 8)]);
    gang.submit_time = 0;
    let out = schedule(&snapshot, &[gang, tolerant], SchedulerConfig::default(), 1).unwrap();
    assert_eq!(out.admitted.len(), 1);
    assert_eq!(out.admitted[0].placements[0].node, "node-c");
    // A job the reserved nodes cannot hold (it selects a label they lack) is not told that
    // the reservation blocks it.
    let mut elsewhere = small;
    elsewhere.key = "nlp/elsewhere".into();
    elsewhere.node_selector = [("rack".to_string(), "r9".to_string())].into();
    let mut labelled = snapshot.clone();
    labelled.nodes[0].labels.insert("rack".into(), "r9".into());
    let mut gang = job("vision/ddp-c", "default", vec![group("worker", 2, 8)]);
    gang.submit_time = 0;
    let out = schedule(&labelled, &[gang, elsewhere], SchedulerConfig::default(), 1).unwrap();
    let reason = out
        .pending
        .iter()
        .find(|p| p.job == "nlp/elsewhere")
        .map(|p| p.reason.to_string())
        .unwrap_or_default();
    assert!(!reason.contains("reserved"), "{reason}");
    assert!(
        reason.contains("no node the job may use has a free GPU"),
        "{reason}"
    );
}

#[test]
fn a_job_that_never_fits_names_the_taint_of_a_node_that_would_hold_it() {
    let snapshot = ClusterSnapshot {
        nodes: vec![Node {
            taints: vec![Taint::new(
                "nvidia.com/gpu",
                "reserved",
                TaintEffect::NoSchedule,
            )],
            ..a100_node("node-0", &[])
        }],
        queues: vec![open_queue()],
        ..Default::default()
    };
    let out = schedule(
        &snapshot,
        &[job("a/j", "default", vec![group("worker", 1, 4)])],
        SchedulerConfig::default(),
        1,
    )
    .unwrap();
    let reason = &out.pending[0].reason;
    assert!(
        matches!(
            &reason.blockers[..],
            [Blocker::NoSuitableNode { taint: Some(TaintBlock { node, taint, .. }), .. }]
                if node == "node-0" && taint == "nvidia.com/gpu=reserved:NoSchedule"
        ),
        "{:?}",
        reason.blockers
    );
    assert!(
        reason
            .to_string()
            .ends_with("(node-0 has 8 GPUs but taint nvidia.com/gpu=reserved:NoSchedule, which the job does not tolerate)"),
        "{reason}"
    );
}

fn open_queue() -> QueueConfig {
    QueueConfig {
        name: "default".into(),
        cohort: None,
        weight: 1,
        namespaces: Vec::new(),
        quotas: [(
            "A100".to_string(),
            PoolQuota {
                nominal: ResourceAmount::UNLIMITED,
                borrowing_limit: None,
                lending_limit: None,
            },
        )]
        .into(),
    }
}

/// A queue with unlimited quota in each of `pools`.
fn queue_for(pools: &[&str]) -> QueueConfig {
    QueueConfig {
        name: "default".into(),
        cohort: None,
        weight: 1,
        namespaces: Vec::new(),
        quotas: pools
            .iter()
            .map(|p| {
                (
                    p.to_string(),
                    PoolQuota {
                        nominal: ResourceAmount::UNLIMITED,
                        borrowing_limit: None,
                        lending_limit: None,
                    },
                )
            })
            .collect(),
    }
}

fn cpu_group(role: &str, count: u32, cpu_milli: u64, memory_bytes: u64) -> ReplicaGroup {
    ReplicaGroup {
        role: role.into(),
        count,
        cpu_milli,
        memory_bytes,
        gpu: 0,
        allowed_gpu_types: vec![],
        extended: BTreeMap::new(),
    }
}

/// The one reason of the one pending job.
fn only_reason(snapshot: &ClusterSnapshot, job: JobRequest) -> PendingReason {
    let out = schedule(snapshot, &[job], SchedulerConfig::default(), 1).unwrap();
    assert!(out.admitted.is_empty(), "{:?}", out.admitted);
    out.pending[0].reason.clone()
}

fn cpu_node(name: &str, cpu_milli: u64, memory_bytes: u64) -> Node {
    Node::new(name, None, 0, cpu_milli, memory_bytes)
}

/// Issue 31: a CPU-only job waiting for CPU was told "no GPUs are free".
#[test]
fn a_cpu_only_job_waiting_for_cpu_is_told_cpu() {
    let busy = |cpu_used: u64, mem_used: u64| Node {
        allocated: NodeAllocation {
            cpu_milli: cpu_used,
            memory_bytes: mem_used,
            ..Default::default()
        },
        ..cpu_node("cpu-0", 4000, 16 << 30)
    };
    let snapshot = |node: Node| ClusterSnapshot {
        nodes: vec![node],
        queues: vec![queue_for(&["cpu"])],
        ..Default::default()
    };
    let want = cpu_group("worker", 1, 2000, 8 << 30);
    let one = job("a/cpu", "default", vec![want.clone()]);
    // Was: "needs 2 CPUs and 8 GiB memory on one node; no GPUs are free".
    assert_eq!(
        only_reason(&snapshot(busy(3000, 0)), one.clone()).to_string(),
        "needs 2 CPUs and 8 GiB memory on one node; no node has 2 CPUs free (at most 1, on cpu-0)"
    );
    assert_eq!(
        only_reason(&snapshot(busy(0, 12 << 30)), one.clone()).to_string(),
        "needs 2 CPUs and 8 GiB memory on one node; no node has 8 GiB memory free (at most \
         4 GiB, on cpu-0)"
    );
    assert_eq!(
        only_reason(&snapshot(busy(4000, 12 << 30)), one.clone()).to_string(),
        "needs 2 CPUs and 8 GiB memory on one node; no node has 2 CPUs free (all CPU is taken) \
         or 8 GiB memory free (at most 4 GiB, on cpu-0)"
    );
    // Each is free somewhere, but not on one node.
    let two = ClusterSnapshot {
        nodes: vec![
            Node {
                name: "cpu-1".into(),
                ..busy(0, 12 << 30)
            },
            busy(3000, 0),
        ],
        queues: vec![queue_for(&["cpu"])],
        ..Default::default()
    };
    assert_eq!(
        only_reason(&two, one).to_string(),
        "needs 2 CPUs and 8 GiB memory on one node; no node has 2 CPUs and 8 GiB memory free \
         at once"
    );
    // A CPU-only gang on a GPU pool is not told about GPUs or "room for 0 of 2 replicas".
    let gpu_pool = ClusterSnapshot {
        nodes: vec![Node {
            allocated: NodeAllocation {
                cpu_milli: 63_000,
                ..Default::default()
            },
            ..a100_node("node-0", &[])
        }],
        queues: vec![open_queue()],
        ..Default::default()
    };
    let text = only_reason(
        &gpu_pool,
        job(
            "a/gang",
            "default",
            vec![cpu_group("worker", 2, 2000, 1 << 30)],
        ),
    )
    .to_string();
    assert_eq!(
        text,
        "needs 2 replicas x 2 CPUs and 1 GiB memory; no node has 2 CPUs free (at most 1, on \
         node-0)"
    );
}

/// Issue 31: with pools declared as in examples/cluster.yaml (gpuType + nodeSelector), a job
/// that asks for no GPU was told "this job asks for GPUs" on a machine without GPUs.
#[test]
fn with_declared_pools_a_job_without_gpus_is_not_told_it_asks_for_gpus() {
    let product = "nvidia.com/gpu.product";
    let pool = |name: &str, gpu_type: &str| NodePoolConfig {
        name: name.into(),
        gpu_type: Some(gpu_type.into()),
        node_selector: [(product.to_string(), gpu_type.to_string())].into(),
    };
    let pools = vec![
        pool("h100", "NVIDIA-H100-80GB-HBM3"),
        pool("a100", "NVIDIA-A100-SXM4-80GB"),
    ];
    let local = Node {
        labels: [("kubernetes.io/hostname".to_string(), "local".to_string())].into(),
        ..cpu_node("local", 8000, 32 << 30)
    };
    let snapshot = ClusterSnapshot {
        nodes: vec![local],
        pools: pools.clone(),
        queues: vec![queue_for(&["h100", "a100"])],
        running: vec![],
    };
    let reason = only_reason(
        &snapshot,
        job(
            "a/cpu",
            "default",
            vec![cpu_group("worker", 1, 1000, 1 << 30)],
        ),
    );
    // Was: "needs 1 CPUs and 1 GiB memory on one node; no node pool has GPUs, and this job
    // asks for GPUs".
    assert_eq!(
        reason.to_string(),
        "needs 1 CPU and 1 GiB memory on one node; no node pool has a node; node local is in \
         no pool (a NodePool takes only nodes with GPUs of its gpuType and the labels of its \
         nodeSelector)"
    );
    assert!(reason.never_fits());
    // Where a pool's node is there, the same job runs on it.
    let a100 = Node {
        labels: [(product.to_string(), "NVIDIA-A100-SXM4-80GB".to_string())].into(),
        ..Node::new(
            "a100-0",
            Some("NVIDIA-A100-SXM4-80GB".into()),
            8,
            64_000,
            512 << 30,
        )
    };
    let snapshot = ClusterSnapshot {
        nodes: vec![a100],
        pools,
        queues: vec![queue_for(&["h100", "a100"])],
        running: vec![],
    };
    let out = schedule(
        &snapshot,
        &[job(
            "a/cpu",
            "default",
            vec![cpu_group("worker", 1, 1000, 1 << 30)],
        )],
        SchedulerConfig::default(),
        1,
    )
    .unwrap();
    assert_eq!(out.admitted.len(), 1, "{:?}", out.pending);
}

/// Issue 31 (seen in the operator): 600Gi of memory on 512Gi nodes was "no node matches the
/// job's node selector, tolerations, CPU, memory and extended resources".
#[test]
fn a_replica_larger_than_any_node_names_the_resource() {
    let snapshot = ClusterSnapshot {
        nodes: vec![a100_node("node-0", &[]), a100_node("node-1", &[])],
        queues: vec![open_queue()],
        ..Default::default()
    };
    let big = ReplicaGroup {
        memory_bytes: 600 << 30,
        ..group("worker", 1, 1)
    };
    let reason = only_reason(&snapshot, job("a/big", "default", vec![big.clone()]));
    assert!(reason.never_fits());
    assert!(
        matches!(
            &reason.blockers[..],
            [Blocker::NoSuitableNode {
                misfit: Some(Misfit::Resources(_)),
                taint: None,
                ..
            }]
        ),
        "{:?}",
        reason.blockers
    );
    assert_eq!(
        reason.to_string(),
        "needs 1 GPU of type A100 on one node; a replica needs 600 GiB memory but the largest \
         node, node-0, has 512 GiB"
    );
    // Several resources, and the role when the job has several.
    let chief = ReplicaGroup {
        cpu_milli: 96_000,
        extended: [("rdma/hca".to_string(), 2)].into(),
        ..ReplicaGroup {
            role: "chief".into(),
            ..big
        }
    };
    assert_eq!(
        only_reason(
            &snapshot,
            job("a/mixed", "default", vec![chief, group("worker", 2, 1)])
        )
        .to_string(),
        "needs 3 replicas x 1 GPU (3 GPUs) of type A100; a chief replica needs 96 CPUs but the \
         largest node, node-0, has 64; a chief replica needs 600 GiB memory but the largest \
         node, node-0, has 512 GiB; a chief replica needs 2 rdma/hca but no node has any"
    );
    // Each fits some node, but no node has both.
    let snapshot = ClusterSnapshot {
        nodes: vec![
            Node::new("fat", Some("A100".into()), 8, 16_000, 1 << 40),
            Node::new("wide", Some("A100".into()), 8, 128_000, 256 << 30),
        ],
        queues: vec![open_queue()],
        ..Default::default()
    };
    let both = ReplicaGroup {
        cpu_milli: 96_000,
        memory_bytes: 600 << 30,
        ..group("worker", 1, 1)
    };
    assert_eq!(
        only_reason(&snapshot, job("a/both", "default", vec![both])).to_string(),
        "needs 1 GPU of type A100 on one node; no node has 1 GPU, 96 CPUs and 600 GiB memory \
         at once, which a replica needs"
    );
}

/// A node selector no node matches, and nodes left out by the selector, are said so.
#[test]
fn a_node_selector_that_matches_no_node_is_named() {
    let labelled = |name: &str, rack: &str, gpus: u32| Node {
        labels: [("rack".to_string(), rack.to_string())].into(),
        ..Node::new(name, Some("A100".into()), gpus, 64_000, 512 << 30)
    };
    let snapshot = ClusterSnapshot {
        nodes: vec![labelled("node-0", "r1", 4), labelled("node-1", "r2", 8)],
        queues: vec![open_queue()],
        ..Default::default()
    };
    let mut j = job("a/j", "default", vec![group("worker", 1, 8)]);
    j.node_selector = [("rack".to_string(), "r9".to_string())].into();
    assert_eq!(
        only_reason(&snapshot, j.clone()).to_string(),
        "needs 8 GPUs of type A100 on one node; no node has the labels of the job's node \
         selector (rack=r9)"
    );
    j.node_selector = [("rack".to_string(), "r1".to_string())].into();
    assert_eq!(
        only_reason(&snapshot, j).to_string(),
        "needs 8 GPUs of type A100 on one node; a replica needs 8 GPUs but the largest node \
         the job may use, node-0, has 4"
    );
}

/// GPUs free, CPU taken: the reason names CPU, not "CPU, memory and extended resources".
#[test]
fn free_gpus_without_the_cpu_a_replica_needs_name_cpu() {
    let half = |name: &str| Node {
        allocated: NodeAllocation {
            cpu_milli: 32_000,
            ..Default::default()
        },
        ..a100_node(name, &[])
    };
    let snapshot = ClusterSnapshot {
        nodes: vec![half("node-0"), half("node-1")],
        queues: vec![open_queue()],
        ..Default::default()
    };
    let hungry = ReplicaGroup {
        cpu_milli: 48_000,
        ..group("worker", 1, 1)
    };
    // Was: "...; 8 GPUs are free on node-0, but no node with enough free GPUs has the CPU,
    // memory and extended resources a replica needs free".
    assert_eq!(
        only_reason(&snapshot, job("a/j", "default", vec![hungry])).to_string(),
        "needs 1 GPU of type A100 on one node; 8 GPUs are free on node-0, but no node with 1 \
         free GPU has 48 CPUs free (at most 32, on node-0)"
    );
}

/// Taints by Kubernetes' rules, in the scheduler: PreferNoSchedule never blocks; a taint
/// that keeps a CPU-only job off the only node with room is named with room, not GPUs; and
/// a node is used only where every role of the job tolerates its taints.
#[test]
fn taints_and_tolerations_follow_kubernetes_rules_in_the_scheduler() {
    let tainted = |effect: TaintEffect| ClusterSnapshot {
        nodes: vec![Node {
            taints: vec![Taint::new("dedicated", "infra", effect)],
            ..cpu_node("cpu-0", 8000, 32 << 30)
        }],
        queues: vec![queue_for(&["cpu"])],
        ..Default::default()
    };
    let cpu_job = || {
        job(
            "a/cpu",
            "default",
            vec![cpu_group("worker", 1, 1000, 1 << 30)],
        )
    };
    let admitted = |snapshot: &ClusterSnapshot, j: JobRequest| {
        schedule(snapshot, &[j], SchedulerConfig::default(), 1)
            .unwrap()
            .admitted
            .len()
    };
    assert_eq!(
        admitted(&tainted(TaintEffect::PreferNoSchedule), cpu_job()),
        1
    );
    let reason = only_reason(&tainted(TaintEffect::NoExecute), cpu_job());
    // Was: "...; no node matches the job's node selector, tolerations, CPU, memory and
    // extended resources (cpu-0 has 0 GPUs but taint dedicated=infra:NoExecute, ...)".
    assert_eq!(
        reason.to_string(),
        "needs 1 CPU and 1 GiB memory on one node; no node the job tolerates could hold a \
         replica (cpu-0 has room for a replica but taint dedicated=infra:NoExecute, which the \
         job does not tolerate)"
    );
    // Every role must tolerate: the chief tolerates everything, the worker nothing.
    let mut two_roles = job(
        "a/two",
        "default",
        vec![
            cpu_group("chief", 1, 1000, 1 << 30),
            cpu_group("worker", 1, 1000, 1 << 30),
        ],
    );
    two_roles.tolerations = [("chief".to_string(), vec![Toleration::exists("", None)])].into();
    assert_eq!(
        admitted(&tainted(TaintEffect::NoSchedule), two_roles.clone()),
        0
    );
    two_roles.tolerations.insert(
        "worker".to_string(),
        vec![Toleration::exists(
            "dedicated",
            Some(TaintEffect::NoSchedule),
        )],
    );
    assert_eq!(
        admitted(&tainted(TaintEffect::NoSchedule), two_roles.clone()),
        1
    );
    // The worker's toleration is for NoSchedule only.
    assert_eq!(admitted(&tainted(TaintEffect::NoExecute), two_roles), 0);
}

/// CPUs read as people write them: exact, never rounded (`250m` is 0.25, not 0.2).
#[test]
fn cpu_amounts_are_written_exactly() {
    for (milli, want) in [
        (250, "0.25"),
        (1000, "1"),
        (1500, "1.5"),
        (100, "0.1"),
        (1001, "1.001"),
        (0, "0"),
    ] {
        assert_eq!(corral_core::sched::cpu_text(milli), want);
    }
}
