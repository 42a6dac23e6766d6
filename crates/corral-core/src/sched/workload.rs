//! A seeded, deterministic synthetic workload for benches, tests and `corral bench
//! scheduler`: a cluster of 8-GPU nodes in racks, split over K GPU types, eight team queues
//! in one cohort, and jobs of 1-64 GPUs (single replicas, gangs of 1-GPU workers, and
//! multi-node gangs of 8-GPU workers with a CPU-only master).

use std::collections::BTreeMap;

use super::model::{
    ClusterSnapshot, JobRequest, Node, PoolQuota, QueueConfig, ReplicaGroup, ResourceAmount,
};

/// SplitMix64: small, fast, and the same on every platform.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Uniform index into a slice of `len` elements (`len > 0`).
    pub fn index(&mut self, len: usize) -> usize {
        self.below(len as u64) as usize
    }
    /// Fisher-Yates shuffle.
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.index(i + 1);
            v.swap(i, j);
        }
    }
}

const TYPE_NAMES: [&str; 8] = ["H100", "A100", "V100", "L4", "A10", "T4", "P100", "K80"];
/// Rough relative speeds of the types above, for synthetic throughputs.
const TYPE_SPEED: [f64; 8] = [2.0, 1.0, 0.55, 0.45, 0.4, 0.25, 0.3, 0.12];
const GIB: u64 = 1 << 30;

/// The name of the i-th GPU type of the synthetic cluster.
pub fn gpu_type_name(i: usize) -> String {
    match TYPE_NAMES.get(i) {
        Some(n) => n.to_string(),
        None => format!("GPU{i}"),
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkloadSpec {
    pub nodes: usize,
    pub jobs: usize,
    pub gpu_types: usize,
    pub seed: u64,
    pub queues: usize,
    pub nodes_per_rack: usize,
}

impl WorkloadSpec {
    pub fn new(nodes: usize, jobs: usize, gpu_types: usize, seed: u64) -> Self {
        WorkloadSpec {
            nodes,
            jobs,
            gpu_types: gpu_types.max(1),
            seed,
            queues: 8,
            nodes_per_rack: 32,
        }
    }
}

/// The cluster (no running jobs) and the pending jobs.
#[derive(Clone, Debug)]
pub struct Workload {
    pub snapshot: ClusterSnapshot,
    pub jobs: Vec<JobRequest>,
}

/// The synthetic cluster: nodes split evenly over the GPU types, 32 to a rack, and team
/// queues sharing one cohort with even nominal GPU quotas and unlimited borrowing.
pub fn cluster(spec: &WorkloadSpec) -> ClusterSnapshot {
    let k = spec.gpu_types.max(1);
    let nodes: Vec<Node> = (0..spec.nodes)
        .map(|i| Node {
            topology: Some(format!("rack-{}", i / spec.nodes_per_rack.max(1))),
            ..Node::new(
                format!("node-{i}"),
                Some(gpu_type_name(i * k / spec.nodes.max(1))),
                8,
                96_000,
                1024 * GIB,
            )
        })
        .collect();
    let mut gpus_per_type = vec![0u64; k];
    for i in 0..spec.nodes {
        gpus_per_type[i * k / spec.nodes.max(1)] += 8;
    }
    let queues = (0..spec.queues.max(1))
        .map(|q| QueueConfig {
            name: format!("team-{q}"),
            cohort: Some("org".to_string()),
            weight: 1 + (q as u32 % 2),
            namespaces: Vec::new(),
            quotas: (0..k)
                .map(|t| {
                    (
                        gpu_type_name(t),
                        PoolQuota {
                            nominal: ResourceAmount::gpus(
                                gpus_per_type[t] / spec.queues.max(1) as u64,
                            ),
                            borrowing_limit: None,
                            lending_limit: None,
                        },
                    )
                })
                .collect(),
        })
        .collect();
    ClusterSnapshot {
        nodes,
        pools: Vec::new(),
        queues,
        running: Vec::new(),
    }
}

/// One synthetic job; `i` makes its key and submit time.
pub fn job(rng: &mut Rng, i: usize, spec: &WorkloadSpec) -> JobRequest {
    let k = spec.gpu_types.max(1);
    let gpus: u32 = match rng.below(100) {
        0..40 => 1,
        40..55 => 2,
        55..70 => 4,
        70..85 => 8,
        85..92 => 16,
        92..97 => 32,
        _ => 64,
    };
    let allowed: Vec<String> = match rng.below(10) {
        0..5 => Vec::new(),
        5..8 => vec![gpu_type_name(rng.below(k as u64) as usize)],
        _ => {
            let a = rng.below(k as u64) as usize;
            let b = (a + 1 + rng.below((k as u64).saturating_sub(1).max(1)) as usize) % k;
            let mut v = vec![gpu_type_name(a), gpu_type_name(b)];
            v.sort();
            v.dedup();
            v
        }
    };
    let worker = |count: u32, gpu: u32| ReplicaGroup {
        role: "worker".to_string(),
        count,
        cpu_milli: 8_000 * u64::from(gpu.max(1)),
        memory_bytes: 64 * GIB * u64::from(gpu.max(1)),
        gpu,
        allowed_gpu_types: allowed.clone(),
        extended: BTreeMap::new(),
    };
    let groups = if gpus <= 8 {
        if gpus > 1 && rng.below(10) < 4 {
            vec![worker(gpus, 1)]
        } else {
            vec![worker(1, gpus)]
        }
    } else {
        let mut g = vec![worker(gpus / 8, 8)];
        if rng.below(2) == 0 {
            g.insert(
                0,
                ReplicaGroup {
                    role: "master".to_string(),
                    count: 1,
                    cpu_milli: 2_000,
                    memory_bytes: 8 * GIB,
                    gpu: 0,
                    allowed_gpu_types: Vec::new(),
                    extended: BTreeMap::new(),
                },
            );
        }
        g
    };
    let throughput = if rng.below(2) == 0 {
        (0..k)
            .map(|t| {
                let affinity = 0.7 + 0.6 * rng.unit();
                (
                    gpu_type_name(t),
                    TYPE_SPEED.get(t).copied().unwrap_or(0.5) * affinity,
                )
            })
            .collect()
    } else {
        BTreeMap::new()
    };
    let priority = match rng.below(100) {
        0..70 => 0,
        70..95 => 100,
        _ => 1000,
    };
    JobRequest {
        key: format!("job-{i}"),
        queue: format!("team-{}", rng.below(spec.queues.max(1) as u64)),
        priority,
        submit_time: i as u64 * 10,
        groups,
        throughput,
        preemptible: true,
        node_selector: BTreeMap::new(),
        tolerations: Default::default(),
        elastic: None,
    }
}

/// The whole workload, the same for the same spec.
pub fn generate(spec: &WorkloadSpec) -> Workload {
    let mut rng = Rng::new(spec.seed);
    let jobs = (0..spec.jobs).map(|i| job(&mut rng, i, spec)).collect();
    Workload {
        snapshot: cluster(spec),
        jobs,
    }
}
