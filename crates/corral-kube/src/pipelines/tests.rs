use std::collections::BTreeSet;
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use corral_api::pipeline::{RunPhase, StepPhase};
use corral_api::{PipelineRun, TrainingJob};

use super::*;

fn cfg() -> PipelineConfig {
    PipelineConfig {
        artifacts: super::ArtifactLocation::Claim("corral-artifacts".into()),
        tools_image: "corral:test".into(),
    }
}

fn now() -> Timestamp {
    "2026-11-28T03:00:00Z".parse().expect("time")
}

/// produce -> consume, passing an artifact; as the API server serves it (uid, version).
fn run(name: &str, status: Option<Value>) -> Arc<PipelineRun> {
    let mut v = json!({
        "apiVersion": "corral.dev/v1alpha1",
        "kind": "PipelineRun",
        "metadata": {"name": name, "namespace": "ml", "uid": format!("uid-{name}"),
                     "resourceVersion": "7", "creationTimestamp": "2026-11-28T02:00:00Z"},
        "spec": {"pipelineSpec": {"steps": [
            {"name": "produce", "outputs": ["data"],
             "task": {"image": "busybox", "command": ["sh", "-c", "echo 3 > $(CORRAL_OUTPUT_DATA)/n"]}},
            {"name": "consume", "inputs": {"data": "steps.produce.outputs.data"},
             "task": {"image": "busybox", "command": ["cat", "$(CORRAL_INPUT_DATA)/n"]}},
        ]}},
    });
    if let Some(s) = status {
        v["status"] = s;
    }
    Arc::new(serde_json::from_value(v).expect("run"))
}

fn succeeded_job(name: &str) -> Arc<TrainingJob> {
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "corral.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": name, "namespace": "ml"},
            "spec": {"framework": "generic", "replicas": {"worker": {"count": 1,
                     "template": {"image": "busybox"}}}},
            "status": {"conditions": [{"type": "Succeeded", "status": "True",
                       "reason": "Done", "message": "", "lastTransitionTime": "2026-11-28T02:30:00Z"}]},
        }))
        .expect("job"),
    )
}

fn tool_pod(name: &str, phase: &str, message: &str, created: &str) -> Arc<Pod> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ml", "creationTimestamp": created,
                         "labels": {ARTIFACTS_OF_LABEL: "r1"}},
            "status": {"phase": phase, "containerStatuses": [{"name": "artifacts",
                "image": "corral:test", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": if phase == "Succeeded" { 0 } else { 1 },
                                         "message": message}}}]},
        }))
        .expect("pod"),
    )
}

fn plan_of(runs: &[Arc<PipelineRun>], world: &World) -> Vec<RunAction> {
    plan(runs, &[], &[], world, &BTreeSet::new(), &cfg(), now())
}

fn status_of(actions: &[RunAction]) -> Option<&PipelineRunStatus> {
    actions.iter().find_map(|a| match a {
        RunAction::Status { status, .. } => Some(status),
        _ => None,
    })
}

fn jobs_of(actions: &[RunAction]) -> Vec<&Value> {
    actions
        .iter()
        .filter_map(|a| match a {
            RunAction::CreateJob { job, .. } => Some(job),
            _ => None,
        })
        .collect()
}

fn env(job: &Value, name: &str) -> Option<String> {
    job.pointer("/spec/replicas/worker/template/env")?
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
        .and_then(|e| e["value"].as_str().map(str::to_string))
}

#[test]
fn a_new_run_starts_its_first_step_on_the_artifact_claim_owned_by_the_run() {
    let actions = plan_of(&[run("r1", None)], &World::default());
    let jobs = jobs_of(&actions);
    assert_eq!(jobs.len(), 1, "{actions:?}");
    let job = jobs[0];
    assert_eq!(job["metadata"]["name"], "r1-produce");
    assert_eq!(job["metadata"]["ownerReferences"][0]["kind"], "PipelineRun");
    assert_eq!(job["metadata"]["ownerReferences"][0]["uid"], "uid-r1");
    let out = env(job, "CORRAL_OUTPUT_DATA").expect("output env");
    assert_eq!(out, "/corral/artifacts/r1/produce/data");
    let command = &job["spec"]["replicas"]["worker"]["template"]["command"];
    assert_eq!(command[2], "echo 3 > /corral/artifacts/r1/produce/data/n");
    let spec = &job["spec"]["replicas"]["worker"]["template"]["podTemplate"]["spec"];
    assert_eq!(
        spec["volumes"][0]["persistentVolumeClaim"]["claimName"],
        "corral-artifacts"
    );
    assert_eq!(
        spec["containers"][0]["volumeMounts"][0]["mountPath"],
        ARTIFACTS_MOUNT
    );
    assert!(
        spec["containers"][0].get("image").is_none(),
        "the main container: no image"
    );
    assert_eq!(
        spec["initContainers"][0]["command"],
        json!([
            "corral",
            "artifacts",
            "prepare",
            "/corral/artifacts/r1/produce/data"
        ])
    );
    let status = status_of(&actions).expect("status");
    assert_eq!(status.steps["produce"].phase, StepPhase::Running);
    assert_eq!(status.steps["produce"].job.as_deref(), Some("r1-produce"));
    assert_eq!(status.steps["consume"].phase, StepPhase::Pending);
    // Written over the version it was decided from.
    assert!(actions.iter().any(|a| matches!(a,
        RunAction::Status { resource_version: Some(v), .. } if v == "7")));
}

#[test]
fn a_finished_step_is_hashed_by_a_pod_then_its_successor_reads_the_artifact() {
    let first = plan_of(&[run("r1", None)], &World::default());
    let status = serde_json::to_value(status_of(&first).expect("status")).expect("json");
    let r = run("r1", Some(status));
    let mut world = World {
        jobs: vec![succeeded_job("r1-produce")],
        ..World::default()
    };
    // The step's job succeeded: a pod is asked to hash its output; nothing else moves.
    let asked = plan_of(std::slice::from_ref(&r), &world);
    let pod = asked
        .iter()
        .find_map(|a| match a {
            RunAction::CreatePod { pod, .. } => Some(pod),
            _ => None,
        })
        .expect("an artifact pod");
    let c = &pod.spec.as_ref().expect("spec").containers[0];
    assert_eq!(
        c.command.as_deref(),
        Some(
            &[
                "corral".to_string(),
                "artifacts".into(),
                "hash".into(),
                "/corral/artifacts/r1/produce/data".into()
            ][..]
        )
    );
    assert_eq!(c.image.as_deref(), Some("corral:test"));
    assert!(status_of(&asked).is_none(), "waits: {asked:?}");
    assert!(jobs_of(&asked).is_empty());
    // Asked again while the pod runs: the same pod, not another.
    let name = pod.metadata.name.clone().expect("name");
    world.pods = vec![tool_pod(&name, "Running", "", "2026-11-28T02:59:00Z")];
    let waiting = plan_of(std::slice::from_ref(&r), &world);
    assert!(waiting.is_empty(), "{waiting:?}");
    // It reported: the step succeeded with that hash, the next step reads the path.
    let report = r#"{"sha256":["sha256:abc"]}"#;
    world.pods = vec![tool_pod(&name, "Succeeded", report, "2026-11-28T02:59:00Z")];
    let next = plan_of(std::slice::from_ref(&r), &world);
    let status = status_of(&next).expect("status");
    let produce = &status.steps["produce"];
    assert_eq!(produce.phase, StepPhase::Succeeded);
    assert_eq!(produce.outputs["data"].sha256, "sha256:abc");
    assert_eq!(
        produce.outputs["data"].path,
        "/corral/artifacts/r1/produce/data"
    );
    let jobs = jobs_of(&next);
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0]["metadata"]["name"], "r1-consume");
    assert_eq!(
        env(jobs[0], "CORRAL_INPUT_DATA").as_deref(),
        Some("/corral/artifacts/r1/produce/data")
    );
    let spec = &jobs[0]["spec"]["replicas"]["worker"]["template"]["podTemplate"]["spec"];
    assert_eq!(
        spec["containers"][0]["volumeMounts"][0]["name"],
        ARTIFACTS_VOLUME
    );
    assert!(spec.get("initContainers").is_none(), "no outputs to make");
}

fn store_cfg() -> PipelineConfig {
    PipelineConfig {
        artifacts: ArtifactLocation::new(
            "unused",
            Some("s3://bucket/corral"),
            artifacts::DEFAULT_STORE_SECRET,
        ),
        tools_image: "corral:test".into(),
    }
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn with_an_object_store_each_pod_fetches_what_it_reads_and_uploads_what_it_wrote() {
    let cfg = store_cfg();
    let plan_here = |runs: &[Arc<PipelineRun>], world: &World| {
        plan(runs, &[], &[], world, &BTreeSet::new(), &cfg, now())
    };
    let first = plan_here(&[run("r1", None)], &World::default());
    let produce = jobs_of(&first)[0];
    let spec = &produce["spec"]["replicas"]["worker"]["template"]["podTemplate"]["spec"];
    // Its own empty volume at the same mount: the step's paths do not change.
    assert_eq!(spec["volumes"][0]["emptyDir"], json!({}));
    assert_eq!(
        spec["containers"][0]["volumeMounts"][0]["mountPath"],
        ARTIFACTS_MOUNT
    );
    let init = &spec["initContainers"];
    assert_eq!(
        strings(&init[0]["command"]),
        [
            "corral",
            "artifacts",
            "prepare",
            "--store",
            "s3://bucket/corral/ml",
            "/corral/artifacts/r1/produce/data"
        ]
    );
    assert_eq!(init[1]["name"], "corral-upload");
    assert_eq!(init[1]["restartPolicy"], "Always", "a sidecar");
    assert_eq!(
        strings(&init[1]["command"]),
        [
            "corral",
            "artifacts",
            "upload",
            "--store",
            "s3://bucket/corral/ml",
            "/corral/artifacts/r1/produce/data"
        ]
    );
    for c in init.as_array().expect("init containers") {
        assert_eq!(
            c["envFrom"][0]["secretRef"]["name"],
            "corral-artifact-store"
        );
        assert_eq!(c["image"], "corral:test");
    }
    assert!(
        spec["containers"][0].get("envFrom").is_none(),
        "the step's own container is not given the store's credentials"
    );

    // The artifact pod reads the store, not a volume.
    let status = serde_json::to_value(status_of(&first).expect("status")).expect("json");
    let r = run("r1", Some(status));
    let mut world = World {
        jobs: vec![succeeded_job("r1-produce")],
        ..World::default()
    };
    let asked = plan_here(std::slice::from_ref(&r), &world);
    let pod = asked
        .iter()
        .find_map(|a| match a {
            RunAction::CreatePod { pod, .. } => Some(pod),
            _ => None,
        })
        .expect("an artifact pod");
    let pod_spec = pod.spec.as_ref().expect("spec");
    assert!(pod_spec.volumes.as_ref().is_none_or(Vec::is_empty));
    let c = &pod_spec.containers[0];
    assert_eq!(
        c.command.clone().unwrap_or_default(),
        [
            "corral",
            "artifacts",
            "hash",
            "--store",
            "s3://bucket/corral/ml",
            "/corral/artifacts/r1/produce/data"
        ]
    );
    let env_from = c.env_from.clone().unwrap_or_default();
    assert_eq!(
        env_from[0].secret_ref.as_ref().map(|s| s.name.as_str()),
        Some("corral-artifact-store")
    );

    // The next step fetches its input first and, writing nothing, uploads nothing.
    let name = pod.metadata.name.clone().expect("name");
    world.pods = vec![tool_pod(
        &name,
        "Succeeded",
        r#"{"sha256":["sha256:abc"]}"#,
        "2026-11-28T02:59:00Z",
    )];
    let next = plan_here(std::slice::from_ref(&r), &world);
    let consume = jobs_of(&next)[0];
    let init =
        &consume["spec"]["replicas"]["worker"]["template"]["podTemplate"]["spec"]["initContainers"];
    assert_eq!(init.as_array().map(Vec::len), Some(1), "{init}");
    assert_eq!(
        strings(&init[0]["command"]),
        [
            "corral",
            "artifacts",
            "prepare",
            "--store",
            "s3://bucket/corral/ml",
            "--input",
            "/corral/artifacts/r1/produce/data"
        ]
    );
}

#[test]
fn an_artifact_store_is_an_s3_url() {
    assert_eq!(artifacts::store_url("s3://b/p/").as_deref(), Ok("s3://b/p"));
    let e = artifacts::store_url("gs://b").unwrap_err();
    assert!(
        e.contains("valid: s3://BUCKET or s3://BUCKET/PREFIX"),
        "{e}"
    );
    assert!(
        artifacts::store_url("s3://")
            .unwrap_err()
            .contains("names no bucket")
    );
    // A fan-out's collected outputs are each fetched.
    assert_eq!(
        artifacts::input_paths(r#"["/corral/artifacts/r/a-0/o","/corral/artifacts/r/a-1/o"]"#),
        ["/corral/artifacts/r/a-0/o", "/corral/artifacts/r/a-1/o"]
    );
    assert_eq!(
        artifacts::input_paths("/corral/artifacts/r/a/o"),
        ["/corral/artifacts/r/a/o"]
    );
}

#[test]
fn a_step_an_earlier_run_recorded_is_cached_from_its_status() {
    let done = run("r0", Some(json!({"phase": "Succeeded", "steps": {}})));
    // What r0 recorded for `produce`: the key its first decision gives.
    let first = plan_of(&[run("r1", None)], &World::default());
    let key = status_of(&first).expect("status").steps["produce"]
        .cache_key
        .clone()
        .expect("a cache key");
    let mut recorded: PipelineRun = (*done).clone();
    let s = recorded.status.get_or_insert_default();
    s.steps.insert(
        "produce".into(),
        serde_json::from_value(json!({"phase": "Succeeded", "job": "r0-produce",
            "cacheKey": key, "outputs": {"data": {"path": "/corral/artifacts/r0/produce/data",
            "sha256": "sha256:abc"}}}))
        .expect("step status"),
    );
    let actions = plan_of(&[Arc::new(recorded), run("r1", None)], &World::default());
    let status = status_of(&actions).expect("status of r1");
    assert_eq!(status.steps["produce"].phase, StepPhase::Cached);
    assert_eq!(
        status.steps["produce"].cached_from.as_deref(),
        Some("r0/produce")
    );
    let jobs = jobs_of(&actions);
    assert_eq!(jobs.len(), 1, "only consume runs");
    assert_eq!(
        env(jobs[0], "CORRAL_INPUT_DATA").as_deref(),
        Some("/corral/artifacts/r0/produce/data")
    );
}

#[test]
fn a_run_that_cannot_run_here_fails_at_once_saying_which_field() {
    let mut r: PipelineRun = (*run("r1", None)).clone();
    r.spec.pipeline_spec.steps[0]
        .task
        .as_mut()
        .expect("task")
        .image = None;
    let actions = plan_of(&[Arc::new(r)], &World::default());
    assert!(jobs_of(&actions).is_empty());
    let status = status_of(&actions).expect("status");
    assert_eq!(status.phase, RunPhase::Failed);
    let message = status.message.clone().unwrap_or_default();
    assert!(message.starts_with("Invalid: "), "{message}");
    assert!(message.contains("image"), "{message}");
}

#[test]
fn a_step_job_gone_fails_the_step_unless_just_made() {
    let first = plan_of(&[run("r1", None)], &World::default());
    let status = serde_json::to_value(status_of(&first).expect("status")).expect("json");
    let r = run("r1", Some(status));
    let recent: BTreeSet<String> = ["ml/r1-produce".to_string()].into();
    let waiting = plan(
        std::slice::from_ref(&r),
        &[],
        &[],
        &World::default(),
        &recent,
        &cfg(),
        now(),
    );
    assert!(waiting.is_empty(), "just made: {waiting:?}");
    let gone = plan_of(std::slice::from_ref(&r), &World::default());
    let status = status_of(&gone).expect("status");
    assert_eq!(status.steps["produce"].phase, StepPhase::Failed);
    assert_eq!(status.phase, RunPhase::Failed);
}

#[test]
fn a_failed_artifact_pod_is_reported_and_made_again_after_a_while() {
    let first = plan_of(&[run("r1", None)], &World::default());
    let status = serde_json::to_value(status_of(&first).expect("status")).expect("json");
    let r = run("r1", Some(status));
    let name = artifacts_pod_name("r1", "hash", &["/corral/artifacts/r1/produce/data".into()]);
    let mut world = World {
        jobs: vec![succeeded_job("r1-produce")],
        pods: vec![tool_pod(
            &name,
            "Failed",
            "permission denied",
            "2026-11-28T02:59:50Z",
        )],
        ..World::default()
    };
    assert!(
        plan_of(std::slice::from_ref(&r), &world).is_empty(),
        "failed 10 s ago: left"
    );
    world.pods = vec![tool_pod(
        &name,
        "Failed",
        "permission denied",
        "2026-11-28T02:59:00Z",
    )];
    let actions = plan_of(std::slice::from_ref(&r), &world);
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, RunAction::Event { warning: true, note, .. }
        if note.contains("permission denied"))),
        "{actions:?}"
    );
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, RunAction::DeletePod { name: n, .. } if *n == name))
    );
}

#[test]
fn a_finished_runs_artifact_pods_are_deleted() {
    let r = run("r1", Some(json!({"phase": "Succeeded"})));
    let world = World {
        pods: vec![tool_pod(
            "r1-hash-0123456789",
            "Succeeded",
            "{}",
            "2026-11-28T02:59:00Z",
        )],
        ..World::default()
    };
    let actions = plan_of(&[r], &world);
    assert_eq!(
        actions,
        vec![RunAction::DeletePod {
            namespace: "ml".into(),
            name: "r1-hash-0123456789".into()
        }]
    );
}

#[test]
fn a_run_named_by_the_server_from_its_generate_name_runs() {
    let mut r: PipelineRun = (*run("r1", None)).clone();
    r.metadata.generate_name = Some("r".into());
    let actions = plan_of(&[Arc::new(r)], &World::default());
    let status = status_of(&actions).expect("status");
    assert_eq!(status.phase, RunPhase::Running, "{:?}", status.message);
    assert_eq!(jobs_of(&actions).len(), 1);
}

fn stored(namespace: &str, generation: i64, command: &str) -> Arc<Pipeline> {
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "corral.dev/v1alpha1", "kind": "Pipeline",
            "metadata": {"name": "stored", "namespace": namespace, "generation": generation},
            "spec": {"steps": [{"name": "only",
                     "task": {"image": "busybox", "command": ["sh", "-c", command]}}]},
        }))
        .expect("pipeline"),
    )
}

fn run_of(reference: Value) -> Arc<PipelineRun> {
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "corral.dev/v1alpha1", "kind": "PipelineRun",
            "metadata": {"name": "by-ref", "namespace": "ml", "uid": "uid-by-ref",
                         "resourceVersion": "9"},
            "spec": {"pipelineRef": reference},
        }))
        .expect("run"),
    )
}

/// A run of a stored Pipeline is given a copy of its spec and version first (as `corral up`
/// gives it at submit), then runs that copy, whatever the Pipeline becomes; a Pipeline of
/// another namespace is not one the run can name.
#[test]
fn a_run_of_a_stored_pipeline_runs_its_copy() {
    let pipelines = [
        stored("ml", 2, "echo v2"),
        stored("other", 5, "echo theirs"),
    ];
    let first = plan(
        &[run_of(json!({"name": "stored"}))],
        &pipelines,
        &[],
        &World::default(),
        &BTreeSet::new(),
        &cfg(),
        now(),
    );
    let [
        RunAction::Resolve {
            namespace,
            name,
            resource_version,
            spec,
        },
    ] = &first[..]
    else {
        panic!("{first:?}");
    };
    assert_eq!((namespace.as_str(), name.as_str()), ("ml", "by-ref"));
    assert_eq!(resource_version.as_deref(), Some("9"));
    assert_eq!(
        spec.pipeline_ref.as_ref().and_then(|r| r.generation),
        Some(2)
    );
    assert_eq!(spec.pipeline_spec, pipelines[0].spec);
    // As the patch leaves it; the Pipeline has changed since.
    let mut patched = run_of(json!({"name": "stored", "generation": 2}))
        .as_ref()
        .clone();
    patched.spec.pipeline_spec = spec.pipeline_spec.clone();
    let changed = [stored("ml", 3, "echo v3")];
    let next = plan(
        &[Arc::new(patched)],
        &changed,
        &[],
        &World::default(),
        &BTreeSet::new(),
        &cfg(),
        now(),
    );
    let job = next
        .iter()
        .find_map(|a| match a {
            RunAction::CreateJob { job, .. } => Some(job),
            _ => None,
        })
        .expect("the first step's job");
    assert!(job.to_string().contains("echo v2"), "{job}");
}

/// Kubernetes keeps a Pipeline's current spec only: each version the operator sees is kept
/// as a ControllerRevision owned by it, and a run naming an older generation runs that.
#[test]
fn a_pipelines_versions_are_kept_and_a_run_may_name_an_older_one() {
    let with_uid = |generation: i64, command: &str| {
        let mut p = stored("ml", generation, command).as_ref().clone();
        p.metadata.uid = Some("uid-stored".into());
        Arc::new(p)
    };
    let v1 = [with_uid(1, "echo v1")];
    let first = plan(
        &[],
        &v1,
        &[],
        &World::default(),
        &BTreeSet::new(),
        &cfg(),
        now(),
    );
    let [
        RunAction::KeepVersion {
            namespace,
            revision,
        },
    ] = &first[..]
    else {
        panic!("{first:?}");
    };
    assert_eq!(namespace, "ml");
    assert_eq!(revision.metadata.name.as_deref(), Some("stored-g1"));
    assert_eq!(revision.revision, 1);
    let owner = &revision.metadata.owner_references.as_ref().expect("owner")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("Pipeline", "uid-stored")
    );
    let kept = [Arc::new(revision.as_ref().clone())];
    // Kept: nothing more to write for it.
    let again = plan(
        &[],
        &v1,
        &kept,
        &World::default(),
        &BTreeSet::new(),
        &cfg(),
        now(),
    );
    assert!(again.is_empty(), "{again:?}");
    // Changed to version 2: kept too; a run asking for generation 1 gets version 1's spec.
    let v2 = [with_uid(2, "echo v2")];
    let actions = plan(
        &[run_of(json!({"name": "stored", "generation": 1}))],
        &v2,
        &kept,
        &World::default(),
        &BTreeSet::new(),
        &cfg(),
        now(),
    );
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, RunAction::KeepVersion { revision, .. }
            if revision.metadata.name.as_deref() == Some("stored-g2"))),
        "{actions:?}"
    );
    let spec = actions
        .iter()
        .find_map(|a| match a {
            RunAction::Resolve { spec, .. } => Some(spec),
            _ => None,
        })
        .expect("the run's copy");
    assert_eq!(spec.pipeline_spec, v1[0].spec);
    assert_eq!(
        spec.pipeline_ref.as_ref().and_then(|r| r.generation),
        Some(1)
    );
    // A version of a Pipeline of that name deleted and made again is not this one's.
    let mut other = with_uid(2, "echo v2").as_ref().clone();
    other.metadata.uid = Some("uid-new".into());
    let refused = plan(
        &[run_of(json!({"name": "stored", "generation": 1}))],
        &[Arc::new(other)],
        &kept,
        &World::default(),
        &BTreeSet::new(),
        &cfg(),
        now(),
    );
    let status = status_of(&refused).expect("the run fails");
    let message = status.message.clone().unwrap_or_default();
    assert!(message.contains("spec.pipelineRef.generation"), "{message}");
}

/// A stored Pipeline a run could never run (stored before the webhook, or without it):
/// the run fails with why, and no copy is written.
#[test]
fn a_run_of_a_pipeline_that_cannot_run_fails_with_why() {
    let mut bad = stored("ml", 1, "true").as_ref().clone();
    if let Some(task) = bad.spec.steps[0].task.as_mut() {
        task.image = None;
    }
    let actions = plan(
        &[run_of(json!({"name": "stored"}))],
        &[Arc::new(bad)],
        &[],
        &World::default(),
        &BTreeSet::new(),
        &cfg(),
        now(),
    );
    assert!(
        !actions
            .iter()
            .any(|a| matches!(a, RunAction::Resolve { .. })),
        "{actions:?}"
    );
    let message = status_of(&actions)
        .and_then(|s| s.message.clone())
        .unwrap_or_default();
    assert!(
        message.starts_with("Invalid: ") && message.contains("image"),
        "{message}"
    );
}

#[test]
fn a_run_of_a_missing_pipeline_fails_naming_those_there() {
    let actions = plan(
        &[run_of(json!({"name": "nope"}))],
        &[stored("ml", 1, "true"), stored("other", 1, "true")],
        &[],
        &World::default(),
        &BTreeSet::new(),
        &cfg(),
        now(),
    );
    let status = status_of(&actions).expect("status");
    assert_eq!(status.phase, RunPhase::Failed);
    let message = status.message.clone().unwrap_or_default();
    assert!(
        message.contains("spec.pipelineRef.name")
            && message.contains("no Pipeline `nope`")
            && message.contains("there are: stored"),
        "{message}"
    );
    // A version the cluster does not keep (only the current one is kept).
    let actions = plan(
        &[run_of(json!({"name": "stored", "generation": 1}))],
        &[stored("ml", 4, "true")],
        &[],
        &World::default(),
        &BTreeSet::new(),
        &cfg(),
        now(),
    );
    let message = status_of(&actions)
        .and_then(|s| s.message.clone())
        .unwrap_or_default();
    assert!(
        message.contains("spec.pipelineRef.generation") && message.contains("no generation 1"),
        "{message}"
    );
}
