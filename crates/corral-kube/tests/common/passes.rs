//! What the reconcile tests share: a fake cluster of H100 nodes, a TrainingJob of a master
//! and workers, one pass (list, plan, apply), and readers of what the fake API server holds.

use corral_kube::apply::{Applier, ApplyReport, RateLimiter};
use corral_kube::operator::observe_api;
use corral_kube::plan::{Plan, PlanConfig, Planner};
use jiff::Timestamp;
use serde_json::{Value, json};

use super::{FakeApi, h100_node};

pub const PODS: &str = "api/v1/pods";
pub const JOBS: &str = "apis/corral.dev/v1alpha1/trainingjobs";
pub const H100: &str = "NVIDIA-H100-80GB-HBM3";

pub fn t(secs: i64) -> Timestamp {
    Timestamp::from_second(1_735_689_600 + secs).expect("valid time")
}

pub fn job(name: &str, workers: u32, gpus: u32, extra: Value) -> Value {
    let res = json!({"cpu": "8", "memory": "32Gi", "gpu": gpus});
    let tpl = json!({"image": "pytorch/pytorch:2.5.1", "command": ["torchrun", "train.py"]});
    let mut j = json!({
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "framework": "pytorch",
            "replicas": {
                "master": {"count": 1, "resources": res, "template": tpl},
                "worker": {"count": workers, "resources": res, "template": tpl},
            },
        },
    });
    if let (Some(spec), Value::Object(extra)) = (j["spec"].as_object_mut(), extra) {
        spec.extend(extra);
    }
    j
}

pub fn cluster(nodes: &[&str]) -> FakeApi {
    let fake = FakeApi::new();
    for n in nodes {
        fake.insert("api/v1/nodes", h100_node(n));
    }
    fake.insert(
        "apis/corral.dev/v1alpha1/queues",
        json!({"metadata": {"name": "default"}, "spec": {"quotas": [{"nodePool": H100, "gpu": 64}]}}),
    );
    fake
}

pub async fn pass(fake: &FakeApi, now: Timestamp) -> (Plan, ApplyReport) {
    pass_with(fake, &PlanConfig::default(), now).await
}

pub async fn pass_with(fake: &FakeApi, cfg: &PlanConfig, now: Timestamp) -> (Plan, ApplyReport) {
    let applier = Applier::new(fake.client(), None, RateLimiter::unlimited());
    let out = kept_pass(fake, &applier, cfg, now).await;
    assert!(out.1.errors.is_empty(), "apply errors: {:?}", out.1.errors);
    out
}

/// One pass as the operator makes it: its control plane kept from the fake's last pass and
/// fed what changed since, checked against a plane rebuilt from the same world (what every
/// pass did before the plane was kept): both must decide the same, job by job.
pub async fn kept_pass(
    fake: &FakeApi,
    applier: &Applier,
    cfg: &PlanConfig,
    now: Timestamp,
) -> (Plan, ApplyReport) {
    let world = observe_api(&applier.client).await.expect("observe");
    let (kept, slice) = {
        let mut slot = fake.planner.lock().expect("planner");
        let planner = slot.get_or_insert_with(Planner::keeping);
        let slice = planner.slice().clone();
        (planner.plan(&world, cfg, now), slice)
    };
    // Sliced as the kept plane is, so that both admit the same jobs.
    let rebuilt = Planner::rebuilding()
        .with_slice(slice)
        .plan(&world, cfg, now);
    let (a, b) = (decisions(&kept), decisions(&rebuilt));
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(
            x, y,
            "at {now} the kept plane (rebuilt: {:?}) planned otherwise than one rebuilt from the world",
            kept.rebuilt
        );
    }
    assert_eq!(a.len(), b.len());
    assert_eq!(kept.jobs_by_state, rebuilt.jobs_by_state);
    let report = applier.apply(&kept).await;
    if let Some(p) = fake.planner.lock().expect("planner").as_mut() {
        p.applied(&report, 0.0, 0.0);
    }
    (kept, report)
}

pub fn pods_of(fake: &FakeApi, job: &str) -> Vec<Value> {
    fake.list(PODS)
        .into_iter()
        .filter(|p| p["metadata"]["labels"]["corral.dev/job-name"] == json!(job))
        .collect()
}

pub fn set_phase(fake: &FakeApi, name: &str, phase: &str, exit: Option<i32>) {
    fake.update(PODS, "ml", name, |p| {
        p["status"]["phase"] = json!(phase);
        if let Some(code) = exit {
            p["status"]["containerStatuses"] = json!([{
                "name": "pytorch", "ready": false, "restartCount": 0, "image": "x", "imageID": "",
                "state": {"terminated": {"exitCode": code, "reason": "Error"}},
            }]);
        }
    });
}

pub fn job_status(fake: &FakeApi, name: &str) -> Value {
    fake.get(JOBS, "ml", name).expect("job")["status"].clone()
}

pub fn condition(fake: &FakeApi, name: &str, ty: &str) -> Option<String> {
    job_status(fake, name)["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == json!(ty)))
        .and_then(|c| c["status"].as_str().map(str::to_string))
}

pub fn event_reasons(plan: &Plan) -> Vec<String> {
    plan.jobs
        .iter()
        .flat_map(|j| j.events.iter().map(|e| e.reason.clone()))
        .collect()
}

/// A plan's jobs without new words for a job that still waits, the same way: a plane
/// rebuilt each pass plans them every pass (the applier writes them at most every few
/// seconds), a kept one plans them itself at most every few seconds.
fn decisions(p: &Plan) -> Vec<corral_kube::plan::JobPlan> {
    p.jobs
        .iter()
        .cloned()
        .map(|mut j| {
            if j.status_words_only {
                j.status = None;
                j.status_words_only = false;
            }
            j
        })
        .filter(|j| !j.is_empty() || j.reject.is_some())
        .collect()
}
