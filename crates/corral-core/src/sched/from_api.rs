//! From the resource model users write (corral-api) to what the scheduler reads. Shared by
//! every shell, so a Queue means the same embedded, on Kubernetes and in the simulator.

use corral_api::{JobPriorityClass, NodePool, Queue, ResourceAmounts, TrainingJob};

use super::model::{NodePoolConfig, PoolQuota, QueueConfig, ResourceAmount, SchedError};

fn amounts(queue: &str, what: &str, a: &ResourceAmounts) -> Result<ResourceAmount, SchedError> {
    // A resource the quota does not name is not limited by it.
    let invalid = |message: String| SchedError::InvalidQuantity {
        job: format!("queue {queue}"),
        what: what.to_string(),
        message,
    };
    let cpu_milli = match &a.cpu {
        Some(q) => {
            u64::try_from(q.milli().map_err(|e| invalid(e.to_string()))?).unwrap_or(u64::MAX)
        }
        None => u64::MAX,
    };
    let memory_bytes = match &a.memory {
        Some(q) => {
            u64::try_from(q.units().map_err(|e| invalid(e.to_string()))?).unwrap_or(u64::MAX)
        }
        None => u64::MAX,
    };
    Ok(ResourceAmount {
        gpu: a.gpu.map_or(u64::MAX, u64::from),
        cpu_milli,
        memory_bytes,
    })
}

impl QueueConfig {
    /// The scheduler's view of a Queue: nominal quota, borrowing and lending limits per pool.
    pub fn from_queue(queue: &Queue) -> Result<QueueConfig, SchedError> {
        let name = queue.metadata.name.as_str();
        let mut quotas = std::collections::BTreeMap::new();
        for q in &queue.spec.quotas {
            let nominal = amounts(
                name,
                "quota",
                &ResourceAmounts {
                    gpu: q.gpu,
                    cpu: q.cpu.clone(),
                    memory: q.memory.clone(),
                },
            )?;
            let borrowing_limit = q
                .borrowing_limit
                .as_ref()
                .map(|b| amounts(name, "borrowingLimit", b))
                .transpose()?;
            let lending_limit = q
                .lending_limit
                .as_ref()
                .map(|l| amounts(name, "lendingLimit", l))
                .transpose()?;
            quotas.insert(
                q.node_pool.clone(),
                PoolQuota {
                    nominal,
                    borrowing_limit,
                    lending_limit,
                },
            );
        }
        Ok(QueueConfig {
            name: name.to_string(),
            cohort: queue.spec.cohort.clone(),
            weight: queue.spec.weight,
            namespaces: queue.spec.namespaces.clone(),
            quotas,
        })
    }
}

impl NodePoolConfig {
    pub fn from_node_pool(pool: &NodePool) -> NodePoolConfig {
        NodePoolConfig {
            name: pool.metadata.name.clone(),
            gpu_type: pool.spec.gpu_type.clone(),
            node_selector: pool.spec.node_selector.clone(),
        }
    }
}

/// A job's priority: its JobPriorityClass's value, else the default class's, else 0.
pub fn priority_of(job: &TrainingJob, classes: &[JobPriorityClass]) -> i32 {
    let named = job
        .spec
        .priority_class
        .as_deref()
        .and_then(|n| classes.iter().find(|c| c.metadata.name == n));
    named
        .or_else(|| classes.iter().find(|c| c.spec.global_default))
        .map_or(0, |c| c.spec.value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use corral_api::document::{Document, parse_documents};
    use corral_api::validate::ValidationContext;

    #[test]
    fn queues_pools_and_priorities_from_the_examples() {
        let text = include_str!("../../../../examples/cluster.yaml");
        let docs: Vec<Document> = parse_documents(text, &ValidationContext::default())
            .into_iter()
            .map(|r| r.expect("valid example").document)
            .collect();
        let queue = docs
            .iter()
            .find_map(|d| match d {
                Document::Queue(q) if q.metadata.name == "team-vision" => Some(q),
                _ => None,
            })
            .expect("team-vision");
        let cfg = QueueConfig::from_queue(queue).expect("converts");
        assert_eq!(cfg.cohort.as_deref(), Some("research"));
        assert_eq!(cfg.weight, 2);
        let h100 = cfg.quotas["h100"];
        assert_eq!(h100.nominal.gpu, 16);
        assert_eq!(
            h100.nominal.cpu_milli,
            u64::MAX,
            "unnamed resources are unlimited"
        );
        assert_eq!(h100.borrowing_limit.map(|b| b.gpu), Some(16));
        assert_eq!(h100.lending_limit.map(|l| l.gpu), Some(8));
        let classes: Vec<JobPriorityClass> = docs
            .iter()
            .filter_map(|d| match d {
                Document::JobPriorityClass(p) => Some(p.clone()),
                _ => None,
            })
            .collect();
        let mut job = TrainingJob::new(
            "j",
            corral_api::TrainingJobSpec {
                framework: corral_api::Framework::Generic,
                replicas: Default::default(),
                run_policy: Default::default(),
                success_policy: None,
                queue: None,
                priority_class: Some("production".into()),
                elastic: None,
                nproc_per_node: None,
                mpi: None,
                port: None,
            },
        );
        assert_eq!(priority_of(&job, &classes), 1000);
        job.spec.priority_class = None;
        assert_eq!(priority_of(&job, &classes), 100, "the global default");
        assert_eq!(priority_of(&job, &[]), 0);
    }
}

/// Relative training speed of known GPU generations, for jobs without measured throughput:
/// the scheduler ranks allowed types by it, so higher-priority jobs (which choose first) get
/// the newer cards. Rough per-GPU mixed-precision training ratios; unknown types get 1.0.
pub fn known_gpu_speed(gpu_type: &str) -> f64 {
    let t = gpu_type.to_ascii_uppercase();
    // Most specific first: "A100" must not match "A10".
    const TABLE: &[(&str, f64)] = &[
        ("B200", 12.0),
        ("H200", 7.0),
        ("H100", 6.0),
        ("L40S", 3.5),
        ("A100", 3.0),
        ("L40", 2.8),
        ("A6000", 2.0),
        ("A40", 1.8),
        ("L4", 1.2),
        ("A10", 1.2),
        ("V100", 1.0),
        ("RTX 2080", 0.7),
        ("2080TI", 0.7),
        ("T4", 0.45),
        ("P100", 0.45),
        ("K80", 0.15),
    ];
    TABLE
        .iter()
        .find(|(name, _)| t.contains(name))
        .map_or(1.0, |(_, s)| *s)
}

/// Speeds for every GPU type of these pools, by [`known_gpu_speed`].
pub fn known_gpu_speeds<'a>(
    gpu_types: impl IntoIterator<Item = &'a str>,
) -> std::collections::BTreeMap<String, f64> {
    gpu_types
        .into_iter()
        .map(|t| (t.to_string(), known_gpu_speed(t)))
        .collect()
}

#[cfg(test)]
mod speed_tests {
    use super::known_gpu_speed;

    #[test]
    fn newer_generations_rank_higher() {
        assert!(
            known_gpu_speed("NVIDIA-H100-80GB-HBM3") > known_gpu_speed("NVIDIA-A100-SXM4-80GB")
        );
        assert!(known_gpu_speed("NVIDIA-A100-SXM4-80GB") > known_gpu_speed("NVIDIA-A10"));
        assert!(known_gpu_speed("Tesla-V100-SXM2-32GB") > known_gpu_speed("Tesla-K80"));
        assert_eq!(known_gpu_speed("G1"), 1.0);
    }
}
