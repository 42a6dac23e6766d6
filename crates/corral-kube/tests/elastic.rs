//! Elastic sizing on the operator, against the in-memory API server: an elastic PyTorch job
//! (min 1, max 3) is admitted at the GPU left, grows to 3 worker pods when the job beside it
//! ends, and shrinks to 1 for a higher-priority job (its extra worker pods deleted, worker 0
//! kept, nothing preempted), with one `Resized` event per resize.

mod common;

use common::passes::{pass, pass_with};
use common::{FakeApi, h100_node};
use corral_kube::plan::{Plan, PlanConfig};
use jiff::Timestamp;
use serde_json::{Value, json};

const PODS: &str = "api/v1/pods";
const JOBS: &str = "apis/corral.dev/v1alpha1/trainingjobs";
const H100: &str = "NVIDIA-H100-80GB-HBM3";

fn t(secs: i64) -> Timestamp {
    Timestamp::from_second(1_735_689_600 + secs).expect("valid time")
}

fn job(name: &str, class: &str, gpus: u32, elastic: Option<(u32, u32)>) -> Value {
    let res = json!({"cpu": "1", "memory": "1Gi", "gpu": gpus});
    let tpl = json!({"image": "pytorch/pytorch:2.5.1", "command": ["torchrun", "train.py"]});
    let mut j = json!({
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "framework": "pytorch",
            "priorityClass": class,
            "replicas": {"worker": {"count": 1, "resources": res, "template": tpl}},
        },
    });
    if let Some((min, max)) = elastic {
        j["spec"]["elastic"] = json!({"minReplicas": min, "maxReplicas": max});
    }
    j
}

/// Names of the job's pods that are not terminating.
fn pods_of(fake: &FakeApi, job: &str) -> Vec<String> {
    let mut names: Vec<String> = fake
        .list(PODS)
        .into_iter()
        .filter(|p| p["metadata"]["labels"]["corral.dev/job-name"] == json!(job))
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_string))
        .collect();
    names.sort();
    names
}

fn run_all(fake: &FakeApi, job: &str) {
    for name in pods_of(fake, job) {
        fake.update(PODS, "ml", &name, |p| {
            p["status"]["phase"] = json!("Running")
        });
    }
}

fn events(plan: &Plan, reason: &str) -> Vec<String> {
    plan.jobs
        .iter()
        .flat_map(|j| j.events.iter())
        .filter(|e| e.reason == reason)
        .map(|e| e.note.clone())
        .collect()
}

/// A cluster with a 7-GPU job `beside` running and the elastic `el` (1..3) admitted at the
/// one GPU left, both Running; `cfg`'s passes.
async fn beside_and_elastic(cfg: &PlanConfig) -> FakeApi {
    let fake = FakeApi::new();
    fake.insert("api/v1/nodes", h100_node("n1"));
    fake.insert(
        "apis/corral.dev/v1alpha1/queues",
        json!({"metadata": {"name": "default"}, "spec": {"quotas": [{"nodePool": H100, "gpu": 64}]}}),
    );
    for (name, value) in [("low", 10), ("high", 1000)] {
        fake.insert(
            "apis/corral.dev/v1alpha1/jobpriorityclasses",
            json!({"metadata": {"name": name}, "spec": {"value": value}}),
        );
    }
    fake.insert(JOBS, job("beside", "low", 7, None));
    pass_with(&fake, cfg, t(0)).await;
    run_all(&fake, "beside");
    fake.insert(JOBS, job("el", "low", 1, Some((1, 3))));
    pass_with(&fake, cfg, t(1)).await;
    run_all(&fake, "el");
    pass_with(&fake, cfg, t(2)).await;
    assert_eq!(pods_of(&fake, "el"), ["el-worker-0"], "1 GPU was left");
    fake
}

#[tokio::test]
async fn an_elastic_job_grows_and_shrinks_as_pods() {
    let fake = beside_and_elastic(&PlanConfig::default()).await;

    // beside ends; after the dwell (60 s from its admission) el grows into its GPUs.
    fake.update(PODS, "ml", "beside-worker-0", |p| {
        p["status"]["phase"] = json!("Succeeded");
    });
    pass(&fake, t(10)).await;
    let (plan, report) = pass(&fake, t(70)).await;
    assert_eq!(
        events(&plan, "Resized"),
        ["grew from 1 to 3 worker replicas into free GPUs"]
    );
    assert_eq!(report.pods_created, 2);
    assert_eq!(
        pods_of(&fake, "el"),
        ["el-worker-0", "el-worker-1", "el-worker-2"]
    );
    let el = fake.get(JOBS, "ml", "el").expect("el");
    let admission: Value = el["status"]["admission"].clone();
    assert_eq!(admission["placements"].as_array().map(Vec::len), Some(3));
    run_all(&fake, "el");
    pass(&fake, t(71)).await;

    // A high-priority job of 7 GPUs: el shrinks to 1, its workers 2 and 1 deleted.
    fake.insert(JOBS, job("urgent", "high", 7, None));
    let (plan, report) = pass(&fake, t(200)).await;
    assert_eq!(
        events(&plan, "Resized"),
        ["shrank from 3 to 1 worker replicas to make room for ml/urgent (priority 1000)"]
    );
    assert!(events(&plan, "Preempted").is_empty());
    assert_eq!(report.pods_deleted, 2);
    assert_eq!(pods_of(&fake, "el"), ["el-worker-0"]);
    fake.finish_terminating();
    pass(&fake, t(240)).await;
    assert_eq!(pods_of(&fake, "urgent"), ["urgent-worker-0"]);
    let el = fake.get(JOBS, "ml", "el").expect("el");
    assert!(el["status"]["preemptionCount"].is_null());
}

/// `--resize-dwell-secs 600`: el does not grow before 600 s from its admission, then does.
#[tokio::test]
async fn the_resize_dwell_is_the_operators_setting() {
    let cfg = PlanConfig {
        resize_dwell_seconds: Some(600),
        ..PlanConfig::default()
    };
    let fake = beside_and_elastic(&cfg).await;
    fake.update(PODS, "ml", "beside-worker-0", |p| {
        p["status"]["phase"] = json!("Succeeded");
    });
    pass_with(&fake, &cfg, t(10)).await;
    let (plan, _) = pass_with(&fake, &cfg, t(70)).await;
    assert!(events(&plan, "Resized").is_empty(), "grew inside the dwell");
    assert_eq!(pods_of(&fake, "el"), ["el-worker-0"]);
    let (plan, _) = pass_with(&fake, &cfg, t(605)).await;
    assert_eq!(
        events(&plan, "Resized"),
        ["grew from 1 to 3 worker replicas into free GPUs"]
    );
}
