//! The server's answers on the error paths (404 before the CRDs, 409, 422, 403), checked
//! against tests/fixtures/real-api.

use serde_json::json;

use crate::harness::{Env, fixture, raw};
use crate::manifests::namespace;

pub(crate) async fn error_paths_before_crds(env: &Env) {
    let (code, body) = raw(
        &env.admin,
        "GET",
        "/apis/corral.dev/v1alpha1/namespaces/default/trainingjobs",
        None,
    )
    .await
    .expect("call");
    assert_eq!(code, 404, "{body}");
    fixture("crd-missing-404", code, &body);
}

pub(crate) async fn error_paths(env: &Env) {
    namespace(env, "fixtures").await;
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "taken", "namespace": "fixtures"},
        "spec": {"schedulerName": "corral", "containers": [{"name": "c", "image": "busybox"}]}});
    let path = "/api/v1/namespaces/fixtures/pods";
    let (code, _) = raw(&env.admin, "POST", path, Some(pod.clone()))
        .await
        .expect("call");
    assert_eq!(code, 201);
    let (code, body) = raw(&env.admin, "POST", path, Some(pod.clone()))
        .await
        .expect("call");
    assert_eq!(code, 409, "{body}");
    fixture("pod-already-exists-409", code, &body);

    let mut invalid = pod.clone();
    invalid["metadata"]["name"] = json!("invalid");
    invalid["spec"]["tolerations"] =
        json!([{"key": "nvidia.com/gpu", "operator": "Sometimes", "effect": "NoSchedule"}]);
    let (code, body) = raw(&env.admin, "POST", path, Some(invalid))
        .await
        .expect("call");
    assert_eq!(code, 422, "{body}");
    fixture("pod-invalid-toleration-422", code, &body);

    let mut other = pod;
    other["metadata"]["name"] = json!("forbidden");
    let (code, body) = raw(&env.nobody, "POST", path, Some(other))
        .await
        .expect("call");
    assert_eq!(code, 403, "{body}");
    fixture("pod-create-forbidden-403", code, &body);

    // What the operator may not do by its RBAC: delete a namespace.
    let (code, body) = raw(&env.operator, "DELETE", "/api/v1/namespaces/fixtures", None)
        .await
        .expect("call");
    assert_eq!(code, 403, "{body}");
}
