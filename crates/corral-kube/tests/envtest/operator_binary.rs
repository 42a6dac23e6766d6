//! The operator binary as deployed, against the same server.

use std::process::Command;
use std::time::Duration;

use kube::api::{Api, DynamicObject, PostParams};
use serde_json::json;

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
    let port = free_port();
    let mut child = spawn(
        Command::new(bin)
            .args(["operator", "--kubeflow", "serve", "--listen"])
            .arg(format!("127.0.0.1:{port}"))
            .args([
                "--lease-namespace",
                "corral-system",
                "--identity",
                "envtest-op",
            ])
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
}
