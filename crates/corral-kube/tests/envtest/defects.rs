//! Issue 19's defects, checked on the real server.

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use serde_json::json;

use crate::harness::Env;
use crate::kubelet::{kubelet_phase, kubelet_reap, pods};
use crate::manifests::{ar, namespace};
use crate::passes::{Operator, pass, pass_allowing_errors};
use crate::trainingjobs::{condition, job, replica, submit, training_job, training_jobs};

/// Issue 19's defects, on the real server: a job without an image is refused by the CRD,
/// a pod template the server rejects fails the job and frees its GPUs, a pod deleted from
/// outside restarts the gang (counted), and a queue's namespaces are enforced.
pub(crate) async fn defects_on_the_real_server(env: &Env, op: &Operator) {
    let ns = "defects";
    namespace(env, ns).await;

    // #4: no image: the CRD refuses the object, naming the field.
    let mut no_image = training_job(
        ns,
        "no-image",
        "pytorch",
        json!({"worker": replica(1, 1)}),
        json!({}),
    );
    no_image["spec"]["replicas"]["worker"]["template"]
        .as_object_mut()
        .expect("template")
        .remove("image");
    let api: Api<DynamicObject> = Api::namespaced_with(env.admin.clone(), ns, &training_jobs());
    let err = api
        .create(
            &PostParams::default(),
            &serde_json::from_value(no_image).expect("object"),
        )
        .await
        .expect_err("a job without an image was accepted");
    let text = err.to_string();
    assert!(text.contains("image"), "{text}");

    // #3: a pod template the server refuses (422) fails the job with the server's message
    // and releases its admission, instead of retrying every pass holding GPUs.
    let mut bad = training_job(
        ns,
        "bad-toleration",
        "pytorch",
        json!({"worker": replica(1, 8)}),
        json!({}),
    );
    bad["spec"]["replicas"]["worker"]["template"]["podTemplate"] = json!({
        "spec": {"tolerations": [{"key": "k", "operator": "Sometimes", "value": "v"}]}
    });
    submit(env, bad).await;
    let now = Timestamp::now();
    let mut failed = None;
    let mut t = now;
    for _ in 0..6 {
        let _ = pass_allowing_errors(op, t).await;
        kubelet_reap(env, ns).await;
        let j = job(env, ns, "bad-toleration").await.expect("job");
        if condition(&j, "Failed").as_deref() == Some("True") {
            failed = Some(j);
            break;
        }
        t += SignedDuration::from_secs(1);
    }
    let j = failed.expect("the rejected job did not fail");
    let status = j["status"].to_string();
    assert!(
        status.contains("Sometimes") || status.contains("operator"),
        "{status}"
    );
    assert!(
        j["status"].get("admission").is_none() || pods(env, ns).await.is_empty(),
        "the failed job still holds its admission: {j}"
    );

    // #8: a running gang loses a pod to `kubectl delete pod`: the gang restarts, counted.
    submit(
        env,
        training_job(
            ns,
            "evicted",
            "pytorch",
            json!({"master": replica(1, 1), "worker": replica(1, 1)}),
            json!({"backoffLimit": 3}),
        ),
    )
    .await;
    t += SignedDuration::from_secs(1);
    pass(op, t).await;
    for p in ["evicted-master-0", "evicted-worker-0"] {
        kubelet_phase(env, ns, p, "Running", None).await;
    }
    t += SignedDuration::from_secs(1);
    pass(op, t).await;
    let pod_api: Api<Pod> = Api::namespaced(env.admin.clone(), ns);
    pod_api
        .delete("evicted-worker-0", &Default::default())
        .await
        .expect("delete pod");
    kubelet_reap(env, ns).await;
    let mut restarted = None;
    for _ in 0..20 {
        t += SignedDuration::from_secs(15);
        let _ = pass_allowing_errors(op, t).await;
        kubelet_reap(env, ns).await;
        let j = job(env, ns, "evicted").await.expect("job");
        if j["status"]["restartCount"] == json!(1) {
            restarted = Some(j);
            break;
        }
    }
    let j = restarted.expect("the lost pod did not restart the gang");
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(env.admin.clone(), ns);
    let reasons: Vec<String> = events
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("evicted"))
        .filter_map(|e| e.reason)
        .collect();
    assert!(
        reasons.iter().any(|r| r == "Restarting"),
        "{reasons:?}; {}",
        j["status"]
    );

    // #5: a queue that lists namespaces admits no other namespace's job.
    let queues: Api<DynamicObject> = Api::all_with(
        env.admin.clone(),
        &ar("corral.dev", "v1alpha1", "Queue", "queues"),
    );
    queues
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "corral.dev/v1alpha1", "kind": "Queue",
                "metadata": {"name": "team-vision"},
                "spec": {"namespaces": ["vision"]},
            }))
            .expect("queue"),
        )
        .await
        .expect("create queue");
    let mut foreign = training_job(
        ns,
        "foreign",
        "pytorch",
        json!({"worker": replica(1, 1)}),
        json!({}),
    );
    foreign["spec"]["queue"] = json!("team-vision");
    submit(env, foreign).await;
    t += SignedDuration::from_secs(1);
    let _ = pass_allowing_errors(op, t).await;
    let j = job(env, ns, "foreign").await.expect("job");
    assert_ne!(
        condition(&j, "Admitted").as_deref(),
        Some("True"),
        "a job of {ns} was admitted to team-vision: {}",
        j["status"]
    );
    let status = j["status"].to_string();
    assert!(
        status.contains("team-vision") && status.contains("vision"),
        "the reason names the queue and its namespaces: {status}"
    );
}
