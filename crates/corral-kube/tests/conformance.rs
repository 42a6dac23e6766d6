//! The conformance story (`corral_core::control::conformance`) through the operator: the
//! in-memory API server of the other kube tests, operator passes as `reconcile_once` runs
//! them (a fresh client and recorder each pass: the operator keeps nothing between passes),
//! and a fake kubelet. After every step the jobs' states, admissions and events must be
//! those of the bare control plane.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::FakeApi;
use corral_core::control::conformance::{self, JobOutcome, ScenarioStep};
use corral_core::lifecycle::job_state;
use corral_kube::apply::{Applier, ApplyReport, RateLimiter};
use corral_kube::consts::{GPU_PRODUCT_LABEL, GPU_RESOURCE};
use corral_kube::plan::{Plan, PlanConfig};
use jiff::Timestamp;
use kube::api::{Api, DeleteParams, DynamicObject};
use kube::runtime::events::{Recorder, Reporter};
use serde_json::{Value, json};

const PODS: &str = "api/v1/pods";
const JOBS: &str = "apis/corral.dev/v1alpha1/trainingjobs";
const CLASSES: &str = "apis/corral.dev/v1alpha1/jobpriorityclasses";
const H100: &str = "NVIDIA-H100-80GB-HBM3";
/// The image of a job that cannot start.
const UNPULLABLE: &str = "registry.invalid/corral/no-such-image:1";
/// Seconds the operator's clock advances between passes: more than the grace period, so
/// that restart back-offs pass within a few passes.
const PASS_SECONDS: i64 = 3;
/// Passes in a row that change nothing before a step counts as settled.
const QUIET_PASSES: usize = 3;

fn t(secs: i64) -> Timestamp {
    Timestamp::from_second(1_735_689_600 + secs).expect("valid time")
}

fn config() -> PlanConfig {
    let mut cfg = PlanConfig {
        grace_period: Some(Duration::from_secs(conformance::GRACE_SECONDS)),
        ..PlanConfig::default()
    };
    cfg.scheduler.preemption_protection_ms = 0;
    cfg
}

/// One operator pass at `now`, with a recorder so that its events reach the API server,
/// every event of the plane among them (`--condition-events`): the story compares the
/// plane's decisions, whatever the operator leaves to the job's conditions.
async fn pass(fake: &FakeApi, cfg: &PlanConfig, now: Timestamp) -> (Plan, ApplyReport) {
    let client = fake.client();
    let reporter = Reporter {
        controller: "corral".into(),
        instance: Some("conformance".into()),
    };
    let applier = Applier::new(
        client.clone(),
        Some(Recorder::new(client, reporter)),
        RateLimiter::unlimited(),
    )
    .with_condition_events(true);
    let out = common::passes::kept_pass(fake, &applier, cfg, now).await;
    assert!(out.1.errors.is_empty(), "apply errors: {:?}", out.1.errors);
    out
}

fn pods_of(fake: &FakeApi, job: &str) -> Vec<Value> {
    fake.list(PODS)
        .into_iter()
        .filter(|p| p["metadata"]["labels"]["corral.dev/job-name"] == json!(job))
        .collect()
}

fn pod_name(p: &Value) -> String {
    p["metadata"]["name"].as_str().unwrap_or("").to_string()
}

/// A pod's phase as the kubelet reports it, with its container's exit code.
fn set_phase(fake: &FakeApi, name: &str, phase: &str, exit: Option<i32>) {
    fake.update(PODS, conformance::NAMESPACE, name, |p| {
        p["status"]["phase"] = json!(phase);
        if let Some(code) = exit {
            p["status"]["containerStatuses"] = json!([{
                "name": "pytorch", "ready": false, "restartCount": 0, "image": "x", "imageID": "",
                "state": {"terminated": {"exitCode": code, "reason": if code == 0 { "Completed" } else { "Error" }}},
            }]);
        }
    });
}

/// The kubelet: pods being deleted go (their grace period is shorter than a pass), except
/// those of a job slow to stop, which ignore SIGTERM and go a pass later (their grace period
/// is over by then); bound pods start, or wait for an image that cannot be pulled. Whether
/// it changed anything.
fn kubelet(fake: &FakeApi, dying: &mut BTreeSet<String>) -> bool {
    let mut changed = false;
    for p in fake.list(PODS) {
        if p["metadata"]["deletionTimestamp"].is_null() {
            continue;
        }
        let name = pod_name(&p);
        let job = p["metadata"]["labels"]["corral.dev/job-name"]
            .as_str()
            .unwrap_or("");
        if conformance::slow_to_stop(job) && dying.insert(name.clone()) {
            continue;
        }
        dying.remove(&name);
        fake.remove(PODS, conformance::NAMESPACE, &name);
        changed = true;
    }
    for p in fake.list(PODS) {
        let bound = !p["spec"]["nodeName"].is_null();
        if !bound || p["status"]["phase"] != json!("Pending") {
            continue;
        }
        let job = p["metadata"]["labels"]["corral.dev/job-name"]
            .as_str()
            .unwrap_or("");
        if conformance::cannot_start(job) {
            if p["status"]["containerStatuses"].is_null() {
                fake.update(PODS, conformance::NAMESPACE, &pod_name(&p), |p| {
                    p["status"]["containerStatuses"] = json!([{
                        "name": "pytorch", "ready": false, "restartCount": 0,
                        "image": UNPULLABLE, "imageID": "",
                        "state": {"waiting": {
                            "reason": "ErrImagePull",
                            "message": "failed to pull and unpack image: not found",
                        }},
                    }]);
                });
                changed = true;
            }
        } else {
            set_phase(fake, &pod_name(&p), "Running", None);
            changed = true;
        }
    }
    changed
}

/// The GPUs requested by the pods bound to the node that have not ended (being deleted
/// included: their processes may still hold the GPUs).
fn gpus_held(fake: &FakeApi) -> u64 {
    fake.list(PODS)
        .iter()
        .filter(|p| !p["spec"]["nodeName"].is_null())
        .filter(|p| !matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed")))
        .filter_map(|p| {
            p["spec"]["containers"][0]["resources"]["limits"][GPU_RESOURCE]
                .as_str()
                .and_then(|v| v.parse::<u64>().ok())
                .or_else(|| {
                    p["spec"]["containers"][0]["resources"]["limits"][GPU_RESOURCE].as_u64()
                })
        })
        .sum()
}

/// The device plugin's view of the node's GPUs: its allocatable count.
fn set_allocatable_gpus(fake: &FakeApi, gpus: u32) {
    fake.update("api/v1/nodes", "", "n1", |n| {
        n["status"]["allocatable"][GPU_RESOURCE] = json!(gpus.to_string());
    });
}

fn set_suspend(fake: &FakeApi, name: &str, suspend: bool) {
    fake.update(JOBS, conformance::NAMESPACE, name, |j| {
        j["spec"]["runPolicy"]["suspend"] = json!(suspend);
    });
}

/// The reasons of the events the operator published about `name`, in order.
fn events_of(fake: &FakeApi, name: &str) -> Vec<String> {
    let s = fake.state.lock().expect("lock");
    s.events
        .iter()
        .filter(|e| {
            e["regarding"]["name"] == json!(name)
                && e["regarding"]["namespace"] == json!(conformance::NAMESPACE)
        })
        .filter_map(|e| e["reason"].as_str().map(str::to_string))
        .collect()
}

#[tokio::test]
async fn the_conformance_story_through_the_operator() {
    let fake = FakeApi::new();
    fake.state.lock().expect("lock").graceful_deletes = true;
    fake.insert(
        "api/v1/nodes",
        json!({
            "metadata": {"name": "n1", "labels": {GPU_PRODUCT_LABEL: H100}},
            "status": {
                "allocatable": {
                    "cpu": "64", "memory": "512Gi",
                    GPU_RESOURCE: conformance::NODE_GPUS.to_string(),
                },
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }),
    );
    for class in conformance::priority_classes() {
        fake.insert(CLASSES, serde_json::to_value(&class).expect("class"));
    }
    let cfg = config();
    let ns = conformance::NAMESPACE;
    let mut now = 0i64;
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut submitted: Vec<&str> = Vec::new();
    let mut trace = Vec::new();
    let mut dying = BTreeSet::new();
    for step in conformance::steps() {
        match &step {
            ScenarioStep::Submit(names) => {
                for name in names {
                    let job = conformance::job(name, &["train".to_string()]).expect("job");
                    let mut job = serde_json::to_value(&job).expect("json");
                    // Kubernetes runs images: the story's command needs one.
                    let image = if conformance::cannot_start(name) {
                        UNPULLABLE
                    } else {
                        "busybox"
                    };
                    job["spec"]["replicas"]["worker"]["template"]["image"] = json!(image);
                    fake.insert(JOBS, job);
                    submitted.push(name);
                }
            }
            ScenarioStep::FailWorker(name, index) => {
                let pod = format!("{name}-worker-{index}");
                let p = fake.get(PODS, ns, &pod).unwrap_or_else(|| {
                    panic!("a pod {pod}; trace so far {trace:#?}");
                });
                assert_eq!(p["status"]["phase"], json!("Running"), "{p}");
                set_phase(&fake, &pod, "Failed", Some(1));
            }
            ScenarioStep::Finish(name) => {
                for p in pods_of(&fake, name) {
                    if p["status"]["phase"] == json!("Running") {
                        set_phase(&fake, &pod_name(&p), "Succeeded", Some(0));
                    }
                }
            }
            ScenarioStep::Suspend(name) => set_suspend(&fake, name, true),
            ScenarioStep::Resume(name) => set_suspend(&fake, name, false),
            ScenarioStep::Delete(name) => {
                // A background deletion: the garbage collector takes the job's pods with it.
                let api: Api<DynamicObject> = Api::namespaced_with(
                    fake.client(),
                    ns,
                    &corral_kube::dynamic_objects::training_jobs(),
                );
                api.delete(name, &DeleteParams::background())
                    .await
                    .expect("delete");
            }
            // The device plugin takes the card out: the node offers one GPU less.
            ScenarioStep::GpuTurnsUnhealthy(_) => {
                set_allocatable_gpus(&fake, conformance::NODE_GPUS - 1);
            }
            ScenarioStep::GpusHeal => set_allocatable_gpus(&fake, conformance::NODE_GPUS),
        }
        // Settled: a few passes in a row in which neither the operator nor the kubelet did
        // anything and nothing is due.
        let mut quiet = 0;
        let mut passes = 0;
        while quiet < QUIET_PASSES {
            passes += 1;
            assert!(passes < 200, "step {step:?} did not settle");
            now += PASS_SECONDS;
            let (plan, _) = pass(&fake, &cfg, t(now)).await;
            let operator_busy = plan.jobs.iter().any(|j| !j.is_empty()) || plan.wake_in.is_some();
            let kubelet_busy = kubelet(&fake, &mut dying);
            // No GPU is given twice: a victim slow to exit holds its GPUs until it has gone.
            let held = gpus_held(&fake);
            assert!(
                held <= u64::from(conformance::NODE_GPUS),
                "{held} GPUs held by pods on a node of {} after {step:?}",
                conformance::NODE_GPUS
            );
            quiet = if operator_busy || kubelet_busy {
                0
            } else {
                quiet + 1
            };
        }
        let mut outcome = BTreeMap::new();
        for name in &submitted {
            let (state, admitted) = match fake.get(JOBS, ns, name) {
                Some(v) => {
                    let job: corral_api::TrainingJob =
                        serde_json::from_value(v.clone()).expect("a TrainingJob");
                    (
                        Some(job_state(&job.spec, job.status.as_ref())),
                        !v["status"]["admission"].is_null(),
                    )
                }
                None => (None, false),
            };
            let events = events_of(&fake, name);
            let from = seen.get(*name).copied().unwrap_or(0).min(events.len());
            let recent =
                JobOutcome::new(state, admitted, events[from..].iter().map(|r| r.as_str()));
            seen.insert(name.to_string(), events.len());
            outcome.insert(name.to_string(), recent);
        }
        trace.push(outcome);
    }
    let differences = conformance::differences(&trace);
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}
