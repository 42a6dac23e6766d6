//! Served models on the running operator, against the real API server: a ServedModel gets
//! its revision (a ControllerRevision) and its replica (a TrainingJob the operator places);
//! requests through the operator's router reach the replica's pod (the test plays the
//! kubelet: the pod runs at a loopback address where a model server of the test answers)
//! behind `servedmodels/proxy` RBAC; a changed template rolls out as a new revision without
//! a failed request; idle, the model goes to zero, and the next request is held until a
//! replica is ready again.

use std::net::SocketAddr;
use std::time::Duration;

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::harness::Env;
use crate::kubelet::{kubelet_phase, kubelet_reap, pods};
use crate::manifests::ar;
use crate::read_api::{http, token_of};

pub(crate) fn models(env: &Env, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        env.admin.clone(),
        ns,
        &ar("corral.dev", "v1alpha1", "ServedModel", "servedmodels"),
    )
}

pub(crate) fn jobs(env: &Env, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        env.admin.clone(),
        ns,
        &ar("corral.dev", "v1alpha1", "TrainingJob", "trainingjobs"),
    )
}

/// A model server of the test at `ip:port`, answering `/healthz` and `/predict` with its
/// name.
pub(crate) async fn model_server(
    ip: &str,
    port: u16,
    name: &'static str,
) -> tokio::task::JoinHandle<()> {
    let addr: SocketAddr = format!("{ip}:{port}").parse().expect("address");
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .unwrap_or_else(|e| panic!("bind {addr}: {e}"));
    let app = axum::Router::new()
        .route("/healthz", axum::routing::get(|| async { "ok" }))
        .route(
            "/predict",
            axum::routing::get(move || async move { format!("{{\"replica\": \"{name}\"}}") }),
        );
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    })
}

/// The kubelet's part for a replica's pod: running, at `ip`.
pub(crate) async fn run_pod_at(env: &Env, ns: &str, pod: &str, ip: &str) {
    kubelet_phase(env, ns, pod, "Running", None).await;
    let api: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(env.admin.clone(), ns);
    api.patch_status(
        pod,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"podIP": ip, "podIPs": [{"ip": ip}]}})),
    )
    .await
    .unwrap_or_else(|e| panic!("podIP of {pod}: {e}"));
}

/// Waits up to 60 s for `pod` to be bound to a node.
pub(crate) async fn bound(env: &Env, ns: &str, pod: &str) -> bool {
    for _ in 0..240 {
        if pods(env, ns).await.iter().any(|p| {
            p.metadata.name.as_deref() == Some(pod)
                && p.metadata.deletion_timestamp.is_none()
                && p.spec.as_ref().is_some_and(|s| s.node_name.is_some())
        }) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    false
}

/// A service account of `ns` that may call its models (and list its jobs, as the read API
/// asks), and a token for it.
pub(crate) async fn caller(env: &Env, ns: &str) -> String {
    token_of(
        env,
        ns,
        "model-caller",
        json!([
            {"apiGroups": ["corral.dev"], "resources": ["servedmodels/proxy"],
             "verbs": ["get", "create"]},
            {"apiGroups": ["corral.dev"], "resources": ["trainingjobs"], "verbs": ["list"]}]),
    )
    .await
}

/// `GET /serve/<ns>/tiny/predict` until it answers 200 (up to 60 s): the last answer.
async fn predict_until_ok(port: u16, ns: &str, token: &str) -> (u16, String) {
    let mut last = (0, String::new());
    for _ in 0..240 {
        last = http(
            port,
            "GET",
            &format!("/serve/{ns}/tiny/predict"),
            Some(token),
            "",
        )
        .await;
        if last.0 == 200 {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    last
}

async fn model_json(env: &Env, ns: &str) -> Value {
    serde_json::to_value(models(env, ns).get("tiny").await.expect("model")).expect("json")
}

/// Waits up to 60 s for `check` to hold of the model as the API server has it.
async fn until_model(env: &Env, ns: &str, check: impl Fn(&Value) -> bool) -> Value {
    let mut m = Value::Null;
    for _ in 0..240 {
        m = model_json(env, ns).await;
        if check(&m) {
            return m;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    m
}

/// The served-model story on the operator binary listening on `port` (the read API's and
/// the router's), its replicas on `serving_port`.
pub(crate) async fn live_serving(
    env: &Env,
    ns: &str,
    (port, serving_port): (u16, u16),
    bin: &std::ffi::OsStr,
    log: &dyn Fn() -> String,
) {
    let token = caller(env, ns).await;
    models(env, ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "corral.dev/v1alpha1", "kind": "ServedModel",
                "metadata": {"name": "tiny", "namespace": ns},
                "spec": {
                    "template": {"image": "models/tiny:1", "command": ["python3", "serve.py"]},
                    "resources": {"cpu": "1", "memory": "1Gi"},
                    "readiness": {"path": "/healthz", "periodSeconds": 1},
                    "autoscaling": {"minReplicas": 1, "maxReplicas": 2,
                                    "stableWindowSeconds": 6, "panicWindowSeconds": 1,
                                    "scaleToZeroAfterSeconds": 1},
                },
            }))
            .expect("ServedModel"),
        )
        .await
        .expect("create ServedModel");

    // Its first revision and replica, owned by it; the replica placed like any job.
    let first = "tiny-serving-0-worker-0";
    assert!(
        bound(env, ns, first).await,
        "the replica's pod was not placed; operator log:\n{}",
        log()
    );
    let revisions: Api<k8s_openapi::api::apps::v1::ControllerRevision> =
        Api::namespaced(env.admin.clone(), ns);
    let r1 = revisions.get("tiny-00001").await.expect("revision 1");
    assert_eq!(r1.revision, 1);
    let job = serde_json::to_value(jobs(env, ns).get("tiny-serving-0").await.expect("job"))
        .expect("json");
    assert_eq!(job["metadata"]["ownerReferences"][0]["kind"], "ServedModel");
    assert_eq!(job["spec"]["port"], json!(serving_port), "{job}");
    let pod = pods(env, ns)
        .await
        .into_iter()
        .find(|p| p.metadata.name.as_deref() == Some(first))
        .expect("pod");
    let env_vars = pod.spec.expect("spec").containers[0]
        .env
        .clone()
        .unwrap_or_default();
    assert!(
        env_vars
            .iter()
            .any(|v| v.name == "PORT" && v.value.as_deref() == Some(&serving_port.to_string())),
        "{env_vars:?}"
    );

    // Without a token, and with one that may not call models: refused; then answered by the
    // replica once the kubelet runs it.
    let (code, _) = http(port, "GET", &format!("/serve/{ns}/tiny/predict"), None, "").await;
    assert_eq!(code, 401);
    let (code, refused) = http(
        port,
        "POST",
        &format!("/serve/{ns}/tiny/predict"),
        Some(corral_kube::testenv::NOBODY_TOKEN),
        "{}",
    )
    .await;
    assert_eq!(code, 403, "{refused}");
    assert!(
        refused.contains("may not create servedmodels/proxy"),
        "{refused}"
    );
    let _r1 = model_server("127.0.0.2", serving_port, "r1").await;
    run_pod_at(env, ns, first, "127.0.0.2").await;
    let (code, body) = predict_until_ok(port, ns, &token).await;
    assert_eq!(
        (code, body.contains("r1")),
        (200, true),
        "{body}; operator log:\n{}",
        log()
    );
    let m = until_model(env, ns, |m| m["status"]["readyReplicas"] == 1).await;
    assert_eq!(m["status"]["latestRevision"], "tiny-00001", "{m}");
    assert_eq!(m["status"]["url"], format!("/serve/{ns}/tiny/"), "{m}");
    let (code, got) = http(
        port,
        "GET",
        &format!("/api/v1/namespaces/{ns}/servedmodels/tiny"),
        Some(&token),
        "",
    )
    .await;
    let got: Value = serde_json::from_str(&got).unwrap_or(Value::Null);
    assert_eq!(code, 200, "{got}");
    assert_eq!(got["replicas"][0]["job"], "tiny-serving-0", "{got}");
    assert_eq!(got["replicas"][0]["ready"], true, "{got}");
    // The CLI's read verbs, pointed at the operator, as against `corral up`.
    let corral = |args: &[&str]| crate::harness::corral_cli(bin.as_ref(), env, port, &token, args);
    let (ok, text) = corral(&["get", "servedmodels", "-n", ns]);
    assert!(ok && text.contains("tiny"), "{text}");
    let (ok, text) = corral(&["describe", "servedmodel", "tiny", "-n", ns]);
    assert!(
        ok && text.contains("tiny-00001") && text.contains("tiny-serving-0"),
        "{text}"
    );
    let (_, metrics) = http(port, "GET", "/metrics", None, "").await;
    assert!(
        metrics.contains(&format!(
            "corral_serving_requests_total{{namespace=\"{ns}\",model=\"tiny\",revision=\"tiny-00001\",code=\"2xx\"}}"
        )),
        "{metrics}"
    );

    // A new template is revision 2: its replica runs beside the first until it is ready,
    // then takes every request; revision 1's replica drains and goes.
    models(env, ns)
        .patch(
            "tiny",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"image": "models/tiny:2"}}})),
        )
        .await
        .expect("patch the model");
    let second = "tiny-serving-1-worker-0";
    assert!(
        bound(env, ns, second).await,
        "revision 2's replica was not placed; operator log:\n{}",
        log()
    );
    let job = serde_json::to_value(jobs(env, ns).get("tiny-serving-1").await.expect("job"))
        .expect("json");
    assert_eq!(
        job["metadata"]["labels"]["corral.dev/serving-revision"],
        "tiny-00002"
    );
    // Until it is ready, revision 1 answers.
    let (code, body) = predict_until_ok(port, ns, &token).await;
    assert_eq!((code, body.contains("r1")), (200, true), "{body}");
    let _r2 = model_server("127.0.0.3", serving_port, "r2").await;
    run_pod_at(env, ns, second, "127.0.0.3").await;
    let ran = std::time::Instant::now();
    let m = until_model(env, ns, |m| m["status"]["stableRevision"] == "tiny-00002").await;
    eprintln!(
        "envtest: serving: revision 2 promoted {:.2} s after its pod ran",
        ran.elapsed().as_secs_f64()
    );
    assert_eq!(
        m["status"]["stableRevision"],
        "tiny-00002",
        "{m}; {}",
        log()
    );
    let mut answered = Vec::new();
    for _ in 0..20 {
        let (code, body) = predict_until_ok(port, ns, &token).await;
        assert_eq!(code, 200, "{body}");
        answered.push(body);
    }
    assert!(answered.iter().all(|b| b.contains("r2")), "{answered:?}");
    let mut gone = false;
    for _ in 0..240 {
        kubelet_reap(env, ns).await;
        if jobs(env, ns)
            .get_opt("tiny-serving-0")
            .await
            .expect("get")
            .is_none()
            && revisions
                .get_opt("tiny-00001")
                .await
                .expect("get")
                .is_none()
        {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(
        gone,
        "revision 1 and its replica were not retired; operator log:\n{}",
        log()
    );

    // Allowed to reach zero: idle, the last replica goes; the next request is held until a
    // new replica is ready, then answered.
    models(env, ns)
        .patch(
            "tiny",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"autoscaling": {"minReplicas": 0}}})),
        )
        .await
        .expect("patch the model");
    let idle = std::time::Instant::now();
    let mut zero = false;
    for _ in 0..240 {
        kubelet_reap(env, ns).await;
        let left = pods(env, ns)
            .await
            .iter()
            .filter(|p| {
                p.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.starts_with("tiny-serving-"))
            })
            .count();
        if left == 0 && model_json(env, ns).await["status"]["replicas"] == 0 {
            zero = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(
        zero,
        "the idle model did not go to zero; operator log:\n{}",
        log()
    );
    eprintln!(
        "envtest: serving: at zero {:.1} s after minReplicas 0 (stable window 6 s, idle 1 s)",
        idle.elapsed().as_secs_f64()
    );
    // Scaling is the model's, not a revision's: still revision 2.
    assert!(
        revisions
            .get_opt("tiny-00003")
            .await
            .expect("get")
            .is_none(),
        "minReplicas made a revision"
    );
    let held = {
        let (ns, token) = (ns.to_string(), token.clone());
        tokio::spawn(async move {
            http(
                port,
                "GET",
                &format!("/serve/{ns}/tiny/predict"),
                Some(&token),
                "",
            )
            .await
        })
    };
    let mut cold = None;
    for _ in 0..240 {
        cold = pods(env, ns)
            .await
            .into_iter()
            .find(|p| {
                p.metadata.deletion_timestamp.is_none()
                    && p.spec.as_ref().is_some_and(|s| s.node_name.is_some())
                    && p.metadata
                        .name
                        .as_deref()
                        .is_some_and(|n| n.starts_with("tiny-serving-"))
            })
            .and_then(|p| p.metadata.name);
        if cold.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let cold =
        cold.unwrap_or_else(|| panic!("a held request made no replica; operator log:\n{}", log()));
    let cold_job = cold.trim_end_matches("-worker-0");
    let job = serde_json::to_value(jobs(env, ns).get(cold_job).await.expect("job")).expect("json");
    assert_eq!(
        job["metadata"]["labels"]["corral.dev/serving-revision"], "tiny-00002",
        "{job}"
    );
    let _r3 = model_server("127.0.0.4", serving_port, "r3").await;
    run_pod_at(env, ns, &cold, "127.0.0.4").await;
    let ran = std::time::Instant::now();
    let (code, body) = tokio::time::timeout(Duration::from_secs(60), held)
        .await
        .expect("the held request was answered")
        .expect("task");
    assert_eq!((code, body.contains("r3")), (200, true), "{body}");
    eprintln!(
        "envtest: serving: the held request answered by the new replica {:.2} s after its pod ran",
        ran.elapsed().as_secs_f64()
    );
    models(env, ns)
        .delete("tiny", &Default::default())
        .await
        .expect("delete the model");
}
