//! Pipelines on the real API server: a PipelineRun of two steps passing an artifact runs
//! to success through the operator's passes (its steps' TrainingJobs admitted and placed
//! as any job), the artifact pod's report carries the hash, a second run of the same
//! pipeline is answered from the first one's cache, and deleting a run deletes its steps.
//!
//! In the kubelet's place the test does what the pods would: the step writes its output
//! into a directory standing for the namespace's artifact claim, and the artifact pod's
//! report is what `corral artifacts hash` makes of that directory (the same function).

use std::path::{Path, PathBuf};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use corral_kube::pipelines::{self, ARTIFACTS_MOUNT, PipelineConfig};

use crate::harness::Env;
use crate::kubelet::{env_of, kubelet_phase, kubelet_reap, pods};
use crate::manifests::{ar, namespace};
use crate::passes::{Operator, pass};
use crate::trainingjobs::job;

fn runs() -> kube::api::ApiResource {
    ar("corral.dev", "v1alpha1", "PipelineRun", "pipelineruns")
}

fn config() -> PipelineConfig {
    PipelineConfig {
        artifacts: corral_kube::pipelines::ArtifactLocation::Claim("corral-artifacts".into()),
        tools_image: "ghcr.io/corral-dev/corral:test".into(),
    }
}

fn pipeline_run(ns: &str, name: &str) -> Value {
    let task = |command: &str| {
        json!({"image": "busybox:1.36", "command": ["sh", "-c", command],
               "resources": {"cpu": "1", "memory": "1Gi"}})
    };
    json!({
        "apiVersion": "corral.dev/v1alpha1", "kind": "PipelineRun",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"pipelineSpec": {"steps": [
            {"name": "produce", "outputs": ["data"],
             "task": task("echo 3 > $(CORRAL_OUTPUT_DATA)/n")},
            {"name": "consume", "inputs": {"data": "steps.produce.outputs.data"},
             "task": task("cat $(CORRAL_INPUT_DATA)/n")},
        ]}},
    })
}

async fn run_of(env: &Env, ns: &str, name: &str) -> Value {
    let api: Api<DynamicObject> = Api::namespaced_with(env.admin.clone(), ns, &runs());
    serde_json::to_value(api.get(name).await.expect("run")).expect("json")
}

/// The operator's pass, then the pipelines' (as the running operator does them).
async fn passes(env: &Env, op: &Operator) {
    pass(op, Timestamp::now()).await;
    let (_, report) = pipelines::apply::reconcile_once(op.applier(), &config(), Timestamp::now())
        .await
        .expect("the pipelines' lists are allowed");
    assert!(report.errors.is_empty(), "pipelines: {:?}", report.errors);
    let _ = env;
}

/// Where the claim is, here: a path of a pod under [`ARTIFACTS_MOUNT`] in `claim`.
fn on_claim(claim: &Path, pod_path: &str) -> PathBuf {
    claim.join(
        pod_path
            .trim_start_matches(ARTIFACTS_MOUNT)
            .trim_start_matches('/'),
    )
}

/// The kubelet's part for an artifact pod: its container ran `corral artifacts hash` on
/// the claim and ended with the report as its termination message.
async fn run_artifact_pods(env: &Env, ns: &str, claim: &Path) -> usize {
    let api: Api<Pod> = Api::namespaced(env.admin.clone(), ns);
    let mut ran = 0;
    for p in pods(env, ns).await {
        let name = p.metadata.name.clone().unwrap_or_default();
        if corral_kube::observe::label(&p.metadata, pipelines::ARTIFACTS_OF_LABEL).is_none()
            || p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded")
        {
            continue;
        }
        let c = &p.spec.as_ref().expect("spec").containers[0];
        let command = c.command.clone().expect("command");
        assert_eq!(
            &command[..3],
            ["corral", "artifacts", "hash"],
            "{command:?}"
        );
        let mounts = c.volume_mounts.clone().unwrap_or_default();
        assert!(
            mounts.iter().any(|m| m.mount_path == ARTIFACTS_MOUNT),
            "{mounts:?}"
        );
        let paths: Vec<PathBuf> = command[3..].iter().map(|p| on_claim(claim, p)).collect();
        let report = corral_local::artifacts::report_hashes(&paths)
            .expect("hash")
            .to_message()
            .expect("fits");
        let status = json!({"status": {"phase": "Succeeded", "containerStatuses": [{
            "name": c.name, "ready": false, "restartCount": 0, "image": "x", "imageID": "",
            "state": {"terminated": {"exitCode": 0, "reason": "Completed", "message": report}}}]}});
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(status))
            .await
            .expect("artifact pod status");
        ran += 1;
    }
    ran
}

pub(crate) async fn pipeline_runs(env: &Env, op: &Operator) {
    let ns = "pipes";
    namespace(env, ns).await;
    let claim = tempfile::tempdir().expect("claim dir");
    let api: Api<DynamicObject> = Api::namespaced_with(env.admin.clone(), ns, &runs());
    api.create(
        &PostParams::default(),
        &serde_json::from_value(pipeline_run(ns, "r1")).expect("run"),
    )
    .await
    .expect("the API server takes a PipelineRun (its CRD's schema)");
    passes(env, op).await;
    let produce = job(env, ns, "r1-produce")
        .await
        .expect("the first step's job");
    assert_eq!(
        produce["metadata"]["ownerReferences"][0]["kind"],
        "PipelineRun"
    );
    let run = run_of(env, ns, "r1").await;
    assert_eq!(
        run["status"]["steps"]["produce"]["phase"], "Running",
        "{}",
        run["status"]
    );
    // The next pass places the step's pod: on the claim, its output made before it starts.
    passes(env, op).await;
    let pod = pods(env, ns)
        .await
        .into_iter()
        .find(|p| p.metadata.name.as_deref() == Some("r1-produce-worker-0"))
        .expect("the step's pod");
    let spec = pod.spec.as_ref().expect("spec");
    let out = env_of(&pod, "CORRAL_OUTPUT_DATA").expect("output path");
    assert_eq!(out, format!("{ARTIFACTS_MOUNT}/r1/produce/data"));
    let claim_volume = spec
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == pipelines::ARTIFACTS_VOLUME);
    assert_eq!(
        claim_volume
            .and_then(|v| v.persistent_volume_claim.as_ref())
            .map(|c| c.claim_name.as_str()),
        Some("corral-artifacts")
    );
    let init = &spec.init_containers.as_ref().expect("init container")[0];
    assert_eq!(init.command.as_ref().expect("command")[3], out);
    // The step runs: what its command writes lands on the claim.
    let dir = on_claim(claim.path(), &out);
    std::fs::create_dir_all(&dir).expect("output dir");
    std::fs::write(dir.join("n"), "3\n").expect("output");
    kubelet_phase(env, ns, "r1-produce-worker-0", "Succeeded", Some(0)).await;
    // Its job succeeds; the run asks a pod for the output's hash.
    passes(env, op).await;
    passes(env, op).await;
    assert_eq!(
        run_artifact_pods(env, ns, claim.path()).await,
        1,
        "one hash pod"
    );
    passes(env, op).await;
    let run = run_of(env, ns, "r1").await;
    let produced = &run["status"]["steps"]["produce"];
    assert_eq!(produced["phase"], "Succeeded", "{}", run["status"]);
    let sha = corral_local::artifacts::hash(&dir).expect("hash");
    assert_eq!(produced["outputs"]["data"]["sha256"], json!(sha));
    // The second step reads the artifact by its path on the claim.
    passes(env, op).await;
    let consume = pods(env, ns)
        .await
        .into_iter()
        .find(|p| p.metadata.name.as_deref() == Some("r1-consume-worker-0"))
        .expect("the second step's pod");
    assert_eq!(env_of(&consume, "CORRAL_INPUT_DATA"), Some(out.clone()));
    kubelet_phase(env, ns, "r1-consume-worker-0", "Succeeded", Some(0)).await;
    for _ in 0..3 {
        passes(env, op).await;
    }
    let run = run_of(env, ns, "r1").await;
    assert_eq!(
        run["status"]["phase"],
        "Succeeded",
        "{}; the job: {}",
        run["status"],
        job(env, ns, "r1-consume").await.unwrap_or_default()["status"]
    );
    assert!(
        pods(env, ns).await.iter().all(|p| p
            .metadata
            .labels
            .as_ref()
            .is_none_or(|l| !l.contains_key(pipelines::ARTIFACTS_OF_LABEL))
            || p.metadata.deletion_timestamp.is_some()),
        "a finished run's artifact pods are deleted"
    );

    // The same pipeline again: every step answered from r1's results, no job made.
    api.create(
        &PostParams::default(),
        &serde_json::from_value(pipeline_run(ns, "r2")).expect("run"),
    )
    .await
    .expect("second run");
    passes(env, op).await;
    let run = run_of(env, ns, "r2").await;
    assert_eq!(run["status"]["phase"], "Succeeded", "{}", run["status"]);
    for step in ["produce", "consume"] {
        let st = &run["status"]["steps"][step];
        assert_eq!(st["phase"], "Cached", "{step}: {}", run["status"]);
        assert_eq!(st["cachedFrom"], json!(format!("r1/{step}")));
    }
    assert!(job(env, ns, "r2-produce").await.is_none());

    served_from_a_step(env, op, ns, &run_of(env, ns, "r1").await).await;

    // A pipeline the `kfp` package compiled, as `corral convert FILE | kubectl create -f -`
    // sends it (generateName kept): taken as it is, its first step started.
    let text = std::fs::read_to_string(
        crate::harness::repo_root().join("crates/corral-api/tests/fixtures/kfp/two_steps.yaml"),
    )
    .expect("compiled pipeline");
    let ctx = corral_api::validate::ValidationContext {
        requires_image: true,
        ..Default::default()
    };
    let converted = corral_api::document::parse_documents(&text, &ctx)
        .into_iter()
        .next()
        .expect("a document")
        .expect("it converts")
        .document
        .to_value();
    let mut kfp_run = converted;
    kfp_run["metadata"]["namespace"] = json!(ns);
    let made = api
        .create(
            &PostParams::default(),
            &serde_json::from_value(kfp_run).expect("run"),
        )
        .await
        .expect("a converted Kubeflow pipeline is taken as it is");
    let name = made.metadata.name.clone().expect("a generated name");
    assert!(name.starts_with("two-steps-"), "{name}");
    passes(env, op).await;
    let run = run_of(env, ns, &name).await;
    assert_eq!(
        run["status"]["steps"]["produce"]["phase"], "Running",
        "{}",
        run["status"]
    );
    let produce = job(env, ns, &format!("{name}-produce"))
        .await
        .expect("its first step's job");
    let env_vars = produce["spec"]["replicas"]["worker"]["template"]["env"].to_string();
    assert!(
        env_vars.contains("\"hello\""),
        "the parameter's default: {env_vars}"
    );

    // A run that cannot run here (a step without an image) fails saying which field.
    let mut bad = pipeline_run(ns, "r3");
    bad["spec"]["pipelineSpec"]["steps"][0]["task"]
        .as_object_mut()
        .expect("task")
        .remove("image");
    api.create(
        &PostParams::default(),
        &serde_json::from_value(bad).expect("run"),
    )
    .await
    .expect("the schema leaves a task's image to validation");
    passes(env, op).await;
    let run = run_of(env, ns, "r3").await;
    assert_eq!(run["status"]["phase"], "Failed");
    let message = run["status"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("Invalid: ") && message.contains("image"),
        "{message}"
    );
    assert!(job(env, ns, "r3-produce").await.is_none());

    restricted_namespace_takes_the_artifact_pods(env).await;

    if env.gc {
        // Deleting a run deletes its steps' jobs (the garbage collector; up to a few seconds).
        api.delete("r1", &DeleteParams::default())
            .await
            .expect("delete run");
        let mut gone = false;
        // Up to a minute on a loaded machine (as a job's own objects, `jobs.rs`).
        for _ in 0..200 {
            kubelet_reap(env, ns).await;
            let mut left = 0;
            for name in ["r1-produce", "r1-consume"] {
                // Being deleted (waiting on its pods) counts: the collector did its part.
                if job(env, ns, name)
                    .await
                    .is_some_and(|j| j["metadata"]["deletionTimestamp"].is_null())
                {
                    left += 1;
                }
            }
            if left == 0 {
                gone = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        assert!(gone, "the run's step jobs are deleted with it");
    }
}

/// A namespace that enforces the `restricted` Pod Security Standard (the API server's own
/// PodSecurity admission) takes the operator's artifact pods: a server-side dry run of one
/// is admitted, and the same pod without its security context is refused there.
async fn restricted_namespace_takes_the_artifact_pods(env: &Env) {
    let ns = "pipes-restricted";
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(env.admin.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns, "labels": {
                "pod-security.kubernetes.io/enforce": "restricted"}}}))
            .expect("namespace"),
        )
        .await
        .expect("a restricted namespace");
    // Pods need their namespace's `default` ServiceAccount (the controller-manager's
    // service-account controller may not have made it yet).
    let sas: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(env.admin.clone(), ns);
    let _ = sas
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "default"}})).expect("sa"),
        )
        .await;
    let run: corral_api::PipelineRun = serde_json::from_value({
        let mut r = pipeline_run(ns, "r");
        r["metadata"]["uid"] = json!("0c7f1d6e-0000-4000-8000-000000000001");
        r
    })
    .expect("run");
    let paths = vec![pipelines::output_path("r", "produce", "data")];
    let pod = pipelines::artifacts_pod(
        &run,
        "r-hash-x",
        pipelines::Question::Hash,
        &paths,
        &config(),
    );
    let pods: Api<Pod> = Api::namespaced(env.admin.clone(), ns);
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    pods.create(&dry, &pod)
        .await
        .expect("the restricted Pod Security Standard admits the artifact pod");
    let mut bare = pod.clone();
    if let Some(spec) = bare.spec.as_mut() {
        spec.security_context = None;
        for c in &mut spec.containers {
            c.security_context = None;
        }
    }
    let refused = pods
        .create(&dry, &bare)
        .await
        .expect_err("the namespace enforces the standard");
    assert!(refused.to_string().contains("restricted"), "{refused}");
}

/// A ServedModel serving r1's `produce` output, with the operator's identity: pinned to the
/// run (its uid and the output's recorded hash), its replica's pod mounting the claim
/// read-only with the model's path in `$CORRAL_MODEL_PATH`; one naming a step r1 lacks
/// says so in its status and makes nothing.
async fn served_from_a_step(env: &Env, op: &Operator, ns: &str, r1: &Value) {
    use corral_kube::serving::{ServingConfig, apply::reconcile_once};
    let models: Api<DynamicObject> = Api::namespaced_with(
        env.admin.clone(),
        ns,
        &ar("corral.dev", "v1alpha1", "ServedModel", "servedmodels"),
    );
    for (name, step) in [("from-r1", "produce"), ("from-nowhere", "evaluate")] {
        models
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "apiVersion": "corral.dev/v1alpha1", "kind": "ServedModel",
                    "metadata": {"name": name, "namespace": ns},
                    "spec": {
                        "template": {"image": "models/server:1", "command": ["python3", "serve.py"]},
                        "resources": {"cpu": "100m", "memory": "64Mi"},
                        "model": {"pipelineRun": "r1", "step": step, "output": "data", "path": "n"},
                    },
                }))
                .expect("ServedModel"),
            )
            .await
            .expect("create ServedModel");
    }
    let cfg = ServingConfig {
        port: 8080,
        build: Default::default(),
        artifacts: config().artifacts,
        tools_image: config().tools_image,
    };
    let mut serving = corral_core::control::serving::Serving::new();
    let router = corral_router::Router::new(Default::default());
    for _ in 0..2 {
        let (_, report) =
            reconcile_once(op.applier(), &mut serving, &router, &cfg, Timestamp::now())
                .await
                .expect("serving's lists are allowed");
        assert!(report.errors.is_empty(), "serving: {:?}", report.errors);
    }
    pass(op, Timestamp::now()).await;
    let replica = job(env, ns, "from-r1-serving-0")
        .await
        .expect("the replica's job");
    let worker = &replica["spec"]["replicas"]["worker"]["template"];
    let path = format!("{ARTIFACTS_MOUNT}/r1/produce/data/n");
    assert!(
        worker["env"].to_string().contains(&format!("\"{path}\"")),
        "{worker}"
    );
    let pod = pods(env, ns)
        .await
        .into_iter()
        .find(|p| p.metadata.name.as_deref() == Some("from-r1-serving-0-worker-0"))
        .expect("the replica's pod");
    let spec = pod.spec.expect("spec");
    let claim = spec
        .volumes
        .iter()
        .flatten()
        .find_map(|v| v.persistent_volume_claim.clone())
        .expect("the artifact claim");
    assert_eq!(
        (claim.claim_name.as_str(), claim.read_only),
        ("corral-artifacts", Some(true))
    );
    let model = serde_json::to_value(models.get("from-r1").await.expect("model")).expect("json");
    let origin = &model["status"]["model"];
    assert_eq!(origin["pipelineRun"], "r1", "{model}");
    assert_eq!(origin["uid"], r1["metadata"]["uid"], "{model}");
    assert_eq!(
        origin["sha256"], r1["status"]["steps"]["produce"]["outputs"]["data"]["sha256"],
        "{model}"
    );
    let refused =
        serde_json::to_value(models.get("from-nowhere").await.expect("model")).expect("json");
    let message = refused["status"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("Invalid: spec.model.step: PipelineRun `r1` has no step `evaluate`"),
        "{refused}"
    );
    assert!(job(env, ns, "from-nowhere-serving-0").await.is_none());
    for name in ["from-r1", "from-nowhere"] {
        models
            .delete(name, &DeleteParams::default())
            .await
            .expect("delete");
    }
}
