//! The operator binary as deployed, against the same server.

use std::process::Command;
use std::time::Duration;

use kube::api::{Api, DynamicObject, PostParams};
use serde_json::{Value, json};

use crate::harness::{Env, OPERATOR_TOKEN, free_port, kubeconfig, prerequisite, spawn};
use crate::kubelet::{kubelet_phase, pods};
use crate::manifests::{ar, namespace};

/// The operator binary as deployed: leader election, watches, `--kubeflow serve`, with the
/// ServiceAccount's identity. `CORRAL_OPERATOR_BIN` names it (e.g. target/debug/corral).
pub(crate) async fn operator_binary(env: &Env) {
    let Some(bin) = std::env::var_os("CORRAL_OPERATOR_BIN") else {
        prerequisite(
            false,
            "operator binary case: set CORRAL_OPERATOR_BIN (e.g. target/release/corral)",
        );
        return;
    };
    let ns = "kf-bin";
    namespace(env, ns).await;
    let kc = env.dir.join("operator.kubeconfig");
    std::fs::write(&kc, kubeconfig(&env.url, OPERATOR_TOKEN)).expect("kubeconfig");
    // The pod the operator runs in (POD_NAME is its identity): the leader labels it, for
    // the router's Service.
    let own: Api<k8s_openapi::api::core::v1::Pod> =
        Api::namespaced(env.admin.clone(), "corral-system");
    own.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "metadata": {"name": "envtest-op", "labels": {"app.kubernetes.io/name": "corral-operator"}},
            "spec": {"containers": [{"name": "operator", "image": "corral:test"}]},
        }))
        .expect("pod"),
    )
    .await
    .expect("the operator's own pod");
    let leader_label = |p: &k8s_openapi::api::core::v1::Pod| {
        p.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(corral_kube::leader::LEADER_LABEL).cloned())
    };
    let port = free_port();
    let serving_port = free_port();
    let mut child = spawn(
        Command::new(&bin)
            .args(["operator", "--kubeflow", "serve", "--kserve", "--listen"])
            .arg(format!("127.0.0.1:{port}"))
            .args([
                "--lease-namespace",
                "corral-system",
                "--identity",
                "envtest-op",
            ])
            .arg("--progress-url")
            .arg(format!("http://127.0.0.1:{port}/progress"))
            .arg("--serving-port")
            .arg(serving_port.to_string())
            .env("KUBECONFIG", &kc)
            .env("RUST_LOG", "info"),
        &env.dir.join("operator.log"),
    );
    let pt = ar("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs");
    let api: Api<DynamicObject> = Api::namespaced_with(env.admin.clone(), ns, &pt);
    let replica = json!({"replicas": 1, "template": {"spec": {"containers": [{
        "name": "pytorch", "image": "pytorch/pytorch:2.5.1", "command": ["python", "train.py"],
        "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}});
    api.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "live", "namespace": ns},
            "spec": {"pytorchReplicaSpecs": {"Master": replica, "Worker": replica}},
        }))
        .expect("PyTorchJob"),
    )
    .await
    .expect("create PyTorchJob");
    // Watches wake the operator: the job is converted, admitted and its pods bound.
    let mut bound = Vec::new();
    for _ in 0..120 {
        bound = pods(env, ns)
            .await
            .into_iter()
            .filter(|p| p.spec.as_ref().is_some_and(|s| s.node_name.is_some()))
            .collect();
        if bound.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let log = || std::fs::read_to_string(env.dir.join("operator.log")).unwrap_or_default();
    assert_eq!(bound.len(), 2, "operator log:\n{}", log());
    for p in &bound {
        kubelet_phase(
            env,
            ns,
            p.metadata.name.as_deref().unwrap_or(""),
            "Running",
            None,
        )
        .await;
    }
    let mut running = false;
    for _ in 0..120 {
        let kf = serde_json::to_value(api.get("live").await.expect("job")).expect("json");
        if kf["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == json!("Running") && c["status"] == json!("True"))
        }) {
            running = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(running, "no Running condition; operator log:\n{}", log());
    let lease: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(env.admin.clone(), "corral-system");
    let holder = lease
        .get("corral-operator")
        .await
        .expect("Lease")
        .spec
        .and_then(|s| s.holder_identity);
    assert_eq!(holder.as_deref(), Some("envtest-op"));
    let mine = own.get("envtest-op").await.expect("own pod");
    assert_eq!(
        leader_label(&mine).as_deref(),
        Some("true"),
        "{:?}",
        mine.metadata
    );
    // Done: free its GPUs, stop the operator as Kubernetes does (SIGTERM).
    for p in &bound {
        kubelet_phase(
            env,
            ns,
            p.metadata.name.as_deref().unwrap_or(""),
            "Succeeded",
            Some(0),
        )
        .await;
    }
    let mut succeeded = false;
    for _ in 0..120 {
        let kf = serde_json::to_value(api.get("live").await.expect("job")).expect("json");
        if kf["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == json!("Succeeded") && c["status"] == json!("True"))
        }) {
            succeeded = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        succeeded,
        "no Succeeded condition; operator log:\n{}",
        log()
    );
    live_pipeline_run(env, ns, &log).await;
    live_progress(env, ns, port, &log).await;
    crate::read_api::live_read_api(env, ns, port, &bin, &log).await;
    crate::serving::live_serving(env, ns, (port, serving_port), &bin, &log).await;
    crate::kserve::live_inference_service(env, ns, (port, serving_port), &log).await;
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let stopped = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        child.try_wait().ok().flatten().is_some()
    });
    if !stopped {
        let _ = child.kill();
    }
    let _ = child.wait();
    assert!(stopped, "the operator did not stop on SIGTERM");
    let mine = own.get("envtest-op").await.expect("own pod");
    assert_eq!(
        leader_label(&mine),
        None,
        "a stopped operator leaves its pod labelled leader"
    );
}

/// The running operator's watches move a PipelineRun on by themselves: its one step's job
/// is made, placed and, once its pod ended, the run succeeds (no artifact: no claim here).
async fn live_pipeline_run(env: &Env, ns: &str, log: &dyn Fn() -> String) {
    let runs: Api<DynamicObject> = Api::namespaced_with(
        env.admin.clone(),
        ns,
        &ar("corral.dev", "v1alpha1", "PipelineRun", "pipelineruns"),
    );
    runs.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "apiVersion": "corral.dev/v1alpha1", "kind": "PipelineRun",
            "metadata": {"name": "live-run", "namespace": ns},
            "spec": {"pipelineSpec": {"steps": [{"name": "only", "task": {
                "image": "busybox:1.36", "command": ["true"],
                "resources": {"cpu": "1", "memory": "1Gi"}}}]}},
        }))
        .expect("PipelineRun"),
    )
    .await
    .expect("create PipelineRun");
    let pod = "live-run-only-worker-0";
    let mut bound = false;
    for _ in 0..120 {
        bound = pods(env, ns).await.iter().any(|p| {
            p.metadata.name.as_deref() == Some(pod)
                && p.spec.as_ref().is_some_and(|s| s.node_name.is_some())
        });
        if bound {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        bound,
        "the step's pod was not placed; operator log:\n{}",
        log()
    );
    kubelet_phase(env, ns, pod, "Succeeded", Some(0)).await;
    let mut phase = Value::Null;
    for _ in 0..120 {
        let run = serde_json::to_value(runs.get("live-run").await.expect("run")).expect("json");
        phase = run["status"]["phase"].clone();
        if phase == json!("Succeeded") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(phase, json!("Succeeded"), "operator log:\n{}", log());
}

/// `POST /progress` to the running operator: `status` and what it answered.
async fn post_progress(port: u16, token: Option<&str>, body: &str) -> (u16, String) {
    crate::read_api::http(port, "POST", "/progress", token, body).await
}

/// `GET /progress` with a replica's token: its stop notice (status, body).
async fn get_notice(port: u16, token: &str) -> (u16, String) {
    crate::read_api::http(port, "GET", "/progress", Some(token), "").await
}

/// A replica reports its progress to the running operator with the token projected for
/// it: the job's status shows it; without a token, or with one for another audience, the
/// report is refused.
async fn live_progress(env: &Env, ns: &str, port: u16, log: &dyn Fn() -> String) {
    use k8s_openapi::api::authentication::v1::{
        BoundObjectReference, TokenRequest, TokenRequestSpec,
    };
    use k8s_openapi::api::core::v1::ServiceAccount;
    let jobs: Api<DynamicObject> = Api::namespaced_with(
        env.admin.clone(),
        ns,
        &ar("corral.dev", "v1alpha1", "TrainingJob", "trainingjobs"),
    );
    jobs.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "apiVersion": "corral.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": "reporter", "namespace": ns},
            "spec": {"framework": "generic", "replicas": {"worker": {"count": 1,
                "resources": {"cpu": "1", "memory": "1Gi"},
                "template": {"image": "busybox:1.36", "command": ["sleep", "600"]}}}},
        }))
        .expect("job"),
    )
    .await
    .expect("create job");
    let name = "reporter-worker-0";
    let mut pod = None;
    for _ in 0..120 {
        pod = pods(env, ns).await.into_iter().find(|p| {
            p.metadata.name.as_deref() == Some(name)
                && p.spec.as_ref().is_some_and(|s| s.node_name.is_some())
        });
        if pod.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let pod = pod.unwrap_or_else(|| panic!("the replica was not placed; operator log:\n{}", log()));
    assert_eq!(
        crate::kubelet::env_of(&pod, "CORRAL_PROGRESS_URL"),
        Some(format!("http://127.0.0.1:{port}/progress"))
    );
    let token_file =
        crate::kubelet::env_of(&pod, "CORRAL_PROGRESS_TOKEN_FILE").expect("token file");
    let spec = pod.spec.as_ref().expect("spec");
    let projected = spec
        .volumes
        .iter()
        .flatten()
        .find_map(|v| v.projected.as_ref())
        .and_then(|p| p.sources.as_ref())
        .and_then(|s| s.first())
        .and_then(|s| s.service_account_token.as_ref())
        .expect("a projected service-account token");
    assert_eq!(projected.audience.as_deref(), Some("corral"));
    assert!(token_file.ends_with(&projected.path), "{token_file}");
    kubelet_phase(env, ns, name, "Running", None).await;
    // What the kubelet projects: a token for the pod's service account, bound to the pod.
    let sa_name = spec
        .service_account_name
        .clone()
        .unwrap_or_else(|| "default".into());
    let sas: Api<ServiceAccount> = Api::namespaced(env.admin.clone(), ns);
    if sas.get_opt(&sa_name).await.expect("get sa").is_none() {
        sas.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": sa_name}})).expect("sa"),
        )
        .await
        .expect("service account");
    }
    let token_for = |audience: &str| TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![audience.to_string()],
            expiration_seconds: Some(600),
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: pod.metadata.name.clone(),
                uid: pod.metadata.uid.clone(),
            }),
        },
        ..TokenRequest::default()
    };
    let token = |r: TokenRequest| r.status.map(|s| s.token).expect("a token");
    let good = token(
        sas.create_token_request(&sa_name, &PostParams::default(), &token_for("corral"))
            .await
            .expect("a token for the pod"),
    );
    let other = token(
        sas.create_token_request(&sa_name, &PostParams::default(), &token_for("someone-else"))
            .await
            .expect("a token for another audience"),
    );
    let report = r#"{"step": 42, "totalSteps": 100, "samplesPerSecond": 12.5}"#;
    let (code, answer) = post_progress(port, None, report).await;
    assert_eq!(code, 401, "{answer}");
    let (code, answer) = post_progress(port, Some(&other), report).await;
    assert_eq!(code, 401, "{answer}");
    let (code, answer) = post_progress(port, Some(&good), "{\"steps\": 1}").await;
    assert_eq!(code, 400, "{answer}");
    let (code, answer) = post_progress(port, Some(&good), report).await;
    assert_eq!(code, 202, "{answer}; operator log:\n{}", log());
    let mut shown = Value::Null;
    for _ in 0..120 {
        let j = serde_json::to_value(jobs.get("reporter").await.expect("job")).expect("json");
        shown = j["status"]["progress"].clone();
        if shown["step"] == json!(42) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(shown["step"], json!(42), "operator log:\n{}", log());
    assert_eq!(shown["replica"], json!(name));
    assert_eq!(shown["percent"].as_f64(), Some(42.0));

    // Suspended, its replica is told to stop (deleted with the grace period); the checkpoint
    // it then reports ends the wait: deleted again, at once.
    jobs.patch(
        "reporter",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"spec": {"runPolicy": {"suspend": true}}})),
    )
    .await
    .expect("suspend");
    let pods_api: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(env.admin.clone(), ns);
    let mut grace = None;
    for _ in 0..120 {
        let p = pods_api.get_opt(name).await.expect("get pod");
        grace = p.and_then(|p| p.metadata.deletion_grace_period_seconds);
        if grace.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(
        grace.is_some_and(|g| g > 0),
        "not stopped with a grace period: {grace:?}; operator log:\n{}",
        log()
    );
    // Why and by when, as the replica asks for it with its token.
    let (code, notice) = get_notice(port, &good).await;
    assert_eq!(code, 200, "{notice}");
    let notice: Value = serde_json::from_str(&notice).unwrap_or(Value::Null);
    assert_eq!(notice["reason"], json!("Suspended"), "{notice}");
    assert!(
        notice["graceSeconds"].as_i64().is_some_and(|g| g > 0),
        "{notice}"
    );
    assert!(notice["deadline"].as_str().is_some(), "{notice}");
    let saved = r#"{"step": 50, "checkpoint": {"step": 50, "path": "/ckpt/step-50"}}"#;
    let (code, answer) = post_progress(port, Some(&good), saved).await;
    assert_eq!(code, 202, "{answer}");
    assert!(answer.contains("\"reason\":\"Suspended\""), "{answer}");
    let mut gone = false;
    for _ in 0..120 {
        if pods_api.get_opt(name).await.expect("get pod").is_none() {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(
        gone,
        "the replica was not stopped once its checkpoint was saved; operator log:\n{}",
        log()
    );
    let j = serde_json::to_value(jobs.get("reporter").await.expect("job")).expect("json");
    assert_eq!(
        j["status"]["lastCheckpoint"]["step"],
        json!(50),
        "{}",
        j["status"]
    );
    assert_eq!(
        j["status"]["lastCheckpoint"]["path"],
        json!("/ckpt/step-50")
    );
}
