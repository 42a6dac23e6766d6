//! The reconcile loop against a mocked API server (kube's tower-test pattern, with an
//! in-memory fake behind it): the real kube `Client` sends real requests; the fake keeps
//! objects as the API server does for the calls Corral makes.

mod common;

use common::FakeApi;
use corral_kube::apply::{Applier, ApplyReport, RateLimiter};
use corral_kube::operator::reconcile_once;
use corral_kube::plan::{Plan, PlanConfig};
use jiff::Timestamp;
use serde_json::{Value, json};

const PODS: &str = "api/v1/pods";
const JOBS: &str = "apis/corral.dev/v1alpha1/trainingjobs";
const H100: &str = "NVIDIA-H100-80GB-HBM3";

fn t(secs: i64) -> Timestamp {
    Timestamp::from_second(1_735_689_600 + secs).expect("valid time")
}

fn node(name: &str) -> Value {
    json!({
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": H100}},
        "status": {
            "allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    })
}

fn job(name: &str, workers: u32, gpus: u32, extra: Value) -> Value {
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

fn cluster(nodes: &[&str]) -> FakeApi {
    let fake = FakeApi::new();
    for n in nodes {
        fake.insert("api/v1/nodes", node(n));
    }
    fake.insert(
        "apis/corral.dev/v1alpha1/queues",
        json!({"metadata": {"name": "default"}, "spec": {"quotas": [{"nodePool": H100, "gpu": 64}]}}),
    );
    fake
}

async fn pass(fake: &FakeApi, now: Timestamp) -> (Plan, ApplyReport) {
    let applier = Applier::new(fake.client(), None, RateLimiter::unlimited());
    let out = reconcile_once(&applier, &PlanConfig::default(), now)
        .await
        .expect("observe");
    assert!(out.1.errors.is_empty(), "apply errors: {:?}", out.1.errors);
    out
}

fn pods_of(fake: &FakeApi, job: &str) -> Vec<Value> {
    fake.list(PODS)
        .into_iter()
        .filter(|p| p["metadata"]["labels"]["corral.dev/job-name"] == json!(job))
        .collect()
}

fn set_phase(fake: &FakeApi, name: &str, phase: &str, exit: Option<i32>) {
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

fn job_status(fake: &FakeApi, name: &str) -> Value {
    fake.get(JOBS, "ml", name).expect("job")["status"].clone()
}

fn condition(fake: &FakeApi, name: &str, ty: &str) -> Option<String> {
    job_status(fake, name)["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == json!(ty)))
        .and_then(|c| c["status"].as_str().map(str::to_string))
}

fn event_reasons(plan: &Plan) -> Vec<String> {
    plan.jobs
        .iter()
        .flat_map(|j| j.events.iter().map(|e| e.reason.clone()))
        .collect()
}

#[tokio::test]
async fn create_admits_creates_service_and_pods_and_binds_the_gang() {
    let fake = cluster(&["n1", "n2"]);
    fake.insert(JOBS, job("llm", 1, 8, json!({})));

    let (plan, report) = pass(&fake, t(0)).await;
    assert_eq!(report.pods_created, 2);
    assert_eq!(report.pods_bound, 2);
    assert!(event_reasons(&plan).contains(&"Admitted".to_string()));

    let job = fake.get(JOBS, "ml", "llm").expect("job");
    let admission: Value = serde_json::from_str(
        job["metadata"]["annotations"]["corral.dev/admission"]
            .as_str()
            .expect("admission recorded"),
    )
    .expect("admission json");
    assert_eq!(admission["placements"].as_array().map(Vec::len), Some(2));
    assert_eq!(condition(&fake, "llm", "Admitted").as_deref(), Some("True"));

    let svc = fake
        .get("api/v1/services", "ml", "llm")
        .expect("headless service");
    assert_eq!(svc["spec"]["clusterIP"], json!("None"));
    let pods = pods_of(&fake, "llm");
    assert_eq!(pods.len(), 2);
    let mut nodes: Vec<String> = pods
        .iter()
        .map(|p| p["spec"]["nodeName"].as_str().expect("bound").to_string())
        .collect();
    nodes.sort();
    assert_eq!(nodes, ["n1", "n2"], "8 GPUs each: one replica per node");
    for p in &pods {
        assert_eq!(p["spec"]["schedulerName"], json!("corral"));
        assert_eq!(p["spec"]["subdomain"], json!("llm"));
        assert_eq!(
            p["metadata"]["ownerReferences"][0]["kind"],
            json!("TrainingJob")
        );
        assert_eq!(
            p["metadata"]["labels"]["corral.dev/incarnation"],
            json!("0.0")
        );
    }
    let master = fake.get(PODS, "ml", "llm-master-0").expect("master");
    let env = master["spec"]["containers"][0]["env"]
        .as_array()
        .expect("env")
        .clone();
    assert!(env.iter().any(
        |e| e["name"] == json!("MASTER_ADDR") && e["value"] == json!("llm-master-0.llm.ml.svc")
    ));

    // A second pass changes nothing: no duplicate pods, no second binding.
    fake.clear_log();
    let (_, report) = pass(&fake, t(1)).await;
    assert_eq!(report.pods_created, 0);
    assert_eq!(report.pods_bound, 0);
    assert!(
        !fake.log().iter().any(|l| l.starts_with("POST")),
        "{:?}",
        fake.log()
    );
}

#[tokio::test]
async fn a_failed_pod_restarts_the_gang_with_the_count_in_status() {
    let fake = cluster(&["n1", "n2"]);
    fake.insert(
        JOBS,
        job("llm", 1, 8, json!({"runPolicy": {"backoffLimit": 3}})),
    );
    pass(&fake, t(0)).await;
    set_phase(&fake, "llm-master-0", "Running", None);
    set_phase(&fake, "llm-worker-0", "Running", None);
    pass(&fake, t(5)).await;
    assert_eq!(condition(&fake, "llm", "Running").as_deref(), Some("True"));

    set_phase(&fake, "llm-worker-0", "Failed", Some(137));
    let (plan, report) = pass(&fake, t(10)).await;
    assert!(event_reasons(&plan).contains(&"Restarting".to_string()));
    assert_eq!(report.pods_deleted, 2, "the whole gang stops");
    assert_eq!(job_status(&fake, "llm")["restartCount"], json!(1));
    assert_eq!(job_status(&fake, "llm")["attempt"], json!(1));
    assert!(pods_of(&fake, "llm").is_empty());

    // Within the back-off nothing starts; after it the new attempt starts and is bound.
    let (_, report) = pass(&fake, t(11)).await;
    assert_eq!(report.pods_created, 0);
    let (_, report) = pass(&fake, t(60)).await;
    assert_eq!(report.pods_created, 2);
    assert_eq!(report.pods_bound, 2);
    for p in pods_of(&fake, "llm") {
        assert_eq!(
            p["metadata"]["labels"]["corral.dev/incarnation"],
            json!("1.0")
        );
    }
    // A late duplicate of the old failure never counts again.
    let (_, _) = pass(&fake, t(61)).await;
    assert_eq!(job_status(&fake, "llm")["restartCount"], json!(1));
}

#[tokio::test]
async fn preemption_deletes_victims_with_grace_then_binds_the_preemptor() {
    let fake = cluster(&["n1"]);
    fake.state.lock().expect("lock").graceful_deletes = true;
    for (name, value) in [("low", 10), ("high", 1000)] {
        fake.insert(
            "apis/corral.dev/v1alpha1/jobpriorityclasses",
            json!({"metadata": {"name": name}, "spec": {"value": value}}),
        );
    }
    fake.insert(JOBS, job("low", 1, 4, json!({"priorityClass": "low"})));
    pass(&fake, t(0)).await;
    assert_eq!(pods_of(&fake, "low").len(), 2);

    // Past the preemption protection, a high-priority job needs the whole node.
    fake.insert(JOBS, job("high", 1, 4, json!({"priorityClass": "high"})));
    let (plan, report) = pass(&fake, t(600)).await;
    assert!(event_reasons(&plan).contains(&"Preempted".to_string()));
    assert_eq!(report.pods_deleted, 2);
    for p in pods_of(&fake, "low") {
        assert!(!p["metadata"]["deletionTimestamp"].is_null(), "terminating");
        assert_eq!(p["metadata"]["deletionGracePeriodSeconds"], json!(30));
    }
    // The preemptor's pods exist but wait: the victims still hold the GPUs.
    assert_eq!(report.pods_created, 2);
    assert_eq!(report.pods_bound, 0);
    assert!(event_reasons(&plan).contains(&"WaitingForRoom".to_string()));

    // Terminating pods are never deleted again (that would cut their grace short).
    fake.clear_log();
    pass(&fake, t(601)).await;
    assert!(!fake.log().iter().any(|l| l.starts_with("DELETE")));

    fake.finish_terminating();
    let (_, report) = pass(&fake, t(640)).await;
    assert_eq!(report.pods_bound, 2);
    let low = fake.get(JOBS, "ml", "low").expect("low");
    assert!(
        low["metadata"]["annotations"]["corral.dev/admission"].is_null(),
        "back in the queue"
    );
    assert_eq!(low["status"]["preemptionCount"], json!(1));
    assert_eq!(condition(&fake, "low", "Queued").as_deref(), Some("True"));
    assert!(
        low["status"]["restartCount"].is_null(),
        "preemption is not a failure"
    );
}

#[tokio::test]
async fn a_finished_job_is_cleaned_up_and_deleted_after_its_ttl() {
    let fake = cluster(&["n1"]);
    fake.insert(
        JOBS,
        job(
            "done",
            1,
            1,
            json!({"runPolicy": {"cleanPodPolicy": "All", "ttlSecondsAfterFinished": 60}}),
        ),
    );
    pass(&fake, t(0)).await;
    set_phase(&fake, "done-master-0", "Succeeded", Some(0));
    set_phase(&fake, "done-worker-0", "Succeeded", Some(0));
    let (plan, _) = pass(&fake, t(10)).await;
    assert!(event_reasons(&plan).contains(&"Succeeded".to_string()));
    assert_eq!(
        condition(&fake, "done", "Succeeded").as_deref(),
        Some("True")
    );
    assert!(pods_of(&fake, "done").is_empty(), "cleanPodPolicy All");
    pass(&fake, t(20)).await;
    let job = fake.get(JOBS, "ml", "done").expect("kept until the ttl");
    assert!(
        job["metadata"]["annotations"]["corral.dev/admission"].is_null(),
        "released"
    );
    pass(&fake, t(80)).await;
    assert!(
        fake.get(JOBS, "ml", "done").is_none(),
        "deleted after the ttl"
    );
    assert!(
        fake.get("api/v1/services", "ml", "done").is_none(),
        "owned objects go with it"
    );
}

#[tokio::test]
async fn an_operator_restart_in_the_middle_of_a_gang_creates_no_duplicates_and_loses_nothing() {
    let fake = cluster(&["n1", "n2", "n3", "n4"]);
    fake.insert(JOBS, job("gang", 3, 8, json!({})));
    // The first operator dies after two pod creations.
    fake.state.lock().expect("lock").pod_creates_left = Some(2);
    let applier = Applier::new(fake.client(), None, RateLimiter::unlimited());
    let (_, report) = reconcile_once(&applier, &PlanConfig::default(), t(0))
        .await
        .expect("observe");
    assert_eq!(report.errors.len(), 1, "{:?}", report.errors);
    assert_eq!(report.pods_bound, 0, "an incomplete gang is never bound");
    let admission_before = fake.get(JOBS, "ml", "gang").expect("job")["metadata"]["annotations"]
        ["corral.dev/admission"]
        .clone();
    assert!(
        admission_before.is_string(),
        "the decision was recorded first"
    );
    assert_eq!(pods_of(&fake, "gang").len(), 2);

    // A new operator (fresh client, no memory) picks up from the API server alone.
    fake.state.lock().expect("lock").pod_creates_left = None;
    let (_, report) = pass(&fake, t(5)).await;
    assert_eq!(report.pods_created, 2, "only the missing replicas");
    assert_eq!(report.pods_bound, 4, "the whole gang at once");
    let pods = pods_of(&fake, "gang");
    assert_eq!(pods.len(), 4);
    let admission: Value =
        serde_json::from_str(admission_before.as_str().expect("string")).expect("json");
    for p in &pods {
        let role = p["metadata"]["labels"]["corral.dev/role"]
            .as_str()
            .expect("role");
        let index: u32 = p["metadata"]["labels"]["corral.dev/index"]
            .as_str()
            .and_then(|i| i.parse().ok())
            .expect("index");
        let placed = admission["placements"]
            .as_array()
            .and_then(|ps| {
                ps.iter()
                    .find(|pl| pl["role"] == json!(role) && pl["index"] == json!(index))
            })
            .expect("placement");
        assert_eq!(
            p["spec"]["nodeName"], placed["node"],
            "bound where admitted"
        );
    }
    assert_eq!(
        fake.get(JOBS, "ml", "gang").expect("job")["metadata"]["annotations"]["corral.dev/admission"],
        admission_before,
        "the admission survived unchanged"
    );
    assert_eq!(job_status(&fake, "gang")["restartCount"], Value::Null);
}

#[tokio::test]
async fn a_stale_status_is_rejected_and_nothing_else_is_done_for_that_job() {
    let fake = cluster(&["n1"]);
    fake.insert(JOBS, job("s", 0, 1, json!({})));
    let applier = Applier::new(fake.client(), None, RateLimiter::unlimited());
    let world = corral_kube::operator::observe_api(&applier.client)
        .await
        .expect("observe");
    // Someone changes the job between observe and apply.
    fake.update(JOBS, "ml", "s", |j| {
        j["metadata"]["labels"] = json!({"x": "y"})
    });
    let (_, report) =
        corral_kube::operator::pass(&world, &PlanConfig::default(), &applier, t(0)).await;
    assert_eq!(report.errors.len(), 1);
    assert_eq!(report.pods_created, 0);
    let (_, report) = pass(&fake, t(1)).await;
    assert_eq!(report.pods_created, 1);
}

async fn pass_with(fake: &FakeApi, cfg: &PlanConfig, now: Timestamp) -> (Plan, ApplyReport) {
    let applier = Applier::new(fake.client(), None, RateLimiter::unlimited());
    let out = reconcile_once(&applier, cfg, now).await.expect("observe");
    assert!(out.1.errors.is_empty(), "apply errors: {:?}", out.1.errors);
    out
}

fn condition_message(fake: &FakeApi, name: &str, ty: &str) -> String {
    job_status(fake, name)["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == json!(ty)))
        .and_then(|c| c["message"].as_str().map(str::to_string))
        .unwrap_or_default()
}

#[tokio::test]
async fn a_job_naming_no_queue_is_admitted_on_a_cluster_that_declares_no_default_queue() {
    // As embedded: the implicit `default` queue (unlimited in every pool) takes jobs that
    // name no queue. Before the control plane, the operator left them pending.
    let fake = FakeApi::new();
    fake.insert("api/v1/nodes", node("n1"));
    fake.insert(JOBS, job("noq", 1, 4, json!({})));
    let (plan, report) = pass(&fake, t(0)).await;
    assert!(event_reasons(&plan).contains(&"Admitted".to_string()));
    assert_eq!(report.pods_created, 2);
    assert_eq!(report.pods_bound, 2);
    assert_eq!(condition(&fake, "noq", "Admitted").as_deref(), Some("True"));
}

#[tokio::test]
async fn the_configured_grace_period_reaches_the_pod_deletions_of_a_suspend() {
    let fake = cluster(&["n1"]);
    fake.state.lock().expect("lock").graceful_deletes = true;
    let cfg = PlanConfig {
        grace_period: Some(std::time::Duration::from_secs(45)),
        ..PlanConfig::default()
    };
    fake.insert(JOBS, job("s", 1, 1, json!({})));
    pass_with(&fake, &cfg, t(0)).await;
    assert_eq!(pods_of(&fake, "s").len(), 2);
    fake.update(JOBS, "ml", "s", |j| {
        j["spec"]["runPolicy"] = json!({"suspend": true})
    });
    let (plan, report) = pass_with(&fake, &cfg, t(5)).await;
    assert_eq!(report.pods_deleted, 2);
    assert!(event_reasons(&plan).contains(&"Suspended".to_string()));
    for p in pods_of(&fake, "s") {
        assert_eq!(p["metadata"]["deletionGracePeriodSeconds"], json!(45));
    }
    assert_eq!(condition(&fake, "s", "Suspended").as_deref(), Some("True"));
    // Once the pods are gone the job gives its admission back.
    fake.finish_terminating();
    pass_with(&fake, &cfg, t(10)).await;
    let s = fake.get(JOBS, "ml", "s").expect("job");
    assert!(s["metadata"]["annotations"]["corral.dev/admission"].is_null());
}

#[tokio::test]
async fn a_pod_templates_termination_grace_period_reaches_the_pod_deletions_of_a_delete() {
    let fake = cluster(&["n1"]);
    fake.state.lock().expect("lock").graceful_deletes = true;
    let mut j = job("d", 1, 1, json!({}));
    j["spec"]["replicas"]["worker"]["template"]["podTemplate"] =
        json!({"spec": {"terminationGracePeriodSeconds": 120}});
    fake.insert(JOBS, j);
    // The cluster's setting yields to the job's own.
    let cfg = PlanConfig {
        grace_period: Some(std::time::Duration::from_secs(45)),
        ..PlanConfig::default()
    };
    pass_with(&fake, &cfg, t(0)).await;
    assert_eq!(pods_of(&fake, "d").len(), 2);
    // A foreground deletion: the job stays, with a deletionTimestamp, while its pods stop.
    fake.update(JOBS, "ml", "d", |j| {
        j["metadata"]["deletionTimestamp"] = json!("2025-01-01T00:00:05Z");
        j["metadata"]["finalizers"] = json!(["foregroundDeletion"]);
    });
    let (_, report) = pass_with(&fake, &cfg, t(5)).await;
    assert_eq!(report.pods_deleted, 2);
    for p in pods_of(&fake, "d") {
        assert_eq!(p["metadata"]["deletionGracePeriodSeconds"], json!(120));
    }
    // Terminating pods are not deleted again; nothing new starts.
    fake.clear_log();
    let (_, report) = pass_with(&fake, &cfg, t(6)).await;
    assert_eq!(report.pods_created, 0);
    assert!(!fake.log().iter().any(|l| l.starts_with("DELETE")));
}

#[tokio::test]
async fn a_job_that_can_never_fit_says_why_in_queued_and_is_unschedulable() {
    let fake = cluster(&["n1"]);
    // 16 GPUs in one replica; nodes have 8.
    fake.insert(JOBS, job("big", 0, 16, json!({})));
    let (plan, report) = pass(&fake, t(0)).await;
    assert_eq!(report.pods_created, 0);
    assert_eq!(condition(&fake, "big", "Queued").as_deref(), Some("True"));
    assert_eq!(
        condition(&fake, "big", "Unschedulable").as_deref(),
        Some("True")
    );
    let why = condition_message(&fake, "big", "Queued");
    assert!(
        why.contains("16"),
        "the pending reason names the need: {why}"
    );
    let big = plan.jobs.iter().find(|j| j.name == "big").expect("plan");
    assert!(
        big.events
            .iter()
            .any(|e| e.warning && e.reason == "Unschedulable"),
        "{:?}",
        big.events
    );
    assert_eq!(plan.pending, 1);
    // The next pass changes nothing and says nothing again.
    let (plan, _) = pass(&fake, t(5)).await;
    let big = plan.jobs.iter().find(|j| j.name == "big").expect("plan");
    assert!(big.is_empty(), "{big:?}");
}
