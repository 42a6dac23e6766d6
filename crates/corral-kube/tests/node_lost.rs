//! A node that disappears under a running job (the Kubernetes-only case of the conformance
//! story: an embedded cluster is one machine that cannot vanish): the operator's plane,
//! rebuilt from what it observes, no longer has the node, so the job's admission there is
//! lost; its pods are deleted and it runs again on a node that is still there, its GPUs
//! never counted twice.

mod common;

use common::{FakeApi, h100_node};
use corral_kube::apply::{Applier, RateLimiter};
use corral_kube::plan::PlanConfig;
use jiff::Timestamp;
use serde_json::{Value, json};

const PODS: &str = "api/v1/pods";
const JOBS: &str = "apis/corral.dev/v1alpha1/trainingjobs";
const NODES: &str = "api/v1/nodes";

fn pods(fake: &FakeApi) -> Vec<(String, String, String)> {
    fake.list(PODS)
        .iter()
        .map(|p| {
            let s = |v: &Value| v.as_str().unwrap_or("").to_string();
            (
                s(&p["metadata"]["name"]),
                s(&p["spec"]["nodeName"]),
                s(&p["status"]["phase"]),
            )
        })
        .collect()
}

/// One operator pass, then the kubelets: bound pods run.
async fn pass(fake: &FakeApi, secs: i64) -> Vec<String> {
    let applier = Applier::new(fake.client(), None, RateLimiter::unlimited());
    let now = Timestamp::from_second(1_735_689_600 + secs).expect("time");
    let (plan, report) =
        common::passes::kept_pass(fake, &applier, &PlanConfig::default(), now).await;
    assert!(
        report.errors.is_empty(),
        "apply errors: {:?}",
        report.errors
    );
    for (name, node, phase) in pods(fake) {
        if !node.is_empty() && phase == "Pending" {
            fake.update(PODS, "ml", &name, |p| {
                p["status"]["phase"] = json!("Running")
            });
        }
    }
    plan.jobs
        .iter()
        .flat_map(|j| j.events.iter().map(|e| e.reason.clone()))
        .collect()
}

#[tokio::test]
async fn a_job_on_a_node_that_disappears_runs_again_on_another() {
    let fake = FakeApi::new();
    for n in ["n1", "n2"] {
        fake.insert(NODES, h100_node(n));
    }
    let res = json!({"cpu": "8", "memory": "32Gi", "gpu": 4});
    let tpl = json!({"image": "pytorch/pytorch:2.5.1", "command": ["torchrun", "train.py"]});
    fake.insert(
        JOBS,
        json!({
            "metadata": {"name": "llm", "namespace": "ml"},
            "spec": {"framework": "pytorch", "replicas": {
                "master": {"count": 1, "resources": res, "template": tpl},
                "worker": {"count": 1, "resources": res, "template": tpl},
            }},
        }),
    );
    let mut events = Vec::new();
    for s in 0..3 {
        events.extend(pass(&fake, s).await);
    }
    let before = pods(&fake);
    assert_eq!(before.len(), 2, "{before:?}");
    let lost = before[0].1.clone();
    assert!(
        before.iter().all(|(_, n, p)| *n == lost && p == "Running"),
        "the gang runs on one node: {before:?}"
    );
    let other = if lost == "n1" { "n2" } else { "n1" };

    // The node goes (deleted, or its kubelet gone for good and the node removed); its pods
    // stay bound to it until someone deletes them, as on Kubernetes.
    fake.remove(NODES, "", &lost);
    let mut after_events = Vec::new();
    for s in 10..20 {
        after_events.extend(pass(&fake, s * 3).await);
    }
    let after = pods(&fake);
    assert_eq!(after.len(), 2, "{after:?}");
    assert!(
        after.iter().all(|(_, n, p)| n == other && p == "Running"),
        "the gang runs again on {other}: {after:?}; events {after_events:?}"
    );
    assert!(
        after_events.iter().any(|e| e == "AdmissionLost"),
        "{after_events:?}"
    );
    let job = fake.get(JOBS, "ml", "llm").expect("job");
    let admission = job["status"]["admission"].to_string();
    assert!(
        admission.contains(other) && !admission.contains(&format!("\"{lost}\"")),
        "{admission}"
    );
}
