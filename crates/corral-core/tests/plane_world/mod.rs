//! What the control plane's tests share: a PyTorch job of `workers` x `gpus`, priority
//! classes `high` and `low`, a one-node cluster, the plane's settings and a job's record,
//! and a fake shell. Each test crate uses part of it.
#![allow(dead_code)]

use std::time::Duration;

use corral_api::{JobPriorityClass, TrainingJob};
use corral_core::control::{ControlConfig, JobRecord};
use corral_core::sched::{ClusterSnapshot, Node, SchedulerConfig};

pub fn job(name: &str, workers: u32, gpus: u32, priority: Option<&str>) -> TrainingJob {
    let class = priority
        .map(|p| format!("  priorityClass: {p}\n"))
        .unwrap_or_default();
    let yaml = format!(
        "apiVersion: corral.dev/v1alpha1
kind: TrainingJob
metadata: {{name: {name}, namespace: team}}
spec:
  framework: pytorch
{class}  replicas:
    worker:
      count: {workers}
      restartPolicy: OnFailure
      resources: {{gpu: {gpus}, cpu: 1, memory: 1Gi}}
      template: {{command: [train]}}
  runPolicy: {{backoffLimit: 3}}
"
    );
    serde_saphyr::from_str(&yaml).expect("test job")
}

pub fn class(name: &str, value: i32) -> JobPriorityClass {
    serde_saphyr::from_str(&format!(
        "apiVersion: corral.dev/v1alpha1\nkind: JobPriorityClass\nmetadata: {{name: {name}}}\nspec: {{value: {value}}}\n"
    ))
    .expect("test class")
}

pub fn cluster(gpus: u32) -> ClusterSnapshot {
    ClusterSnapshot {
        nodes: vec![Node::new(
            "node-a",
            Some("H100".into()),
            gpus,
            64_000,
            256 << 30,
        )],
        ..ClusterSnapshot::default()
    }
}

pub fn config() -> ControlConfig {
    ControlConfig {
        scheduler: SchedulerConfig {
            preemption_protection_ms: 0,
            ..SchedulerConfig::default()
        },
        grace_period: Some(Duration::from_secs(7)),
        priority_classes: vec![class("high", 100), class("low", 0)],
        requires_image: false,
        fixed_nodes: true,
        budgets: Default::default(),
    }
}

pub fn record(job: TrainingJob, submitted: u64) -> JobRecord {
    JobRecord {
        uid: format!("uid-{}", job.metadata.name),
        job,
        submitted,
        hints: Default::default(),
    }
}
pub mod shell;
