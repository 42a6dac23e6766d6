//! Kubeflow's kinds: a JAXJob served by Corral (status, `kubectl get` table, TTL) and a
//! PyTorchJob run alongside Kubeflow's training operator.

use corral_kube::kubeflow::Mode;
use http::Request;
use jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::harness::Env;
use crate::kubelet::{kubelet_phase, pods};
use crate::manifests::{ar, namespace};
use crate::passes::{Operator, kubeflow_pass, pass};
use crate::trainingjobs::job;

pub(crate) async fn kubeflow_served(env: &Env, op: &Operator) {
    let ns = "kf-serve";
    namespace(env, ns).await;
    let jax = ar("kubeflow.org", "v1", "JAXJob", "jaxjobs");
    let api: Api<DynamicObject> = Api::namespaced_with(env.admin.clone(), ns, &jax);
    let container = json!({"name": "jax", "image": "ghcr.io/jax/jax:0.4",
        "command": ["python", "train.py"], "resources": {"limits": {"nvidia.com/gpu": 1}}});
    api.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "apiVersion": "kubeflow.org/v1", "kind": "JAXJob",
            "metadata": {"name": "jx", "namespace": ns},
            "spec": {"runPolicy": {"ttlSecondsAfterFinished": 60},
            "jaxReplicaSpecs": {"Worker": {"replicas": 2, "restartPolicy": "OnFailure",
                "template": {"spec": {"containers": [container]}}}}},
        }))
        .expect("JAXJob"),
    )
    .await
    .expect("kubectl apply of a JAXJob works");
    let now = Timestamp::now();
    kubeflow_pass(op, Mode::Serve, now).await;
    let tj = job(env, ns, "jx").await.expect("owned TrainingJob");
    assert_eq!(
        tj["metadata"]["ownerReferences"][0]["kind"],
        json!("JAXJob")
    );
    pass(op, now + SignedDuration::from_secs(1)).await;
    let ps = pods(env, ns).await;
    assert_eq!(ps.len(), 2);
    for p in &ps {
        kubelet_phase(
            env,
            ns,
            p.metadata.name.as_deref().unwrap_or(""),
            "Running",
            None,
        )
        .await;
    }
    pass(op, now + SignedDuration::from_secs(2)).await;
    kubeflow_pass(op, Mode::Serve, now + SignedDuration::from_secs(3)).await;
    let kf = api.get("jx").await.expect("JAXJob");
    let kf = serde_json::to_value(kf).expect("json");
    assert_eq!(
        kf["status"]["replicaStatuses"]["Worker"]["active"],
        json!(2),
        "{}",
        kf["status"]
    );
    // `kubectl get jaxjobs`: the server's table, State column from the last condition.
    let (code, table) = raw_table(
        env,
        &format!("/apis/kubeflow.org/v1/namespaces/{ns}/jaxjobs"),
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(table["rows"][0]["cells"][1], json!("Running"), "{table}");

    for p in &ps {
        kubelet_phase(
            env,
            ns,
            p.metadata.name.as_deref().unwrap_or(""),
            "Succeeded",
            Some(0),
        )
        .await;
    }
    pass(op, now + SignedDuration::from_secs(4)).await;
    kubeflow_pass(op, Mode::Serve, now + SignedDuration::from_secs(5)).await;
    let (_, table) = raw_table(
        env,
        &format!("/apis/kubeflow.org/v1/namespaces/{ns}/jaxjobs"),
    )
    .await;
    assert_eq!(table["rows"][0]["cells"][1], json!("Succeeded"), "{table}");
    // Nothing more to write.
    assert_eq!(
        kubeflow_pass(op, Mode::Serve, now + SignedDuration::from_secs(6)).await,
        0
    );
    // After its TTL: the TrainingJob, then the JAXJob, go; nothing runs again.
    pass(op, now + SignedDuration::from_secs(200)).await;
    assert!(
        job(env, ns, "jx").await.is_none(),
        "TrainingJob deleted after its TTL"
    );
    kubeflow_pass(op, Mode::Serve, now + SignedDuration::from_secs(201)).await;
    assert!(
        api.get_opt("jx").await.expect("get").is_none(),
        "JAXJob deleted after its TTL"
    );
    assert!(job(env, ns, "jx").await.is_none(), "not run again");
}

pub(crate) async fn raw_table(env: &Env, path: &str) -> (u16, Value) {
    let req = Request::builder()
        .method("GET")
        .uri(path)
        .header("accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
        .body(kube::client::Body::empty())
        .expect("request");
    let resp = env.admin.send(req).await.expect("table");
    let code = resp.status().as_u16();
    let bytes = resp.into_body().collect_bytes().await.unwrap_or_default();
    (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

pub(crate) async fn kubeflow_alongside(env: &Env, op: &Operator) {
    let ns = "kf-along";
    namespace(env, ns).await;
    let pt = ar("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs");
    let api: Api<DynamicObject> = Api::namespaced_with(env.admin.clone(), ns, &pt);
    let replica = |n: u32| {
        json!({"replicas": n, "restartPolicy": "OnFailure", "template": {"spec": {
        "containers": [{"name": "pytorch", "image": "pytorch/pytorch:2.5.1",
            "command": ["python", "train.py"], "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}})
    };
    api.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "big", "namespace": ns, "labels": {"corral.dev/queue": "default"}},
            "spec": {"runPolicy": {"suspend": false},
                     "pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(1)}},
        }))
        .expect("PyTorchJob"),
    )
    .await
    .expect("create PyTorchJob");
    let now = Timestamp::now();
    kubeflow_pass(op, Mode::Alongside, now).await;
    let kf = serde_json::to_value(api.get("big").await.expect("job")).expect("json");
    assert_eq!(
        kf["spec"]["runPolicy"]["suspend"],
        json!(true),
        "suspended until admitted"
    );
    let w = job(env, ns, "big").await.expect("workload");
    assert_eq!(
        w["metadata"]["annotations"]["corral.dev/runner"],
        json!("kubeflow.org")
    );

    pass(op, now + SignedDuration::from_secs(1)).await;
    assert!(
        pods(env, ns).await.is_empty(),
        "Corral makes no pods of a Kubeflow-run job"
    );
    let w = job(env, ns, "big").await.expect("workload");
    let admission: Value = w["status"]["admission"].clone();
    kubeflow_pass(op, Mode::Alongside, now + SignedDuration::from_secs(2)).await;
    let kf = serde_json::to_value(api.get("big").await.expect("job")).expect("json");
    assert_eq!(
        kf["spec"]["runPolicy"]["suspend"],
        json!(false),
        "unsuspended once admitted"
    );
    for (rtype, role) in [("Master", "master"), ("Worker", "worker")] {
        let node = admission["placements"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["role"] == json!(role)))
            .expect("placement")["node"]
            .clone();
        let terms = &kf["spec"]["pytorchReplicaSpecs"][rtype]["template"]["spec"]["affinity"]["nodeAffinity"]
            ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"];
        assert_eq!(
            terms[0]["matchExpressions"][0]["values"],
            json!([node]),
            "{rtype}: {terms}"
        );
    }
    assert_eq!(
        kubeflow_pass(op, Mode::Alongside, now + SignedDuration::from_secs(3)).await,
        0
    );

    // Kubeflow's operator reports it finished: the workload goes, the GPUs are free.
    api.patch_status(
        "big",
        &PatchParams::default(),
        &Patch::Merge(
            json!({"status": {"conditions": [{"type": "Succeeded", "status": "True",
            "reason": "PyTorchJobSucceeded", "message": "done",
            "lastUpdateTime": Timestamp::now().to_string(),
            "lastTransitionTime": Timestamp::now().to_string()}]}}),
        ),
    )
    .await
    .expect("status as Kubeflow's operator writes it");
    kubeflow_pass(op, Mode::Alongside, now + SignedDuration::from_secs(4)).await;
    assert!(job(env, ns, "big").await.is_none(), "workload deleted");
}
