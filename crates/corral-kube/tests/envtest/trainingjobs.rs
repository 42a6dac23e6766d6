//! Corral's TrainingJobs as a user writes and reads them: the manifest, its replicas,
//! submission, and the object and its conditions as the server has them.

use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use serde_json::{Value, json};

use crate::harness::Env;
use crate::manifests::ar;

pub(crate) fn training_jobs() -> ApiResource {
    ar("corral.dev", "v1alpha1", "TrainingJob", "trainingjobs")
}

pub(crate) async fn job(env: &Env, ns: &str, name: &str) -> Option<Value> {
    let api: Api<DynamicObject> = Api::namespaced_with(env.admin.clone(), ns, &training_jobs());
    api.get_opt(name)
        .await
        .expect("get job")
        .map(|o| serde_json::to_value(o).expect("json"))
}

pub(crate) fn condition(job: &Value, ty: &str) -> Option<String> {
    job["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == json!(ty))?["status"]
        .as_str()
        .map(str::to_string)
}

pub(crate) async fn submit(env: &Env, doc: Value) {
    let api: Api<DynamicObject> = Api::namespaced_with(
        env.admin.clone(),
        doc["metadata"]["namespace"].as_str().expect("namespace"),
        &training_jobs(),
    );
    api.create(
        &PostParams::default(),
        &serde_json::from_value(doc).expect("object"),
    )
    .await
    .expect("submit");
}

pub(crate) fn training_job(
    ns: &str,
    name: &str,
    framework: &str,
    replicas: Value,
    run_policy: Value,
) -> Value {
    json!({
        "apiVersion": "corral.dev/v1alpha1", "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"framework": framework, "replicas": replicas, "runPolicy": run_policy},
    })
}

pub(crate) fn replica(count: u32, gpu: u32) -> Value {
    json!({"count": count, "resources": {"cpu": "1", "memory": "1Gi", "gpu": gpu},
           "template": {"image": "busybox:1.36", "command": ["sh", "-c", "true"]}})
}
