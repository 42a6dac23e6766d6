use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use corral_api::served_model::{MODEL_ORIGIN_ANNOTATION, ModelOrigin};
use corral_api::{ServedModel, TrainingJob};
use corral_core::control::serving::{Serving, ServingObservation};

use super::*;

fn cfg() -> ServingConfig {
    ServingConfig {
        port: 8080,
        build: BuildOptions::default(),
        artifacts: crate::pipelines::ArtifactLocation::Claim("corral-artifacts".into()),
        tools_image: "ghcr.io/corral-dev/corral:test".into(),
    }
}

fn now() -> Timestamp {
    "2026-11-28T03:00:00Z".parse().expect("time")
}

fn model(image: Option<&str>, command: &str, status: Option<Value>) -> Arc<ServedModel> {
    let mut template = json!({"command": ["python3", "-c", command]});
    if let Some(i) = image {
        template["image"] = json!(i);
    }
    let mut v = json!({
        "apiVersion": "corral.dev/v1alpha1", "kind": "ServedModel",
        "metadata": {"name": "tiny", "namespace": "ml", "uid": "uid-tiny"},
        "spec": {"template": template, "resources": {"cpu": "1", "memory": "1Gi"},
                 "autoscaling": {"minReplicas": 1, "maxReplicas": 3}},
    });
    if let Some(s) = status {
        v["status"] = s;
    }
    Arc::new(serde_json::from_value(v).expect("model"))
}

/// The revision a first pass made, as the watch then shows it (with its owner's uid).
fn kept(actions: &[ServingAction]) -> Arc<ControllerRevision> {
    let r = actions
        .iter()
        .find_map(|a| match a {
            ServingAction::CreateRevision { revision, .. } => Some(revision.clone()),
            _ => None,
        })
        .expect("a revision");
    Arc::new(*r)
}

fn running_job(action: &ServingAction) -> Arc<TrainingJob> {
    let ServingAction::CreateJob { job, .. } = action else {
        panic!("not a job: {action:?}");
    };
    let mut job = job.clone();
    job["status"] = json!({"phase": "Running"});
    Arc::new(serde_json::from_value(job).expect("job"))
}

fn pod_of(job: &str, ip: &str) -> Arc<Pod> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": format!("{job}-worker-0"), "namespace": "ml",
                         "labels": {"corral.dev/job-name": job}},
            "spec": {"containers": [{"name": "main", "image": "m"}]},
            "status": {"phase": "Running", "podIP": ip},
        }))
        .expect("pod"),
    )
}

fn decide(
    models: &[Arc<ServedModel>],
    revisions: &[Arc<ControllerRevision>],
    world: &World,
    serving: &mut Serving,
) -> Plan {
    decide_with_runs(models, revisions, &[], world, serving)
}

fn decide_with_runs(
    models: &[Arc<ServedModel>],
    revisions: &[Arc<ControllerRevision>],
    runs: &[Arc<corral_api::PipelineRun>],
    world: &World,
    serving: &mut Serving,
) -> Plan {
    plan(
        Seen {
            models,
            revisions,
            runs,
            world,
            observed: &BTreeMap::new(),
        },
        serving,
        &cfg(),
        now(),
    )
}

#[test]
fn a_new_model_gets_its_first_revision_and_replica_owned_by_it() {
    let m = model(Some("models/tiny:1"), "serve()", None);
    let mut serving = Serving::new();
    let p = decide(&[m], &[], &World::default(), &mut serving);
    let r = kept(&p.actions);
    assert_eq!(r.metadata.name.as_deref(), Some("tiny-00001"));
    assert_eq!(r.revision, 1);
    let owner = &r.metadata.owner_references.as_ref().expect("owned")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("ServedModel", "uid-tiny")
    );
    let data = &r.data.as_ref().expect("data").0;
    assert_eq!(data["spec"]["template"]["image"], "models/tiny:1");
    assert!(data.get("status").is_none());

    let job = p
        .actions
        .iter()
        .find_map(|a| match a {
            ServingAction::CreateJob { name, job, .. } => Some((name.clone(), job.clone())),
            _ => None,
        })
        .expect("a replica");
    assert_eq!(job.0, "tiny-serving-0");
    assert_eq!(job.1["spec"]["port"], 8080, "{}", job.1);
    assert_eq!(
        job.1["metadata"]["labels"]["corral.dev/serving-revision"],
        "tiny-00001"
    );
    assert_eq!(job.1["metadata"]["ownerReferences"][0]["uid"], "uid-tiny");
    let status = p
        .actions
        .iter()
        .find_map(|a| match a {
            ServingAction::Status { status, .. } => Some(status.clone()),
            _ => None,
        })
        .expect("a status");
    assert_eq!(status.latest_revision.as_deref(), Some("tiny-00001"));
    assert_eq!(status.desired_replicas, 1);
    assert_eq!(status.url.as_deref(), Some("/serve/ml/tiny/"));
    // Nothing runs yet: the router knows the model, with no replica.
    assert_eq!(p.targets.len(), 1);
    assert!(p.targets[0].1.replicas.is_empty());
}

#[test]
fn a_running_replica_is_routed_at_its_pod_ip_and_nothing_more_is_made() {
    let m = model(Some("models/tiny:1"), "serve()", None);
    let mut serving = Serving::new();
    let first = decide(
        std::slice::from_ref(&m),
        &[],
        &World::default(),
        &mut serving,
    );
    let revision = kept(&first.actions);
    let job_action = first
        .actions
        .iter()
        .find(|a| matches!(a, ServingAction::CreateJob { .. }))
        .expect("job");
    let world = World {
        jobs: vec![running_job(job_action)],
        pods: vec![pod_of("tiny-serving-0", "10.1.2.3")],
        ..World::default()
    };
    let p = decide(&[m], &[revision], &world, &mut serving);
    assert!(
        !p.actions.iter().any(|a| matches!(
            a,
            ServingAction::CreateJob { .. } | ServingAction::CreateRevision { .. }
        )),
        "{:?}",
        p.actions
    );
    let replicas = &p.targets[0].1.replicas;
    assert_eq!(replicas.len(), 1);
    assert_eq!(replicas[0].addr.to_string(), "10.1.2.3:8080");
    assert_eq!(replicas[0].revision, "tiny-00001");
    assert_eq!(replicas[0].name, "tiny-serving-0");
}

#[test]
fn a_changed_template_is_the_next_revision() {
    let mut serving = Serving::new();
    let v1 = model(Some("models/tiny:1"), "serve()", None);
    let first = decide(&[v1], &[], &World::default(), &mut serving);
    let revision = kept(&first.actions);
    let v2 = model(
        Some("models/tiny:2"),
        "serve()",
        Some(json!({"stableRevision": "tiny-00001", "latestRevision": "tiny-00001"})),
    );
    let p = decide(&[v2], &[revision], &World::default(), &mut serving);
    let r = kept(&p.actions);
    assert_eq!(r.metadata.name.as_deref(), Some("tiny-00002"));
    assert_eq!(
        r.data.as_ref().expect("data").0["spec"]["template"]["image"],
        "models/tiny:2"
    );
    // Its replica runs the new revision.
    let job = p
        .actions
        .iter()
        .find_map(|a| match a {
            ServingAction::CreateJob { job, .. } => Some(job.clone()),
            _ => None,
        })
        .expect("a replica of the new revision");
    assert_eq!(
        job["metadata"]["labels"]["corral.dev/serving-revision"],
        "tiny-00002"
    );
    assert_eq!(
        job["spec"]["replicas"]["worker"]["template"]["image"],
        "models/tiny:2"
    );
}

#[test]
fn a_model_that_cannot_run_says_why_and_makes_nothing() {
    let m = model(None, "serve()", None);
    let mut serving = Serving::new();
    let p = decide(&[m], &[], &World::default(), &mut serving);
    assert_eq!(p.actions.len(), 1, "{:?}", p.actions);
    let ServingAction::Status { status, .. } = &p.actions[0] else {
        panic!("{:?}", p.actions);
    };
    let message = status.message.as_deref().expect("a message");
    assert!(
        message.starts_with("Invalid: spec.template.image"),
        "{message}"
    );
    assert!(p.targets.is_empty());
    // Said once: the same status is not written again.
    let m = model(
        None,
        "serve()",
        Some(serde_json::to_value(status).expect("json")),
    );
    let p = decide(&[m], &[], &World::default(), &mut serving);
    assert!(p.actions.is_empty(), "{:?}", p.actions);
}

#[test]
fn serving_a_training_jobs_output_is_refused_on_kubernetes() {
    let mut m = (*model(Some("models/tiny:1"), "serve()", None)).clone();
    m.spec.model = serde_json::from_value(json!({"trainingJob": "train"})).ok();
    let mut serving = Serving::new();
    let p = decide(&[Arc::new(m)], &[], &World::default(), &mut serving);
    let ServingAction::Status { status, .. } = &p.actions[0] else {
        panic!("{:?}", p.actions);
    };
    assert!(
        status
            .message
            .as_deref()
            .is_some_and(|m| m.contains("spec.model")),
        "{status:?}"
    );
}

#[test]
fn the_last_request_time_alone_is_written_every_thirty_seconds() {
    let at = |s: &str| Some(s.parse::<Timestamp>().expect("time"));
    let last = ServedModelStatus {
        desired_replicas: 1,
        last_request_time: at("2026-11-28T03:00:00Z"),
        ..ServedModelStatus::default()
    };
    let mut next = last.clone();
    next.last_request_time = at("2026-11-28T03:00:05Z");
    assert!(!worth_writing(Some(&last), &next));
    next.last_request_time = at("2026-11-28T03:00:31Z");
    assert!(worth_writing(Some(&last), &next));
    next.last_request_time = at("2026-11-28T03:00:05Z");
    next.desired_replicas = 2;
    assert!(worth_writing(Some(&last), &next));
}

#[test]
fn a_model_gone_is_forgotten_by_the_router_table() {
    let mut serving = Serving::new();
    let observed = BTreeMap::from([("ml/gone".to_string(), ServingObservation::default())]);
    let p = plan(
        Seen {
            models: &[],
            revisions: &[],
            runs: &[],
            world: &World::default(),
            observed: &observed,
        },
        &mut serving,
        &cfg(),
        now(),
    );
    assert!(p.targets.is_empty() && p.actions.is_empty());
}

fn succeeded_run() -> Arc<corral_api::PipelineRun> {
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "corral.dev/v1alpha1", "kind": "PipelineRun",
            "metadata": {"name": "r1", "namespace": "ml", "uid": "uid-r1"},
            "spec": {"pipelineSpec": {"steps": [{"name": "train", "outputs": ["model"],
                     "task": {"image": "busybox", "command": ["true"]}}]}},
            "status": {"phase": "Succeeded", "steps": {"train": {"phase": "Succeeded",
                "outputs": {"model": {"path": "/corral/artifacts/r1/train/model",
                                      "sha256": "sha256:abc"}}}}},
        }))
        .expect("run"),
    )
}

fn model_from_run() -> Arc<ServedModel> {
    let mut m = (*model(Some("models/server:1"), "serve()", None)).clone();
    m.spec.model = serde_json::from_value(
        json!({"pipelineRun": "r1", "step": "train", "output": "model", "path": "w.json"}),
    )
    .ok();
    Arc::new(m)
}

#[test]
fn a_steps_artifact_is_pinned_and_mounted_read_only_in_the_replicas() {
    let mut serving = Serving::new();
    let p = decide_with_runs(
        &[model_from_run()],
        &[],
        &[succeeded_run()],
        &World::default(),
        &mut serving,
    );
    let r = kept(&p.actions);
    let data = &r.data.as_ref().expect("data").0;
    let origin: ModelOrigin = serde_json::from_str(
        data["metadata"]["annotations"][MODEL_ORIGIN_ANNOTATION]
            .as_str()
            .expect("pinned"),
    )
    .expect("origin");
    assert_eq!(origin.path, "/corral/artifacts/r1/train/model/w.json");
    assert_eq!(
        (origin.uid.as_str(), origin.sha256.as_str()),
        ("uid-r1", "sha256:abc")
    );
    assert_eq!(origin.pipeline_run.as_deref(), Some("r1"));
    let job = p
        .actions
        .iter()
        .find_map(|a| match a {
            ServingAction::CreateJob { job, .. } => Some(job.clone()),
            _ => None,
        })
        .expect("a replica");
    let worker = &job["spec"]["replicas"]["worker"]["template"];
    assert!(
        worker["env"]
            .as_array()
            .expect("env")
            .iter()
            .any(|v| v["name"] == "CORRAL_MODEL_PATH"
                && v["value"] == "/corral/artifacts/r1/train/model/w.json"),
        "{worker}"
    );
    let pod = &worker["podTemplate"]["spec"];
    assert_eq!(
        pod["volumes"][0]["persistentVolumeClaim"]["claimName"],
        "corral-artifacts"
    );
    assert_eq!(pod["volumes"][0]["persistentVolumeClaim"]["readOnly"], true);
    assert_eq!(
        pod["containers"][0]["volumeMounts"][0]["readOnly"], true,
        "{pod}"
    );
    let status = p
        .actions
        .iter()
        .find_map(|a| match a {
            ServingAction::Status { status, .. } => Some(status.clone()),
            _ => None,
        })
        .expect("status");
    assert_eq!(
        status.model.as_ref().map(|o| o.path.as_str()),
        Some(origin.path.as_str())
    );

    // The run deleted later: the pinned revision serves on, nothing is said against it.
    let p = decide_with_runs(
        &[model_from_run()],
        &[r],
        &[],
        &World::default(),
        &mut serving,
    );
    assert!(
        !p.actions
            .iter()
            .any(|a| matches!(a, ServingAction::CreateRevision { .. })),
        "{:?}",
        p.actions
    );
    assert!(
        p.models[0]
            .status
            .as_ref()
            .is_some_and(|s| s.message.is_none())
    );
}

#[test]
fn with_an_object_store_a_replica_fetches_the_steps_artifact_first() {
    let mut serving = Serving::new();
    let store = ServingConfig {
        artifacts: crate::pipelines::ArtifactLocation::new(
            "unused",
            Some("s3://bucket/corral"),
            "creds",
        ),
        ..cfg()
    };
    let p = plan(
        Seen {
            models: &[model_from_run()],
            revisions: &[],
            runs: &[succeeded_run()],
            world: &World::default(),
            observed: &BTreeMap::new(),
        },
        &mut serving,
        &store,
        now(),
    );
    let job = p
        .actions
        .iter()
        .find_map(|a| match a {
            ServingAction::CreateJob { job, .. } => Some(job.clone()),
            _ => None,
        })
        .expect("a replica");
    let pod = &job["spec"]["replicas"]["worker"]["template"]["podTemplate"]["spec"];
    assert_eq!(pod["volumes"][0]["emptyDir"], json!({}));
    assert_eq!(pod["containers"][0]["volumeMounts"][0]["readOnly"], true);
    let init = pod["initContainers"].as_array().expect("init");
    assert_eq!(init.len(), 1, "it fetches and uploads nothing: {init:?}");
    assert_eq!(
        init[0]["command"],
        json!([
            "corral",
            "artifacts",
            "prepare",
            "--store",
            format!(
                "s3://bucket/corral/{}",
                job["metadata"]["namespace"].as_str().unwrap_or_default()
            ),
            "--input",
            "/corral/artifacts/r1/train/model/w.json"
        ])
    );
    assert_eq!(init[0]["envFrom"][0]["secretRef"]["name"], "creds");
}

#[test]
fn a_missing_run_is_said_at_its_field_and_makes_nothing() {
    let mut serving = Serving::new();
    let p = decide(&[model_from_run()], &[], &World::default(), &mut serving);
    assert_eq!(p.actions.len(), 1, "{:?}", p.actions);
    let ServingAction::Status { status, .. } = &p.actions[0] else {
        panic!("{:?}", p.actions);
    };
    let message = status.message.as_deref().unwrap_or_default();
    assert!(
        message.starts_with("Invalid: spec.model.pipelineRun: there is no PipelineRun `r1`"),
        "{message}"
    );
}

#[test]
fn scaling_and_the_split_are_no_new_revision() {
    let mut serving = Serving::new();
    let v1 = model(Some("models/tiny:1"), "serve()", None);
    let first = decide(
        std::slice::from_ref(&v1),
        &[],
        &World::default(),
        &mut serving,
    );
    let revision = kept(&first.actions);
    let mut changed = (*v1).clone();
    changed.spec.autoscaling.min_replicas = 0;
    changed.spec.canary_traffic_percent = Some(10);
    changed.spec.max_request_bytes = Some(1024);
    let p = decide(
        &[Arc::new(changed)],
        std::slice::from_ref(&revision),
        &World::default(),
        &mut serving,
    );
    assert!(
        !p.actions
            .iter()
            .any(|a| matches!(a, ServingAction::CreateRevision { .. })),
        "{:?}",
        p.actions
    );
    // What the replicas run is: a new revision.
    let mut env = (*v1).clone();
    env.spec
        .template
        .env
        .push(serde_json::from_value(json!({"name": "V", "value": "2"})).expect("env"));
    let p = decide(
        &[Arc::new(env)],
        &[revision],
        &World::default(),
        &mut serving,
    );
    assert_eq!(
        kept(&p.actions).metadata.name.as_deref(),
        Some("tiny-00002")
    );
}
