//! What the test does in place of the nodes and their kubelets: GPU Node objects, pod
//! phases and exit codes, removal of deleted pods; and reads of the pods.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;

use corral_kube::testenv;

use crate::harness::Env;

pub(crate) async fn gpu_node(env: &Env, name: &str) {
    testenv::ready_gpu_node(&env.admin, name, 8)
        .await
        .expect("node");
    // The TaintNodesByCondition admission plugin taints a new node not-ready; the node
    // lifecycle controller (not run here) lifts it once the node reports Ready.
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(env.admin.clone());
    let node = nodes.get(name).await.expect("node");
    let taints = node.spec.and_then(|s| s.taints).unwrap_or_default();
    assert!(
        taints
            .iter()
            .any(|t| t.key == "node.kubernetes.io/not-ready"),
        "{taints:?}"
    );
    testenv::lift_not_ready_taint(&env.admin, name)
        .await
        .expect("lift the not-ready taint");
}

/// The kubelet's part: a pod's phase (and its container's exit code).
pub(crate) async fn kubelet_phase(env: &Env, ns: &str, pod: &str, phase: &str, exit: Option<i32>) {
    let pods: Api<Pod> = Api::namespaced(env.admin.clone(), ns);
    let mut status = json!({"phase": phase});
    let container = pods
        .get(pod)
        .await
        .expect("pod")
        .spec
        .expect("spec")
        .containers[0]
        .name
        .clone();
    let state = match (phase, exit) {
        ("Running", _) => json!({"running": {"startedAt": Timestamp::now().to_string()}}),
        (_, code) => json!({"terminated": {"exitCode": code.unwrap_or(0),
            "reason": if code.unwrap_or(0) == 0 { "Completed" } else { "Error" }}}),
    };
    status["containerStatuses"] = json!([{"name": container, "ready": phase == "Running",
        "restartCount": 0, "image": "x", "imageID": "", "state": state}]);
    pods.patch_status(
        pod,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": status})),
    )
    .await
    .unwrap_or_else(|e| panic!("kubelet status of {ns}/{pod}: {e}"));
}

/// The kubelet's part: pods being deleted are gone once their containers stopped.
pub(crate) async fn kubelet_reap(env: &Env, ns: &str) {
    let pods: Api<Pod> = Api::namespaced(env.admin.clone(), ns);
    for p in pods.list(&ListParams::default()).await.expect("pods").items {
        if p.metadata.deletion_timestamp.is_some() {
            let name = p.metadata.name.unwrap_or_default();
            let _ = pods
                .delete(&name, &DeleteParams::default().grace_period(0))
                .await;
        }
    }
}

pub(crate) async fn pods(env: &Env, ns: &str) -> Vec<Pod> {
    let api: Api<Pod> = Api::namespaced(env.admin.clone(), ns);
    let mut items = api.list(&ListParams::default()).await.expect("pods").items;
    items.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    items
}

pub(crate) fn env_of(pod: &Pod, name: &str) -> Option<String> {
    pod.spec.as_ref()?.containers[0]
        .env
        .as_ref()?
        .iter()
        .find(|e| e.name == name)?
        .value
        .clone()
}
