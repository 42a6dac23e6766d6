//! One test per pending-reason message, plus the issue's example end to end.

use std::collections::BTreeMap;

use corral_core::sched::{
    Blocker, ClusterSnapshot, JobRequest, Needs, Node, NodeAllocation, PendingReason, PoolQuota,
    PreemptionReason, QueueConfig, QuotaResource, ReplicaGroup, ReplicaPlacement, ResourceAmount,
    RunningJob, SchedulerConfig, schedule,
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
        tolerations: Vec::new(),
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
                quotas: [("A100".to_string(), quota(16))].into(),
            },
            QueueConfig {
                name: "team-b".into(),
                cohort: Some("org".into()),
                weight: 1,
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
            gpu_types: vec!["A100".into()]
        }]),
        "needs 8 GPUs of type A100 on one node; no node pool has GPUs of type A100"
    );
    assert_eq!(
        reason(vec![Blocker::NoMatchingPool { gpu_types: vec![] }]),
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

#[test]
fn no_suitable_node() {
    assert!(
        reason(vec![Blocker::NoSuitableNode {
            pool: "A100".into(),
            gpu_type: Some("A100".into()),
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
         nodes are reserved for ns/big so that it is not starved"
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
