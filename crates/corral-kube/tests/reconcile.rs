//! The reconcile loop against a mocked API server (kube's tower-test pattern, with an
//! in-memory fake behind it): the real kube `Client` sends real requests; the fake keeps
//! objects as the API server does for the calls Corral makes.

mod common;

use common::passes::*;
use common::{FakeApi, h100_node};
use corral_kube::apply::{Applier, ApplyReport, RateLimiter};
use corral_kube::plan::{Plan, PlanConfig};
use jiff::Timestamp;
use serde_json::{Value, json};

#[tokio::test]
async fn create_admits_creates_service_and_pods_and_binds_the_gang() {
    let fake = cluster(&["n1", "n2"]);
    fake.insert(JOBS, job("llm", 1, 8, json!({})));

    let (plan, report) = pass(&fake, t(0)).await;
    assert_eq!(report.pods_created, 2);
    assert_eq!(report.pods_bound, 2);
    assert!(event_reasons(&plan).contains(&"Admitted".to_string()));

    let job = fake.get(JOBS, "ml", "llm").expect("job");
    let admission: Value = job["status"]["admission"].clone();
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

/// A container the kubelet cannot start (its image cannot be pulled) is decided by the
/// control plane as in every shell: the job stops its pods, gives its GPUs back to a job
/// that can run, waits out a back-off in state BackOff with the kubelet's words (a Warning
/// once, never counted against backoffLimit), then re-enters its queue.
#[tokio::test]
async fn a_pod_whose_image_cannot_be_pulled_backs_off_and_frees_its_gpus() {
    let fake = cluster(&["n1"]);
    fake.insert(
        JOBS,
        job("bad", 1, 4, json!({"runPolicy": {"backoffLimit": 0}})),
    );
    pass(&fake, t(0)).await;
    assert_eq!(pods_of(&fake, "bad").len(), 2);
    set_phase(&fake, "bad-worker-0", "Running", None);
    let words = "Back-off pulling image \"pytorch/pytorch:2.5.1\": not found";
    fake.update(PODS, "ml", "bad-master-0", |p| {
        p["status"]["phase"] = json!("Pending");
        p["status"]["containerStatuses"] = json!([{
            "name": "pytorch", "ready": false, "restartCount": 0, "image": "pytorch/pytorch:2.5.1",
            "imageID": "",
            "state": {"waiting": {"reason": "ImagePullBackOff", "message": words}},
        }]);
    });
    fake.insert(JOBS, job("next", 1, 4, json!({})));

    // The plane backs the job off: its pods go, with the kubelet's words in its status.
    let (plan, report) = pass(&fake, t(1)).await;
    assert_eq!(report.pods_deleted, 2, "both pods stop");
    let status = job_status(&fake, "bad");
    assert_eq!(status["phase"], json!("BackOff"));
    assert_eq!(status["startFailures"], json!(1));
    assert_eq!(status["blockedBy"], json!(["StartBackOff"]));
    assert_eq!(status["restartCount"], json!(null));
    assert_eq!(condition(&fake, "bad", "Failed"), None);
    let message = condition_message(&fake, "bad", "Queued");
    assert!(message.contains("bad-master-0"), "{message}");
    assert!(
        message.contains(&format!("ImagePullBackOff: {words}")),
        "{message}"
    );
    assert_eq!(
        event_reasons(&plan)
            .iter()
            .filter(|r| *r == "StartBackOff")
            .count(),
        1
    );

    // Its admission is given back once its pods are gone; the job waiting behind it runs.
    fake.finish_terminating();
    pass(&fake, t(2)).await;
    let (plan, report) = pass(&fake, t(3)).await;
    let job = fake.get(JOBS, "ml", "bad").expect("job");
    assert!(job["status"]["admission"].is_null(), "admission released");
    assert_eq!(pods_of(&fake, "next").len(), 2, "{report:?}");
    assert!(
        !event_reasons(&plan).contains(&"StartBackOff".to_string()),
        "announced once"
    );
    assert_eq!(job_status(&fake, "bad")["phase"], json!("BackOff"));
    assert_eq!(job_status(&fake, "bad")["startFailures"], json!(1));

    // After the back-off (10 s) it waits in its queue again: next holds the GPUs.
    pass(&fake, t(12)).await;
    let status = job_status(&fake, "bad");
    assert_eq!(status["phase"], json!("Queued"));
    assert_eq!(status["startFailures"], json!(1));
    assert_ne!(status["blockedBy"], json!(["StartBackOff"]));
    assert!(pods_of(&fake, "bad").is_empty());
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
    assert!(low["status"]["admission"].is_null(), "back in the queue");
    assert_eq!(low["status"]["preemptionCount"], json!(1));
    assert_eq!(condition(&fake, "low", "Queued").as_deref(), Some("True"));
    assert!(
        low["status"]["restartCount"].is_null(),
        "preemption is not a failure"
    );
}

#[tokio::test]
async fn an_operator_restart_in_the_middle_of_a_gang_creates_no_duplicates_and_loses_nothing() {
    let fake = cluster(&["n1", "n2", "n3", "n4"]);
    fake.insert(JOBS, job("gang", 3, 8, json!({})));
    // The first operator dies after two pod creations.
    fake.state.lock().expect("lock").pod_creates_left = Some(2);
    let applier = Applier::new(fake.client(), None, RateLimiter::unlimited());
    let (_, report) =
        common::passes::kept_pass(&fake, &applier, &PlanConfig::default(), t(0)).await;
    assert_eq!(report.errors.len(), 1, "{:?}", report.errors);
    // Made on their nodes: the whole gang's room was checked before the first creation.
    assert_eq!(report.pods_bound, 2, "the pods made are on their nodes");
    let admission_before =
        fake.get(JOBS, "ml", "gang").expect("job")["status"]["admission"].clone();
    assert!(
        admission_before.is_object(),
        "the decision was recorded first"
    );
    assert_eq!(pods_of(&fake, "gang").len(), 2);

    // A new operator (fresh client, no memory) picks up from the API server alone.
    fake.state.lock().expect("lock").pod_creates_left = None;
    let (_, report) = pass(&fake, t(5)).await;
    assert_eq!(report.pods_created, 2, "only the missing replicas");
    assert_eq!(report.pods_bound, 2, "the rest of the gang, on its nodes");
    let pods = pods_of(&fake, "gang");
    assert_eq!(pods.len(), 4);
    let admission = &admission_before;
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
        fake.get(JOBS, "ml", "gang").expect("job")["status"]["admission"],
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
    let out = common::passes::kept_pass(fake, &applier, cfg, now).await;
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
    fake.insert("api/v1/nodes", h100_node("n1"));
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
    assert!(s["status"]["admission"].is_null());
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

/// A pass whose apply errors are expected (a refusal of the API server).
async fn pass_expecting_errors(fake: &FakeApi, now: Timestamp) -> (Plan, ApplyReport) {
    let applier = Applier::new(fake.client(), None, RateLimiter::unlimited());
    common::passes::kept_pass(fake, &applier, &PlanConfig::default(), now).await
}

fn bad_toleration_job(name: &str) -> Value {
    let mut j = job(name, 1, 4, json!({}));
    j["spec"]["replicas"]["worker"]["template"]["podTemplate"] = json!({"spec": {"tolerations": [{"key": "gpu", "operator": "Sometimes", "effect": "NoSchedule"}]}});
    j
}

// Issue 19 #3. The 422 body is the shape and words kube-apiserver writes for an unsupported
// toleration operator (apimachinery's field.NotSupported in a StatusError); the 409 and 403
// bodies likewise. They were written from the API server's source, not captured from a live
// server in this session.
#[tokio::test]
async fn a_pod_the_api_server_rejects_fails_the_job_with_its_message_and_frees_the_gpus() {
    let fake = cluster(&["n1"]);
    fake.insert(JOBS, bad_toleration_job("bad"));
    // Pass 1: admitted; the master is created, the worker refused (422). The refusal is
    // counted and recorded on the job.
    let (_, report) = pass_expecting_errors(&fake, t(0)).await;
    assert_eq!(report.rejected.len(), 1, "{:?}", report.errors);
    assert_eq!(report.rejected[0].code, 422);
    assert!(
        report
            .errors
            .iter()
            .any(|e| e.contains("Unsupported value: \"Sometimes\""))
    );
    let job = fake.get(JOBS, "ml", "bad").expect("job");
    assert!(job["metadata"]["annotations"]["corral.dev/launch-rejected"].is_string());
    // Pass 2: the control plane fails the job with the server's words, releases the
    // admission and stops what started; a Failed event says why.
    let (plan, report) = pass(&fake, t(1)).await;
    assert_eq!(condition(&fake, "bad", "Failed").as_deref(), Some("True"));
    let message = condition_message(&fake, "bad", "Failed");
    assert!(message.contains("bad-worker-0"), "{message}");
    assert!(
        message.contains("spec.tolerations[0].operator: Unsupported value: \"Sometimes\""),
        "{message}"
    );
    assert!(event_reasons(&plan).contains(&"Failed".to_string()));
    assert_eq!(
        job_status(&fake, "bad")["gpus"],
        json!(null),
        "no GPUs held"
    );
    assert!(report.pods_deleted >= 1 || pods_of(&fake, "bad").is_empty());
    // Pass 3: once nothing of it runs its admission is released; nothing is retried,
    // nothing re-announced.
    fake.finish_terminating();
    let (plan, report) = pass(&fake, t(2)).await;
    assert_eq!(report.pods_created, 0);
    assert!(!event_reasons(&plan).contains(&"Failed".to_string()));
    let job = fake.get(JOBS, "ml", "bad").expect("job");
    assert!(job["status"]["admission"].is_null(), "admission released");
    // The GPUs serve the next job.
    fake.insert(JOBS, self::job("next", 1, 4, json!({})));
    let (_, report) = pass(&fake, t(3)).await;
    assert_eq!(report.pods_created, 2);
}

#[tokio::test]
async fn a_pod_name_taken_by_a_foreign_pod_is_a_counted_rejection_not_a_silent_retry() {
    let fake = cluster(&["n1"]);
    // Someone else's pod holds the worker's name (no owner reference to the job).
    fake.insert(
        PODS,
        json!({"metadata": {"name": "taken-worker-0", "namespace": "ml"}, "spec": {"containers": []}}),
    );
    fake.insert(JOBS, job("taken", 1, 4, json!({})));
    let (_, report) = pass_expecting_errors(&fake, t(0)).await;
    assert_eq!(report.rejected.len(), 1, "{:?}", report.errors);
    assert_eq!(report.rejected[0].code, 409);
    assert_eq!(report.rejected[0].reason, "AlreadyExists");
    assert_eq!(
        report.errors.len(),
        1,
        "counted in corral_reconcile_errors_total"
    );
    let (_, _) = pass(&fake, t(1)).await;
    assert_eq!(condition(&fake, "taken", "Failed").as_deref(), Some("True"));
    let message = condition_message(&fake, "taken", "Failed");
    assert!(
        message.contains("pods \"taken-worker-0\" already exists")
            && message.contains("not owned by TrainingJob ml/taken"),
        "{message}"
    );
}

#[tokio::test]
async fn a_forbidden_create_fails_the_job_and_a_server_error_backs_off() {
    let fake = cluster(&["n1"]);
    fake.insert(JOBS, job("denied", 1, 4, json!({})));
    fake.state.lock().expect("lock").refuse_pod_creates = Some(json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "pods \"denied-master-0\" is forbidden: cannot set blockOwnerDeletion if an ownerReference refers to a resource you can't set finalizers on: , <nil>",
        "reason": "Forbidden", "details": {"name": "denied-master-0", "kind": "pods"}, "code": 403,
    }));
    let (_, report) = pass_expecting_errors(&fake, t(0)).await;
    assert_eq!(report.rejected.len(), 1);
    assert_eq!(report.rejected[0].code, 403);
    let (_, _) = pass_expecting_errors(&fake, t(1)).await;
    assert_eq!(
        condition(&fake, "denied", "Failed").as_deref(),
        Some("True")
    );
    assert!(condition_message(&fake, "denied", "Failed").contains("cannot set blockOwnerDeletion"));

    // A 503 is transient: no rejection, the job is backed off (left alone by the next
    // pass of the same applier) and keeps its admission.
    fake.state.lock().expect("lock").refuse_pod_creates = Some(json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "the server is currently unable to handle the request", "reason": "ServiceUnavailable",
        "code": 503,
    }));
    fake.insert(JOBS, job("flaky", 1, 4, json!({})));
    let applier = Applier::new(fake.client(), None, RateLimiter::unlimited());
    let (_, report) =
        common::passes::kept_pass(&fake, &applier, &PlanConfig::default(), t(2)).await;
    assert!(report.rejected.is_empty());
    assert_eq!(report.errors.len(), 1, "{:?}", report.errors);
    assert!(report.retry_in.is_some());
    let (_, report) =
        common::passes::kept_pass(&fake, &applier, &PlanConfig::default(), t(3)).await;
    assert_eq!(report.backed_off, 1);
    assert!(report.errors.is_empty());
    assert_ne!(condition(&fake, "flaky", "Failed").as_deref(), Some("True"));
    let job = fake.get(JOBS, "ml", "flaky").expect("job");
    assert!(job["status"]["admission"].is_object());
}

// Issue 19 #4: a job without `template.image` is never admitted on Kubernetes, says why in
// its status, and announces it once (it was a Warning every pass, 58 in two minutes).
#[tokio::test]
async fn a_job_without_an_image_is_never_admitted_and_says_so_once() {
    let fake = cluster(&["n1"]);
    let mut j = job("noimage", 1, 4, json!({}));
    j["spec"]["replicas"]["worker"]["template"]
        .as_object_mut()
        .expect("template")
        .remove("image");
    fake.insert(JOBS, j);
    let (plan, report) = pass(&fake, t(0)).await;
    assert_eq!(report.pods_created, 0);
    assert_eq!(
        event_reasons(&plan)
            .iter()
            .filter(|r| *r == "Invalid")
            .count(),
        1
    );
    assert_eq!(
        condition(&fake, "noimage", "Queued").as_deref(),
        Some("True")
    );
    assert_ne!(
        condition(&fake, "noimage", "Admitted").as_deref(),
        Some("True")
    );
    let message = condition_message(&fake, "noimage", "Queued");
    assert!(
        message.contains("spec.replicas.worker.template.image: is required on Kubernetes"),
        "{message}"
    );
    assert_eq!(
        job_status(&fake, "noimage")["blockedBy"],
        json!(["Invalid"])
    );
    for s in 1..4 {
        let (plan, report) = pass(&fake, t(s * 30)).await;
        assert!(
            event_reasons(&plan).is_empty(),
            "{:?}",
            event_reasons(&plan)
        );
        assert_eq!(report.status_updates, 0);
        assert_eq!(report.pods_created, 0);
    }
    let job = fake.get(JOBS, "ml", "noimage").expect("job");
    assert!(job["status"]["admission"].is_null());
    // Its quota is free: a valid job of the same size runs.
    fake.insert(JOBS, self::job("valid", 1, 4, json!({})));
    let (_, report) = pass(&fake, t(200)).await;
    assert_eq!(report.pods_created, 2);
}

// Issue 19 #7: /readyz said ready before any contact with the API server, also with an
// invalid token. The 401 and 404 bodies are kube-apiserver's (`Unauthorized`; `the server
// could not find the requested resource` for a resource without its CRD).
#[tokio::test]
async fn ready_only_when_the_api_server_answers_and_serves_the_crds() {
    use corral_kube::operator::{Health, check_api};
    let health = Health::default();
    assert!(health.readiness().is_err(), "not ready before any contact");

    let fake = cluster(&["n1"]);
    fake.state.lock().expect("lock").unauthorized = true;
    let why = check_api(&fake.client()).await.expect_err("401");
    assert!(why.contains("401 Unauthorized"), "{why}");
    health.set_api(Err(why));
    assert!(health.readiness().is_err());

    let fake = cluster(&["n1"]);
    fake.state
        .lock()
        .expect("lock")
        .unserved
        .push("apis/corral.dev/v1alpha1/jobpriorityclasses".into());
    let why = check_api(&fake.client()).await.expect_err("no CRD");
    assert!(
        why.contains("jobpriorityclasses.corral.dev is not installed"),
        "{why}"
    );

    let fake = cluster(&["n1"]);
    health.set_api(check_api(&fake.client()).await);
    assert_eq!(
        health.readiness(),
        Ok(()),
        "a standby is ready once the API answers"
    );
    health.set_leading(true);
    assert!(
        health.readiness().is_err_and(|w| w.contains("not synced")),
        "a leader waits for its caches"
    );
    health.set_synced();
    assert_eq!(health.readiness(), Ok(()));
}

// Issue 19 #11: an MPI job gets an ssh key Secret (owned by the job, as Kubeflow's MPI
// operator v2 lays it out) mounted at `mpi.sshAuthMountPath` in the launcher and workers.
#[tokio::test]
async fn an_mpi_job_gets_an_ssh_key_secret_mounted_in_launcher_and_workers() {
    let fake = cluster(&["n1"]);
    let tpl = json!({"image": "mpioperator/mpi-pi:openmpi", "command": ["mpirun", "pi"]});
    let res = json!({"cpu": "2", "memory": "4Gi", "gpu": 1});
    fake.insert(
        JOBS,
        json!({
            "metadata": {"name": "pi", "namespace": "ml"},
            "spec": {
                "framework": "mpi",
                "mpi": {"sshAuthMountPath": "/home/mpiuser/.ssh", "slotsPerWorker": 1},
                "replicas": {
                    "launcher": {"count": 1, "resources": {"cpu": "1", "memory": "1Gi"}, "template": tpl},
                    "worker": {"count": 2, "resources": res, "template": tpl},
                },
            },
        }),
    );
    let (_, report) = pass(&fake, t(0)).await;
    assert!(report.pods_created >= 2);
    let secret = fake
        .get("api/v1/secrets", "ml", "pi-ssh")
        .expect("the ssh Secret");
    assert_eq!(secret["type"], json!("kubernetes.io/ssh-auth"));
    assert_eq!(secret["immutable"], json!(true));
    let job_uid = fake.get(JOBS, "ml", "pi").expect("job")["metadata"]["uid"].clone();
    assert_eq!(secret["metadata"]["ownerReferences"][0]["uid"], job_uid);
    let private = secret["stringData"]["ssh-privatekey"]
        .as_str()
        .expect("private key");
    let public = secret["stringData"]["ssh-publickey"]
        .as_str()
        .expect("public key");
    assert!(
        private.starts_with("-----BEGIN OPENSSH PRIVATE KEY-----"),
        "{private}"
    );
    assert!(public.starts_with("ssh-ed25519 "), "{public}");
    // The key pair is one: the public key is the private key's.
    let key = ssh_key::PrivateKey::from_openssh(private).expect("OpenSSH private key");
    assert_eq!(key.public_key().to_openssh().expect("public"), public);
    for pod in pods_of(&fake, "pi") {
        let mounts = pod["spec"]["containers"][0]["volumeMounts"].clone();
        assert!(
            mounts
                .as_array()
                .is_some_and(|m| m.iter().any(|m| m["name"] == json!("ssh-auth")
                    && m["mountPath"] == json!("/home/mpiuser/.ssh"))),
            "{mounts}"
        );
        let volume = pod["spec"]["volumes"]
            .as_array()
            .and_then(|v| v.iter().find(|v| v["name"] == json!("ssh-auth")).cloned())
            .expect("ssh volume");
        assert_eq!(volume["secret"]["secretName"], json!("pi-ssh"));
        assert_eq!(volume["secret"]["defaultMode"], json!(0o600));
        let paths: Vec<&str> = volume["secret"]["items"]
            .as_array()
            .expect("items")
            .iter()
            .filter_map(|i| i["path"].as_str())
            .collect();
        assert_eq!(paths, ["id_rsa", "id_rsa.pub", "authorized_keys"]);
    }
    // A later launch keeps the Secret (immutable; created once).
    let before = secret["stringData"].clone();
    let _ = pass(&fake, t(1)).await;
    assert_eq!(
        fake.get("api/v1/secrets", "ml", "pi-ssh").expect("secret")["stringData"],
        before
    );
}

// Issue 19 #8: a pod deleted from outside (drain, eviction, `kubectl delete pod`) was
// re-created silently in the same incarnation while the gang kept running. As Kubeflow's
// and JobSet's operators do, the lost replica restarts the gang by the job's policy, counted
// and announced.
#[tokio::test]
async fn a_pod_deleted_from_outside_restarts_the_gang_counted_with_an_event() {
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

    fake.remove(PODS, "ml", "llm-worker-0");
    let (plan, report) = pass(&fake, t(10)).await;
    assert_eq!(
        report.pods_created, 0,
        "not re-created in the same incarnation"
    );
    assert!(event_reasons(&plan).contains(&"Restarting".to_string()));
    assert_eq!(job_status(&fake, "llm")["restartCount"], json!(1));
    assert_eq!(job_status(&fake, "llm")["attempt"], json!(1));
    assert_ne!(condition(&fake, "llm", "Running").as_deref(), Some("True"));
    let message = condition_message(&fake, "llm", "Restarting");
    assert!(message.contains("llm-worker-0 vanished"), "{message}");
    assert_eq!(report.pods_deleted, 1, "the rest of the gang stops");
    // After the back-off the whole gang starts again as the next attempt.
    let (_, report) = pass(&fake, t(60)).await;
    assert_eq!(report.pods_created, 2);
    for p in pods_of(&fake, "llm") {
        assert_eq!(
            p["metadata"]["labels"]["corral.dev/incarnation"],
            json!("1.0")
        );
    }
}

/// A launch the operator itself cannot build (here a name too long for the replicas' host
/// names) is refused for good like one the API server refuses: recorded on the job, then the
/// plane fails it with the words and its GPUs serve the next job; nothing is created.
#[tokio::test]
async fn a_launch_the_operator_cannot_build_fails_the_job_and_frees_the_gpus() {
    let fake = cluster(&["n1"]);
    let long = "a".repeat(60);
    fake.insert(JOBS, job(&long, 1, 4, json!({})));
    let (_, report) = pass_expecting_errors(&fake, t(0)).await;
    assert_eq!(report.pods_created, 0, "nothing of the gang is created");
    assert_eq!(report.rejected.len(), 1, "{:?}", report.errors);
    assert!(
        report.rejected[0].reason.starts_with("Invalid"),
        "{:?}",
        report.rejected
    );
    assert!(
        report
            .errors
            .iter()
            .any(|e| e.contains("the operator cannot build")),
        "{:?}",
        report.errors
    );
    let (_, _) = pass(&fake, t(1)).await;
    assert_eq!(condition(&fake, &long, "Failed").as_deref(), Some("True"));
    let message = condition_message(&fake, &long, "Failed");
    assert!(message.contains("at most 63"), "{message}");
    fake.finish_terminating();
    pass(&fake, t(2)).await;
    let job = fake.get(JOBS, "ml", &long).expect("job");
    assert!(job["status"]["admission"].is_null(), "admission released");
    fake.insert(JOBS, self::job("next", 1, 4, json!({})));
    let (_, report) = pass(&fake, t(3)).await;
    assert_eq!(report.pods_created, 2, "the GPUs serve the next job");
}

/// A job naming a priority class the cluster does not have is not admitted at another
/// priority: it waits as written, and its reason names the class and those that exist.
#[tokio::test]
async fn a_job_naming_a_missing_priority_class_waits_and_says_which() {
    let fake = cluster(&["n1"]);
    let mut j = job("classless", 1, 1, json!({}));
    j["spec"]["priorityClass"] = json!("platinum");
    fake.insert(JOBS, j);
    let (plan, report) = pass(&fake, t(0)).await;
    assert_eq!(report.pods_created, 0);
    assert_eq!(
        condition(&fake, "classless", "Queued").as_deref(),
        Some("True")
    );
    let why = condition_message(&fake, "classless", "Queued");
    assert!(
        why.contains("`platinum` is not a JobPriorityClass"),
        "{why}"
    );
    assert!(event_reasons(&plan).contains(&"Invalid".to_string()));
}
