//! KServe's InferenceService on the running operator (`--kserve`), against the real API
//! server: it becomes a ServedModel it owns, whose replica answers through the router; its
//! status says what KServe's would (`Ready`, `url`, the predictor's revisions and traffic);
//! one Corral cannot serve is refused in its status, naming the field; deleting it deletes
//! its model (the controller manager's garbage collector).

use std::time::Duration;

use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use serde_json::{Value, json};

use crate::harness::Env;
use crate::manifests::ar;
use crate::read_api::{http, token_of};
use crate::serving::{bound, model_server, models, run_pod_at};

fn services(env: &Env, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        env.admin.clone(),
        ns,
        &ar(
            "serving.kserve.io",
            "v1beta1",
            "InferenceService",
            "inferenceservices",
        ),
    )
}

/// Waits up to 60 s for `check` to hold of InferenceService `name`.
async fn until_isvc(env: &Env, ns: &str, name: &str, check: impl Fn(&Value) -> bool) -> Value {
    let mut v = Value::Null;
    for _ in 0..240 {
        if let Ok(o) = services(env, ns).get(name).await {
            v = serde_json::to_value(o).unwrap_or(Value::Null);
            if check(&v) {
                return v;
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    v
}

fn condition<'a>(isvc: &'a Value, type_: &str) -> &'a Value {
    isvc["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .unwrap_or(&Value::Null)
}

async fn create(env: &Env, ns: &str, name: &str, predictor: Value) {
    services(env, ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
                "metadata": {"name": name, "namespace": ns},
                "spec": {"predictor": predictor},
            }))
            .expect("InferenceService"),
        )
        .await
        .unwrap_or_else(|e| panic!("create InferenceService {name}: {e}"));
}

/// The operator binary listening on `port` (the router's), its replicas on `serving_port`.
pub(crate) async fn live_inference_service(
    env: &Env,
    ns: &str,
    (port, serving_port): (u16, u16),
    log: &dyn Fn() -> String,
) {
    let token = token_of(
        env,
        ns,
        "isvc-caller",
        json!([{"apiGroups": ["corral.dev"], "resources": ["servedmodels/proxy"],
                "verbs": ["get"]}]),
    )
    .await;
    create(
        env,
        ns,
        "kmodel",
        json!({"minReplicas": 1, "maxReplicas": 1, "containers": [{
            "name": "kserve-container", "image": "models/kmodel:1",
            "command": ["python3", "serve.py"],
            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
            "readinessProbe": {"httpGet": {"path": "/healthz"}, "periodSeconds": 1}}]}),
    )
    .await;
    // Its ServedModel, owned by it, and the model's replica placed like any job.
    let pod = "kmodel-serving-0-worker-0";
    assert!(
        bound(env, ns, pod).await,
        "the InferenceService's replica was not placed; operator log:\n{}",
        log()
    );
    let m = serde_json::to_value(models(env, ns).get("kmodel").await.expect("ServedModel"))
        .expect("json");
    assert_eq!(
        m["metadata"]["ownerReferences"][0]["kind"], "InferenceService",
        "{m}"
    );
    assert_eq!(m["spec"]["template"]["image"], "models/kmodel:1", "{m}");
    assert_eq!(m["spec"]["readiness"]["path"], "/healthz", "{m}");
    let waiting = until_isvc(env, ns, "kmodel", |i| {
        condition(i, "Ready")["status"] == "False"
    })
    .await;
    assert_eq!(
        condition(&waiting, "Ready")["reason"],
        "PredictorNotReady",
        "{waiting}"
    );

    // Running, it answers through the router, and the InferenceService says so.
    let _server = model_server("127.0.0.6", serving_port, "kserve").await;
    run_pod_at(env, ns, pod, "127.0.0.6").await;
    let mut answer = (0, String::new());
    for _ in 0..240 {
        answer = http(
            port,
            "GET",
            &format!("/serve/{ns}/kmodel/predict"),
            Some(&token),
            "",
        )
        .await;
        if answer.0 == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(
        (answer.0, answer.1.contains("kserve")),
        (200, true),
        "{answer:?}; operator log:\n{}",
        log()
    );
    let ready = until_isvc(env, ns, "kmodel", |i| {
        condition(i, "Ready")["status"] == "True"
    })
    .await;
    assert_eq!(condition(&ready, "Ready")["status"], "True", "{ready}");
    assert_eq!(condition(&ready, "PredictorReady")["status"], "True");
    assert_eq!(ready["status"]["url"], format!("/serve/{ns}/kmodel/"));
    let predictor = &ready["status"]["components"]["predictor"];
    assert_eq!(predictor["latestReadyRevision"], "kmodel-00001", "{ready}");
    assert_eq!(
        predictor["traffic"],
        json!([{"revisionName": "kmodel-00001", "percent": 100, "latestRevision": true}]),
        "{ready}"
    );

    // One Corral cannot serve: refused in its status, naming the field; no model.
    create(
        env,
        ns,
        "kformat",
        json!({"sklearn": {"storageUri": "gs://models/iris"}}),
    )
    .await;
    let refused = until_isvc(env, ns, "kformat", |i| {
        condition(i, "Ready")["reason"] == "InvalidSpec"
    })
    .await;
    let message = condition(&refused, "Ready")["message"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(
        message.contains("spec.predictor.sklearn"),
        "{refused}; operator log:\n{}",
        log()
    );
    assert!(models(env, ns).get("kformat").await.is_err());

    // Deleted, its model goes with it.
    services(env, ns)
        .delete("kmodel", &DeleteParams::background())
        .await
        .expect("delete InferenceService");
    let mut gone = false;
    for _ in 0..240 {
        // Gone, or going (its replicas' pods wait for the kubelet the test plays).
        let going = models(env, ns)
            .get("kmodel")
            .await
            .map_or(true, |m| m.metadata.deletion_timestamp.is_some());
        if going {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(gone, "the ServedModel outlived its InferenceService");
}
