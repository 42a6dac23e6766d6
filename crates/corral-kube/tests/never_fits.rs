//! On Kubernetes nodes come and go: a job no node can hold now is admitted to the plane and
//! waits, Queued and Unschedulable, with a Warning naming what falls short (never refused
//! at submit, as the embedded cluster refuses it).

mod common;

use common::FakeApi;
use corral_kube::apply::{Applier, ApplyReport, RateLimiter};
use corral_kube::plan::{Plan, PlanConfig};
use jiff::Timestamp;
use serde_json::{Value, json};

const JOBS: &str = "apis/corral.dev/v1alpha1/trainingjobs";
const H100: &str = "NVIDIA-H100-80GB-HBM3";

fn t(secs: i64) -> Timestamp {
    Timestamp::from_second(1_735_689_600 + secs).expect("valid time")
}

fn cluster() -> FakeApi {
    let fake = FakeApi::new();
    fake.insert(
        "api/v1/nodes",
        json!({
            "metadata": {"name": "n1", "labels": {"nvidia.com/gpu.product": H100}},
            "status": {
                "allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }),
    );
    fake
}

fn job(name: &str, resources: Value, extra: Value) -> Value {
    let mut j = json!({
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "framework": "pytorch",
            "replicas": {
                "master": {"count": 1, "resources": resources, "template": {
                    "image": "pytorch/pytorch:2.5.1", "command": ["torchrun", "train.py"],
                }},
            },
        },
    });
    if let (Some(spec), Value::Object(extra)) = (j["spec"].as_object_mut(), extra) {
        spec.extend(extra);
    }
    j
}

async fn pass(fake: &FakeApi, now: Timestamp) -> (Plan, ApplyReport) {
    let applier = Applier::new(fake.client(), None, RateLimiter::unlimited());
    let out = common::passes::kept_pass(fake, &applier, &PlanConfig::default(), now).await;
    assert!(out.1.errors.is_empty(), "apply errors: {:?}", out.1.errors);
    out
}

fn condition(fake: &FakeApi, name: &str, ty: &str) -> (String, String) {
    let job = fake.get(JOBS, "ml", name).expect("job");
    job["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == json!(ty)))
        .map(|c| {
            (
                c["status"].as_str().unwrap_or_default().to_string(),
                c["message"].as_str().unwrap_or_default().to_string(),
            )
        })
        .unwrap_or_default()
}

/// What the job's Warning Unschedulable event says, once.
fn unschedulable_warning(plan: &Plan, name: &str) -> String {
    let planned = plan.jobs.iter().find(|j| j.name == name).expect("planned");
    let warnings: Vec<&str> = planned
        .events
        .iter()
        .filter(|e| e.warning && e.reason == "Unschedulable")
        .map(|e| e.note.as_str())
        .collect();
    assert_eq!(warnings.len(), 1, "{:?}", planned.events);
    warnings[0].to_string()
}

#[tokio::test]
async fn memory_beyond_every_node_waits_unschedulable_naming_memory() {
    let fake = cluster();
    fake.insert(
        JOBS,
        job(
            "fat",
            json!({"cpu": "8", "memory": "600Gi", "gpu": 1}),
            json!({}),
        ),
    );
    let (plan, report) = pass(&fake, t(0)).await;
    assert_eq!(report.pods_created, 0);
    let warning = unschedulable_warning(&plan, "fat");
    assert!(
        warning.contains("a replica needs 600 GiB memory but the largest node, n1, has 512 GiB"),
        "{warning}"
    );
    let (status, message) = condition(&fake, "fat", "Unschedulable");
    assert_eq!(status, "True");
    assert!(message.contains("600 GiB memory"), "{message}");
    assert_eq!(condition(&fake, "fat", "Queued").0, "True");
    // Admitted to the plane, not refused: the next pass keeps it and says nothing again.
    let (plan, _) = pass(&fake, t(5)).await;
    let fat = plan.jobs.iter().find(|j| j.name == "fat").expect("planned");
    assert!(fat.is_empty(), "{fat:?}");
}

#[tokio::test]
async fn a_queue_without_quota_where_nodes_are_waits_unschedulable() {
    let fake = cluster();
    // The only quota is in a pool no node of this cluster is in.
    fake.insert(
        "apis/corral.dev/v1alpha1/queues",
        json!({"metadata": {"name": "default"},
               "spec": {"quotas": [{"nodePool": "Tesla-V100-SXM2-32GB", "gpu": 8}]}}),
    );
    fake.insert(JOBS, job("lost", json!({"gpu": 1}), json!({})));
    let (plan, report) = pass(&fake, t(0)).await;
    assert_eq!(report.pods_created, 0);
    let warning = unschedulable_warning(&plan, "lost");
    assert!(
        warning.contains("queue default has no GPU quota in pool"),
        "{warning}"
    );
    assert_eq!(condition(&fake, "lost", "Unschedulable").0, "True");
}
