//! Pipelines with `--artifact-store`: artifacts in an S3 store (moto's server on loopback)
//! instead of the claim. The operator's passes against the real API server make each
//! step's pod with its own volume, an init container that fetches what it reads and a
//! sidecar that uploads what it wrote; the test plays the kubelet and runs those
//! containers' commands with the real `corral` binary (`CORRAL_OPERATOR_BIN`), their
//! environment from the namespace's Secret as the kubelet gives it. The second step's pod
//! finds the first one's output in its own, separate volume: the artifact went through S3.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Container, Pod, Secret};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use corral_kube::pipelines::{self, ARTIFACTS_MOUNT, ArtifactLocation, PipelineConfig};
use corral_kube::testenv::S3Server;

use crate::harness::{Env, prerequisite};
use crate::kubelet::{kubelet_phase, pods};
use crate::manifests::{ar, namespace};
use crate::passes::{Operator, pass};

const BUCKET: &str = "corral-artifacts";

fn config() -> PipelineConfig {
    PipelineConfig {
        artifacts: ArtifactLocation::new(
            "unused",
            Some(&format!("s3://{BUCKET}/pipelines")),
            "corral-artifact-store",
        ),
        tools_image: "ghcr.io/corral-dev/corral:test".into(),
    }
}

async fn passes(op: &Operator) {
    pass(op, Timestamp::now()).await;
    let (_, report) = pipelines::apply::reconcile_once(op.applier(), &config(), Timestamp::now())
        .await
        .expect("the pipelines' lists are allowed");
    assert!(report.errors.is_empty(), "pipelines: {:?}", report.errors);
}

/// The environment `envFrom: secretRef` gives a container.
async fn env_from(env: &Env, ns: &str, c: &Container) -> BTreeMap<String, String> {
    let secrets: Api<Secret> = Api::namespaced(env.admin.clone(), ns);
    let mut out = BTreeMap::new();
    for from in c.env_from.iter().flatten() {
        let Some(name) = from.secret_ref.as_ref().map(|s| s.name.clone()) else {
            continue;
        };
        let secret = secrets.get(&name).await.expect("the container's Secret");
        for (k, v) in secret.data.unwrap_or_default() {
            out.insert(k, String::from_utf8_lossy(&v.0).into_owned());
        }
    }
    out
}

/// A tool container's command as the real binary runs it here: its volume at `volume`.
fn command(bin: &Path, c: &Container, volume: &Path, env: &BTreeMap<String, String>) -> Command {
    let argv = c.command.clone().unwrap_or_default();
    assert_eq!(&argv[..2], ["corral", "artifacts"], "{argv:?}");
    let mut cmd = Command::new(bin);
    cmd.args(&argv[1..3])
        .arg("--volume")
        .arg(volume)
        .args(&argv[3..])
        .env_clear()
        .envs(env)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

fn finished(out: std::process::Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The kubelet's part for a step's pod: its init container, its sidecar started, `main`
/// (what the step's container does to the volume), the sidecar stopped once it ended,
/// and the pod's phase once the sidecar exited.
async fn run_step_pod(
    env: &Env,
    bin: &Path,
    ns: &str,
    pod: &Pod,
    volume: &Path,
    main: impl FnOnce(&Path),
) {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let spec = pod.spec.as_ref().expect("spec");
    let own = spec
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == pipelines::ARTIFACTS_VOLUME)
        .expect("the artifacts' volume");
    assert!(
        own.empty_dir.is_some() && own.persistent_volume_claim.is_none(),
        "{own:?}"
    );
    let mut sidecars = Vec::new();
    for c in spec.init_containers.iter().flatten() {
        let vars = env_from(env, ns, c).await;
        assert!(vars.contains_key("AWS_ENDPOINT"), "{vars:?}");
        let mut cmd = command(bin, c, volume, &vars);
        if c.restart_policy.as_deref() == Some("Always") {
            sidecars.push(cmd.spawn().expect("the sidecar starts"));
        } else {
            finished(cmd.output().expect("runs"), &c.name);
        }
    }
    main(volume);
    // The step's containers ended: the kubelet stops the sidecars, the pod ends after them.
    std::thread::sleep(Duration::from_millis(300));
    for child in sidecars {
        let pid = child.id().to_string();
        assert!(
            Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .is_ok_and(|s| s.success())
        );
        let out = finished(child.wait_with_output().expect("exits"), "corral-upload");
        assert!(out.contains("uploaded"), "{out}");
    }
    kubelet_phase(env, ns, &name, "Succeeded", Some(0)).await;
}

/// The kubelet's part for the artifact pods: each runs with the store's credentials and
/// ends with its report as the termination message.
async fn run_artifact_pods(env: &Env, bin: &Path, ns: &str) -> usize {
    let api: Api<Pod> = Api::namespaced(env.admin.clone(), ns);
    let mut ran = 0;
    for p in pods(env, ns).await {
        if corral_kube::observe::label(&p.metadata, pipelines::ARTIFACTS_OF_LABEL).is_none()
            || p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded")
        {
            continue;
        }
        let spec = p.spec.as_ref().expect("spec");
        assert!(
            !spec
                .volumes
                .iter()
                .flatten()
                .any(|v| v.name == pipelines::ARTIFACTS_VOLUME),
            "it reads the store, not a volume"
        );
        let c = &spec.containers[0];
        let vars = env_from(env, ns, c).await;
        let dir = tempfile::tempdir().expect("dir");
        let file = dir.path().join("termination-log");
        let mut cmd = command(bin, c, dir.path(), &vars);
        cmd.arg("--message-file").arg(&file);
        finished(cmd.output().expect("runs"), "artifact pod");
        let report = std::fs::read_to_string(&file).expect("report");
        let status = json!({"status": {"phase": "Succeeded", "containerStatuses": [{
            "name": c.name, "ready": false, "restartCount": 0, "image": "x", "imageID": "",
            "state": {"terminated": {"exitCode": 0, "reason": "Completed", "message": report}}}]}});
        let name = p.metadata.name.clone().unwrap_or_default();
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(status))
            .await
            .expect("artifact pod status");
        ran += 1;
    }
    ran
}

fn on_volume(volume: &Path, pod_path: &str) -> PathBuf {
    volume.join(
        pod_path
            .trim_start_matches(ARTIFACTS_MOUNT)
            .trim_start_matches('/'),
    )
}

async fn pod_named(env: &Env, ns: &str, name: &str) -> Pod {
    pods(env, ns)
        .await
        .into_iter()
        .find(|p| p.metadata.name.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("pod {name}"))
}

pub(crate) async fn pipeline_with_an_object_store(env: &Env, op: &Operator) {
    let Some(bin) = std::env::var_os("CORRAL_OPERATOR_BIN").map(PathBuf::from) else {
        prerequisite(
            false,
            "object store case: set CORRAL_OPERATOR_BIN (e.g. target/release/corral)",
        );
        return;
    };
    if !prerequisite(
        S3Server::available(),
        "moto_server (pip install 'moto[server]') for the S3 store",
    ) {
        return;
    }
    let s3 = S3Server::start(BUCKET).expect("moto's S3 server");
    let ns = "pipes-s3";
    namespace(env, ns).await;
    let secrets: Api<Secret> = Api::namespaced(env.admin.clone(), ns);
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "corral-artifact-store"},
                "stringData": s3.env().into_iter().collect::<BTreeMap<_, _>>(),
            }))
            .expect("secret"),
        )
        .await
        .expect("the namespace's store credentials");
    let runs: Api<DynamicObject> = Api::namespaced_with(
        env.admin.clone(),
        ns,
        &ar("corral.dev", "v1alpha1", "PipelineRun", "pipelineruns"),
    );
    let task = |command: &str| {
        json!({"image": "busybox:1.36", "command": ["sh", "-c", command],
               "resources": {"cpu": "1", "memory": "1Gi"}})
    };
    let run: Value = json!({
        "apiVersion": "corral.dev/v1alpha1", "kind": "PipelineRun",
        "metadata": {"name": "s1", "namespace": ns},
        "spec": {"pipelineSpec": {"steps": [
            {"name": "produce", "outputs": ["data"],
             "task": task("echo 3 > $(CORRAL_OUTPUT_DATA)/n")},
            {"name": "consume", "inputs": {"data": "steps.produce.outputs.data"},
             "task": task("cat $(CORRAL_INPUT_DATA)/n")},
        ]}},
    });
    runs.create(
        &PostParams::default(),
        &serde_json::from_value(run).expect("run"),
    )
    .await
    .expect("run");
    passes(op).await;
    passes(op).await;
    let produce = pod_named(env, ns, "s1-produce-worker-0").await;
    let sidecar = produce
        .spec
        .as_ref()
        .and_then(|s| s.init_containers.as_ref())
        .and_then(|c| c.iter().find(|c| c.name == "corral-upload"))
        .expect("the upload sidecar, as the API server stored it");
    assert_eq!(sidecar.restart_policy.as_deref(), Some("Always"));
    let out = format!("{ARTIFACTS_MOUNT}/s1/produce/data");
    let first = tempfile::tempdir().expect("the first pod's volume");
    run_step_pod(env, &bin, ns, &produce, first.path(), |v| {
        let dir = on_volume(v, &out);
        assert!(dir.is_dir(), "made before the step");
        std::fs::write(dir.join("n"), "3\n").expect("the step writes");
    })
    .await;
    passes(op).await;
    passes(op).await;
    assert_eq!(run_artifact_pods(env, &bin, ns).await, 1, "one hash pod");
    passes(op).await;
    let status = runs.get("s1").await.expect("run").data["status"].clone();
    let produced = &status["steps"]["produce"];
    assert_eq!(produced["phase"], "Succeeded", "{status}");
    let sha = corral_local::artifacts::hash(&on_volume(first.path(), &out)).expect("hash");
    assert_eq!(
        produced["outputs"]["data"]["sha256"],
        json!(sha),
        "hashed in the store as on the disk"
    );
    passes(op).await;
    let consume = pod_named(env, ns, "s1-consume-worker-0").await;
    let second = tempfile::tempdir().expect("the second pod's own volume");
    run_step_pod(env, &bin, ns, &consume, second.path(), |v| {
        let n = std::fs::read_to_string(on_volume(v, &out).join("n"));
        assert_eq!(n.ok().as_deref(), Some("3\n"), "fetched from the store");
    })
    .await;
    for _ in 0..3 {
        passes(op).await;
    }
    let status = runs.get("s1").await.expect("run").data["status"].clone();
    assert_eq!(status["phase"], "Succeeded", "{status}");
}
